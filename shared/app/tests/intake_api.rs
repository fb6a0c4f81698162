//! The intake handler fed real API Gateway HTTP API (v2) events, against the
//! local AWS endpoint.

use genace_aws::DynamoStore;
use genace_aws::S3Store;
use genace_aws::SqsQueue;
use genace_edge::http as api;
use genace_localaws::LocalAws;
use genace_stages::api::context::Api;
use genace_stages::config::QueueUrls;
use genace_stages::ports::Parts;
use lambda_http::{Body, Response};
use serde_json::{Value, json};

const POST_FIXTURE: &str = include_str!("fixtures/apigw-v2-post-operations.json");
const GET_FIXTURE: &str = include_str!("fixtures/apigw-v2-get-operation.json");

fn spec_body() -> Value {
    json!({
        "operation_key": "storyboard-7/frame-3/rev-2",
        "media_type": "video",
        "specification": {
            "model": "genace-video-2",
            "prompt": "a lighthouse at dusk",
            "duration": 5,
            "aspect_ratio": "16:9",
            "parameters": {"seed": 7, "camera": {"move": "dolly", "speed": 0.5}}
        }
    })
}

/// A POST event from the fixture, with the given raw body, tenant claim
/// (None removes it) and extra headers.
fn post_raw(body: &str, tenant: Option<&str>, headers: &[(&str, &str)]) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(POST_FIXTURE).unwrap();
    event["body"] = Value::String(body.to_owned());
    event["headers"]["content-length"] = Value::String(body.len().to_string());
    for (k, v) in headers {
        event["headers"][*k] = Value::String((*v).to_owned());
    }
    set_tenant(&mut event, tenant);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

fn post(body: &Value, tenant: &str) -> lambda_http::Request {
    post_raw(&body.to_string(), Some(tenant), &[])
}

fn get(id: &str, tenant: Option<&str>) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(GET_FIXTURE).unwrap();
    let path = format!("/v1/operations/{id}");
    event["rawPath"] = Value::String(path.clone());
    event["requestContext"]["http"]["path"] = Value::String(path);
    event["pathParameters"]["operation_id"] = Value::String(id.to_owned());
    set_tenant(&mut event, tenant);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

fn set_tenant(event: &mut Value, tenant: Option<&str>) {
    let claims = event["requestContext"]["authorizer"]["jwt"]["claims"]
        .as_object_mut()
        .unwrap();
    match tenant {
        Some(t) => claims.insert("tenant_id".into(), Value::String(t.to_owned())),
        None => claims.remove("tenant_id"),
    };
}

struct Parsed {
    status: u16,
    content_type: String,
    replayed: bool,
    location: Option<String>,
    body: Value,
}

fn parse(resp: Response<Body>) -> Parsed {
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    Parsed {
        status: resp.status().as_u16(),
        content_type: header("content-type").unwrap_or_default(),
        replayed: header("idempotent-replayed").as_deref() == Some("true"),
        location: header("location"),
        body: serde_json::from_slice(resp.body().as_ref()).unwrap(),
    }
}

fn intake(env: &LocalAws) -> Api<Parts<DynamoStore, SqsQueue, S3Store>> {
    Api::new(env.store(), env.queue(), env.objects(), env.config.clone())
}

#[tokio::test]
async fn a_new_intent_is_recorded_and_announced_once() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let r = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.content_type, "application/json");
    let id = r.body["operation_id"].as_str().unwrap().to_owned();
    assert_eq!(r.location.as_deref(), Some(format!("/v1/operations/{id}").as_str()));
    assert_eq!(r.body["phase"], "prepared");
    assert_eq!(r.body["delivery_state"], "not_collected");
    assert_eq!(r.body["specification_hash"].as_str().unwrap().len(), 64);
    assert!(r.body["created_at"].is_string());
    assert!(!r.replayed);

    let messages = env.drain(&env.queues.dispatch).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&messages[0]).unwrap(),
        json!({"operation_id": id})
    );

    let view = parse(api::handle(&api, get(&id, Some("tenant-a"))).await);
    assert_eq!(view.status, 200);
    assert_eq!(view.body["operation_id"], id.as_str());
    assert_eq!(view.body["specification"]["parameters"]["camera"]["move"], "dolly");
}

async fn concurrent_duplicates(n: usize) {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let calls = (0..n).map(|_| api::handle(&api, post(&spec_body(), "tenant-a")));
    let responses: Vec<Parsed> = futures::future::join_all(calls).await.into_iter().map(parse).collect();
    let created = responses.iter().filter(|r| r.status == 202).count();
    let replayed = responses.iter().filter(|r| r.status == 200 && r.replayed).count();
    assert_eq!((created, replayed), (1, n - 1), "one 202, the rest replayed 200s");
    let ids: std::collections::HashSet<_> = responses.iter().map(|r| r.body["operation_id"].clone()).collect();
    assert_eq!(ids.len(), 1, "every response names the same operation");
    assert_eq!(env.scan().await.len(), 1, "exactly one item");
    assert_eq!(
        env.drain(&env.queues.dispatch).await.len(),
        1,
        "exactly one dispatch message"
    );
}

#[tokio::test]
async fn two_concurrent_duplicates_converge() {
    concurrent_duplicates(2).await;
}

#[tokio::test]
async fn fifty_concurrent_duplicates_converge() {
    concurrent_duplicates(50).await;
}

#[tokio::test]
async fn reordered_keys_and_number_spelling_replay_the_same_operation() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let first = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    let reordered = r#"{"specification":{"parameters":{"camera":{"speed":0.50,"move":"dolly"},"seed":7.0},
        "aspect_ratio":"16:9","duration":5.0,"prompt":"a lighthouse at dusk","model":"genace-video-2"},
        "media_type":"video","operation_key":"storyboard-7/frame-3/rev-2"}"#;
    let again = parse(api::handle(&api, post_raw(reordered, Some("tenant-a"), &[])).await);
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.replayed);
    assert_eq!(again.body["operation_id"], first.body["operation_id"]);
    assert_eq!(again.body["specification_hash"], first.body["specification_hash"]);
    assert_eq!(
        env.drain(&env.queues.dispatch).await.len(),
        1,
        "a replay enqueues nothing"
    );
}

#[tokio::test]
async fn a_changed_prompt_conflicts_and_leaves_the_original_untouched() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let first = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    let before = env.scan().await;
    let mut changed = spec_body();
    changed["specification"]["prompt"] = json!("a lighthouse at dawn");
    let r = parse(api::handle(&api, post(&changed, "tenant-a")).await);
    assert_eq!(r.status, 409);
    assert_eq!(r.content_type, "application/problem+json");
    assert_eq!(r.body["status"], 409);
    assert_eq!(r.body["operation_id"], first.body["operation_id"]);
    assert_eq!(env.scan().await, before, "the stored item is unchanged");
}

#[tokio::test]
async fn tenants_are_isolated() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let a = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    let a_id = a.body["operation_id"].as_str().unwrap().to_owned();

    let b_reads_a = parse(api::handle(&api, get(&a_id, Some("tenant-b"))).await);
    let unknown = parse(api::handle(&api, get("op_0123456789abcdef0123456789abcdef", Some("tenant-a"))).await);
    assert_eq!((b_reads_a.status, unknown.status), (404, 404));
    assert_eq!(b_reads_a.content_type, "application/problem+json");
    assert_eq!(b_reads_a.body["detail"], unknown.body["detail"], "both look the same");

    let b = parse(api::handle(&api, post(&spec_body(), "tenant-b")).await);
    assert_eq!(b.status, 202, "B with A's key gets its own operation");
    assert_ne!(b.body["operation_id"], a.body["operation_id"]);
    assert_eq!(env.scan().await.len(), 2);
}

#[tokio::test]
async fn a_duplicate_intake_costs_one_dynamodb_request() {
    let env = LocalAws::fresh().await;
    let (store, counter) = env.counted_store();
    let api = Api::new(store, env.queue(), env.objects(), env.config.clone());
    assert_eq!(
        parse(api::handle(&api, post(&spec_body(), "tenant-a")).await).status,
        202
    );
    let before = counter.get();
    assert_eq!(
        parse(api::handle(&api, post(&spec_body(), "tenant-a")).await).status,
        200
    );
    assert_eq!(counter.get() - before, 1);
}

#[tokio::test]
async fn the_key_may_come_from_the_idempotency_key_header() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let mut body = spec_body();
    body.as_object_mut().unwrap().remove("operation_key");
    let r = parse(
        api::handle(
            &api,
            post_raw(
                &body.to_string(),
                Some("tenant-a"),
                &[("idempotency-key", "storyboard-7/frame-3/rev-2")],
            ),
        )
        .await,
    );
    assert_eq!(r.status, 202);
    assert_eq!(r.body["operation_key"], "storyboard-7/frame-3/rev-2");
    // The same key in the body replays the same operation.
    let again = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    assert_eq!(
        (again.status, again.body["operation_id"].clone()),
        (200, r.body["operation_id"].clone())
    );
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn bad_requests_get_problems_and_write_nothing() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = spec_body();
        f(&mut b);
        b.to_string()
    };
    let too_big = with(&|b| b["specification"]["prompt"] = json!("x".repeat(70 * 1024)));
    type Case<'a> = (&'a str, String, Option<&'a str>, Vec<(&'a str, &'a str)>, u16);
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            "{\"operation_key\": ".into(),
            Some("tenant-a"),
            vec![],
            400,
        ),
        ("not an object", "[1,2]".into(), Some("tenant-a"), vec![], 400),
        (
            "missing key",
            with(&|b| {
                b.as_object_mut().unwrap().remove("operation_key");
            }),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "missing spec",
            with(&|b| {
                b.as_object_mut().unwrap().remove("specification");
            }),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "missing model",
            with(&|b| {
                b["specification"].as_object_mut().unwrap().remove("model");
            }),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "bad key",
            with(&|b| b["operation_key"] = json!("has space")),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "long key",
            with(&|b| b["operation_key"] = json!("k".repeat(256))),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "unknown media type",
            with(&|b| b["media_type"] = json!("audio")),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "tenant in body",
            with(&|b| b["tenant_id"] = json!("tenant-b")),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "header and body keys differ",
            spec_body().to_string(),
            Some("tenant-a"),
            vec![("idempotency-key", "other")],
            400,
        ),
        (
            "fault directive while fault injection is off",
            with(&|b| b["fault"] = json!("dispatch.before_post")),
            Some("tenant-a"),
            vec![],
            400,
        ),
        (
            "unknown fault directive",
            with(&|b| b["fault"] = json!("dispatch.explode")),
            Some("tenant-a"),
            vec![],
            400,
        ),
        ("no tenant claim", spec_body().to_string(), None, vec![], 401),
        ("body over 64 KiB", too_big, Some("tenant-a"), vec![], 413),
        (
            "not JSON",
            spec_body().to_string(),
            Some("tenant-a"),
            vec![("content-type", "text/plain")],
            415,
        ),
    ];
    for (name, body, tenant, headers, status) in cases {
        let r = parse(api::handle(&api, post_raw(&body, tenant, &headers)).await);
        assert_eq!(r.status, status, "{name}: {}", r.body);
        assert_eq!(r.content_type, "application/problem+json", "{name}");
        assert_eq!(r.body["status"], status, "{name}");
        assert!(r.body["type"].as_str().unwrap().starts_with("https://"), "{name}");
        assert!(r.body["title"].is_string() && r.body["detail"].is_string(), "{name}");
    }
    assert!(env.scan().await.is_empty(), "no item was written");
    assert!(env.drain(&env.queues.dispatch).await.is_empty(), "nothing was enqueued");
}

#[tokio::test]
async fn reads_need_a_tenant_too() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let r = parse(api::handle(&api, get("op_0123456789abcdef0123456789abcdef", None)).await);
    assert_eq!(r.status, 401);
    let malformed = parse(api::handle(&api, get("not-an-id", Some("tenant-a"))).await);
    assert_eq!(malformed.status, 404);
}

#[tokio::test]
async fn a_failed_enqueue_does_not_fail_the_request() {
    let env = LocalAws::fresh().await;
    let broken = QueueUrls {
        dispatch: format!("{}-missing", env.queues.dispatch),
        ..env.queues.clone()
    };
    let api = Api::new(
        env.store(),
        SqsQueue::new(genace_aws::clients::sqs(&env.sdk), broken),
        env.objects(),
        env.config.clone(),
    );
    let r = parse(api::handle(&api, post(&spec_body(), "tenant-a")).await);
    assert_eq!(r.status, 202);
    assert_eq!(env.scan().await.len(), 1, "the record is the truth");
}

/// Measured: during an outage of every AWS call intake answered 503 with
/// nothing to say when to come back. It now names a time and what to do.
#[tokio::test]
async fn an_unavailable_store_answers_503_with_retry_after_and_the_same_key_advice() {
    let env = LocalAws::fresh().await;
    let missing = genace_aws::DynamoStore::new(
        genace_aws::clients::dynamodb(&env.sdk),
        format!("{}-missing", env.names.table),
    );
    let api = Api::new(missing, env.queue(), env.objects(), env.config.clone());
    let resp = api::handle(&api, post(&spec_body(), "tenant-a")).await;
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let r = parse(resp);
    assert_eq!(r.status, 503);
    assert_eq!(r.content_type, "application/problem+json");
    let seconds: u32 = retry_after
        .expect("Retry-After on a 503")
        .parse()
        .expect("delay-seconds");
    assert!((1..=60).contains(&seconds), "{seconds}");
    assert!(r.body["detail"].as_str().unwrap().contains("same operation key"));
}

#[tokio::test]
async fn a_wrong_method_answers_405_with_allow() {
    let env = LocalAws::fresh().await;
    let api = intake(&env);
    let mut event: Value = serde_json::from_str(GET_FIXTURE).unwrap();
    event["rawPath"] = json!("/v1/operations");
    event["requestContext"]["http"]["path"] = json!("/v1/operations");
    event["requestContext"]["http"]["method"] = json!("DELETE");
    event["pathParameters"] = json!({});
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let resp = api::handle(&api, req).await;
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers().get("allow").unwrap(), "GET, POST");
}

/// A retry that comes after its intent's absolute deadline (its first
/// answer lost) is a replay of the recorded operation, never a 400 that
/// would invite a new key and a second paid job. Only a new intent is
/// judged against the time; a changed one under the key is 409.
#[tokio::test]
async fn a_retry_after_its_deadline_is_a_replay_not_a_400() {
    use genace_memory::ManualClock;
    let env = LocalAws::fresh().await;
    let start = chrono::Utc::now();
    let clock = ManualClock::new(start);
    let api = Api::<
        genace_stages::ports::Parts<_, _, _, genace_stages::ports::Unused, genace_stages::ports::Unused, ManualClock>,
    > {
        store: env.store(),
        queue: env.queue(),
        objects: env.objects(),
        config: env.config.clone(),
        clock: clock.clone(),
        metrics: genace_stages::ports::metrics::Metrics::off(),
        vault: std::sync::Arc::new(genace_stages::ports::webhooks::NoVault),
        traces: std::sync::Arc::new(genace_stages::ports::traces::NoTraces),
    };
    let mut body = spec_body();
    body["dispatch_deadline"] = json!((start + chrono::Duration::seconds(60)).to_rfc3339());
    let first = parse(api::handle(&api, post(&body, "tenant-a")).await);
    assert_eq!(first.status, 202, "{}", first.body);

    clock.advance(chrono::Duration::minutes(10));
    let again = parse(api::handle(&api, post(&body, "tenant-a")).await);
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.replayed);
    assert_eq!(again.body["operation_id"], first.body["operation_id"]);

    // The same past deadline under the key with another prompt: the key is
    // taken (409), whatever the deadline says.
    let mut changed = body.clone();
    changed["specification"]["prompt"] = json!("a lighthouse at dawn");
    let conflict = parse(api::handle(&api, post(&changed, "tenant-a")).await);
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert_eq!(conflict.body["operation_id"], first.body["operation_id"]);

    // A new key with that deadline is a new intent: in the past, 400.
    let mut fresh = body.clone();
    fresh["operation_key"] = json!("storyboard-7/frame-4/rev-1");
    let refused = parse(api::handle(&api, post(&fresh, "tenant-a")).await);
    assert_eq!(
        (refused.status, &refused.body["field"]),
        (400, &json!("dispatch_deadline"))
    );
    assert_eq!(env.scan().await.len(), 1, "nothing new was recorded");
    assert_eq!(env.drain(&env.queues.dispatch).await.len(), 1, "one dispatch message");
}
