//! Dispatch Lambda (SQS): claim, POST once to Genace, save the outcome.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init_with_secrets().await;
    genace_edge::sqs::serve_sqs(genace_app::from_env_with_genace().await?.dispatcher()).await
}
