//! Problems: RFC 9457 `application/problem+json` documents. Every error of
//! the layers below is mapped to one here, and only here.

use genace_core::domain::InvalidInput;
use genace_core::record::{DeliveryState, Phase};
use genace_stages::api::errors::{EndpointError, ListError, OperationError, SettingsError, SubmitError};
use genace_stages::ports::table::StoreError;
use lambda_http::http::{StatusCode, header};
use lambda_http::{Body, Response};
use serde_json::{Map, Value};
use tracing::error;

pub const PROBLEM_JSON: &str = "application/problem+json";
const PROBLEM_BASE: &str = "https://genace-operations.dev/problems/";

/// An RFC 9457 problem, ready to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    /// Short slug; the problem `type` is a URI built from it.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub extensions: Map<String, Value>,
    /// Headers the status calls for: `Allow` on a 405, `Retry-After` on a 503.
    pub headers: Vec<(header::HeaderName, String)>,
}

/// How long a client waits before retrying when the store is unavailable.
/// AWS outages of seconds to a minute are the usual; a retry with the same
/// operation key is always safe, so the hint is short.
pub const STORE_RETRY_AFTER_SECONDS: u32 = 5;

impl Problem {
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            title,
            detail: detail.into(),
            extensions: Map::new(),
            headers: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: header::HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }

    pub fn into_response(self, instance: &str) -> Response<Body> {
        let mut body = Map::new();
        body.insert("type".into(), format!("{PROBLEM_BASE}{}", self.kind).into());
        body.insert("title".into(), self.title.into());
        body.insert("status".into(), self.status.as_u16().into());
        body.insert("detail".into(), self.detail.into());
        body.insert("instance".into(), instance.into());
        body.extend(self.extensions);
        let mut builder = Response::builder()
            .status(self.status)
            .header(header::CONTENT_TYPE, PROBLEM_JSON);
        for (name, value) in self.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Body::Text(Value::Object(body).to_string()))
            .expect("a problem response is always valid")
    }
}

impl From<InvalidInput> for Problem {
    fn from(e: InvalidInput) -> Self {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request is invalid",
            e.to_string(),
        )
        .with("field", e.field)
    }
}

impl From<SubmitError> for Problem {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::KeyReused { ref existing, .. } => {
                let id = existing.as_str().to_owned();
                Problem::new(
                    StatusCode::CONFLICT,
                    "operation-key-reused",
                    "The operation key is already used for a different specification",
                    format!("{e}. Use a new operation key for a new intent."),
                )
                .with("operation_id", id)
            }
            SubmitError::Invalid(invalid) => Problem::from(invalid),
            SubmitError::Store(inner) => store_problem(inner),
        }
    }
}

impl From<OperationError> for Problem {
    fn from(e: OperationError) -> Self {
        match e {
            OperationError::NotFound => not_found(),
            OperationError::StaleVersion { actual, .. } => Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "stale-version",
                "The operation changed since it was read",
                format!("{e}. Read it again and decide on what it is now."),
            )
            .with("current_version", actual),
            OperationError::JobHeldElsewhere { ref holder, .. } => {
                let p = Problem::new(
                    StatusCode::CONFLICT,
                    "remote-job-held",
                    "The remote job belongs to another operation",
                    e.to_string(),
                );
                match holder {
                    Some(id) => p.with("operation_id", id.as_str()),
                    None => p,
                }
            }
            OperationError::JobNotAttachable { .. } => Problem::new(
                StatusCode::CONFLICT,
                "remote-job-not-attachable",
                "The remote job cannot be attached to this operation",
                format!("{e}: another operation holds it."),
            ),
            OperationError::JobNotInEvidence { .. } => Problem::new(
                StatusCode::FORBIDDEN,
                "remote-job-not-in-evidence",
                "An operator scoped to one tenant may attach only a job the operation's evidence names",
                format!("{e}; an operator of every tenant may attach it after checking it."),
            ),
            OperationError::TooLateToCancel { phase } => too_late_to_cancel(phase),
            OperationError::CannotErase { phase, delivery_state } => erasure_refused(phase, delivery_state),
            OperationError::Objects(ref inner) => {
                error!(error = %inner, "object store failure");
                unavailable(
                    "object-store-unavailable",
                    "The object store is unavailable",
                    "Nothing was recorded; send the same request again after the Retry-After seconds.",
                )
            }
            OperationError::Traces(ref inner) => {
                error!(error = %inner, "trace store failure");
                unavailable(
                    "trace-store-unavailable",
                    "The kept spans could not be read",
                    "Nothing was changed; ask again after the Retry-After seconds.",
                )
            }
            OperationError::Refused(refusal) => Problem::new(
                StatusCode::CONFLICT,
                "wrong-phase",
                "The operation is not in a phase that allows this",
                refusal.to_string(),
            ),
            OperationError::Store(inner) => store_problem(inner),
        }
    }
}

impl From<ListError> for Problem {
    fn from(e: ListError) -> Self {
        match e {
            ListError::Invalid(invalid) => Problem::from(invalid),
            ListError::Store(inner) => store_problem(inner),
        }
    }
}

impl From<SettingsError> for Problem {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::NotFound => not_found(),
            SettingsError::AccountWide => Problem::new(
                StatusCode::FORBIDDEN,
                "account-wide",
                "Only an operator of every tenant may change this",
                format!("{e}; this operator is scoped to one tenant."),
            ),
            SettingsError::PlatformLimit => Problem::new(
                StatusCode::FORBIDDEN,
                "platform-limit",
                "Only an operator of every tenant may set a tenant's limits",
                format!("{e}; this operator is scoped to one tenant and may read them only."),
            ),
            SettingsError::Invalid(invalid) => Problem::from(invalid),
            SettingsError::Store(inner) => store_problem(inner),
        }
    }
}

impl From<EndpointError> for Problem {
    fn from(e: EndpointError) -> Self {
        match e {
            EndpointError::Invalid(invalid) => Problem::from(invalid),
            EndpointError::NoSuchEndpoint => Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "No such webhook endpoint",
                "No webhook endpoint with this id belongs to the tenant.",
            ),
            EndpointError::NoSuchEvent => Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "No such event",
                "No event with this id is kept for the tenant: it is not one of its events, or it is older \
                 than the attempt log keeps.",
            ),
            EndpointError::NotReplayable(_) => Problem::new(
                StatusCode::CONFLICT,
                "not-replayable",
                "The endpoint cannot take this event now",
                format!("{e}. Nothing was queued."),
            ),
            EndpointError::RecoveryRunning { until } => {
                let seconds = (until - chrono::Utc::now()).num_seconds().max(1);
                Problem::new(
                    StatusCode::CONFLICT,
                    "recovery-running",
                    "A recovery of this endpoint ran recently",
                    format!("{e}. Nothing was queued; its copies may still be on their way."),
                )
                .with_header(lambda_http::http::header::RETRY_AFTER, seconds.to_string())
            }
            EndpointError::ReplayLimit { until, .. } => {
                let seconds = (until - chrono::Utc::now()).num_seconds().max(1);
                Problem::new(
                    StatusCode::CONFLICT,
                    "replay-limit",
                    "This endpoint had as many replays as a window allows",
                    format!("{e}. Nothing was queued."),
                )
                .with_header(lambda_http::http::header::RETRY_AFTER, seconds.to_string())
            }
            EndpointError::EndpointLimit { limit } => Problem::new(
                StatusCode::CONFLICT,
                "endpoint-limit",
                "The tenant has as many webhook endpoints as it may",
                format!("{e}. Delete one, or change one of them, instead."),
            )
            .with("limit", limit),
            EndpointError::Secrets(ref inner) => {
                error!(error = %inner, "secret store failure");
                unavailable(
                    "secrets-unavailable",
                    "The secret store is unavailable",
                    "Nothing was changed; send the same request again after the Retry-After seconds.",
                )
            }
            EndpointError::Store(inner) => store_problem(inner),
        }
    }
}

/// The table failed, or a cursor was not one it gave: what every family
/// answers for its `Store` case.
fn store_problem(e: StoreError) -> Problem {
    match e {
        StoreError::Cursor => Problem::from(InvalidInput::new("cursor", "is not a cursor this API returned")),
        inner => {
            error!(error = %inner, "store failure");
            unavailable(
                "store-unavailable",
                "The operation store is unavailable",
                "Try again after the Retry-After seconds, with the same operation key: \
                 nothing was lost, and a retry never creates a second operation.",
            )
        }
    }
}

/// 503: a store behind the API failed; ask again after `Retry-After`.
fn unavailable(kind: &'static str, title: &'static str, detail: &'static str) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, kind, title, detail)
        .with_header(header::RETRY_AFTER, STORE_RETRY_AFTER_SECONDS.to_string())
}

/// A cancel after the dispatch claim: a job may exist.
fn too_late_to_cancel(phase: Phase) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "too-late-to-cancel",
        "The operation can no longer be cancelled",
        format!(
            "It is {}: dispatch claimed it, so a Genace job may exist, and Genace cannot stop a job it \
             accepted. Read the operation to follow it.",
            phase.as_str()
        ),
    )
    .with("phase", phase.as_str())
}

/// An erasure before delivery has finished.
fn erasure_refused(phase: Phase, delivery_state: DeliveryState) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "erasure-refused",
        "A delivery may still store outputs",
        format!(
            "It is {} with delivery {}: erase once delivery is over (delivered, given up, refused or \
             abandoned), so that no object is stored after the erasure.",
            phase.as_str(),
            delivery_state.as_str()
        ),
    )
    .with("phase", phase.as_str())
    .with("delivery_state", delivery_state.as_str())
}

/// 405, naming the methods the resource supports (RFC 9110 §15.5.6), in
/// the body and in `Allow`.
pub fn method_not_allowed(allow: String) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!("Use {allow}."),
    )
    .with("allow", allow.clone())
    .with_header(header::ALLOW, allow)
}

pub fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such operation",
        "No operation with this id exists for the caller.",
    )
}
