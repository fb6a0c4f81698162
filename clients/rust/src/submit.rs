//! Intent-safe submit: the key and the body are fixed once per intent,
//! and every retry resends exactly them.

use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Client, Request};
use crate::error::{Error, Problem};
use crate::operations::Operation;

/// One business intent: its operation key and its body, serialized once.
/// Send the same `Intent` again (after a crash, a timeout, a lost answer)
/// and the service replays the operation instead of making a second one.
/// Never build a new `Intent` to retry: a new key is a new paid job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    key: String,
    body: String,
}

impl Intent {
    /// An intent under the application's own key (its business id, such
    /// as `order-1234-thumbnail`): the key alone decides what is the same
    /// intent, across processes and restarts.
    pub fn new(key: &str, media_type: &str, specification: Value) -> Self {
        Self::from_body(key, json!({"media_type": media_type, "specification": specification}))
    }

    /// An intent of a whole body (`priority`, `dispatch_within_seconds`,
    /// ...); its `operation_key` member is set to `key`.
    pub fn from_body(key: &str, mut body: Value) -> Self {
        if let Value::Object(members) = &mut body {
            members.insert("operation_key".to_owned(), Value::String(key.to_owned()));
        }
        Self {
            key: key.to_owned(),
            body: body.to_string(),
        }
    }

    /// An intent under a key made now, at random. Keep the `Intent` (or
    /// its key) for every retry of this intent.
    pub fn with_new_key(media_type: &str, specification: Value) -> Self {
        Self::new(&uuid::Uuid::new_v4().to_string(), media_type, specification)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The body as sent, every time.
    pub fn body(&self) -> &str {
        &self.body
    }
}

/// What a submit came to.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// A new operation: the service will make one job of it.
    Created(Operation),
    /// The intent was already submitted (by this call's earlier try, a
    /// double click, another process): the same operation, no new job.
    Replayed(Operation),
    /// The key already names an operation of another specification: no
    /// operation was made. The application reused a key for a new intent.
    KeyReused { operation_id: String, problem: Problem },
    /// The service refused the intent (invalid, too large, ...); nothing
    /// was made. A 429 that outlasts the retries is an error instead: the
    /// same intent may be sent again later.
    Refused(Problem),
}

impl Submitted {
    /// The operation, created or replayed.
    pub fn operation(&self) -> Option<&Operation> {
        match self {
            Submitted::Created(op) | Submitted::Replayed(op) => Some(op),
            _ => None,
        }
    }
}

impl Client {
    /// Submits `intent`: `POST /v1/operations` with its key in
    /// `Idempotency-Key` and its body, both as fixed in the intent. Lost
    /// connections, 5xx and 429 are retried (the service's replay makes a
    /// resend safe); `Err` when no try got an answer, or the last answer
    /// was a 5xx.
    pub async fn submit(&self, intent: &Intent) -> Result<Submitted, Error> {
        let req = Request::new(Method::POST, "/v1/operations")
            .raw("application/json", intent.body())
            .header("idempotency-key", intent.key())
            .idempotent(true);
        let reply = self.send(&req).await?;
        let replayed = reply.header("idempotent-replayed") == Some("true");
        match reply.status {
            202 => Ok(Submitted::Created(Operation::from_reply(reply))),
            200 if replayed => Ok(Submitted::Replayed(Operation::from_reply(reply))),
            // Still too many requests after every retry: nothing was made,
            // and the same intent is to be sent again later, not dropped.
            429 => Err(reply.into_result().unwrap_err()),
            400..=499 => {
                let problem = Problem {
                    status: reply.status,
                    body: reply.body,
                };
                match problem.body["operation_id"].as_str() {
                    Some(id) if problem.kind() == "operation-key-reused" => Ok(Submitted::KeyReused {
                        operation_id: id.to_owned(),
                        problem,
                    }),
                    _ => Ok(Submitted::Refused(problem)),
                }
            }
            status => {
                let body = reply.into_result()?;
                Err(Error::Unreadable(format!("a submit answered {status}: {body}")))
            }
        }
    }
}
