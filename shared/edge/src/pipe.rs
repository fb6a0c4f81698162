//! The EventBridge Pipes edge: an enrichment Lambda receives a batch of
//! source records (a JSON array) and returns the array the pipe sends on to
//! its target. A failure fails the whole batch, so the pipe retries it and,
//! past its retry bound, sends it to the pipe's dead-letter queue: nothing
//! is dropped in silence.

use serde::Serialize;
use serde_json::Value;
use tracing::{error, info};

/// Runs an enrichment Lambda with `enrich` as its one step.
pub async fn serve_enrichment<F, Fut, T, E>(enrich: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(Vec<Value>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, E>>,
    T: Serialize,
    E: std::fmt::Display,
{
    let enrich = &enrich;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<Vec<Value>>| async move {
            let received = event.payload.len();
            match enrich(event.payload).await {
                Ok(out) => {
                    info!(received, sent = out.len(), "batch enriched");
                    Ok(out)
                }
                Err(e) => {
                    error!(received, error = %e, "batch refused; the pipe retries it");
                    Err(lambda_runtime::Error::from(e.to_string()))
                }
            }
        },
    ))
    .await
}
