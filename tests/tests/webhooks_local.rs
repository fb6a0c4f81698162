//! Webhooks on the local stack: an operator sets a tenant's webhook through
//! the API, the operator keeps its secret in Secrets Manager (moto), and one
//! operation's lifecycle reaches the receiver as signed POSTs, taken off the
//! table's stream by the events pipe and queued as the bus's rule does. A
//! refused POST is deferred on the queue by the retry schedule. A message
//! put on the webhook queue by hand is dead-lettered unsigned.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use genace_client::{Client, Intent, ListQuery};
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use genace_stages::config::RetrySchedule;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn a_tenants_webhook_receives_its_lifecycle_signed() {
    let env = LocalAws::fresh().await;
    let genace = genace_rendering("job-hook", "a.mp4", "video/mp4").await;
    let receiver = MockServer::start().await;
    // The first POST fails: its event is deferred, then delivered again.
    let refusing = RefusesFirst::default();
    Mock::given(method("POST"))
        .respond_with(refusing.clone())
        .mount(&receiver)
        .await;

    // Standard Webhooks secrets, rotated before the first event: for the
    // overlap both sign, so a receiver holding either verifies.
    let old_secret = "whsec_b2xkLXNlY3JldC1vZi10aGUtdGVzdC0wMTIz";
    let secret = "whsec_bmV3LXNlY3JldC1vZi10aGUtdGVzdC00NTY3";
    // Unique per run: the endpoint may outlive one test run.
    let secret_id = format!("genace/webhooks/hooked/hook-{}", uuid::Uuid::new_v4().simple());
    let secrets = genace_aws::clients::secrets(&env.sdk);
    secrets
        .create_secret()
        .name(&secret_id)
        .secret_string(old_secret)
        .send()
        .await
        .unwrap();
    secrets
        .put_secret_value()
        .secret_id(&secret_id)
        .secret_string(secret)
        .send()
        .await
        .unwrap();

    let mut config = env.config.clone();
    // Retried after 6 s, far longer than the 2 s visibility timeout below.
    config.webhook_retry = RetrySchedule {
        first_seconds: 6,
        max_seconds: 60,
    };
    let (running, api, events) = start_stack(&env, config, &genace).await;

    let operator = e2e::client(
        &api,
        &devauth::issue_operator("ops-alice", "tenant_id", None, 600).unwrap(),
    );
    let set = operator
        .set_webhook(
            "hooked",
            &json!({"url": format!("{}/genace", receiver.uri()), "secret_id": secret_id}),
        )
        .await;
    assert!(set.is_ok(), "{set:?}");

    let user = e2e::client(&api, &devauth::issue("tenant_id", "hooked", 600).unwrap());
    let created = e2e::create(
        &user,
        json!({"operation_key": "hooked-1", "media_type": "video",
               "specification": {"model": "genace-video-2", "prompt": "a lighthouse"}}),
    )
    .await;
    let id = created["operation_id"].as_str().unwrap().to_owned();

    // A second tenant without a webhook: its events stay off the webhook queue.
    let other = e2e::client(&api, &devauth::issue("tenant_id", "unhooked", 600).unwrap());
    let spec = json!({"model": "genace-image-1", "prompt": "a harbour"});
    other.submit(&Intent::new("plain-1", "image", spec)).await.unwrap();

    let wanted = ["operation.accepted", "operation.rendered", "operation.delivered"];
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut delivered: Vec<Value> = Vec::new();
    while Instant::now() < deadline {
        let requests = receiver.received_requests().await.unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for r in &requests {
            let body = String::from_utf8(r.body.clone()).unwrap();
            let header = |n: &str| {
                r.headers
                    .get(n)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default()
            };
            let detail: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                detail["tenant_id"], "hooked",
                "only the hooked tenant's events are sent"
            );
            assert_eq!(header("webhook-id"), detail["id"].as_str().unwrap());
            assert!(detail.get("webhooks").is_none(), "the bus's mark is not posted");
            seen.insert(detail["id"].as_str().unwrap().to_owned(), detail);
        }
        delivered = seen.into_values().collect();
        // Done when every type arrived and the refused first POST came again.
        let retried = {
            let posts = refusing.0.lock().unwrap();
            posts
                .first()
                .is_some_and(|(first, _)| posts[1..].iter().any(|(id, _)| id == first))
        };
        if retried && wanted.iter().all(|w| delivered.iter().any(|d| d["type"] == *w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    running.shutdown().await;
    // The bus carries both tenants' events; only the hooked tenant's are
    // marked for the webhook rule, so the other's never reach the queue.
    let carried: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of = |tenant: &str| -> Vec<&Value> {
        carried
            .iter()
            .map(|e| &e["detail"])
            .filter(|d| d["tenant_id"] == tenant)
            .collect()
    };
    assert!(!of("unhooked").is_empty(), "the other tenant's events are on the bus");
    assert!(of("unhooked").iter().all(|d| d.get("webhooks").is_none()));
    assert!(!of("hooked").is_empty() && of("hooked").iter().all(|d| d["webhooks"] == true));
    let _ = std::fs::remove_file(&events);
    // Every POST, first attempts and retries alike, verifies with a
    // receiver written with the standardwebhooks package, under the new
    // secret and under the rotated one.
    verify_with_standard_webhooks(&receiver.received_requests().await.unwrap(), &[secret, old_secret]);
    let mut types: Vec<(u64, String)> = delivered
        .iter()
        .filter(|d| d["operation_id"] == id.as_str())
        .map(|d| (d["version"].as_u64().unwrap(), d["type"].as_str().unwrap().to_owned()))
        .collect();
    types.sort();
    let types: Vec<&str> = types.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(types, wanted, "the lifecycle, in order of the versions");
    // The refused first POST was delivered again, once the retry schedule
    // (not the queue's visibility timeout) let it.
    let posts = refusing.0.lock().unwrap().clone();
    let (refused_id, refused_at) = posts[0].clone();
    let (_, retried_at) = posts[1..]
        .iter()
        .find(|(id, _)| *id == refused_id)
        .expect("the refused event was POSTed again");
    let waited = retried_at.duration_since(refused_at);
    assert!(
        waited >= Duration::from_secs(5),
        "retried after {waited:?}, before the 6 s the schedule asks"
    );
}

/// The local stack against `genace`, with its events pipe writing the bus
/// to a file of its own, and webhooks allowed to the loopback receiver:
/// the stack, its API's base URL and the bus file.
async fn start_stack(
    env: &LocalAws,
    mut config: genace_stages::config::Config,
    genace: &MockServer,
) -> (runner::Running, String, std::path::PathBuf) {
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    let mut gconf = GenaceConfig::new(genace.uri(), "hook-test-key");
    gconf.timeout = Duration::from_secs(3);
    let events = std::env::temp_dir().join(format!("genace-events-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let settings = runner::RunnerSettings {
        events_file: Some(events.clone()),
        ..runner::RunnerSettings::for_tests()
    };
    let addr = settings.intake_addr;
    let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();
    (running, format!("http://{addr}"), events)
}

/// A Genace stand-in that takes one job, `job`, and renders it at once to
/// one output, `file`.
async fn genace_rendering(job: &str, file: &str, content_type: &str) -> MockServer {
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": job, "state": "queued"})))
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{job}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": job, "state": "completed", "error": null,
            "outputs": [{"url": format!("{}/outputs/{file}", genace.uri()), "content_type": content_type}]
        })))
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/outputs/{file}")))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"rendered".to_vec()))
        .mount(&genace)
        .await;
    genace
}

/// Answers 503 to the first POST and 200 to every other, noting when each
/// event id was POSTed.
#[derive(Clone, Default)]
struct RefusesFirst(Arc<Mutex<Vec<(String, Instant)>>>);

impl Respond for RefusesFirst {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let id = request
            .headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut posts = self.0.lock().unwrap();
        posts.push((id, Instant::now()));
        ResponseTemplate::new(if posts.len() == 1 { 503 } else { 200 })
    }
}

/// Runs `tests/py/verify_webhooks.py` (the `standardwebhooks` package from
/// PyPI) over the POSTs: each must verify under every secret, and the
/// script checks that a tampered body and an old timestamp are refused.
/// The interpreter is `GENACE_PYTHON`, else the repository's `.venv`
/// (`scripts/test.sh` installs the package there).
fn verify_with_standard_webhooks(requests: &[Request], secrets: &[&str]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let python = std::env::var("GENACE_PYTHON").map_or_else(|_| root.join(".venv/bin/python"), Into::into);
    let posts: Vec<Value> = requests
        .iter()
        .map(|r| {
            let headers: serde_json::Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), json!(v.to_str().unwrap())))
                .collect();
            json!({"headers": headers, "body": String::from_utf8(r.body.clone()).unwrap()})
        })
        .collect();
    let input = std::env::temp_dir().join(format!("genace-hooks-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&input, json!({"secrets": secrets, "posts": posts}).to_string()).unwrap();
    let out = std::process::Command::new(&python)
        .arg(root.join("tests/py/verify_webhooks.py"))
        .arg(&input)
        .output()
        .unwrap_or_else(|e| panic!("running {} (scripts/test.sh installs it): {e}", python.display()));
    let _ = std::fs::remove_file(&input);
    assert!(
        out.status.success(),
        "the standardwebhooks receiver refused: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
}

/// A tenant disables its endpoint: its operation's events are not sent,
/// but they are kept and logged as skipped; a replay meanwhile is refused
/// with 409. Enabled again, `recover?since=` sends what it missed, signed
/// with the endpoint's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn a_disabled_endpoint_enabled_again_recovers_what_it_missed() {
    let env = LocalAws::fresh().await;
    let genace = genace_rendering("job-off", "b.png", "image/png").await;
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;

    let (running, api, events) = start_stack(&env, env.config.clone(), &genace).await;
    // Unique per run: the table may outlive one test run.
    let tenant = format!("off-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let app = e2e::client(&api, &devauth::issue_with_webhooks("tenant_id", &tenant, 600).unwrap());
    let created = app
        .create_endpoint(
            None,
            &json!({"url": format!("{}/off", receiver.uri()), "events": ["operation.accepted", "operation.delivered"]}),
        )
        .await
        .unwrap();
    let endpoint = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let disabled = app.update_endpoint(None, &endpoint, &json!({"enabled": false})).await;
    assert!(disabled.is_ok(), "{disabled:?}");
    let since = chrono::Utc::now();

    let op = e2e::create(
        &app,
        json!({"operation_key": "off-1", "media_type": "image",
               "specification": {"model": "genace-image-1", "prompt": "a quay"}}),
    )
    .await;
    let op_id = op["operation_id"].as_str().unwrap().to_owned();
    // Both events the endpoint takes are logged as skipped.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut skipped: Vec<Value> = Vec::new();
    let only_skipped = ListQuery::new().with("status", "skipped");
    while Instant::now() < deadline && skipped.len() < 2 {
        skipped = app
            .endpoint_attempts_page(&endpoint, &only_skipped, None)
            .await
            .unwrap()
            .items;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut types: Vec<&str> = skipped.iter().map(|a| a["event_type"].as_str().unwrap()).collect();
    types.sort_unstable();
    assert_eq!(types, ["operation.accepted", "operation.delivered"], "{skipped:?}");
    assert!(
        receiver.received_requests().await.unwrap().is_empty(),
        "nothing sent while disabled"
    );
    let event_id = skipped[0]["event_id"].as_str().unwrap().to_owned();
    let refused = app.replay(None, &endpoint, &event_id).await.unwrap_err();
    assert_eq!(refused.status(), Some(409), "{refused}");

    let enabled = app.update_endpoint(None, &endpoint, &json!({"enabled": true})).await;
    assert!(enabled.is_ok(), "{enabled:?}");
    let recovered = app.recover(None, &endpoint, since).await.unwrap();
    assert_eq!(
        (recovered["queued"].clone(), recovered["missing"].clone()),
        (json!(2), json!(0))
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while Instant::now() < deadline && got.len() < 2 {
        got = receiver.received_requests().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    forged_delivery_is_dead_lettered(&env, &events, &op_id, &tenant).await;
    assert_eq!(
        receiver.received_requests().await.unwrap().len(),
        got.len(),
        "no POST for the forged message"
    );
    running.shutdown().await;
    let _ = std::fs::remove_file(&events);
    let mut sent: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            let d: Value = serde_json::from_slice(&r.body).unwrap();
            (
                d["operation_id"].as_str().unwrap().to_owned(),
                d["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            (op_id.clone(), "operation.accepted".to_owned()),
            (op_id, "operation.delivered".to_owned())
        ]
    );
    verify_with_standard_webhooks(&got, &[secret.as_str()]);
}

/// A message put on the webhook queue by hand, as any principal allowed to
/// send could: the real `operation.delivered` of `op_id` off the bus file,
/// its objects changed and its id with them. The events pipe's seal does
/// not hold: it is dead-lettered once, and nothing is kept for replay.
async fn forged_delivery_is_dead_lettered(env: &LocalAws, bus: &std::path::Path, op_id: &str, tenant: &str) {
    use genace_stages::ports::table::WebhookEndpoints as _;
    let genuine: Value = std::fs::read_to_string(bus)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["detail"]["operation_id"] == op_id && e["detail"]["type"] == "operation.delivered")
        .expect("the delivered event on the bus");
    assert!(genuine["detail"]["mac"].is_string(), "the pipe seals: {genuine}");
    let mut forged = genuine.clone();
    let id = format!("{}-forged", genuine["detail"]["id"].as_str().unwrap());
    forged["detail"]["id"] = json!(id);
    forged["detail"]["data"]["objects"] = json!([{"key": "forged/elsewhere.png", "bytes": 1, "sha256": "00"}]);
    let sqs = genace_aws::clients::sqs(&env.sdk);
    sqs.send_message()
        .queue_url(&env.config.queues.webhooks)
        .message_body(forged.to_string())
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut letters = Vec::new();
    while Instant::now() < deadline && letters.is_empty() {
        let out = sqs
            .receive_message()
            .queue_url(&env.config.queues.webhook_dead_letters)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        letters.extend(
            out.messages()
                .iter()
                .filter_map(|m| m.body().map(str::to_owned))
                .filter(|b| b.contains(&id)),
        );
    }
    assert_eq!(letters.len(), 1, "one dead letter for the forged message");
    let tenant = genace_core::domain::TenantId::parse(tenant).unwrap();
    let kept = env.store().kept_event(&tenant, &id, chrono::Utc::now()).await.unwrap();
    assert_eq!(kept, None, "nothing kept for replay");
}

/// A Genace stand-in that takes any number of jobs, each with an id of its
/// own, and renders each at once to one image.
async fn genace_rendering_many() -> MockServer {
    #[derive(Clone, Default)]
    struct Mints(Arc<Mutex<u32>>);
    impl Respond for Mints {
        fn respond(&self, _: &Request) -> ResponseTemplate {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            ResponseTemplate::new(202).set_body_json(json!({"job_id": format!("job-many-{n}"), "state": "queued"}))
        }
    }
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(Mints::default())
        .mount(&genace)
        .await;
    let output = format!("{}/outputs/many.png", genace.uri());
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(r"^/v1/jobs/job-many-[0-9]+$"))
        .respond_with(move |r: &Request| {
            let id = r.url.path().rsplit('/').next().unwrap_or_default().to_owned();
            ResponseTemplate::new(200).set_body_json(json!({
                "id": id, "state": "completed", "error": null,
                "outputs": [{"url": output, "content_type": "image/png"}]
            }))
        })
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path("/outputs/many.png"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"rendered".to_vec()))
        .mount(&genace)
        .await;
    genace
}

/// How long another tenant's events may take from its submit to its
/// receiver while one tenant recovers against a failing endpoint: the
/// pipeline's own time (claim, poll, delivery, the events pipe), with room.
const NEIGHBOUR_BOUND: Duration = Duration::from_secs(45);

/// One tenant calls recover over and over against an endpoint that fails;
/// another tenant's webhooks flow meanwhile. With the cap set below the
/// six failed events, the first call queues the cap's copies (the oldest)
/// and leaves the rest; every other call is refused while it runs (409);
/// the second tenant's events reach its receiver within the stated bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn one_tenants_recoveries_do_not_hold_back_anothers_webhooks() {
    let env = LocalAws::fresh().await;
    let genace = genace_rendering_many().await;
    let failing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&failing)
        .await;
    let healthy = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&healthy)
        .await;
    // A cap below the noisy tenant's six failed events, so it is reached.
    let mut config = env.config.clone();
    config.webhook_recover_copies = 4;
    let (running, api, events) = start_stack(&env, config, &genace).await;
    let run = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let since = chrono::Utc::now();
    let endpoint_of = |tenant: &str, receiver: &MockServer| {
        let app = e2e::client(&api, &devauth::issue_with_webhooks("tenant_id", tenant, 600).unwrap());
        let url = receiver.uri();
        async move {
            let created = app
                .create_endpoint(
                    None,
                    &json!({"url": format!("{url}/hook"), "events": ["operation.accepted", "operation.delivered"]}),
                )
                .await
                .unwrap();
            let endpoint = created["id"].as_str().unwrap().to_owned();
            (app, endpoint)
        }
    };
    let submit = |app: Client, key: String| async move {
        e2e::create(
            &app,
            json!({"operation_key": key, "media_type": "image",
                   "specification": {"model": "genace-image-1", "prompt": "a quay"}}),
        )
        .await;
    };
    // The noisy tenant: three operations whose events its endpoint fails.
    let noisy = format!("noisy-{run}");
    let (noisy_app, noisy_endpoint) = endpoint_of(&noisy, &failing).await;
    for i in 0..3 {
        submit(noisy_app.clone(), format!("noisy-{i}")).await;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut failed = 0;
    while Instant::now() < deadline && failed < 6 {
        let only_failed = ListQuery::new().with("status", "failed");
        let log = noisy_app
            .endpoint_attempts_page(&noisy_endpoint, &only_failed, None)
            .await;
        failed = log.unwrap().items.len();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        failed >= 6,
        "each of the noisy tenant's six events failed once: {failed}"
    );

    // Recover, again and again, while the neighbour's operation runs.
    let neighbour = format!("neighbour-{run}");
    let (neighbour_app, _) = endpoint_of(&neighbour, &healthy).await;
    let submitted = Instant::now();
    submit(neighbour_app, "neighbour-1".into()).await;
    let (mut queued, mut left, mut refused) = (0, 0, 0);
    for _ in 0..10 {
        match noisy_app.recover(None, &noisy_endpoint, since).await {
            Ok(done) => {
                queued += done["queued"].as_u64().unwrap();
                left += done["left"].as_u64().unwrap();
            }
            Err(e) if e.status() == Some(409) => refused += 1,
            Err(other) => panic!("recover answered {other}"),
        }
    }
    assert_eq!(
        (queued, left),
        (4, 2),
        "the cap's copies, the oldest, and the rest left"
    );
    assert_eq!(refused, 9, "one recovery of an endpoint at a time");
    let mut neighbours = 0;
    while submitted.elapsed() < NEIGHBOUR_BOUND && neighbours < 2 {
        neighbours = healthy.received_requests().await.unwrap().len();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = submitted.elapsed();
    eprintln!(
        "the neighbour's events in {took:?}; recover queued {queued} copies (left {left}), refused {refused} calls"
    );
    running.shutdown().await;
    let _ = std::fs::remove_file(&events);
    assert_eq!(
        neighbours, 2,
        "the neighbour's accepted and delivered events within {NEIGHBOUR_BOUND:?} (took {took:?})"
    );
}
