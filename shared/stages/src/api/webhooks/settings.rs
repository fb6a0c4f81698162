//! Operators' webhook settings: read, set and remove a tenant's webhook,
//! beside the other operator actions (`operator`). The request is parsed
//! in `genace_core::requests`, against the webhook URL policy and the
//! tenant's secret folder, so a webhook that could never be sent to or
//! would sign with another tenant's secret is refused when it is saved. Sending is the webhook stage (`pipeline::webhooks::send`).

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::info;

use crate::api::errors::SettingsError;
use crate::api::operator::OperatorApi;
use crate::ports::clock::Clock;
use genace_core::domain::TenantId;
use genace_core::requests::WebhookRequest;
use genace_core::webhook::WebhookConfig;

impl<P: Ports> OperatorApi<'_, P> {
    /// A tenant's webhook, for an operator who may see the tenant.
    pub async fn webhook(&self, tenant: &TenantId) -> Result<Option<WebhookConfig>, SettingsError> {
        if !self.op.may_see(tenant) {
            return Err(SettingsError::NotFound);
        }
        Ok(self.api.store.webhook(tenant).await?)
    }

    /// Sets a tenant's webhook; from now on its events are POSTed there.
    pub async fn set_webhook(
        &self,
        tenant: &TenantId,
        request: WebhookRequest,
    ) -> Result<WebhookConfig, SettingsError> {
        let op = self.op;
        if !op.may_see(tenant) {
            return Err(SettingsError::NotFound);
        }
        let config = WebhookConfig {
            tenant_id: tenant.as_str().to_owned(),
            url: request.url,
            events: request.events,
            secret_id: request.secret_id,
            updated_at: self.api.clock.now(),
            updated_by: op.actor.clone(),
        };
        self.api.store.set_webhook(tenant, Some(&config)).await?;
        info!(actor = %op.actor, tenant = %tenant, "webhook set");
        Ok(config)
    }

    /// Removes a tenant's webhook; events already queued are dropped.
    pub async fn remove_webhook(&self, tenant: &TenantId) -> Result<(), SettingsError> {
        let op = self.op;
        if !op.may_see(tenant) {
            return Err(SettingsError::NotFound);
        }
        self.api.store.set_webhook(tenant, None).await?;
        info!(actor = %op.actor, tenant = %tenant, "webhook removed");
        Ok(())
    }
}
