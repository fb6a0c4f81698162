//! Webhook ports: the secret store the sender reads and the API writes,
//! the HTTP sender, and the queue of per-receiver copies.

use std::future::Future;

/// Reads secrets.
pub trait SecretStore: Send + Sync {
    /// The values to sign with: the secret's current value first, then
    /// each value a rotation replaced whose overlap has not ended. `None`
    /// when there is no such secret. `version` is the secret version the
    /// endpoint's record names (every rotation moves it): what a store
    /// keeps of an earlier version is never used for a later one.
    fn signing_secrets(
        &self,
        id: &str,
        version: u32,
    ) -> impl Future<Output = Result<Option<Vec<String>>, String>> + Send;
}

/// A secret store's answer on its way. Boxed so that [`SecretVault`] can be
/// held as a trait object by the stages that carry it beside their other ports.
pub type VaultFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Writes secrets: the service generates each endpoint's secret and keeps
/// it here, never in the table.
pub trait SecretVault: Send + Sync + std::fmt::Debug {
    /// Creates the secret with `value`; when it exists, puts `value` on it
    /// as its current value (a rotation: the old value becomes the previous).
    fn store_secret<'a>(&'a self, name: &'a str, value: &'a str) -> VaultFuture<'a>;
    /// Deletes the secret; one that does not exist is no error.
    fn delete_secret<'a>(&'a self, name: &'a str) -> VaultFuture<'a>;
}

/// The secret store of a process that writes no secrets: every write
/// fails, saying so.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoVault;

impl SecretVault for NoVault {
    fn store_secret<'a>(&'a self, _name: &'a str, _value: &'a str) -> VaultFuture<'a> {
        Box::pin(async { Err("this process has no secret store".to_owned()) })
    }

    fn delete_secret<'a>(&'a self, _name: &'a str) -> VaultFuture<'a> {
        Box::pin(async { Err("this process has no secret store".to_owned()) })
    }
}

/// A new Standard Webhooks secret: `whsec_` and the base64 of 32 random
/// bytes from the operating system.
pub fn new_secret() -> Result<String, String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a secret: {e}"))?;
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// Why a webhook POST got no status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The URL guard refused the URL or every address it resolves to: no
    /// retry can change that.
    #[error("refused by the webhook URL policy: {0}")]
    Refused(String),
    /// No answer (connection, timeout): worth another try.
    #[error("{0}")]
    Failed(String),
}

/// POSTs one webhook body. The adapter applies the URL guard.
pub trait WebhookSender: Send + Sync {
    /// The receiver's status code, or why there was none.
    fn post(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> impl Future<Output = Result<u16, PostError>> + Send;
}

/// The webhook queue, as the stage writes to it.
pub trait WebhookQueue: Send + Sync {
    /// Where an event goes that can never be sent: the dead-letter
    /// queue, at once rather than after a day of retries.
    fn dead_letter(&self, body: String, reason: String) -> impl Future<Output = Result<(), String>> + Send;
    /// Queues one copy of an event per receiver, each retried on its own.
    fn fan_out(&self, bodies: Vec<String>) -> impl Future<Output = Result<(), String>> + Send;
}
