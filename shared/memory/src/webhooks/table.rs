//! Tenants' webhook settings, endpoints, attempt logs and kept events, in
//! memory, in the same table as the records.

use chrono::{DateTime, Utc};
use genace_core::domain::TenantId;

use crate::store::MemoryStore;
use genace_stages::ports::table::{StoreError, WebhookSettings};

impl genace_stages::ports::table::WebhookEndpoints for MemoryStore {
    async fn endpoints(&self, tenant: &TenantId) -> Result<genace_core::webhook::EndpointSet, StoreError> {
        Ok(self.lock().endpoints.get(tenant.as_str()).cloned().unwrap_or_default())
    }

    async fn save_endpoints(
        &self,
        tenant: &TenantId,
        set: &genace_core::webhook::EndpointSet,
    ) -> Result<(), StoreError> {
        let mut table = self.lock();
        let stored = table.endpoints.get(tenant.as_str()).map_or(0, |s| s.version);
        if set.version != stored + 1 {
            return Err(StoreError::Conflict(None));
        }
        table.endpoints.insert(tenant.as_str().to_owned(), set.clone());
        Ok(())
    }

    async fn receivers(
        &self,
        tenants: &[TenantId],
    ) -> Result<std::collections::HashMap<TenantId, genace_core::webhook::Receivers>, StoreError> {
        let table = self.lock();
        Ok(tenants
            .iter()
            .filter_map(|t| {
                let receivers = genace_core::webhook::Receivers {
                    webhook: table.webhooks.get(t.as_str()).cloned(),
                    endpoints: table
                        .endpoints
                        .get(t.as_str())
                        .map(|s| s.endpoints.clone())
                        .unwrap_or_default(),
                };
                (receivers != genace_core::webhook::Receivers::default()).then(|| (t.clone(), receivers))
            })
            .collect())
    }

    async fn record_attempt(
        &self,
        attempt: &genace_core::webhook::WebhookAttempt,
        keep_until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let log = format!("{}\u{0}{}", attempt.tenant_id, attempt.endpoint_id);
        self.lock()
            .attempts
            .entry(log)
            .or_default()
            .insert(attempt.sort_key(), (keep_until, attempt.clone()));
        Ok(())
    }

    async fn keep_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        detail: &str,
        keep_until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let key = format!("{}\u{0}{event_id}", tenant.as_str());
        self.lock().kept.insert(key, (keep_until, detail.to_owned()));
        Ok(())
    }

    async fn kept_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        let key = format!("{}\u{0}{event_id}", tenant.as_str());
        Ok(self
            .lock()
            .kept
            .get(&key)
            .filter(|(until, _)| *until > now)
            .map(|(_, detail)| detail.clone()))
    }

    async fn attempts(
        &self,
        tenant: &TenantId,
        endpoint_id: &str,
        status: Option<genace_core::webhook::AttemptStatus>,
        limit: usize,
        after: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<genace_core::webhook::WebhookAttempt>, Option<String>), StoreError> {
        // As DynamoDB's store: a position of another shape is refused.
        if after.is_some_and(|a| !genace_core::webhook::WebhookAttempt::is_sort_key(a)) {
            return Err(StoreError::Cursor);
        }
        let table = self.lock();
        let Some(log) = table.attempts.get(&format!("{}\u{0}{endpoint_id}", tenant.as_str())) else {
            return Ok((Vec::new(), None));
        };
        // As DynamoDB pages a query: `limit + 1` entries read (those past
        // their time included, as the TTL deletes late), then filtered.
        let read = log
            .iter()
            .rev()
            .filter(|(key, _)| after.is_none_or(|a| key.as_str() < a))
            .take(limit + 1)
            .map(|(key, (until, a))| (key.clone(), *until > now, a.clone()))
            .collect();
        Ok(genace_stages::ports::table::log_page(read, limit, status))
    }
}

impl WebhookSettings for MemoryStore {
    async fn webhook(&self, tenant: &TenantId) -> Result<Option<genace_core::webhook::WebhookConfig>, StoreError> {
        Ok(self.lock().webhooks.get(tenant.as_str()).cloned())
    }

    async fn set_webhook(
        &self,
        tenant: &TenantId,
        config: Option<&genace_core::webhook::WebhookConfig>,
    ) -> Result<(), StoreError> {
        let mut table = self.lock();
        match config {
            Some(c) => table.webhooks.insert(tenant.as_str().to_owned(), c.clone()),
            None => table.webhooks.remove(tenant.as_str()),
        };
        Ok(())
    }
}
