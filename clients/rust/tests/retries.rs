//! The client's retries and waits against wiremock: what is sent again,
//! how long it waits first, and what is never sent twice.

use std::time::{Duration, Instant};

use genace_client::{Client, Intent, RetryPolicy, Submitted, WaitFor};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn created() -> ResponseTemplate {
    ResponseTemplate::new(202)
        .insert_header("etag", "\"1\"")
        .set_body_json(json!({"operation_id": "op-1", "phase": "prepared"}))
}

#[tokio::test]
async fn a_429_is_sent_again_no_sooner_than_retry_after_with_the_same_key_and_body() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/operations"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .mount(&api)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/operations"))
        .respond_with(created())
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");
    let intent = Intent::new("order-7", "image", json!({"model": "m", "prompt": "p"}));
    let started = Instant::now();
    let outcome = client.submit(&intent).await.unwrap();
    let took = started.elapsed();
    assert!(matches!(outcome, Submitted::Created(ref op) if op.id() == "op-1" && op.version == Some(1)));
    assert!(took >= Duration::from_secs(1), "sent again after {took:?}");
    let sent = api.received_requests().await.unwrap();
    assert_eq!(sent.len(), 2);
    for req in &sent {
        assert_eq!(req.headers.get("idempotency-key").unwrap(), "order-7");
        assert_eq!(req.body, intent.body().as_bytes());
    }
}

#[tokio::test]
async fn a_submit_answered_503_is_sent_again_and_a_resolution_is_not() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .mount(&api)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/operations"))
        .respond_with(created())
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");
    let intent = Intent::with_new_key("image", json!({"model": "m", "prompt": "p"}));
    assert!(matches!(client.submit(&intent).await.unwrap(), Submitted::Created(_)));
    assert_eq!(api.received_requests().await.unwrap().len(), 2);

    Mock::given(method("POST"))
        .and(path("/v1/operations/op-1/resolution"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&api)
        .await;
    let refused = client.resolve("op-1", 3, "abandon", "why", None).await.unwrap_err();
    assert_eq!(refused.status(), Some(503));
    let resolutions = api
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path().ends_with("/resolution"))
        .count();
    assert_eq!(resolutions, 1, "a decision is sent once");
}

#[tokio::test]
async fn a_retry_after_past_the_policys_bound_ends_the_retries() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "3600"))
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");
    let intent = Intent::with_new_key("image", json!({"model": "m", "prompt": "p"}));
    let started = Instant::now();
    let outcome = client.submit(&intent).await;
    assert_eq!(outcome.unwrap_err().status(), Some(429));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(api.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn no_answer_at_all_is_an_error_after_every_try() {
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let policy = RetryPolicy {
        attempts: 3,
        base: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    let client = Client::new(&format!("http://{addr}"), "t").with_retry(policy);
    let err = client.operation("op-1").await.unwrap_err();
    assert!(matches!(err, genace_client::Error::Transport { .. }), "{err}");
}

#[tokio::test]
async fn wait_looks_again_when_the_service_suggests() {
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/operations/op-1"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("next-look-in", "1")
                .set_body_json(json!({"operation_id": "op-1", "phase": "accepted",
                                      "progress": {"next_look_at": "2026-12-07T12:00:00Z"}})),
        )
        .up_to_n_times(1)
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/operations/op-1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"operation_id": "op-1", "phase": "rendered"})))
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");
    let started = Instant::now();
    let op = client
        .wait("op-1", WaitFor::phases(&["rendered"]), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(op.phase(), "rendered");
    assert!(started.elapsed() >= Duration::from_secs(1), "looked again too soon");
    assert_eq!(api.received_requests().await.unwrap().len(), 2);

    // Finished in another phase: no use waiting for the deadline.
    let never = client
        .wait("op-1", WaitFor::phases(&["delivered"]), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(never, genace_client::Error::Finished(_)), "{never}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn wait_gives_up_at_its_deadline_and_never_spins_on_a_zero_suggestion() {
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/operations/op-2"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("next-look-in", "0")
                .set_body_json(json!({"operation_id": "op-2", "phase": "accepted",
                                      "progress": {"next_look_at": "2026-12-07T12:00:00Z"}})),
        )
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");
    let late = client
        .wait("op-2", WaitFor::phases(&["rendered"]), Duration::from_millis(700))
        .await
        .unwrap_err();
    assert!(matches!(late, genace_client::Error::Deadline(_)), "{late}");
    let reads = api.received_requests().await.unwrap().len();
    assert!((2..=4).contains(&reads), "{reads} reads in 700 ms");
}

#[tokio::test]
async fn a_429_that_outlasts_the_retries_is_an_error_to_send_again_later() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0"))
        .mount(&api)
        .await;
    let policy = RetryPolicy {
        attempts: 2,
        base: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    let client = Client::new(&api.uri(), "t").with_retry(policy);
    let intent = Intent::with_new_key("image", json!({"model": "m", "prompt": "p"}));
    let err = client.submit(&intent).await.unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert_eq!(api.received_requests().await.unwrap().len(), 2);
}
