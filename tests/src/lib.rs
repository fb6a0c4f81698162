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

/// The operation `id`'s view once its `delivery_state` is `state`, read
/// from `api` with `token` every 200 ms for up to `within`; fails the test
/// with the last view when it never gets there.
pub async fn until_delivery(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    id: &str,
    state: &str,
    within: Duration,
) -> Value {
    let url = format!("{api}/v1/operations/{id}");
    let op = get_until(http, &url, token, within, |op| op["delivery_state"] == state).await;
    assert_eq!(op["delivery_state"], state, "not {state} within {within:?}: {op}");
    op
}
