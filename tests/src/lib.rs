//! End-to-end tests live in this crate's `tests/` folder: the whole stack,
//! hosted in-process by the local runner against the local AWS endpoint,
//! checked by the conformance suite. The helpers here are what those tests
//! share; every call to the stack's API goes through `genace-client`.

use std::future::Future;
use std::time::{Duration, Instant};

use genace_client::{Client, Error, Intent, RetryPolicy, Submitted};
use serde_json::Value;

/// A client of the API at `api` as `token`, each request sent once: a test
/// sees every answer as it came, a 5xx or a 429 included.
pub fn client(api: &str, token: &str) -> Client {
    Client::new(api, token).with_retry(RetryPolicy::none())
}

/// Submits `body` as a new intent under its `operation_key`: the created
/// operation's view; the test fails on any other answer.
pub async fn create(api: &Client, body: Value) -> Value {
    let key = body["operation_key"].as_str().expect("an operation_key").to_owned();
    match api.submit(&Intent::from_body(&key, body)).await {
        Ok(Submitted::Created(op)) => op.view,
        other => panic!("{key} was not created: {other:?}"),
    }
}

/// The body of `answer`: the success's, or the problem document.
pub fn body_of(answer: Result<Value, Error>) -> Value {
    match answer {
        Ok(body) => body,
        Err(Error::Api(problem)) => problem.body,
        Err(e) => panic!("no answer: {e}"),
    }
}

/// Calls `read` every 200 ms until `done` holds for its answer (a problem
/// answer is read as its document) or `within` has passed; the last answer
/// either way.
pub async fn read_until<F, R>(within: Duration, read: R, done: impl Fn(&Value) -> bool) -> Value
where
    R: Fn() -> F,
    F: Future<Output = Result<Value, Error>>,
{
    let deadline = Instant::now() + within;
    loop {
        let body = body_of(read().await);
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The operation `id`'s view once its `delivery_state` is `state`, read
/// through `api` every 200 ms for up to `within`; fails the test with the
/// last view when it never gets there.
pub async fn until_delivery(api: &Client, id: &str, state: &str, within: Duration) -> Value {
    let read = || async { api.operation(id).await.map(|op| op.view) };
    let op = read_until(within, read, |op| op["delivery_state"] == state).await;
    assert_eq!(op["delivery_state"], state, "not {state} within {within:?}: {op}");
    op
}
