//! The events pipe's filter for webhooks: the bus carries every lifecycle
//! event, and its webhook rule queues only the ones marked here: those a
//! receiver of the tenant takes, and every event of a tenant with a webhook
//! endpoint, enabled or not, whose log keeps them. A tenant with no receiver
//! costs the webhook leg (the queue, the function and its reads) nothing.

use std::collections::BTreeSet;

use genace_core::domain::TenantId;
use genace_core::events::LifecycleEvent;
use tracing::warn;

use crate::ports::metrics::Metrics;
use crate::ports::table::WebhookEndpoints;

/// Marks each event that the webhook function must see
/// ([`genace_core::webhook::Receivers::must_see`]; one read of
/// the tenants' receivers for the whole batch). When the receivers cannot
/// be read, every event is marked, as before the filter: the webhook
/// function reads them again, so nothing is lost, it only costs.
pub async fn mark_for_webhooks<S: WebhookEndpoints>(store: &S, metrics: &Metrics, events: &mut [LifecycleEvent]) {
    let tenants: Vec<TenantId> = events
        .iter()
        .map(|e| e.tenant_id.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|t| TenantId::parse(t).ok())
        .collect();
    if tenants.is_empty() {
        return;
    }
    match store.receivers(&tenants).await {
        Ok(receivers) => {
            for event in events.iter_mut() {
                event.webhooks = TenantId::parse(&event.tenant_id)
                    .ok()
                    .and_then(|t| receivers.get(&t))
                    .is_some_and(|r| r.must_see(event.kind.as_str()));
            }
        }
        Err(e) => {
            warn!(error = %e, "receivers unread; every event of the batch goes to the webhook queue");
            metrics.count("WebhookFilterUnread", &[]);
            for event in events.iter_mut() {
                event.webhooks = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::ports::table::{WebhookEndpoints, WebhookSettings};
    use genace_core::events::Kind;
    use genace_core::webhook::{EndpointSet, WebhookConfig, WebhookEndpoint};

    fn event(tenant: &str, kind: Kind) -> LifecycleEvent {
        serde_json::from_value(serde_json::json!({
            "id": format!("op_1:1:2:{}", kind.as_str()),
            "type": kind.as_str(),
            "time": "2026-01-01T00:00:00Z",
            "tenant_id": tenant,
            "operation_id": "op_1",
            "operation_key": "k",
            "phase": "accepted",
            "delivery_state": "not_collected",
            "version": 2,
            "data": {}
        }))
        .expect("an event")
    }

    fn endpoint(id: &str, events: &[&str], disabled: bool) -> WebhookEndpoint {
        serde_json::from_value(serde_json::json!({
            "id": id,
            "url": "https://hooks.example.com/in",
            "description": "",
            "events": events,
            "secret_id": format!("genace/webhooks/t/{id}"),
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "updated_by": "test",
            "disabled_at": disabled.then_some("2026-01-02T00:00:00Z"),
        }))
        .expect("an endpoint")
    }

    #[tokio::test]
    async fn events_a_receiver_takes_or_an_endpoint_keeps_are_marked() {
        let store = MemoryStore::default();
        let tenant = |t: &str| TenantId::parse(t).expect("a tenant");
        // acme: an endpoint for deliveries only; hooli: one disabled endpoint.
        // Their logs keep every event, taken now or not.
        let set = EndpointSet {
            version: 1,
            endpoints: vec![endpoint("ep_1", &["operation.delivered"], false)],
        };
        store.save_endpoints(&tenant("acme"), &set).await.expect("saved");
        let disabled = EndpointSet {
            version: 1,
            endpoints: vec![endpoint("ep_2", &[], true)],
        };
        store.save_endpoints(&tenant("hooli"), &disabled).await.expect("saved");
        // globex: an operator-set webhook for every type.
        let webhook: WebhookConfig = serde_json::from_value(serde_json::json!({
            "tenant_id": "globex",
            "url": "https://hooks.example.com/g",
            "secret_id": "genace/webhooks/globex/main",
            "events": [],
            "updated_at": "2026-01-01T00:00:00Z",
            "updated_by": "test"
        }))
        .expect("a webhook");
        store.set_webhook(&tenant("globex"), Some(&webhook)).await.expect("set");

        let mut events = vec![
            event("acme", Kind::Delivered),
            event("acme", Kind::Accepted),
            event("globex", Kind::Accepted),
            event("initech", Kind::Delivered),
            event("hooli", Kind::Accepted),
        ];
        let metrics = Metrics::off();
        mark_for_webhooks(&store, &metrics, &mut events).await;
        let marked: Vec<bool> = events.iter().map(|e| e.webhooks).collect();
        assert_eq!(marked, [true, true, true, false, true]);

        // What the bus carries: the member only on marked events.
        let bus: Vec<serde_json::Value> = events.iter().map(|e| serde_json::to_value(e).expect("json")).collect();
        assert_eq!(bus[0]["webhooks"], true);
        assert!(bus[3].get("webhooks").is_none());
    }
}
