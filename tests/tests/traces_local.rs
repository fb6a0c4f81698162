//! One operation's trace through the local stack (moto over HTTP, the
//! in-process runner, wiremock as Genace, the local OTLP receiver): the
//! second of two intents on an account of one slot waits for the first's
//! slot, and its first POST is answered 429. Every span that names it is
//! in its trace; the stages come in causal order (intake, dispatch,
//! poll, deliver); the wait for the slot is a span of its own; and the
//! Genace POST spans carry the 429 and the 202. A third intent's dispatch
//! crashes after its commit (the fault directive): the redelivered
//! dispatch is in the same trace. The tenant's erasure of the outputs is
//! a span of the trace as well, and the operators' route serves it all.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use genace_client::Client;
use genace_core::domain::OperationId;
use genace_core::trace::TraceId;
use genace_local::traces::{Receiver, read_trace};
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use genace_trace::lines::{SpanLine, in_order};
use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Genace: `job-<prompt>` for each POST, the second intent's first POST
/// refused with 429; the first job is running at its first look and done
/// at the next, the second done at once.
struct Genace {
    base: String,
    second_posts: AtomicU32,
    first_gets: AtomicU32,
}

impl Respond for Genace {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if request.method == wiremock::http::Method::POST {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let prompt = body["prompt"].as_str().unwrap_or("unknown").to_owned();
            if prompt == "second" && self.second_posts.fetch_add(1, Ordering::SeqCst) == 0 {
                return ResponseTemplate::new(429).insert_header("retry-after", "1");
            }
            return ResponseTemplate::new(202)
                .set_body_json(json!({"job_id": format!("job-{prompt}"), "state": "queued"}));
        }
        let id = request.url.path().trim_start_matches("/v1/jobs/").to_owned();
        if id == "job-first" && self.first_gets.fetch_add(1, Ordering::SeqCst) == 0 {
            return ResponseTemplate::new(200).set_body_json(json!({"id": id, "state": "running"}));
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "id": id, "state": "completed", "error": null,
            "outputs": [{"url": format!("{}/outputs/{id}.png", self.base), "content_type": "image/png"}]
        }))
    }
}

async fn standin() -> MockServer {
    let genace = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/outputs/"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"rendered".to_vec()))
        .with_priority(1)
        .mount(&genace)
        .await;
    Mock::given(path_regex(r"^/v1/jobs"))
        .respond_with(Genace {
            base: genace.uri(),
            second_posts: AtomicU32::new(0),
            first_gets: AtomicU32::new(0),
        })
        .mount(&genace)
        .await;
    genace
}

async fn delivered(user: &Client, id: &str) -> Value {
    e2e::until_delivery(user, id, "delivered", Duration::from_secs(90)).await
}

/// The trace's spans once `done` holds for them (the last invocations
/// export as they end), within 20 s.
/// Whether `spans` hold the operation's root and a span of every stage:
/// the invocations export as they end, in no set order.
fn every_stage(spans: &[SpanLine]) -> bool {
    ["operation", "intake", "dispatch", "poll", "deliver"]
        .iter()
        .all(|name| spans.iter().any(|s| s.name == *name))
}

async fn spans_of(file: &std::path::Path, trace: &str, done: impl Fn(&[SpanLine]) -> bool) -> Vec<SpanLine> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans = read_trace(file, trace).unwrap();
        if done(&spans) || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_operation_is_one_trace_with_its_stages_its_wait_and_its_posts() {
    let file = std::env::temp_dir().join(format!("genace-traces-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let receiver = Receiver::for_this_process(&file, "local").await.unwrap();
    let env = LocalAws::fresh().await;
    let genace = standin().await;
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    config.max_in_flight = Some(1);
    config.fault_injection = true;
    let mut gconf = GenaceConfig::new(genace.uri(), "traces-test-key");
    gconf.timeout = Duration::from_secs(3);
    let settings = runner::RunnerSettings {
        traces_file: Some(file.clone()),
        ..runner::RunnerSettings::for_tests()
    };
    let api = format!("http://{}", settings.intake_addr);
    let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();
    let tenant = format!("traced-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let user = e2e::client(&api, &devauth::issue("tenant_id", &tenant, 600).unwrap());
    let mut ids = Vec::new();
    for (prompt, fault) in [
        ("first", None),
        ("second", None),
        ("crashed", Some("dispatch.after_commit")),
    ] {
        let mut intent = json!({"operation_key": prompt, "media_type": "image",
                                "specification": {"model": "genace-image-1", "prompt": prompt}});
        if let Some(f) = fault {
            intent["fault"] = json!(f);
        }
        let created = e2e::create(&user, intent).await;
        ids.push(created["operation_id"].as_str().unwrap().to_owned());
    }
    let second = delivered(&user, &ids[1]).await;
    delivered(&user, &ids[2]).await;
    // The tenant erases the outputs: a span of the operation's trace too.
    user.erase_outputs(&ids[1]).await.expect("erased, 200");
    let trace = TraceId::of(&OperationId::parse(&ids[1]).unwrap()).to_hex();
    assert_eq!(second["trace_id"], trace, "the view names the trace");
    the_operators_route_serves_the_trace(&api, &ids[1], &trace).await;
    running.shutdown().await;

    assert_the_trace(&file, &trace, &ids[1]).await;
    let crashed = TraceId::of(&OperationId::parse(&ids[2]).unwrap()).to_hex();
    let spans = spans_of(&file, &crashed, |s| {
        every_stage(s) && s.iter().filter(|s| s.name == "dispatch").count() >= 2
    })
    .await;
    let dispatches: Vec<String> = in_order(&spans)
        .iter()
        .filter(|(_, s)| s.name == "dispatch")
        .map(|(_, s)| s.attribute("outcome").unwrap_or_default())
        .collect();
    let crash = dispatches.iter().position(|o| o.starts_with("error: injected crash"));
    let again = dispatches.iter().rposition(|o| o.starts_with("nothing to dispatch"));
    assert!(
        crash.zip(again).is_some_and(|(c, a)| c < a),
        "the crashed dispatch, then the redelivered one, in the same trace: {dispatches:?}"
    );
    assert!(spans.iter().any(|s| s.name == "poll"), "polled after the redelivery");
    drop(receiver);
    let _ = std::fs::remove_file(&file);
}

/// The operator's trace route serves the receiver's spans of `id`'s
/// trace, in causal order under the operation's root, with the POSTs'
/// statuses: what the console draws.
async fn the_operators_route_serves_the_trace(api: &str, id: &str, trace: &str) {
    let operator = e2e::client(
        api,
        &devauth::issue_operator("ops-trace", "tenant_id", None, 600).unwrap(),
    );
    let body = e2e::read_until(
        Duration::from_secs(20),
        || operator.trace(id),
        |body| {
            // The erasure's span leaves with the rest of its trace (a webhook
            // send of the same operation may hold it back a moment).
            ["deliver", "erase"].iter().all(|name| {
                body["spans"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["name"] == *name))
            })
        },
    )
    .await;
    assert_eq!(body["trace_id"], trace);
    assert_eq!(body["source"], "receiver");
    let spans = body["spans"].as_array().unwrap();
    assert_eq!(spans[0]["name"], "operation", "{body}");
    assert_eq!(spans[0]["depth"], 0);
    assert_eq!(spans[0]["offset_ms"], 0.0);
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    for stage in [
        "intake",
        "dispatch",
        "wait.capacity",
        "genace.post",
        "poll",
        "deliver",
        "erase",
    ] {
        assert!(names.contains(&stage), "{stage} missing: {names:?}");
    }
    let erase = spans.iter().find(|s| s["name"] == "erase").unwrap();
    assert_eq!(erase["outcome"], "ok", "{erase}");
    assert_eq!(erase["depth"], 1, "under the operation's root: {erase}");
    let statuses: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "genace.post")
        .map(|s| &s["status_code"])
        .collect();
    assert_eq!(statuses, [&json!(429), &json!(202)], "{body}");
}

/// The trace of operation `id` as the receiver wrote it to `file`: one
/// trace, its stages in causal order, the wait for a slot under the
/// admitted dispatch, and the POSTs' 429 and 202.
async fn assert_the_trace(file: &std::path::Path, trace: &str, id: &str) {
    let spans = spans_of(file, trace, every_stage).await;
    let names: Vec<&str> = in_order(&spans).iter().map(|(_, s)| s.name.as_str()).collect();
    // One trace: every span that names the operation is in it.
    let text = std::fs::read_to_string(file).unwrap();
    for line in text.lines() {
        let span: SpanLine = serde_json::from_str(line).unwrap();
        if span.attribute("operation_id").as_deref() == Some(id) {
            assert_eq!(span.trace_id, trace, "{span:?}");
        }
    }
    // The stages, in causal order, under the operation's root.
    let first_at = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.start_ns)
            .min()
            .unwrap_or_else(|| panic!("no {name} span: {names:?}"))
    };
    assert_eq!(names.first(), Some(&"operation"), "{names:?}");
    let order = ["intake", "dispatch", "poll", "deliver"].map(first_at);
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
    let stage_spans = spans.iter().filter(|s| s.name == "dispatch").count();
    assert!(stage_spans >= 2, "the 429's dispatch and the retry's: {names:?}");
    // The wait for the slot, a span of its own under the dispatch that
    // was admitted.
    let wait = spans
        .iter()
        .find(|s| s.name == "wait.capacity")
        .expect("the wait's span");
    let parent = spans
        .iter()
        .find(|s| Some(&s.span_id) == wait.parent_span_id.as_ref())
        .expect("the wait's parent");
    assert_eq!(parent.name, "dispatch");
    assert!(
        wait.end_ns - wait.start_ns > 500_000_000,
        "it waited for the first job: {wait:?}"
    );
    // The POSTs: the 429, then the 202.
    let posts: Vec<String> = spans
        .iter()
        .filter(|s| s.name == "genace.post")
        .filter_map(|s| s.attribute("http.response.status_code"))
        .collect();
    assert_eq!(posts, ["429", "202"], "{names:?}");
}
