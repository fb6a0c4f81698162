//! Whether a webhook event tells what the table committed: the one check
//! between the queue and a signature, so a message put on the webhook
//! queue by anyone but the bus's rule is never signed, kept or copied.

use serde_json::Value;

use crate::pipeline::stage::StageError;
use crate::pipeline::webhooks::send::WebhookStage;
use crate::ports::clock::Clock;
use crate::ports::table::OperationRecords;
use genace_core::domain::TenantId;
use genace_core::webhook::{ENDPOINT_DISABLED, WebhookEndpoint};

/// Whether an `endpoint.disabled` event tells what the table holds: the
/// endpoint it names is disabled, at the time it says, with the URL and
/// the failing time it says (everything the event's data tells).
fn disabled_as_told(detail: &Value, endpoints: &[WebhookEndpoint]) -> Result<(), String> {
    let data = &detail["data"];
    let named = data["endpoint_id"].as_str().unwrap_or_default();
    let time = |member: &str| {
        data[member]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    match endpoints.iter().find(|e| e.id == named) {
        Some(e)
            if e.disabled_at.is_some()
                && e.disabled_at == time("disabled_at")
                && data["url"].as_str() == Some(e.url.as_str())
                && e.failing_since == time("failing_since") =>
        {
            Ok(())
        }
        _ => Err(format!("endpoint {named:?} is not disabled as the event says")),
    }
}

impl<S: OperationRecords, K, W, D, C: Clock> WebhookStage<S, K, W, D, C> {
    /// Whether the table committed the event `detail` of `kind` says: an
    /// endpoint disabled as it says, or an operation's change
    /// ([`Self::committed`]).
    pub(super) async fn verified(
        &self,
        kind: &str,
        detail: &Value,
        tenant: &TenantId,
        endpoints: &[WebhookEndpoint],
    ) -> Result<Result<(), String>, StageError> {
        match kind {
            ENDPOINT_DISABLED => Ok(disabled_as_told(detail, endpoints)),
            _ => self.committed(detail, tenant).await,
        }
    }

    /// Whether the event describes a change the table committed: it holds
    /// the events pipe's seal (when the stage has one: nobody else can
    /// choose its type or data), and its operation is live, belongs to the
    /// event's tenant, is the same incarnation (the id's creation time) and
    /// has reached the event's version. `Ok(Err(why))` when it does not; a
    /// store failure is retried.
    pub(super) async fn committed(&self, detail: &Value, tenant: &TenantId) -> Result<Result<(), String>, StageError> {
        if let Some(seal) = &self.seal
            && !seal.holds(detail)
        {
            return Ok(Err("the event does not hold the events pipe's seal".into()));
        }
        let op = detail["operation_id"].as_str().unwrap_or_default();
        let Ok(op_id) = genace_core::domain::OperationId::parse(op) else {
            return Ok(Err(format!("{op:?} is not an operation id")));
        };
        let version = detail["version"].as_u64().unwrap_or(u64::MAX);
        let incarnation = detail["id"].as_str().and_then(|id| id.split(':').nth(1));
        let Some(rec) = self.store.get(&op_id, self.clock.now()).await? else {
            return Ok(Err(format!("operation {op} is not in the table")));
        };
        if rec.tenant_id != *tenant {
            return Ok(Err(format!("operation {op} belongs to another tenant")));
        }
        if incarnation != Some(rec.created_at.timestamp_millis().to_string().as_str()) {
            return Ok(Err(format!("the event names another incarnation of operation {op}")));
        }
        if rec.version < version {
            return Ok(Err(format!(
                "operation {op} is at version {}, the event claims {version}",
                rec.version
            )));
        }
        Ok(Ok(()))
    }
}
