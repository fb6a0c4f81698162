//! Secrets Manager behind the `genace_stages::webhooks::SecretStore` port.
//! A value read is kept for [`CACHE_FOR`], so a warm function reads each
//! secret about once every five minutes; a rotated secret takes effect
//! within that time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::Client;
use genace_stages::webhooks::SecretStore;

/// How long a value read is used before it is read again.
pub const CACHE_FOR: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct SecretsManager {
    client: Client,
    cache: Arc<Mutex<HashMap<String, (Instant, String)>>>,
}

impl SecretsManager {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }
}

impl SecretStore for SecretsManager {
    async fn secret(&self, id: &str) -> Result<Option<String>, String> {
        if let Some((at, value)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(id)
            && at.elapsed() < CACHE_FOR
        {
            return Ok(Some(value.clone()));
        }
        match self.client.get_secret_value().secret_id(id).send().await {
            Ok(out) => {
                let Some(value) = out.secret_string else {
                    return Err(format!("secret {id} has no string value"));
                };
                self.cache
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.to_owned(), (Instant::now(), value.clone()));
                Ok(Some(value))
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
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
