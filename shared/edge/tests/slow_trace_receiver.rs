//! An API response waits for its spans to leave at most
//! [`SPAN_EXPORT_BOUND`]: a slow or unreachable trace receiver delays no
//! answer by more. A test binary of its own: it installs the process's
//! one span export.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use genace_edge::http::router::{SPAN_EXPORT_BOUND, handle};

/// A receiver that takes a minute to take the spans.
struct SlowReceiver;

impl genace_trace::Flush for SlowReceiver {
    fn flush(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(Duration::from_secs(60)))
    }
}

#[tokio::test]
async fn a_slow_trace_receiver_delays_no_response_past_the_bound() {
    genace_trace::set_flush(SlowReceiver);
    let app = genace_memory::memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    let api = app.api();
    let request = lambda_http::http::Request::builder()
        .method("GET")
        .uri("/v1/no-such-route")
        .body(lambda_http::Body::Empty)
        .unwrap();
    let began = Instant::now();
    let response = handle(&api, request).await;
    let waited = began.elapsed();
    assert_eq!(response.status(), 404);
    assert!(waited >= SPAN_EXPORT_BOUND, "it waited for the spans: {waited:?}");
    // The receiver would have taken a minute; the bound is a quarter of
    // a second (the margin is for a loaded machine, not a speed goal).
    assert!(
        waited < Duration::from_secs(20),
        "it waited {waited:?} for the receiver"
    );
}
