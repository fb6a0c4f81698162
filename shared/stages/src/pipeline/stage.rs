//! What the queue-driven stages share: the [`Stage`] shape (a typed message
//! and one `handle`) and the error that leaves a message on its queue. The
//! runner that feeds SQS batches to a stage is `genace_edge::sqs`.

use std::future::Future;

use tracing::Instrument;
use tracing::warn;

use crate::ports::commit::CommitError;
use crate::ports::metrics::Metrics;
use crate::ports::queue::QueueError;
use crate::ports::table::StoreError;
use genace_core::record::OperationRecord;

/// Any of these leaves the message on the queue for redelivery.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A fault directive stopped the handler here, as a killed Lambda would.
    #[error("injected crash at {0}")]
    Crashed(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The rules refused the message's change; a person must look.
    #[error("refused: {0}")]
    Refused(String),
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A remote party failed (a webhook receiver, a secret store); the
    /// message is delivered again.
    #[error("remote failure: {0}")]
    Remote(String),
}

/// A queue-driven stage: dispatch, poll, deliver and recovery.
pub trait Stage: Send + Sync {
    /// The message body, parsed; a body that does not parse is malformed.
    type Message: serde::de::DeserializeOwned + Send;
    /// What the stage made of one message (for tests and logs).
    /// What became of the message; its `Display` is the words its span
    /// shows ([`crate::pipeline::outcomes`]).
    type Outcome: std::fmt::Debug + std::fmt::Display + Send;
    /// The stage's name on its spans.
    const NAME: &'static str = "stage";

    fn handle(&self, message: Self::Message) -> impl Future<Output = Result<Self::Outcome, StageError>> + Send;

    /// Where a message body goes in its batch, which is handled one
    /// message after another, lowest first (a stable sort: the default,
    /// the same for every body, keeps the queue's order). A stage whose
    /// messages wait for a time of their own handles the earliest first,
    /// so that no wait holds up a message due before it.
    fn batch_order(_body: &str) -> i64 {
        0
    }

    /// [`handle`](Self::handle) for one receipt of the message from its
    /// queue, told how many times it has now been received (1 the first
    /// time): for a stage that records its attempts.
    fn handle_receipt(
        &self,
        message: Self::Message,
        _receives: u32,
    ) -> impl Future<Output = Result<Self::Outcome, StageError>> + Send {
        self.handle(message)
    }

    /// How long a message that failed with `error`, on its `receives`-th
    /// receipt, stays hidden before the next one. `None` (the default)
    /// leaves it to the queue's visibility timeout; the queue runner applies
    /// `Some` through a [`ReceiptDeferral`](crate::ports::queue::ReceiptDeferral).
    fn retry_after(&self, _error: &StageError, _receives: u32) -> Option<u32> {
        None
    }
}

/// Parses one message body for `S` and hands it to the stage.
pub async fn handle_body<S: Stage>(stage: &S, body: &str) -> Result<S::Outcome, StageError> {
    handle_received(stage, body, 1).await
}

/// [`handle_body`] for the `receives`-th receipt of the message.
pub async fn handle_received<S: Stage>(stage: &S, body: &str, receives: u32) -> Result<S::Outcome, StageError> {
    let message = serde_json::from_str(body).map_err(|e| StageError::Malformed(e.to_string()))?;
    // Boxed: stage futures are deep, and inlining them into a caller's
    // future (the Lambda runtime's) exceeds the compiler's layout limits.
    let handled: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> =
        Box::pin(stage.handle_receipt(message, receives));
    handled.await
}

/// [`handle_received`] in the span of this stage's invocation for the
/// message: under its operation's root, linking the span that sent it
/// (`traceparent`, the W3C header it carried), with how it ended.
pub async fn handle_traced<S: Stage>(
    stage: &S,
    body: &str,
    receives: u32,
    traceparent: Option<&str>,
) -> Result<S::Outcome, StageError> {
    // Work messages name it at the top; the bus's events (the webhook
    // stage's) in their detail, with the trace the pipe put there.
    let message = serde_json::from_str::<serde_json::Value>(body).unwrap_or_default();
    let named = |member: &str| {
        message
            .get(member)
            .or_else(|| message.get("detail").and_then(|d| d.get(member)))
            .and_then(serde_json::Value::as_str)
    };
    let operation = named("operation_id").and_then(|id| genace_core::domain::OperationId::parse(id).ok());
    let parent = traceparent
        .and_then(genace_core::trace::TraceParent::parse)
        .or_else(|| {
            // An event off the bus: the trace its detail names, under the
            // operation's root.
            let root = genace_trace::root_parent(operation.as_ref()?);
            // "Sampled" when the event says a case keeps the trace.
            let kept = message["detail"][genace_core::events::TRACE_KEPT_MEMBER] == true;
            let flags = if kept { "01" } else { "00" };
            genace_core::trace::TraceParent::parse(&format!(
                "00-{}-{}-{flags}",
                named("trace_id")?,
                root.span_id.to_hex()
            ))
        });
    let span = genace_trace::stage_span(S::NAME, operation.as_ref(), parent);
    let handled = handle_received(stage, body, receives).instrument(span.clone()).await;
    let outcome = match &handled {
        Ok(o) => o.to_string(),
        Err(e) => format!("error: {e}"),
    };
    genace_trace::record_outcome(&span, &outcome);
    handled
}

/// A refused or failed commit leaves the message for redelivery.
pub fn commit_failure(e: CommitError) -> StageError {
    match e {
        CommitError::Refused { refusal, .. } => StageError::Refused(refusal.to_string()),
        CommitError::Store(s) => StageError::Store(s),
    }
}

/// Logs and counts a reconciliation case that a write just opened.
pub fn case_opened(metrics: &Metrics, rec: &OperationRecord) {
    if let Some(case) = &rec.case {
        let reason = serde_json::to_value(case.reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        warn!(operation_id = %rec.operation_id, tenant = %rec.tenant_id, phase = rec.phase.as_str(), reason = %reason, "reconciliation case opened");
        metrics.count("CasesOpened", &[("Reason", &reason)]);
    }
}
