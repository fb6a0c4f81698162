//! Secrets Manager behind the `genace_stages::ports::webhooks::SecretStore` port.
//!
//! An endpoint's secret holds its [`SigningKeys`]: the current value and
//! each value a rotation replaced, until that value's overlap ends
//! (`WEBHOOK_SECRET_OVERLAP_HOURS`, 24 by default), so two rotations inside
//! one overlap drop no value a receiver may still hold. A secret that holds
//! a plain value (an operator's, for a tenant's single webhook) is rotated
//! the Secrets Manager way: the value it replaced (`AWSPREVIOUS`) signs for
//! the overlap after the current one was created.
//!
//! What a read finds is kept for [`CACHE_FOR`], keyed by the secret and the
//! endpoint's secret version, which every rotation moves: a warm function
//! reads each secret about once every five minutes, and signs with a new
//! value from the first POST after the rotation that wrote it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::Client;
use genace_core::webhook::SigningKeys;
use genace_stages::ports::webhooks::{SecretStore, SecretVault, VaultFuture};

/// How long a value read is used before it is read again.
pub const CACHE_FOR: Duration = Duration::from_secs(300);

/// Per secret: when it was read, under which secret version, and the keys.
type Cache = HashMap<String, (Instant, u32, SigningKeys)>;

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
    async fn signing_secrets(&self, id: &str, version: u32) -> Result<Option<Vec<String>>, String> {
        let now = chrono::Utc::now();
        if let Some((at, read_version, keys)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(id)
            && at.elapsed() < CACHE_FOR
            && *read_version == version
        {
            return Ok(Some(keys.live(now)));
        }
        let Some(keys) = self.keys(id, now).await? else {
            return Ok(None);
        };
        let live = keys.live(now);
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), (Instant::now(), version, keys));
        Ok(Some(live))
    }
}

impl SecretsManager {
    /// The keys the secret holds now; `None` when there is no secret.
    async fn keys(&self, id: &str, now: chrono::DateTime<chrono::Utc>) -> Result<Option<SigningKeys>, String> {
        let Some((current, created)) = self.value(id, "AWSCURRENT").await? else {
            return Ok(None);
        };
        if let Some(keys) = SigningKeys::parse(&current) {
            return Ok(Some(keys));
        }
        let mut keys = SigningKeys::new(&current);
        // The previous value signs until the overlap after the current one
        // was created ends. Without a creation time it signs too, until the
        // next read: a receiver never fails for a signature too many.
        let until = created
            .and_then(|at| chrono::DateTime::from_timestamp(at, 0))
            .map(|at| at + self.overlap);
        if until.is_none_or(|u| u > now)
            && let Some((previous, _)) = self.value(id, "AWSPREVIOUS").await?
        {
            keys.keys
                .push(genace_core::webhook::SigningKey { value: previous, until });
        }
        Ok(Some(keys))
    }
}

/// Writes endpoints' secrets: `PutSecretValue` on an existing secret (a
/// rotation: Secrets Manager moves `AWSCURRENT` to the new value and
/// `AWSPREVIOUS` to the old), `CreateSecret` for a new one.
impl SecretVault for SecretsManager {
    fn store_secret<'a>(&'a self, name: &'a str, value: &'a str) -> VaultFuture<'a> {
        Box::pin(async move {
            // The keys after this value: the replaced ones keep signing
            // until their overlaps end.
            // A plain value's previous one, still in its overlap, is kept too.
            let now = chrono::Utc::now();
            let stored = self.keys(name, now).await?.unwrap_or(SigningKeys { keys: Vec::new() });
            let keys = stored.rotated(value, now, self.overlap).to_stored();
            let put = self
                .client
                .put_secret_value()
                .secret_id(name)
                .secret_string(&keys)
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
                        .secret_string(&keys)
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
