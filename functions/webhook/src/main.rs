//! Webhook Lambda (SQS): each lifecycle event the bus's rule queued, POSTed
//! signed to the tenant's webhook, if it has one.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_stages::telemetry::init();
    genace_edge::sqs::serve_sqs(genace_app::webhooks_from_env().await?).await
}
