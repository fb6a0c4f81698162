//! Webhook secrets, receivers and dead letters, in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;

/// Secrets, in memory. Clones share the values; each clone keeps its own
/// read cache, as each warm function does with Secrets Manager.
#[derive(Debug, Default)]
pub struct MemorySecrets {
    values: Arc<Mutex<BTreeMap<String, String>>>,
    /// What this copy read, per secret: the endpoint's secret version it
    /// was asked under and the stored value. A read under the same version
    /// answers from here, however the value changed since; a read under
    /// another version reads again.
    read: Mutex<BTreeMap<String, (u32, String)>>,
    /// How long a replaced value still signs (none by default).
    pub overlap: chrono::Duration,
}

impl Clone for MemorySecrets {
    /// The same values, and a cold cache.
    fn clone(&self) -> Self {
        Self {
            values: Arc::clone(&self.values),
            read: Mutex::default(),
            overlap: self.overlap,
        }
    }
}

impl MemorySecrets {
    /// Writes a plain value; this copy reads it at once.
    pub fn put(&self, id: &str, value: &str) {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), value.to_owned());
        self.forget(id);
    }

    fn forget(&self, id: &str) {
        self.read.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

impl genace_stages::ports::webhooks::SecretStore for MemorySecrets {
    /// The live values of the keys stored (or a plain value put with
    /// [`MemorySecrets::put`]), from this copy's cache while `version` is
    /// the one it read under.
    async fn signing_secrets(&self, id: &str, version: u32) -> Result<Option<Vec<String>>, String> {
        let live = |v: &String| {
            genace_core::webhook::SigningKeys::parse(v).map_or_else(|| vec![v.clone()], |keys| keys.live(Utc::now()))
        };
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, value)) = read.get(id)
            && *at == version
        {
            return Ok(Some(live(value)));
        }
        let Some(value) = self.values.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned() else {
            return Ok(None);
        };
        let keys = live(&value);
        read.insert(id.to_owned(), (version, value));
        Ok(Some(keys))
    }
}

/// A written value becomes the current one, and the one it replaces
/// signs for [`MemorySecrets::overlap`], as in Secrets Manager; deleting
/// removes the secret.
impl genace_stages::ports::webhooks::SecretVault for MemorySecrets {
    fn store_secret<'a>(&'a self, name: &'a str, value: &'a str) -> genace_stages::ports::webhooks::VaultFuture<'a> {
        Box::pin(async move {
            let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
            let keys = genace_core::webhook::SigningKeys::rotate(
                values.get(name).map(String::as_str),
                value,
                Utc::now(),
                self.overlap,
            );
            values.insert(name.to_owned(), keys.to_stored());
            drop(values);
            // This copy reads what it wrote at once, not after its cache.
            self.forget(name);
            Ok(())
        })
    }

    fn delete_secret<'a>(&'a self, name: &'a str) -> genace_stages::ports::webhooks::VaultFuture<'a> {
        Box::pin(async move {
            self.values.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            self.forget(name);
            Ok(())
        })
    }
}

/// A webhook receiver, in memory: answers each POST with the next planned
/// status (200 once the plan is used up) and keeps what it received.
#[derive(Debug, Clone, Default)]
pub struct MemoryReceiver {
    inner: Arc<Mutex<(Vec<u16>, Vec<ReceivedPost>)>>,
}

/// One POST a [`MemoryReceiver`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPost {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl MemoryReceiver {
    /// The statuses the next POSTs get, in order.
    pub fn answer(&self, statuses: &[u16]) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0 = statuses.to_vec();
    }

    pub fn received(&self) -> Vec<ReceivedPost> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.clone()
    }
}

/// The receiver applies the production webhook URL policy (https, public
/// addresses, port 443), as the HTTP adapter does before connecting.
impl genace_stages::ports::webhooks::WebhookSender for MemoryReceiver {
    async fn post(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> Result<u16, genace_stages::ports::webhooks::PostError> {
        genace_core::urlguard::check_url_text(url, &genace_core::urlguard::UrlPolicy::default())
            .map_err(genace_stages::ports::webhooks::PostError::Refused)?;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.1.push(ReceivedPost {
            url: url.to_owned(),
            headers,
            body,
        });
        Ok(if inner.0.is_empty() { 200 } else { inner.0.remove(0) })
    }
}

/// The webhook queue, in memory: keeps each dead letter with its reason,
/// and each copy queued for one receiver until it is taken.
#[derive(Debug, Clone, Default)]
pub struct MemoryWebhookQueue {
    letters: Arc<Mutex<Vec<(String, String)>>>,
    copies: Arc<Mutex<Vec<String>>>,
}

impl MemoryWebhookQueue {
    /// Every (body, reason) received, in order.
    pub fn letters(&self) -> Vec<(String, String)> {
        self.letters.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The copies queued since the last call, in order.
    pub fn take_copies(&self) -> Vec<String> {
        std::mem::take(&mut *self.copies.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl genace_stages::ports::webhooks::WebhookQueue for MemoryWebhookQueue {
    async fn dead_letter(&self, body: String, reason: String) -> Result<(), String> {
        self.letters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((body, reason));
        Ok(())
    }

    async fn fan_out(&self, bodies: Vec<String>) -> Result<(), String> {
        self.copies.lock().unwrap_or_else(|p| p.into_inner()).extend(bodies);
        Ok(())
    }
}
