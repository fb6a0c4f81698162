//! The Rust client (`genace-client`) end to end on the local stack: the
//! runner's intake and stages against the local AWS endpoint, Genace as
//! wiremock. One intent walks from submit to erasure through the client
//! alone (created, replayed, a key reused, listed across a cursor, waited
//! for, erased, its webhook verified), a held one is cancelled, and a
//! submit whose first answer is lost after it reached intake comes back a
//! replay, with one operation and one Genace POST.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use genace_client::{Client, Intent, ListQuery, Submitted, WaitFor};
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// The example docs/clients.md quotes.
#[path = "../../clients/rust/examples/quickstart.rs"]
mod quickstart;

/// A Genace stand-in: every POST a new job, every job rendered at once to
/// one small output.
async fn genace() -> MockServer {
    let genace = MockServer::start().await;
    let jobs = Arc::new(AtomicUsize::new(0));
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(move |_: &Request| {
            let n = jobs.fetch_add(1, Ordering::SeqCst);
            ResponseTemplate::new(202).set_body_json(json!({"job_id": format!("job-{n}"), "state": "queued"}))
        })
        .mount(&genace)
        .await;
    let output = format!("{}/outputs/still.png", genace.uri());
    Mock::given(method("GET"))
        .and(path_regex("^/v1/jobs/job-[0-9]+$"))
        .respond_with(move |req: &Request| {
            let id = req.url.path().rsplit('/').next().unwrap_or("").to_owned();
            ResponseTemplate::new(200).set_body_json(json!({
                "id": id, "state": "completed", "error": null,
                "outputs": [{"url": output, "content_type": "image/png"}]
            }))
        })
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path("/outputs/still.png"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![9u8; 512]))
        .mount(&genace)
        .await;
    genace
}

async fn stack(env: &LocalAws, genace: &MockServer) -> (runner::Running, String) {
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    let mut gconf = GenaceConfig::new(genace.uri(), "client-test-key");
    gconf.timeout = Duration::from_secs(3);
    let events = std::env::temp_dir().join(format!("genace-client-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let settings = runner::RunnerSettings {
        events_file: Some(events),
        ..runner::RunnerSettings::for_tests()
    };
    let addr = settings.intake_addr;
    let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();
    (running, format!("http://{addr}"))
}

fn tenant(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

fn spec(prompt: &str) -> serde_json::Value {
    json!({"model": "genace-image-1", "prompt": prompt})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_intent_walks_from_submit_to_erasure_through_the_client() {
    let env = LocalAws::fresh().await;
    let genace = genace().await;
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let (running, api) = stack(&env, &genace).await;
    let tenant = tenant("client");
    let app = Client::new(&api, &devauth::issue_with_webhooks("tenant_id", &tenant, 600).unwrap());
    let operator = app.with_token(&devauth::issue_operator("ops-client", "tenant_id", None, 600).unwrap());

    let endpoint = app
        .create_endpoint(
            None,
            &json!({"url": format!("{}/hook", receiver.uri()), "events": ["operation.delivered"]}),
        )
        .await
        .unwrap();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();

    // Created, then the same intent again: the same operation.
    let intent = Intent::new("thumb-1", "image", spec("a lighthouse"));
    let Submitted::Created(op) = app.submit(&intent).await.unwrap() else {
        panic!("a new intent is created");
    };
    let Submitted::Replayed(again) = app.submit(&intent).await.unwrap() else {
        panic!("the same intent is replayed");
    };
    assert_eq!(again.id(), op.id());
    // The key reused for another intent: the existing operation, nothing new.
    let other = Intent::new("thumb-1", "image", spec("a windmill"));
    match app.submit(&other).await.unwrap() {
        Submitted::KeyReused { operation_id, problem } => {
            assert_eq!(operation_id, op.id());
            assert_eq!(problem.status, 409);
        }
        outcome => panic!("a reused key is refused: {outcome:?}"),
    }

    let delivered = app
        .wait(op.id(), WaitFor::Delivered, Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(delivered.phase(), "rendered", "{}", delivered.view);

    // A second operation, and the listing, one per page, finds both.
    let second = Intent::new("thumb-2", "image", spec("a harbour"));
    assert!(matches!(app.submit(&second).await.unwrap(), Submitted::Created(_)));
    let query = ListQuery::new().with("limit", 1);
    let listed: Vec<serde_json::Value> = app.operations(&query).try_collect().await.unwrap();
    let keys: Vec<&str> = listed.iter().filter_map(|o| o["operation_key"].as_str()).collect();
    assert_eq!(listed.len(), 2, "{keys:?}");
    assert!(keys.contains(&"thumb-1") && keys.contains(&"thumb-2"), "{keys:?}");

    let erased = app.erase_outputs(op.id()).await.unwrap();
    assert_eq!(
        erased.view["erased_objects"].as_array().map(Vec::len),
        Some(1),
        "{}",
        erased.view
    );

    // Held by a spend limit of nothing, an operation is still prepared,
    // and the client cancels it; a repeat changes nothing.
    operator.set_spend_limit(&tenant, Some(0.0)).await.unwrap();
    let held = Intent::new("thumb-3", "image", spec("a quay"));
    let Submitted::Created(held) = app.submit(&held).await.unwrap() else {
        panic!("a held intent is still created");
    };
    let cancelled = app.cancel(held.id()).await.unwrap();
    assert_eq!(cancelled.phase(), "cancelled", "{}", cancelled.view);
    assert_eq!(app.cancel(held.id()).await.unwrap().phase(), "cancelled");

    // The delivered event verifies under the endpoint's secret, and a
    // changed body does not.
    let mut posts = Vec::new();
    for _ in 0..60 {
        posts = receiver.received_requests().await.unwrap();
        if !posts.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let post = posts.first().expect("the delivered event was POSTed");
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &post.headers {
        headers.insert(name.clone(), value.clone());
    }
    let event = genace_client::webhooks::verify(&[&secret], &headers, &post.body).unwrap();
    assert_eq!(event.kind, "operation.delivered");
    assert_eq!(event.operation_id, op.id());
    assert_eq!(
        quickstart::on_webhook(&headers, &post.body, &[&secret]).map(|e| e.operation_id),
        Some(op.id().to_owned()),
        "the documented receiver verifies it too"
    );
    let mut tampered = post.body.clone();
    tampered.push(b' ');
    assert!(genace_client::webhooks::verify(&[&secret], &headers, &tampered).is_err());
    running.shutdown().await;
}

/// One HTTP/1.1 request read from `conn`: its method, target, headers
/// (names in lower case) and body.
struct Raw {
    verb: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<Raw> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        raw.extend_from_slice(&buf[..n]);
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let verb = first.next().unwrap_or("GET").to_owned();
    let target = first.next().unwrap_or("/").to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while raw.len() < head_end + length {
        let n = conn.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        raw.extend_from_slice(&buf[..n]);
    }
    Some(Raw {
        verb,
        target,
        headers,
        body: raw[head_end..].to_vec(),
    })
}

/// `resp` as HTTP/1.1 bytes, the connection closed after it.
async fn answer_of(resp: reqwest::Response) -> Vec<u8> {
    let status = resp.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (k, v) in resp.headers() {
        if !matches!(k.as_str(), "content-length" | "connection" | "transfer-encoding") {
            out.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
        }
    }
    let body = resp.bytes().await.unwrap_or_default();
    out.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// A proxy on loopback in front of intake: it forwards every request, and
/// answers the first `POST /v1/operations` with 503 after intake has
/// taken it, as a gateway that loses the answer does.
async fn lossy_proxy(target: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let lose = Arc::new(AtomicBool::new(true));
    let http = reqwest::Client::new();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (lose, http, target) = (lose.clone(), http.clone(), target.clone());
            tokio::spawn(async move {
                let Some(req) = read_request(&mut conn).await else {
                    return;
                };
                let mut forward = http.request(req.verb.parse().unwrap(), format!("{target}{}", req.target));
                for (k, v) in &req.headers {
                    if !matches!(k.as_str(), "host" | "content-length" | "connection") {
                        forward = forward.header(k, v);
                    }
                }
                let resp = forward.body(req.body).send().await.unwrap();
                let lost = req.verb == "POST" && req.target == "/v1/operations" && lose.swap(false, Ordering::SeqCst);
                let answer = if lost {
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec()
                } else {
                    answer_of(resp).await
                };
                let _ = conn.write_all(&answer).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_whose_answer_is_lost_is_retried_as_a_replay_with_one_genace_post() {
    let env = LocalAws::fresh().await;
    let genace = genace().await;
    let (running, api) = stack(&env, &genace).await;
    let proxy = lossy_proxy(api).await;
    let tenant = tenant("lossy");
    let app = Client::new(&proxy, &devauth::issue("tenant_id", &tenant, 600).unwrap());
    let intent = Intent::new("lost-1", "image", spec("a jetty"));
    let Submitted::Replayed(op) = app.submit(&intent).await.unwrap() else {
        panic!("the retry of a submit intake took is a replay");
    };
    app.wait(op.id(), WaitFor::Delivered, Duration::from_secs(90))
        .await
        .unwrap();
    let listed: Vec<serde_json::Value> = app.operations(&ListQuery::new()).try_collect().await.unwrap();
    assert_eq!(listed.len(), 1, "one operation: {listed:?}");
    let posts = genace
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST")
        .count();
    assert_eq!(posts, 1, "one Genace POST");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_documented_example_runs_as_written() {
    let env = LocalAws::fresh().await;
    let genace = genace().await;
    let (running, api) = stack(&env, &genace).await;
    let token = devauth::issue("tenant_id", &tenant("example"), 600).unwrap();
    let op = quickstart::quickstart(&api, &token, "quickstart-1").await.unwrap();
    assert_eq!(op.delivery_state(), "delivered", "{}", op.view);
    running.shutdown().await;
}
