//! The SQS edge of the Lambdas: one runner for every queue-driven stage.
//! Each message of a batch is parsed into the stage's message type and
//! handled in turn; the failures are reported as batch item failures, so
//! SQS redelivers only those.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use genace_stages::stage::{Stage, StageError, handle_body};
use tracing::{error, warn};

/// Runs the stage on every message of a batch, one after another, and
/// reports the ones that failed so SQS redelivers only those.
pub async fn process_batch<S: Stage>(event: SqsEvent, stage: &S) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let Some(body) = record.body else {
            warn!(message_id = %id, "message without a body");
            response.add_failure(id);
            continue;
        };
        if let Err(e) = handle_body(stage, &body).await {
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

/// Runs an SQS-triggered Lambda: every message goes to the stage, and the
/// failures are reported as batch item failures.
pub async fn serve_sqs<S: Stage>(stage: S) -> Result<(), lambda_runtime::Error> {
    let stage = &stage;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| async move {
            Ok::<SqsBatchResponse, lambda_runtime::Error>(process_batch(event.payload, stage).await)
        },
    ))
    .await
}
