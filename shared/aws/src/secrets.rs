//! Secrets Manager behind the `genace_stages::webhooks::SecretStore` port.
//! What a read finds is kept for [`CACHE_FOR`], so a warm function reads
//! each secret about once every five minutes; a rotated secret takes effect
//! within that time.
//!
//! A rotation is a new value put on the secret (`PutSecretValue`, or a
//! rotation function): Secrets Manager labels it `AWSCURRENT` and the one it
//! replaced `AWSPREVIOUS`. For the overlap after a rotation
//! (`WEBHOOK_SECRET_OVERLAP_HOURS`, 24 by default), counted from when the
//! current value was created, both values sign, so receivers can move to
//! the new one at their own pace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::Client;
use genace_stages::webhooks::{SecretStore, SecretVault, VaultFuture};

/// How long a value read is used before it is read again.
pub const CACHE_FOR: Duration = Duration::from_secs(300);

type Cache = HashMap<String, (Instant, Vec<String>)>;

#[derive(Debug, Clone)]
pub struct SecretsManager {
    client: Client,
    overlap: chrono::Duration,
    cache: Arc<Mutex<Cache>>,
}

impl SecretsManager {
    /// Reads through `client`; a replaced value still signs for `overlap`.
    pub fn new(client: Client, overlap: chrono::Duration) -> Self {
        Self {
            client,
            overlap,
            cache: Arc::default(),
        }
    }

    /// The value under `stage`; `None` when the secret or the stage is absent.
    async fn value(&self, id: &str, stage: &str) -> Result<Option<(String, Option<i64>)>, String> {
        match self
            .client
            .get_secret_value()
            .secret_id(id)
            .version_stage(stage)
            .send()
            .await
        {
            Ok(out) => {
                let created = out.created_date.map(|d| d.secs());
                match out.secret_string {
                    Some(value) => Ok(Some((value, created))),
                    None => Err(format!("secret {id} has no string value")),
                }
            }
            // Absent, or deleted (kept for its recovery window): nothing signs.
            Err(e)
                if e.as_service_error().is_some_and(|s| {
                    s.is_resource_not_found_exception()
                        || (s.is_invalid_request_exception()
                            && s.meta()
                                .message()
                                .is_some_and(|m| m.contains("deleted") || m.contains("deletion")))
                }) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!(
                "reading secret {id}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
            )),
        }
    }
}

impl SecretStore for SecretsManager {
    async fn signing_secrets(&self, id: &str) -> Result<Option<Vec<String>>, String> {
        if let Some((at, values)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(id)
            && at.elapsed() < CACHE_FOR
        {
            return Ok(Some(values.clone()));
        }
        let Some((current, created)) = self.value(id, "AWSCURRENT").await? else {
            return Ok(None);
        };
        let mut values = vec![current];
        // Without a creation time, sign with the previous value too: a
        // receiver never fails for a signature too many.
        let rotated_recently =
            created.is_none_or(|at| chrono::Utc::now().timestamp() - at < self.overlap.num_seconds());
        if rotated_recently && let Some((previous, _)) = self.value(id, "AWSPREVIOUS").await? {
            values.push(previous);
        }
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), (Instant::now(), values.clone()));
        Ok(Some(values))
    }
}

/// Writes endpoints' secrets: `PutSecretValue` on an existing secret (a
/// rotation: Secrets Manager moves `AWSCURRENT` to the new value and
/// `AWSPREVIOUS` to the old), `CreateSecret` for a new one.
impl SecretVault for SecretsManager {
    fn store_secret<'a>(&'a self, name: &'a str, value: &'a str) -> VaultFuture<'a> {
        Box::pin(async move {
            let put = self
                .client
                .put_secret_value()
                .secret_id(name)
                .secret_string(value)
                .send()
                .await;
            match put {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    self.client
                        .create_secret()
                        .name(name)
                        .description("Signs a tenant's webhook POSTs (Standard Webhooks).")
                        .secret_string(value)
                        .send()
                        .await
                        .map_err(|e| {
                            format!(
                                "creating secret {name}: {}",
                                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                            )
                        })?;
                }
                Err(e) => {
                    return Err(format!(
                        "writing secret {name}: {}",
                        aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                    ));
                }
            }
            // This process reads what it wrote at once, not after the cache.
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            Ok(())
        })
    }

    fn delete_secret<'a>(&'a self, name: &'a str) -> VaultFuture<'a> {
        Box::pin(async move {
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            match self
                .client
                .delete_secret()
                .secret_id(name)
                // Recoverable for a week, should it be deleted by mistake.
                .recovery_window_in_days(7)
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    Ok(())
                }
                Err(e) => Err(format!(
                    "deleting secret {name}: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                )),
            }
        })
    }
}
