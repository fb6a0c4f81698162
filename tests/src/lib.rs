//! End-to-end tests live in this crate's `tests/` folder: the whole stack,
//! hosted in-process by the local runner against the local AWS endpoint,
//! checked by the conformance suite. The helpers here are what those tests
//! share.

use std::time::{Duration, Instant};

use serde_json::Value;

/// GET `url` with `token` as its bearer; the answer's body as JSON.
pub async fn get_json(http: &reqwest::Client, url: &str, token: &str) -> Value {
    let resp = http.get(url).bearer_auth(token).send().await.unwrap();
    resp.json().await.unwrap()
}

/// Reads `url` (as [`get_json`]) every 200 ms until `done` holds for the
/// answer or `within` has passed; the last answer either way.
pub async fn get_until(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let body = get_json(http, url, token).await;
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
