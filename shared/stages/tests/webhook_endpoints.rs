//! Webhook endpoints that tenants manage, on the in-memory adapters: the
//! limit, the URL policy and event types at save time, secrets generated,
//! stored under the tenant's folder and shown once, rotation, updates,
//! deletion and the attempt log's pages.

use chrono::{Duration, TimeZone, Utc};
use genace_core::domain::TenantId;
use genace_core::requests::EndpointChange;
use genace_core::urlguard::UrlPolicy;
use genace_core::webhook::{AttemptStatus, WebhookAttempt};
use genace_memory::{MemoryApp, MemorySecrets, memory_app};
use genace_stages::api::errors::EndpointError;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::table::prelude::*;
use genace_stages::ports::webhooks::SecretStore;
use serde_json::json;

fn app(max: usize) -> (MemoryApp, MemorySecrets) {
    let mut app = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    app.config.webhook_max_endpoints = max;
    let secrets = MemorySecrets::default();
    app.vault = std::sync::Arc::new(secrets.clone());
    (app, secrets)
}

fn change(body: serde_json::Value) -> EndpointChange {
    EndpointChange::parse(&body, &UrlPolicy::default(), true).unwrap()
}

fn acme() -> TenantId {
    TenantId::parse("acme").unwrap()
}

/// The current value stored, read through a cold copy (a copy caches
/// what it read, as a warm sender does).
async fn secret_of(secrets: &MemorySecrets, name: &str) -> Option<String> {
    let cold = secrets.clone();
    cold.signing_secrets(name, 0).await.unwrap().map(|v| v[0].clone())
}

#[tokio::test]
async fn a_created_endpoint_has_a_generated_secret_in_its_tenants_folder_shown_once() {
    let (app, secrets) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let created = endpoints
        .create(change(
            json!({"url": "https://hooks.acme.example/a", "description": "billing",
                              "events": ["operation.delivered"]}),
        ))
        .await
        .unwrap();
    let e = &created.endpoint;
    assert!(e.id.starts_with("ep_") && e.id.len() == 35, "{}", e.id);
    assert_eq!(e.secret_id, format!("genace/webhooks/acme/{}", e.id));
    assert!(genace_core::webhook::secret_belongs_to(&e.secret_id, &acme()));
    assert_eq!(
        (e.description.as_str(), e.events.as_slice()),
        ("billing", &["operation.delivered".to_owned()][..])
    );
    // whsec_ and the base64 of 32 random bytes; each create draws its own.
    use base64::Engine;
    let raw = created.secret.strip_prefix("whsec_").unwrap();
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(raw).unwrap().len(), 32);
    assert_eq!(
        secret_of(&secrets, &e.secret_id).await.as_deref(),
        Some(created.secret.as_str())
    );
    let other = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/b"})))
        .await
        .unwrap();
    assert_ne!(other.secret, created.secret);
    // Read back: the same endpoint, and nowhere the secret.
    let listed = endpoints.list().await.unwrap();
    assert_eq!(listed, [created.endpoint.clone(), other.endpoint.clone()]);
    assert!(!serde_json::to_string(&listed).unwrap().contains(raw));
    // Another tenant sees none of them.
    let globex = api.endpoints(TenantId::parse("globex").unwrap(), "dev@globex".into());
    assert!(globex.list().await.unwrap().is_empty());
    assert!(matches!(globex.get(&e.id).await, Err(EndpointError::NoSuchEndpoint)));
}

#[tokio::test]
async fn past_the_limit_a_create_is_refused_and_stores_no_secret() {
    let (app, secrets) = app(2);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    for n in 0..2 {
        endpoints
            .create(change(json!({"url": format!("https://hooks.acme.example/{n}")})))
            .await
            .unwrap();
    }
    let refused = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/3"})))
        .await;
    assert!(
        matches!(refused, Err(EndpointError::EndpointLimit { limit: 2 })),
        "{refused:?}"
    );
    assert_eq!(endpoints.list().await.unwrap().len(), 2);
    // Only the two endpoints' secrets exist.
    let ids: Vec<String> = endpoints
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.secret_id)
        .collect();
    for id in &ids {
        assert!(secret_of(&secrets, id).await.is_some());
    }
    // Deleting one frees its place and deletes its secret.
    let gone = endpoints.list().await.unwrap()[0].clone();
    endpoints.delete(&gone.id).await.unwrap();
    assert_eq!(secret_of(&secrets, &gone.secret_id).await, None);
    assert!(matches!(
        endpoints.get(&gone.id).await,
        Err(EndpointError::NoSuchEndpoint)
    ));
    assert!(matches!(
        endpoints.delete(&gone.id).await,
        Err(EndpointError::NoSuchEndpoint)
    ));
    endpoints
        .create(change(json!({"url": "https://hooks.acme.example/4"})))
        .await
        .unwrap();
}

#[tokio::test]
async fn rotation_puts_a_new_secret_and_updates_change_only_what_they_name() {
    let (app, secrets) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let created = endpoints
        .create(change(
            json!({"url": "https://hooks.acme.example/a", "description": "d"}),
        ))
        .await
        .unwrap();
    let id = created.endpoint.id.clone();
    let rotated = endpoints.rotate(&id).await.unwrap();
    assert_ne!(rotated.secret, created.secret);
    assert_eq!(
        secret_of(&secrets, &created.endpoint.secret_id).await.as_deref(),
        Some(rotated.secret.as_str())
    );
    assert_eq!(rotated.endpoint.secret_id, created.endpoint.secret_id);
    // Every rotation moves the version a sender keys its cache on.
    assert_eq!(
        (created.endpoint.secret_version, rotated.endpoint.secret_version),
        (0, 1)
    );
    assert!(matches!(
        endpoints.rotate("ep_nope").await,
        Err(EndpointError::NoSuchEndpoint)
    ));

    let policy = UrlPolicy::default();
    let update = |body| EndpointChange::parse(&body, &policy, false).unwrap();
    let disabled = endpoints.update(&id, update(json!({"enabled": false}))).await.unwrap();
    assert!(disabled.disabled_at.is_some());
    assert_eq!(disabled.disabled_reason.as_deref(), Some("disabled by dev@acme"));
    assert!(!disabled.wants("operation.delivered"));
    assert_eq!(
        (disabled.url.as_str(), disabled.description.as_str()),
        ("https://hooks.acme.example/a", "d")
    );
    // Disabled for failing (as the webhook stage does it): enabling it
    // again clears the failure too, so the count starts afresh.
    let mut set = app.store.endpoints(&acme()).await.unwrap();
    set.endpoints[0].failing_since = Some(app.clock.now() - Duration::hours(80));
    set.version += 1;
    app.store.save_endpoints(&acme(), &set).await.unwrap();
    let enabled = endpoints
        .update(&id, update(json!({"enabled": true, "events": ["operation.held"]})))
        .await
        .unwrap();
    assert_eq!(enabled.failing_since, None);
    assert_eq!(
        (enabled.disabled_at, enabled.events.as_slice()),
        (None, &["operation.held".to_owned()][..])
    );
    assert!(enabled.wants("operation.held") && !enabled.wants("operation.delivered"));
}

#[test]
fn a_request_that_can_never_be_delivered_or_names_no_type_is_refused_with_its_field() {
    let policy = UrlPolicy::default();
    let field =
        |body: serde_json::Value, create: bool| EndpointChange::parse(&body, &policy, create).unwrap_err().field;
    assert_eq!(field(json!({"url": "http://hooks.acme.example/a"}), true), "url");
    assert_eq!(field(json!({"url": "https://10.1.2.3/a"}), true), "url");
    assert_eq!(field(json!({"url": "https://hooks.acme.example:8443/a"}), true), "url");
    assert_eq!(field(json!({"url": "https://[::1]/a"}), true), "url");
    assert_eq!(field(json!({"description": "no url"}), true), "url");
    assert_eq!(
        field(
            json!({"url": "https://hooks.acme.example/a", "events": ["operation.exploded"]}),
            true
        ),
        "events"
    );
    assert_eq!(
        field(json!({"url": "https://hooks.acme.example/a", "secret": "mine"}), true),
        "secret"
    );
    assert_eq!(
        field(json!({"url": "https://hooks.acme.example/a", "enabled": "yes"}), true),
        "enabled"
    );
    assert_eq!(field(json!({}), false), "body");
    assert_eq!(
        field(json!({"url": "https://hooks.acme.example/a", "enabled": null}), true),
        "enabled"
    );
    assert_eq!(field(json!({"description": "x".repeat(513)}), false), "description");
    assert!(EndpointChange::parse(&json!({"description": "ok"}), &policy, false).is_ok());
}

fn attempt(n: u32, status: AttemptStatus, at: chrono::DateTime<Utc>) -> WebhookAttempt {
    WebhookAttempt {
        tenant_id: "acme".into(),
        endpoint_id: "ep_x".into(),
        event_id: format!("op:1:{n}:operation.accepted"),
        event_type: "operation.accepted".into(),
        at,
        attempt: 1,
        status,
        http_status: Some(if status == AttemptStatus::Succeeded { 200 } else { 500 }),
        error: None,
        latency_ms: 12,
    }
}

#[tokio::test]
async fn the_delivery_log_pages_newest_first_filters_by_status_and_forgets_after_its_days() {
    let (app, _) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let id = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/a"})))
        .await
        .unwrap()
        .endpoint
        .id;
    let now = app.clock.now();
    for n in 0..7u32 {
        let status = if n % 2 == 0 {
            AttemptStatus::Failed
        } else {
            AttemptStatus::Succeeded
        };
        let mut a = attempt(n, status, now + Duration::seconds(i64::from(n)));
        a.endpoint_id = id.clone();
        app.store.record_attempt(&a, now + Duration::days(30)).await.unwrap();
    }
    let first = endpoints.attempts(&id, None, 3, None).await.unwrap();
    assert_eq!(
        first.attempts.iter().map(|a| a.event_id.as_str()).collect::<Vec<_>>(),
        [
            "op:1:6:operation.accepted",
            "op:1:5:operation.accepted",
            "op:1:4:operation.accepted"
        ]
    );
    let second = endpoints.attempts(&id, None, 3, first.next.as_deref()).await.unwrap();
    assert_eq!(second.attempts.len(), 3);
    assert_eq!(second.attempts[0].event_id, "op:1:3:operation.accepted");
    let last = endpoints.attempts(&id, None, 3, second.next.as_deref()).await.unwrap();
    assert_eq!((last.attempts.len(), last.next), (1, None));
    let failed = endpoints
        .attempts(&id, Some(AttemptStatus::Failed), 10, None)
        .await
        .unwrap();
    assert_eq!(failed.attempts.len(), 4);
    assert!(failed.attempts.iter().all(|a| a.status == AttemptStatus::Failed));
    assert!(matches!(
        endpoints.attempts("ep_nope", None, 3, None).await,
        Err(EndpointError::NoSuchEndpoint)
    ));
    app.clock.advance(Duration::days(31));
    assert!(
        endpoints
            .attempts(&id, None, 10, None)
            .await
            .unwrap()
            .attempts
            .is_empty()
    );
}

/// Replay sends one kept event to the endpoint again; recovery sends every
/// event whose attempts since a time all failed, oldest first, and counts
/// those kept no longer. Both keep the event's id.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn replay_and_recovery_queue_copies_of_kept_events_with_their_ids() {
    let (app, _) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let id = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/a"})))
        .await
        .unwrap()
        .endpoint
        .id;
    let t0 = app.clock.now();
    let keep = t0 + Duration::days(30);
    let detail = |n: u32| json!({"id": format!("op:1:{n}:operation.accepted"), "type": "operation.accepted"});
    // Events 0..4: 0 succeeded, 1 failed then succeeded, 2 and 3 failed, 4
    // failed but is kept no longer; 5 failed before `since`.
    let tries: [(u32, i64, AttemptStatus); 7] = [
        (5, -100, AttemptStatus::Failed),
        (0, 1, AttemptStatus::Succeeded),
        (1, 2, AttemptStatus::Failed),
        (2, 3, AttemptStatus::Failed),
        (1, 4, AttemptStatus::Succeeded),
        (3, 5, AttemptStatus::Failed),
        (4, 6, AttemptStatus::Failed),
    ];
    for (n, at, status) in tries {
        let mut a = attempt(n, status, t0 + Duration::seconds(at));
        a.endpoint_id = id.clone();
        app.store.record_attempt(&a, keep).await.unwrap();
    }
    for n in [0, 1, 2, 3, 5] {
        app.store
            .keep_event(
                &acme(),
                &format!("op:1:{n}:operation.accepted"),
                &detail(n).to_string(),
                keep,
            )
            .await
            .unwrap();
    }
    let done = endpoints.recover(&id, t0).await.unwrap();
    assert_eq!((done.queued, done.missing), (2, 1));
    let copies: Vec<serde_json::Value> = app
        .queue
        .webhook_copies()
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    assert_eq!(
        copies,
        [
            json!({"to": id, "detail": detail(2)}),
            json!({"to": id, "detail": detail(3)})
        ]
    );

    endpoints.replay(&id, "op:1:0:operation.accepted").await.unwrap();
    let replayed: serde_json::Value = serde_json::from_str(&app.queue.webhook_copies()[0]).unwrap();
    assert_eq!(replayed, json!({"to": id, "detail": detail(0)}));
    assert!(matches!(
        endpoints.replay(&id, "op:1:4:operation.accepted").await,
        Err(EndpointError::NoSuchEvent)
    ));
    assert!(matches!(
        endpoints.replay("ep_nope", "op:1:0:operation.accepted").await,
        Err(EndpointError::NoSuchEndpoint)
    ));
    // Another tenant's endpoint cannot replay acme's event.
    let globex = api.endpoints(TenantId::parse("globex").unwrap(), "dev@globex".into());
    let theirs = globex
        .create(change(json!({"url": "https://hooks.globex.example/a"})))
        .await
        .unwrap()
        .endpoint
        .id;
    assert!(matches!(
        globex.replay(&theirs, "op:1:0:operation.accepted").await,
        Err(EndpointError::NoSuchEvent)
    ));
    // Past its days, an event is kept no longer.
    app.clock.advance(Duration::days(31));
    assert!(matches!(
        endpoints.replay(&id, "op:1:0:operation.accepted").await,
        Err(EndpointError::NoSuchEvent)
    ));
}

/// While an endpoint is disabled, nothing is sent to it, copies included:
/// replay and recovery answer why, and queue nothing. Enabled again, its
/// recovery sends what it missed (logged as skipped) with what failed. A
/// replay of a type the endpoint does not take is refused too.
#[tokio::test]
async fn a_disabled_endpoint_is_sent_nothing_and_enabled_recovers_what_it_missed() {
    let (app, _) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let id = endpoints
        .create(change(
            json!({"url": "https://hooks.acme.example/a", "events": ["operation.accepted"]}),
        ))
        .await
        .unwrap()
        .endpoint
        .id;
    let t0 = app.clock.now();
    let keep = t0 + Duration::days(30);
    let kept = |n: u32, kind: &str| {
        (
            format!("op:1:{n}:{kind}"),
            json!({"id": format!("op:1:{n}:{kind}"), "type": kind}),
        )
    };
    for (n, kind) in [
        (0, "operation.accepted"),
        (1, "operation.accepted"),
        (2, "operation.delivered"),
    ] {
        let (event_id, detail) = kept(n, kind);
        app.store
            .keep_event(&acme(), &event_id, &detail.to_string(), keep)
            .await
            .unwrap();
    }
    // 0 failed before the endpoint was disabled; 1 was skipped while it
    // was; 2 failed when the endpoint still took its type.
    for (n, at, status) in [
        (0, 1, AttemptStatus::Failed),
        (1, 2, AttemptStatus::Skipped),
        (2, 3, AttemptStatus::Failed),
    ] {
        let mut a = attempt(n, status, t0 + Duration::seconds(at));
        a.endpoint_id = id.clone();
        if n == 2 {
            (a.event_id, a.event_type) = (kept(2, "operation.delivered").0, "operation.delivered".into());
        }
        app.store.record_attempt(&a, keep).await.unwrap();
    }
    let enabled = |on: bool| EndpointChange::parse(&json!({"enabled": on}), &UrlPolicy::default(), false).unwrap();
    endpoints.update(&id, enabled(false)).await.unwrap();
    let refused = |r: Result<_, EndpointError>| match r {
        Err(EndpointError::NotReplayable(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(endpoints.replay(&id, "op:1:0:operation.accepted").await.map(|()| 0)).contains("disabled"));
    assert!(refused(endpoints.recover(&id, t0).await.map(|r| r.queued)).contains("disabled"));
    assert!(app.queue.webhook_copies().is_empty(), "nothing queued while disabled");

    endpoints.update(&id, enabled(true)).await.unwrap();
    // Of a type it does not take: refused with the type, even enabled.
    let why = refused(endpoints.replay(&id, "op:1:2:operation.delivered").await.map(|()| 0));
    assert!(why.contains("operation.delivered"), "{why}");
    assert!(app.queue.webhook_copies().is_empty());
    // The type it takes no longer is left out.
    let done = endpoints.recover(&id, t0).await.unwrap();
    assert_eq!((done.queued, done.missing), (2, 0));
    let sent: Vec<serde_json::Value> = app
        .queue
        .webhook_copies()
        .iter()
        .map(|c| serde_json::from_str::<serde_json::Value>(c).unwrap()["detail"]["id"].clone())
        .collect();
    assert_eq!(
        sent,
        [json!("op:1:0:operation.accepted"), json!("op:1:1:operation.accepted")]
    );
}

/// One tenant calling recover again and again against an endpoint that
/// keeps failing: each copy is retried for about a day on the queue every
/// tenant shares. A recovery queues at most `RECOVER_COPIES` (the oldest
/// first, `left` counting the rest), and holds its endpoint for
/// `RECOVERY_WINDOW`: another call within it is refused and queues nothing.
#[tokio::test]
async fn recoveries_are_capped_and_one_per_endpoint_in_a_window() {
    use genace_stages::api::webhooks::endpoints::{RECOVER_COPIES, RECOVERY_WINDOW};
    let (app, _) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let id = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/a"})))
        .await
        .unwrap()
        .endpoint
        .id;
    let t0 = app.clock.now();
    let keep = t0 + Duration::days(30);
    let failed = RECOVER_COPIES + 50;
    for n in 0..u32::try_from(failed).unwrap() {
        let mut a = attempt(n, AttemptStatus::Failed, t0 + Duration::seconds(i64::from(n) + 1));
        a.endpoint_id = id.clone();
        app.store.record_attempt(&a, keep).await.unwrap();
        let event = format!("op:1:{n}:operation.accepted");
        let detail = json!({"id": event, "type": "operation.accepted"}).to_string();
        app.store.keep_event(&acme(), &event, &detail, keep).await.unwrap();
    }
    let done = endpoints.recover(&id, t0).await.unwrap();
    assert_eq!((done.queued, done.missing, done.left), (RECOVER_COPIES, 0, 50));
    let copies = app.queue.webhook_copies();
    assert_eq!(copies.len(), RECOVER_COPIES);
    let first: serde_json::Value = serde_json::from_str(&copies[0]).unwrap();
    assert_eq!(first["detail"]["id"], "op:1:0:operation.accepted", "the oldest first");
    for _ in 0..5 {
        let again = endpoints.recover(&id, t0).await;
        assert!(
            matches!(again, Err(EndpointError::RecoveryRunning { .. })),
            "refused within the window: {again:?}"
        );
    }
    assert!(app.queue.webhook_copies().is_empty(), "nothing more queued");
    // Its copies are retried for about a day: still held a day on.
    app.clock.advance(Duration::hours(26));
    let held = endpoints.recover(&id, t0).await;
    assert!(matches!(held, Err(EndpointError::RecoveryRunning { .. })), "{held:?}");
    app.clock
        .advance(RECOVERY_WINDOW - Duration::hours(26) + Duration::seconds(1));
    let later = endpoints.recover(&id, t0).await.unwrap();
    assert_eq!(later.queued, RECOVER_COPIES, "{later:?}");
}

/// Replays of one endpoint are bounded like its recoveries: at most
/// `REPLAY_COPIES` in a window, the next refused with the window's end and
/// nothing queued, and a new window once it has passed.
#[tokio::test]
async fn replays_of_an_endpoint_are_bounded_per_window() {
    use genace_stages::api::webhooks::endpoints::{RECOVERY_WINDOW, REPLAY_COPIES};
    let (app, _) = app(5);
    let api = app.api();
    let endpoints = api.endpoints(acme(), "dev@acme".into());
    let id = endpoints
        .create(change(json!({"url": "https://hooks.acme.example/a"})))
        .await
        .unwrap()
        .endpoint
        .id;
    let t0 = app.clock.now();
    let event_id = "op:1:2:operation.accepted";
    let detail = json!({"id": event_id, "type": "operation.accepted"}).to_string();
    app.store
        .keep_event(&acme(), event_id, &detail, t0 + Duration::days(30))
        .await
        .unwrap();
    for _ in 0..REPLAY_COPIES {
        endpoints.replay(&id, event_id).await.unwrap();
        app.clock.advance(Duration::minutes(1));
    }
    let queued = app.queue.webhook_copies().len();
    assert_eq!(queued, REPLAY_COPIES as usize);
    match endpoints.replay(&id, event_id).await {
        Err(EndpointError::ReplayLimit { until, .. }) => assert_eq!(until, t0 + RECOVERY_WINDOW),
        other => panic!("expected the limit, got {other:?}"),
    }
    // (Each read takes the copies queued since the last.)
    assert!(app.queue.webhook_copies().is_empty(), "nothing more was queued");
    app.clock.set(t0 + RECOVERY_WINDOW);
    endpoints.replay(&id, event_id).await.unwrap();
    assert_eq!(app.queue.webhook_copies().len(), 1);
}
