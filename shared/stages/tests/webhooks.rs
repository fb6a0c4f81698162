//! The webhook stage on in-memory adapters: signed POSTs for the tenants
//! that asked, in the types they asked for, and a failed receiver left for
//! the queue to retry.

use chrono::{TimeZone, Utc};
use genace_core::domain::TenantId;

use genace_core::webhook::{AttemptStatus, WebhookConfig};
use genace_memory::{ManualClock, MemoryReceiver, MemorySecrets, MemoryStore, MemoryWebhookQueue};
use genace_stages::config::RetrySchedule;
use genace_stages::pipeline::stage::{Stage, StageError, handle_body};
use genace_stages::pipeline::webhooks::send::{WebhookStage, Webhooked};
use genace_stages::pipeline::webhooks::signature::signature;
use genace_stages::ports::table::prelude::*;
use serde_json::{Value, json};

/// A bus event for the rig's operation (a committed change at version 2),
/// marked by the pipe for the webhook rule.
fn event_of(rig: &Rig, tenant: &str, kind: &str) -> String {
    event_at(rig, tenant, kind, 2)
}

fn event_at(rig: &Rig, tenant: &str, kind: &str, version: u64) -> String {
    let op = rig.operation.operation_id.as_str();
    let incarnation = rig.operation.created_at.timestamp_millis();
    json!({
        "version": "0", "source": "genace.operations", "detail-type": kind,
        "detail": {"id": format!("{op}:{incarnation}:{version}:{kind}"), "type": kind, "tenant_id": tenant,
                   "operation_id": op, "operation_key": "k", "phase": "submitting",
                   "delivery_state": "not_collected", "version": version, "time": "2026-12-01T12:00:00Z", "data": {},
                   "webhooks": true, "trace_id": op.trim_start_matches("op_"), "trace_kept": true}
    })
    .to_string()
}

struct Rig {
    stage: WebhookStage<MemoryStore, MemorySecrets, MemoryReceiver, MemoryWebhookQueue, ManualClock>,
    receiver: MemoryReceiver,
    queue: MemoryWebhookQueue,
    metrics: genace_stages::ports::metrics::Recorder<ManualClock>,
    /// acme's operation, claimed: version 2.
    operation: genace_core::record::OperationRecord,
}

async fn rig(events: &[&str]) -> Rig {
    let store = MemoryStore::default();
    let secrets = MemorySecrets::default();
    secrets.put("genace/webhooks/acme/hook", "s3cret");
    let config = WebhookConfig {
        tenant_id: "acme".into(),
        url: "https://hooks.acme.example/genace".into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        secret_id: "genace/webhooks/acme/hook".into(),
        updated_at: Utc::now(),
        updated_by: "ops".into(),
    };
    store
        .set_webhook(&TenantId::parse("acme").unwrap(), Some(&config))
        .await
        .unwrap();
    let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
    let intent = genace_core::domain::Intent::parse(
        &json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
        None,
    )
    .unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let policy = genace_core::machine::Policy::default();
    let created =
        genace_core::record::OperationRecord::new_intent(&acme, &intent, None, now, chrono::Duration::seconds(60));
    store.create(&created, now).await.unwrap();
    let claimed = genace_core::machine::transition(
        &created,
        genace_core::machine::Input::ClaimDispatch { token: "t", shard: 0 },
        now,
        &policy,
    )
    .unwrap();
    store.apply(&created, &claimed).await.unwrap();
    let receiver = MemoryReceiver::default();
    let queue = MemoryWebhookQueue::default();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    let metrics = genace_stages::ports::metrics::Recorder::new(clock.clone());
    Rig {
        stage: WebhookStage {
            store,
            secrets,
            sender: receiver.clone(),
            queue: queue.clone(),
            clock,
            retry: RetrySchedule::default(),
            log_for: chrono::Duration::days(30),
            disable_after: chrono::Duration::hours(72),
            metrics: genace_stages::ports::metrics::Metrics::to(metrics.clone()),
            seal: None,
        },
        receiver,
        queue,
        metrics,
        operation: claimed,
    }
}

#[tokio::test]
async fn an_event_is_posted_signed_to_the_tenants_url() {
    let rig = rig(&[]).await;
    let body = event_of(&rig, "acme", "operation.delivered");
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Sent(200));
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
    // The pipe's mark for the bus's rule and the trace id are not part of
    // what is posted.
    assert!(detail.get("webhooks").is_none(), "{detail}");
    assert!(detail.get("trace_id").is_none(), "{detail}");
    assert!(detail.get("trace_kept").is_none(), "{detail}");
    // Standard Webhooks headers: the event id, the time, and the signature
    // over both and the body.
    let id = detail["id"].as_str().unwrap();
    assert_eq!(header("webhook-id"), id);
    let t = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap().timestamp();
    assert_eq!(header("webhook-timestamp"), t.to_string());
    let signed = header("webhook-signature");
    assert_eq!(signed, signature(&["s3cret".to_owned()], id, t, &post.body));
    assert_ne!(signed, signature(&["other".to_owned()], id, t, &post.body));
    assert_ne!(signed, signature(&["s3cret".to_owned()], "another-id", t, &post.body));
    assert!(post.headers.iter().all(|(k, _)| k != "genace-signature"));
}

#[tokio::test]
async fn only_subscribed_types_of_configured_tenants_are_sent() {
    let rig = rig(&["operation.delivered"]).await;
    assert_eq!(
        handle_body(&rig.stage, &event_of(&rig, "acme", "operation.accepted"))
            .await
            .unwrap(),
        Webhooked::NotSubscribed
    );
    assert_eq!(
        handle_body(&rig.stage, &event_of(&rig, "globex", "operation.delivered"))
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
    let body = event_of(&rig, "acme", "operation.rendered");
    // Each failure asks for a longer wait before the next try.
    for receives in 1..=2 {
        let failed = handle_body(&rig.stage, &body).await.unwrap_err();
        assert!(matches!(failed, StageError::Remote(_)), "{failed}");
        assert_eq!(rig.stage.retry_after(&failed, receives), Some(30 << (receives - 1)));
    }
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Sent(200));
    // Every attempt carries the same event id, for the receiver to deduplicate.
    let ids: Vec<String> = rig
        .receiver
        .received()
        .iter()
        .map(|p| p.headers.iter().find(|(k, _)| k == "webhook-id").unwrap().1.clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|i| *i == ids[0]));
}

#[tokio::test]
async fn a_missing_secret_is_retried_and_a_malformed_event_is_refused() {
    let rig = rig(&[]).await;
    let store = &rig.stage.store;
    let mut config = store.webhook(&TenantId::parse("acme").unwrap()).await.unwrap().unwrap();
    config.secret_id = "genace/webhooks/acme/gone".into();
    store
        .set_webhook(&TenantId::parse("acme").unwrap(), Some(&config))
        .await
        .unwrap();
    assert!(matches!(
        handle_body(&rig.stage, &event_of(&rig, "acme", "operation.rendered")).await,
        Err(StageError::Remote(_))
    ));
    let malformed = handle_body(&rig.stage, r#"{"detail": {}}"#).await.unwrap_err();
    assert!(matches!(malformed, StageError::Malformed(_)));
    // Waiting does not mend a malformed event: the queue's timeout applies.
    assert_eq!(rig.stage.retry_after(&malformed, 1), None);
    assert!(rig.receiver.received().is_empty());
}

async fn reconfigure(rig: &Rig, change: impl FnOnce(&mut WebhookConfig)) {
    let store = &rig.stage.store;
    let acme = TenantId::parse("acme").unwrap();
    let mut config = store.webhook(&acme).await.unwrap().unwrap();
    change(&mut config);
    store.set_webhook(&acme, Some(&config)).await.unwrap();
}

/// Measured: a URL on a port the guard refuses was retried 13 times over a
/// day. A refusal is permanent: the event goes to the dead-letter queue at
/// once, with its reason, and nothing is retried.
#[tokio::test]
async fn a_url_the_policy_refuses_is_dead_lettered_at_once() {
    let rig = rig(&[]).await;
    reconfigure(&rig, |c| c.url = "https://hooks.acme.example:8080/genace".into()).await;
    let body = event_of(&rig, "acme", "operation.rendered");
    match handle_body(&rig.stage, &body).await.unwrap() {
        Webhooked::DeadLettered(why) => assert!(why.contains("port 8080"), "{why}"),
        other => panic!("{other:?}"),
    }
    let letters = rig.queue.letters();
    assert_eq!(letters.len(), 1);
    // Counted through the stage's metrics port, at the stage's clock.
    let points = rig.metrics.points();
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!(points[0].name, "WebhookRefused");
    assert_eq!(
        points[0].at_ms,
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap().timestamp_millis()
    );
    let kept: Value = serde_json::from_str(&letters[0].0).unwrap();
    assert_eq!(
        kept["detail"]["type"], "operation.rendered",
        "the whole event is kept for a replay"
    );
    assert!(rig.receiver.received().is_empty());
}

/// Measured: a tenant's webhook was saved with another tenant's secret. A
/// record like that (written before the rule, or around the API) never signs.
#[tokio::test]
async fn a_secret_outside_the_tenants_prefix_never_signs() {
    let rig = rig(&[]).await;
    rig.stage.secrets.put("genace/webhooks/globex/hook", "theirs");
    reconfigure(&rig, |c| c.secret_id = "genace/webhooks/globex/hook".into()).await;
    let outcome = handle_body(&rig.stage, &event_of(&rig, "acme", "operation.rendered"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, Webhooked::DeadLettered(ref why) if why.contains("genace/webhooks/acme/")),
        "{outcome:?}"
    );
    assert!(rig.receiver.received().is_empty());
}

/// The webhook function signs only what the table committed: an event put
/// on the bus by anyone else (another tenant's operation, a version not
/// reached, an unknown operation) is dead-lettered, never signed.
#[tokio::test]
async fn an_event_the_table_did_not_commit_is_never_signed() {
    let rig = rig(&[]).await;
    let forged = [
        event_at(&rig, "acme", "operation.delivered", 9),
        event_of(&rig, "acme", "operation.delivered")
            .replace(&rig.operation.operation_id.as_str()[3..], &"0".repeat(32)),
        {
            let mut v: Value = serde_json::from_str(&event_of(&rig, "acme", "operation.delivered")).unwrap();
            let id = v["detail"]["id"].as_str().unwrap().replacen(':', ":1", 1);
            v["detail"]["id"] = json!(id);
            v.to_string()
        },
    ];
    for body in &forged {
        let outcome = handle_body(&rig.stage, body).await.unwrap();
        assert!(matches!(outcome, Webhooked::DeadLettered(_)), "{outcome:?}\n{body}");
    }
    assert!(rig.receiver.received().is_empty());
    assert_eq!(rig.queue.letters().len(), forged.len());
    // Another tenant's committed change, relabelled as acme's.
    let globex = TenantId::parse("globex").unwrap();
    let mut theirs = rig
        .stage
        .store
        .webhook(&TenantId::parse("acme").unwrap())
        .await
        .unwrap()
        .unwrap();
    theirs.tenant_id = "globex".into();
    theirs.secret_id = "genace/webhooks/globex/hook".into();
    rig.stage.store.set_webhook(&globex, Some(&theirs)).await.unwrap();
    rig.stage.secrets.put("genace/webhooks/globex/hook", "theirs");
    let relabelled = event_of(&rig, "globex", "operation.delivered");
    assert!(matches!(
        handle_body(&rig.stage, &relabelled).await.unwrap(),
        Webhooked::DeadLettered(ref why) if why.contains("another tenant")
    ));
    assert!(rig.receiver.received().is_empty());
}

/// A forged event for a tenant with endpoints is dead-lettered before it
/// is kept: nothing to replay later, and no POST, whoever receives it.
#[tokio::test]
async fn a_forged_event_is_never_kept_for_replay() {
    let rig = rig(&[]).await;
    add_endpoint(&rig, "ep_one", &[]).await;
    add_endpoint(&rig, "ep_two", &[]).await;
    let forged = event_at(&rig, "acme", "operation.delivered", 9);
    let outcome = handle_body(&rig.stage, &forged).await.unwrap();
    assert!(matches!(outcome, Webhooked::DeadLettered(_)), "{outcome:?}");
    let id = serde_json::from_str::<Value>(&forged).unwrap()["detail"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let acme = TenantId::parse("acme").unwrap();
    let kept = rig
        .stage
        .store
        .kept_event(&acme, &id, rig.stage.clock.now())
        .await
        .unwrap();
    assert_eq!(kept, None, "a forged event was kept for replay");
    assert!(rig.receiver.received().is_empty());
    assert_eq!(rig.queue.letters().len(), 1, "one dead letter, no copies fanned out");
}

/// With the events pipe's seal, a message that names a real operation,
/// its tenant and a version it reached, but a type or data the pipe did
/// not seal, is dead-lettered: never signed, kept or copied. A sealed
/// event, and a copy of one, are posted without the seal.
#[tokio::test]
async fn an_event_whose_type_or_data_the_pipe_did_not_seal_is_never_signed() {
    use genace_stages::pipeline::webhooks::seal::EventSeal;
    let mut rig = rig(&[]).await;
    let seal = EventSeal::new(&[9; 32]).unwrap();
    rig.stage.seal = Some(seal.clone());
    let sealed = |body: String| -> Value {
        let mut v: Value = serde_json::from_str(&body).unwrap();
        v["detail"]["mac"] = json!(seal.seal_value(&v["detail"]));
        v
    };
    let genuine = sealed(event_of(&rig, "acme", "operation.delivered"));
    let mut retyped = genuine.clone();
    retyped["detail"]["type"] = json!("operation.rendered");
    let mut redata = genuine.clone();
    redata["detail"]["data"] = json!({"objects": [{"key": "elsewhere"}]});
    let mut unsealed = genuine.clone();
    unsealed["detail"].as_object_mut().unwrap().remove("mac");
    for forged in [&retyped, &redata, &unsealed] {
        let outcome = handle_body(&rig.stage, &forged.to_string()).await.unwrap();
        assert!(
            matches!(outcome, Webhooked::DeadLettered(ref why) if why.contains("seal")),
            "{outcome:?}\n{forged}"
        );
    }
    assert!(rig.receiver.received().is_empty());
    assert_eq!(
        handle_body(&rig.stage, &genuine.to_string()).await.unwrap(),
        Webhooked::Sent(200)
    );
    let posted: Value = serde_json::from_str(&rig.receiver.received()[0].body).unwrap();
    assert!(posted.get("mac").is_none(), "{posted}");
    // Copies for each of two endpoints: a genuine copy is sent, a forged one is not.
    add_endpoint(&rig, "ep_one", &[]).await;
    let copy = |detail: &Value| json!({"to": "ep_one", "detail": detail["detail"]}).to_string();
    assert!(matches!(
        handle_body(&rig.stage, &copy(&redata)).await.unwrap(),
        Webhooked::DeadLettered(_)
    ));
    assert_eq!(
        handle_body(&rig.stage, &copy(&genuine)).await.unwrap(),
        Webhooked::Sent(200)
    );
}

/// An endpoint of acme's, as the service saves it, with its secret.
async fn add_endpoint(rig: &Rig, id: &str, events: &[&str]) -> genace_core::webhook::WebhookEndpoint {
    let acme = TenantId::parse("acme").unwrap();
    let mut set = rig.stage.store.endpoints(&acme).await.unwrap();
    let endpoint = genace_core::webhook::WebhookEndpoint {
        id: id.into(),
        url: format!("https://hooks.acme.example/{id}"),
        description: String::new(),
        events: events.iter().map(|e| e.to_string()).collect(),
        secret_id: genace_core::webhook::endpoint_secret_name(&acme, id),
        secret_version: 0,
        created_at: Utc::now(),
        updated_at: Utc::now(),
        updated_by: "acme".into(),
        disabled_at: None,
        disabled_reason: None,
        failing_since: None,
        recovering_until: None,
        replays: None,
    };
    rig.stage.secrets.put(&endpoint.secret_id, &format!("whsec_{id}"));
    set.endpoints.push(endpoint.clone());
    set.version += 1;
    rig.stage.store.save_endpoints(&acme, &set).await.unwrap();
    endpoint
}

async fn log_of(rig: &Rig, endpoint: &str) -> Vec<genace_core::webhook::WebhookAttempt> {
    let acme = TenantId::parse("acme").unwrap();
    let now = rig.stage.clock.now();
    rig.stage
        .store
        .attempts(&acme, endpoint, None, 100, None, now)
        .await
        .unwrap()
        .0
}

use genace_stages::pipeline::stage::handle_received;
use genace_stages::ports::clock::Clock;

/// Two receivers: one copy each, and a receiver that fails is retried on
/// its own, while the other's delivery stands. Every attempt is logged
/// with its number, status and error class.
#[tokio::test]
async fn each_receiver_gets_its_own_copy_and_its_own_retries() {
    let rig = rig(&[]).await;
    add_endpoint(&rig, "ep_one", &[]).await;
    let body = event_of(&rig, "acme", "operation.delivered");
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::FannedOut(2));
    assert!(
        rig.receiver.received().is_empty(),
        "copies are queued, not posted in the fan-out"
    );
    let copies = rig.queue.take_copies();
    assert_eq!(copies.len(), 2);
    // The tenant webhook's copy comes first and succeeds; the endpoint's fails.
    rig.receiver.answer(&[200, 503]);
    let first: Vec<_> = futures_first(&rig, &copies, 1).await;
    assert!(matches!(first[0], Ok(Webhooked::Sent(200))), "{first:?}");
    assert!(matches!(first[1], Err(StageError::Remote(_))), "{first:?}");
    // Only the failed copy comes back; on its second delivery it succeeds.
    assert_eq!(
        handle_received(&rig.stage, &copies[1], 2).await.unwrap(),
        Webhooked::Sent(200)
    );
    let posts = rig.receiver.received();
    assert_eq!(
        posts.iter().map(|p| p.url.as_str()).collect::<Vec<_>>(),
        [
            "https://hooks.acme.example/genace",
            "https://hooks.acme.example/ep_one",
            "https://hooks.acme.example/ep_one"
        ]
    );
    // Each copy is signed with its own receiver's secret.
    let id = posts[0]
        .headers
        .iter()
        .find(|(k, _)| k == "webhook-id")
        .unwrap()
        .1
        .clone();
    let signed = |p: &genace_memory::ReceivedPost| {
        p.headers
            .iter()
            .find(|(k, _)| k == "webhook-signature")
            .unwrap()
            .1
            .clone()
    };
    let t = rig.stage.clock.now().timestamp();
    assert_eq!(
        signed(&posts[0]),
        signature(&["s3cret".to_owned()], &id, t, &posts[0].body)
    );
    assert_eq!(
        signed(&posts[1]),
        signature(&["whsec_ep_one".to_owned()], &id, t, &posts[1].body)
    );
    let log = log_of(&rig, "ep_one").await;
    assert_eq!(log.len(), 2);
    // Newest first.
    assert_eq!(
        (log[0].attempt, log[0].status, log[0].http_status),
        (2, AttemptStatus::Succeeded, Some(200))
    );
    assert_eq!(
        (
            log[1].attempt,
            log[1].status,
            log[1].http_status,
            log[1].error.as_deref()
        ),
        (1, AttemptStatus::Failed, Some(503), Some("http_status"))
    );
    assert_eq!(log[1].event_id, id);
    assert_eq!(log[1].event_type, "operation.delivered");
}

async fn futures_first(rig: &Rig, copies: &[String], receives: u32) -> Vec<Result<Webhooked, StageError>> {
    let mut out = Vec::new();
    for copy in copies {
        out.push(handle_received(&rig.stage, copy, receives).await);
    }
    out
}

/// A single receiver is posted at once, with no copy; a disabled endpoint
/// and an endpoint filtering the type get nothing; a copy for an endpoint
/// deleted since is dropped.
#[tokio::test]
async fn only_enabled_endpoints_that_take_the_type_receive_it() {
    let rig = rig(&["operation.accepted"]).await;
    add_endpoint(&rig, "ep_all", &[]).await;
    let mut filtered = add_endpoint(&rig, "ep_held", &["operation.held"]).await;
    let acme = TenantId::parse("acme").unwrap();
    // Disable ep_held: it would not take operation.delivered anyway, so
    // make it take every type but be disabled.
    let mut set = rig.stage.store.endpoints(&acme).await.unwrap();
    filtered.events.clear();
    filtered.disabled_at = Some(Utc::now());
    set.endpoints[1] = filtered;
    set.version += 1;
    rig.stage.store.save_endpoints(&acme, &set).await.unwrap();
    let body = event_of(&rig, "acme", "operation.delivered");
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Sent(200));
    assert!(rig.queue.take_copies().is_empty());
    assert_eq!(rig.receiver.received()[0].url, "https://hooks.acme.example/ep_all");
    // Nothing is sent to the disabled one, but its log says what it missed,
    // so that `recover` can send it once it is enabled again.
    let skipped = log_of(&rig, "ep_held").await;
    assert_eq!(
        skipped
            .iter()
            .map(|a| (a.status, a.attempt, a.event_type.as_str(), a.error.as_deref()))
            .collect::<Vec<_>>(),
        [(
            AttemptStatus::Skipped,
            0,
            "operation.delivered",
            Some("endpoint_disabled")
        )]
    );
    // Received again, the event writes the same entry over itself.
    handle_body(&rig.stage, &body).await.unwrap();
    assert_eq!(log_of(&rig, "ep_held").await, skipped, "one entry, at the event's time");
    // A copy queued for it before it was disabled is not sent, but logged.
    let earlier: Value = serde_json::from_str(&event_at(&rig, "acme", "operation.accepted", 1)).unwrap();
    let queued = json!({"to": "ep_held", "detail": earlier["detail"]}).to_string();
    assert_eq!(handle_body(&rig.stage, &queued).await.unwrap(), Webhooked::NoWebhook);
    let types: Vec<String> = log_of(&rig, "ep_held")
        .await
        .into_iter()
        .map(|a| a.event_type)
        .collect();
    assert_eq!(types.len(), 2, "{types:?}");
    assert!(types.contains(&"operation.accepted".to_owned()), "{types:?}");
    // An event the table never committed is not logged: recovery would
    // queue a copy that is refused.
    let uncommitted = event_at(&rig, "acme", "operation.rendered", 99);
    handle_body(&rig.stage, &uncommitted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(log_of(&rig, "ep_held").await.len(), 2);
    // A copy for an endpoint that is gone.
    let detail: Value = serde_json::from_str::<Value>(&body).unwrap()["detail"].clone();
    let stale = json!({"to": "ep_gone", "detail": detail}).to_string();
    assert_eq!(handle_body(&rig.stage, &stale).await.unwrap(), Webhooked::NoWebhook);
    // ep_all was sent the event twice (it came twice), nothing else.
    let urls: Vec<String> = rig.receiver.received().into_iter().map(|p| p.url).collect();
    assert_eq!(urls, ["https://hooks.acme.example/ep_all"; 2]);
}

/// An event of a tenant with endpoints is kept; a replayed copy of it is
/// POSTed with the event's own `webhook-id` and logged as a new attempt.
#[tokio::test]
async fn a_kept_event_replays_with_its_own_id() {
    let rig = rig(&["operation.held"]).await;
    add_endpoint(&rig, "ep_one", &[]).await;
    let body = event_of(&rig, "acme", "operation.delivered");
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Sent(200));
    let mut detail = serde_json::from_str::<Value>(&body).unwrap()["detail"].clone();
    // Kept as posted: without the pipe's mark and the trace id.
    detail.as_object_mut().unwrap().remove("webhooks");
    detail.as_object_mut().unwrap().remove("trace_id");
    detail.as_object_mut().unwrap().remove("trace_kept");
    let id = detail["id"].as_str().unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let kept = rig
        .stage
        .store
        .kept_event(&acme, id, rig.stage.clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&kept).unwrap(), detail);
    // A tenant without endpoints keeps nothing.
    assert_eq!(
        rig.stage
            .store
            .kept_event(&TenantId::parse("globex").unwrap(), id, rig.stage.clock.now())
            .await
            .unwrap(),
        None
    );
    let copy = json!({"to": "ep_one", "detail": detail}).to_string();
    rig.stage.clock.advance(chrono::Duration::seconds(60));
    assert_eq!(handle_body(&rig.stage, &copy).await.unwrap(), Webhooked::Sent(200));
    let posts = rig.receiver.received();
    let ids: Vec<String> = posts
        .iter()
        .map(|p| p.headers.iter().find(|(k, _)| k == "webhook-id").unwrap().1.clone())
        .collect();
    assert_eq!(ids, [id, id]);
    assert_eq!(log_of(&rig, "ep_one").await.len(), 2);
}

async fn endpoint_of(rig: &Rig, id: &str) -> genace_core::webhook::WebhookEndpoint {
    let acme = TenantId::parse("acme").unwrap();
    rig.stage.store.endpoints(&acme).await.unwrap().get(id).unwrap().clone()
}

/// An endpoint whose POSTs all fail for WEBHOOK_DISABLE_AFTER_HOURS is
/// disabled, counted, and announced to the tenant's other enabled
/// endpoints with `endpoint.disabled`; a success on the way starts the
/// count again. Disabled, it receives nothing more.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_endpoint_failing_for_its_hours_is_disabled_and_the_others_are_told() {
    let rig = rig(&["operation.held"]).await;
    add_endpoint(&rig, "ep_bad", &[]).await;
    add_endpoint(&rig, "ep_good", &["operation.held"]).await;
    let t0 = rig.stage.clock.now();
    let delivered = |version: u64| event_at(&rig, "acme", "operation.delivered", version);
    let rig = &rig;
    let try_once = |status: u16, version: u64| {
        rig.receiver.answer(&[status]);
        let body = delivered(version);
        async move { handle_body(&rig.stage, &body).await }
    };
    assert!(try_once(500, 2).await.is_err());
    assert_eq!(endpoint_of(rig, "ep_bad").await.failing_since, Some(t0));
    // A success clears it; the next failure starts again.
    rig.stage.clock.advance(chrono::Duration::hours(50));
    assert_eq!(try_once(200, 2).await.unwrap(), Webhooked::Sent(200));
    assert_eq!(endpoint_of(rig, "ep_bad").await.failing_since, None);
    rig.stage.clock.advance(chrono::Duration::hours(1));
    let t1 = rig.stage.clock.now();
    assert!(try_once(500, 2).await.is_err());
    // Failing, but not yet for 72 hours (the 50 before the success do not count).
    rig.stage.clock.advance(chrono::Duration::hours(71));
    assert!(try_once(500, 2).await.is_err());
    let still = endpoint_of(rig, "ep_bad").await;
    assert_eq!((still.failing_since, still.disabled_at), (Some(t1), None));
    assert!(rig.queue.take_copies().is_empty());
    rig.stage.clock.advance(chrono::Duration::hours(1));
    assert!(try_once(500, 2).await.is_err());
    let disabled = endpoint_of(rig, "ep_bad").await;
    assert_eq!(disabled.disabled_at, Some(rig.stage.clock.now()));
    assert!(disabled.disabled_reason.unwrap().contains("72 hours"));
    assert!(rig.metrics.points().iter().any(|p| p.name == "WebhookEndpointDisabled"));
    // The other endpoint is told, though it takes only operation.held.
    let copies = rig.queue.take_copies();
    assert_eq!(copies.len(), 1);
    let copy: Value = serde_json::from_str(&copies[0]).unwrap();
    assert_eq!(copy["to"], "ep_good");
    assert_eq!(copy["detail"]["type"], "endpoint.disabled");
    assert_eq!(copy["detail"]["data"]["endpoint_id"], "ep_bad");
    rig.receiver.answer(&[200]);
    assert_eq!(handle_body(&rig.stage, &copies[0]).await.unwrap(), Webhooked::Sent(200));
    let post = rig.receiver.received().last().unwrap().clone();
    assert_eq!(post.url, "https://hooks.acme.example/ep_good");
    assert!(
        post.headers
            .contains(&("genace-event-type".to_owned(), "endpoint.disabled".to_owned()))
    );
    // A forged announcement (the endpoint is not disabled at that time) is never signed.
    // Nor one off the bus (no `to`): it is the webhook function's own, sent
    // only as copies; nothing is kept of it.
    let bare = json!({"detail": copy["detail"]});
    assert!(matches!(
        handle_body(&rig.stage, &bare.to_string()).await.unwrap(),
        Webhooked::DeadLettered(ref why) if why.contains("only as a copy")
    ));
    let kept_id = copy["detail"]["id"].as_str().unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let kept = rig
        .stage
        .store
        .kept_event(&acme, kept_id, rig.stage.clock.now())
        .await
        .unwrap();
    assert_eq!(kept, None);
    // Nor one that tells another URL or failing time than the table holds.
    for (member, told) in [
        ("disabled_at", json!("2026-01-01T00:00:00Z")),
        ("url", json!("https://elsewhere.example/hook")),
        ("failing_since", json!("2026-01-01T00:00:00Z")),
    ] {
        let mut forged = copy.clone();
        forged["detail"]["data"][member] = told;
        assert!(
            matches!(
                handle_body(&rig.stage, &forged.to_string()).await.unwrap(),
                Webhooked::DeadLettered(_)
            ),
            "{member}"
        );
    }
    // Disabled, it receives nothing; its queued copies are dropped.
    let posts = rig.receiver.received().len();
    assert_eq!(
        handle_body(&rig.stage, &delivered(2)).await.unwrap(),
        Webhooked::NotSubscribed
    );
    let detail = serde_json::from_str::<Value>(&delivered(2)).unwrap()["detail"].clone();
    let queued = json!({"to": "ep_bad", "detail": detail}).to_string();
    assert_eq!(handle_body(&rig.stage, &queued).await.unwrap(), Webhooked::NoWebhook);
    assert_eq!(rig.receiver.received().len(), posts);
}

/// The webhook-signature header of a post.
fn signature_of(post: &genace_memory::ReceivedPost) -> String {
    let header = post.headers.iter().find(|(k, _)| k == "webhook-signature");
    header.map(|(_, v)| v.clone()).unwrap_or_default()
}

/// A sender whose cache holds an endpoint's secret signs with the new one
/// from the first POST after `POST .../rotate`, beside the old one for the
/// overlap: the rotation moves the endpoint's secret version, and the
/// sender reads under it. The API writes through a vault of its own, as it
/// does in another function, so nothing in the sender is told.
#[tokio::test]
async fn the_first_post_after_a_rotation_is_signed_with_the_new_secret() {
    let mut rig = rig(&[]).await;
    rig.stage.secrets.overlap = chrono::Duration::hours(24);
    let acme = TenantId::parse("acme").unwrap();
    rig.stage.store.set_webhook(&acme, None).await.unwrap();
    let endpoint = add_endpoint(&rig, "ep_rotated", &[]).await;
    let old = format!("whsec_{}", endpoint.id);
    let first = event_at(&rig, "acme", "operation.accepted", 1);
    assert_eq!(handle_body(&rig.stage, &first).await.unwrap(), Webhooked::Sent(200));

    let mut api = genace_memory::memory_app(rig.stage.clock.now());
    api.store = rig.stage.store.clone();
    api.vault = std::sync::Arc::new(rig.stage.secrets.clone());
    let api = api.api();
    let rotated = api
        .endpoints(acme, "dev@acme".into())
        .rotate(&endpoint.id)
        .await
        .unwrap();
    let next = event_at(&rig, "acme", "operation.delivered", 2);
    assert_eq!(handle_body(&rig.stage, &next).await.unwrap(), Webhooked::Sent(200));

    let posts = rig.receiver.received();
    assert_eq!(posts.len(), 2);
    let t = rig.stage.clock.now().timestamp();
    let id = |p: &genace_memory::ReceivedPost| {
        serde_json::from_str::<Value>(&p.body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let signed_by = |p, keys: &[&String]| {
        let keys: Vec<String> = keys.iter().map(|k| (*k).clone()).collect();
        signature(&keys, &id(p), t, &p.body)
    };
    assert_eq!(signature_of(&posts[0]), signed_by(&posts[0], &[&old]));
    assert_eq!(
        signature_of(&posts[1]),
        signed_by(&posts[1], &[&rotated.secret, &old]),
        "the new secret signs first, the replaced one beside it"
    );
}

/// A recovery holds its endpoint while its copies may be retried, through
/// failures and successes alike: a receiver answers success to what it
/// likes, and one that could end the hold would let its tenant queue copy
/// after copy of the events it keeps failing.
#[tokio::test]
async fn a_success_keeps_a_recoverys_hold_on_its_endpoint() {
    let rig = rig(&["operation.held"]).await;
    add_endpoint(&rig, "ep_a", &[]).await;
    let acme = TenantId::parse("acme").unwrap();
    let until = rig.stage.clock.now() + chrono::Duration::hours(27);
    let mut set = rig.stage.store.endpoints(&acme).await.unwrap();
    for e in &mut set.endpoints {
        e.recovering_until = Some(until);
    }
    set.version += 1;
    rig.stage.store.save_endpoints(&acme, &set).await.unwrap();
    let body = event_at(&rig, "acme", "operation.delivered", 2);
    rig.receiver.answer(&[500]);
    assert!(handle_body(&rig.stage, &body).await.is_err());
    assert_eq!(endpoint_of(&rig, "ep_a").await.recovering_until, Some(until));
    rig.receiver.answer(&[200]);
    assert_eq!(handle_body(&rig.stage, &body).await.unwrap(), Webhooked::Sent(200));
    assert_eq!(endpoint_of(&rig, "ep_a").await.recovering_until, Some(until));
    assert_eq!(
        endpoint_of(&rig, "ep_a").await.failing_since,
        None,
        "the success ends the failing spell"
    );
}
