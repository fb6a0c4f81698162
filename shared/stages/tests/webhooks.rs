//! The webhook stage on in-memory adapters: signed POSTs for the tenants
//! that asked, in the types they asked for, and a failed receiver left for
//! the queue to retry.

use chrono::{TimeZone, Utc};
use genace_core::domain::TenantId;

use genace_stages::memory::{ManualClock, MemoryReceiver, MemorySecrets, MemoryStore};
use genace_stages::stage::{Stage, StageError, handle_body};
use genace_stages::table::OperationStore;
use genace_stages::webhooks::{RetrySchedule, WebhookConfig, WebhookDeliverer, Webhooked, signature};
use serde_json::{Value, json};

fn event(tenant: &str, kind: &str) -> String {
    json!({
        "version": "0", "source": "genace.operations", "detail-type": kind,
        "detail": {"id": format!("op_1:4:{kind}"), "type": kind, "tenant_id": tenant,
                   "operation_id": "op_1", "operation_key": "k", "phase": "rendered",
                   "delivery_state": "delivered", "version": 4, "time": "2026-12-01T12:00:00Z", "data": {}}
    })
    .to_string()
}

struct Rig {
    stage: WebhookDeliverer<MemoryStore, MemorySecrets, MemoryReceiver, ManualClock>,
    receiver: MemoryReceiver,
}

async fn rig(events: &[&str]) -> Rig {
    let store = MemoryStore::default();
    let secrets = MemorySecrets::default();
    secrets.put("genace/webhooks/acme", "s3cret");
    let config = WebhookConfig {
        tenant_id: "acme".into(),
        url: "https://hooks.acme.example/genace".into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        secret_id: "genace/webhooks/acme".into(),
        updated_at: Utc::now(),
        updated_by: "ops".into(),
    };
    store
        .set_webhook(&TenantId::parse("acme").unwrap(), Some(&config))
        .await
        .unwrap();
    let receiver = MemoryReceiver::default();
    Rig {
        stage: WebhookDeliverer {
            store,
            secrets,
            sender: receiver.clone(),
            clock: ManualClock::new(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()),
            retry: RetrySchedule::default(),
        },
        receiver,
    }
}

#[tokio::test]
async fn an_event_is_posted_signed_to_the_tenants_url() {
    let rig = rig(&[]).await;
    let body = event("acme", "operation.delivered");
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Delivered(200));
    let posts = rig.receiver.received();
    assert_eq!(posts.len(), 1);
    let post = &posts[0];
    assert_eq!(post.url, "https://hooks.acme.example/genace");
    let header = |name: &str| {
        post.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    // The body is the lifecycle event itself; the signature covers it.
    let detail: Value = serde_json::from_str(&post.body).unwrap();
    assert_eq!(detail["type"], "operation.delivered");
    assert_eq!(header("genace-event-id"), "op_1:4:operation.delivered");
    let t = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap().timestamp();
    assert_eq!(header("genace-signature"), signature("s3cret", t, &post.body));
    assert_ne!(header("genace-signature"), signature("other", t, &post.body));
}

#[tokio::test]
async fn only_subscribed_types_of_configured_tenants_are_sent() {
    let rig = rig(&["operation.delivered"]).await;
    assert_eq!(
        handle_body(&rig.stage, &event("acme", "operation.accepted"))
            .await
            .unwrap(),
        Webhooked::NotSubscribed
    );
    assert_eq!(
        handle_body(&rig.stage, &event("globex", "operation.delivered"))
            .await
            .unwrap(),
        Webhooked::NoWebhook
    );
    assert!(rig.receiver.received().is_empty());
}

#[tokio::test]
async fn a_failing_receiver_fails_the_message_so_the_queue_retries_it() {
    let rig = rig(&[]).await;
    rig.receiver.answer(&[503, 500]);
    let body = event("acme", "operation.rendered");
    // Each failure asks for a longer wait before the next try.
    for receives in 1..=2 {
        let failed = handle_body(&rig.stage, &body).await.unwrap_err();
        assert!(matches!(failed, StageError::Remote(_)), "{failed}");
        assert_eq!(rig.stage.retry_after(&failed, receives), Some(30 << (receives - 1)));
    }
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Delivered(200));
    // Every attempt carries the same event id, for the receiver to deduplicate.
    let ids: Vec<String> = rig
        .receiver
        .received()
        .iter()
        .map(|p| {
            p.headers
                .iter()
                .find(|(k, _)| k == "genace-event-id")
                .unwrap()
                .1
                .clone()
        })
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|i| *i == ids[0]));
}

#[tokio::test]
async fn a_missing_secret_is_retried_and_a_malformed_event_is_refused() {
    let rig = rig(&[]).await;
    let store = &rig.stage.store;
    let mut config = store.webhook(&TenantId::parse("acme").unwrap()).await.unwrap().unwrap();
    config.secret_id = "genace/webhooks/gone".into();
    store
        .set_webhook(&TenantId::parse("acme").unwrap(), Some(&config))
        .await
        .unwrap();
    assert!(matches!(
        handle_body(&rig.stage, &event("acme", "operation.rendered")).await,
        Err(StageError::Remote(_))
    ));
    let malformed = handle_body(&rig.stage, r#"{"detail": {}}"#).await.unwrap_err();
    assert!(matches!(malformed, StageError::Malformed(_)));
    // Waiting does not mend a malformed event: the queue's timeout applies.
    assert_eq!(rig.stage.retry_after(&malformed, 1), None);
    assert!(rig.receiver.received().is_empty());
}
