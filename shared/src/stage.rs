//! What the SQS-driven stages share: the error that leaves a message on its
//! queue, and Lambda's partial batch response.

use std::future::Future;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use tracing::{error, warn};

use crate::metrics;
use crate::queue::QueueError;
use crate::record::OperationRecord;
use crate::store::{CommitError, StoreError};

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
}

/// How many times a state write is tried before giving up.
pub fn write_attempts() -> u32 {
    4
}

/// Runs `handle` on every message body of a batch, one after another, and
/// reports the ones that failed so SQS redelivers only those.
pub async fn process_batch<F, Fut>(event: SqsEvent, handle: F) -> SqsBatchResponse
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), StageError>>,
{
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let Some(body) = record.body else {
            warn!(message_id = %id, "message without a body");
            response.add_failure(id);
            continue;
        };
        if let Err(e) = handle(body).await {
            match e {
                StageError::Crashed(_) => {
                    warn!(message_id = %id, error = %e, "message left for redelivery")
                }
                _ => error!(message_id = %id, error = %e, "message left for redelivery"),
            }
            response.add_failure(id);
        }
    }
    response
}

/// A refused or failed commit leaves the message for redelivery.
pub fn commit_failure(e: CommitError) -> StageError {
    match e {
        CommitError::Refused { refusal, .. } => StageError::Refused(refusal.to_string()),
        CommitError::Store(s) => StageError::Store(s),
    }
}

/// Logs and counts a reconciliation case that a write just opened.
pub fn case_opened(rec: &OperationRecord) {
    if let Some(case) = &rec.case {
        let reason = serde_json::to_value(case.reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        warn!(operation_id = %rec.operation_id, tenant = %rec.tenant_id, phase = rec.phase.as_str(), reason = %reason, "reconciliation case opened");
        metrics::count("CasesOpened", &[("Reason", &reason)]);
    }
}

/// Runs an SQS-triggered Lambda: every message body goes to `handle`, and
/// the failures are reported as batch item failures.
pub async fn serve_sqs<'a, F, Fut>(handle: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(String) -> Fut + Copy + Send,
    Fut: Future<Output = Result<(), StageError>> + Send + 'a,
{
    // Each message's future is boxed: stage futures are deep, and inlining
    // them into the runtime's own future exceeds the compiler's layout limits.
    let boxed = move |body: String| -> std::pin::Pin<Box<dyn Future<Output = Result<(), StageError>> + Send + 'a>> {
        Box::pin(handle(body))
    };
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| async move {
            Ok::<SqsBatchResponse, lambda_runtime::Error>(process_batch(event.payload, boxed).await)
        },
    ))
    .await
}

/// Parses a stage message body.
pub fn work_message(body: &str) -> Result<crate::queue::WorkMessage, StageError> {
    crate::queue::WorkMessage::parse(body).map_err(|e| StageError::Malformed(e.to_string()))
}
