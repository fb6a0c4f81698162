//! The operator API through `genace-client`, with the operator's token:
//! each request sent once (a decision is never retried behind the
//! operator's back), a problem answer kept whole for printing.

use genace_client::{Client, Error, ListQuery, Page, RetryPolicy};
use serde_json::{Value, json};

pub(crate) enum Failure {
    Api(Value),
    Transport(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::Api(p) => Failure::Api(match p.body {
                Value::Null => json!({"status": p.status, "detail": ""}),
                Value::String(text) => json!({"status": p.status, "detail": text}),
                body => body,
            }),
            Error::Transport { reason, .. } => Failure::Transport(reason),
            other => Failure::Transport(other.to_string()),
        }
    }
}

/// A client of the API at `url` as the operator `token`.
pub(crate) fn client(url: &str, token: &str) -> Client {
    Client::new(url, token).with_retry(RetryPolicy::none())
}

/// `pairs` with a value, as a listing's query.
pub(crate) fn query(pairs: &[(&str, Option<&str>)]) -> ListQuery {
    pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .fold(ListQuery::new(), |q, (k, v)| q.with(k, v))
}

/// A page as the API sent it: its items under `member`, and `next_cursor`.
pub(crate) fn page_json(member: &str, page: Page) -> Value {
    json!({member: page.items, "next_cursor": page.next_cursor})
}
