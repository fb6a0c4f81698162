//! The events pipe's filter for webhooks on the in-memory store: which
//! events the webhook rule queues.

use genace_core::domain::TenantId;
use genace_core::events::Kind;
use genace_core::events::LifecycleEvent;
use genace_core::webhook::{EndpointSet, WebhookConfig, WebhookEndpoint};
use genace_memory::MemoryStore;
use genace_stages::pipeline::webhooks::filter::mark_for_webhooks;
use genace_stages::ports::metrics::Metrics;
use genace_stages::ports::table::{WebhookEndpoints, WebhookSettings};

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
