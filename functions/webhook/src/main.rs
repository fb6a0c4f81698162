//! Webhook Lambda (SQS): each lifecycle event the bus's rule queued, POSTed
//! signed to the tenant's webhook, if it has one; a failed one is deferred
//! on its queue for longer after each failure.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init_with_secrets().await;
    let (stage, deferral) = genace_app::webhooks_from_env().await?;
    genace_edge::sqs::serve_sqs_with(stage, deferral).await
}
