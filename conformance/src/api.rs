//! The deployment's public API, as a client sees it: through `genace-client`,
//! sending each request once (a retry would hide what the deployment
//! answered). This crate keeps its own view of the JSON on purpose: it
//! asserts on the answers as `serde_json::Value`s, to catch contract drift.

use std::time::{Duration, Instant};

use genace_client::{Client, Error, Problem, Reply, Request, RetryPolicy};
use reqwest::Method;
use serde_json::Value;

/// A client of the deployment at `base` as the caller `token`, each
/// request sent once.
pub fn client(base: &str, token: &str) -> Client {
    Client::new(base, token).with_retry(RetryPolicy::none())
}

/// `POST /v1/operations` with a raw JSON body, the key in the body alone;
/// the answer as it came (its status and headers are what is checked).
pub async fn create_raw(api: &Client, body: &str) -> Result<Reply, String> {
    let req = Request::new(Method::POST, "/v1/operations").raw("application/json", body);
    api.send(&req).await.map_err(|e| e.to_string())
}

pub async fn create(api: &Client, body: &Value) -> Result<Reply, String> {
    create_raw(api, &body.to_string()).await
}

/// Whether a create's answer is a replay of an earlier one.
pub fn replayed(r: &Reply) -> bool {
    r.header("idempotent-replayed") == Some("true")
}

/// An operation's view; a problem answer is a failure naming it.
pub async fn view(api: &Client, id: &str) -> Result<Value, String> {
    api.operation(id)
        .await
        .map(|op| op.view)
        .map_err(|e| format!("GET {id}: {e}"))
}

/// What the deployment answered: the success, or its problem; `Err` only
/// when no answer came.
pub fn answer<T>(r: Result<T, Error>) -> Result<Result<T, Problem>, String> {
    match r {
        Ok(t) => Ok(Ok(t)),
        Err(Error::Api(p)) => Ok(Err(p)),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads the operation until `done` holds for its view, or fails after
/// `within`; an answer that is not a view is read again.
pub async fn wait_for(
    api: &Client,
    id: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < within {
        match api.operation(id).await {
            Ok(op) if done(&op.view) => return Ok(op.view),
            Ok(op) => last = op.view,
            Err(Error::Api(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "{what}: not reached within {}s; last view: phase={} delivery_state={} case={}",
        within.as_secs(),
        last["phase"],
        last["delivery_state"],
        last["reconciliation_case"]
    ))
}
