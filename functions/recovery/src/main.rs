//! Recovery Lambda (SQS, restricted queue): applies saved Genace outcomes
//! that dispatch could not write. Creates nothing remote.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init_with_secrets().await;
    genace_edge::sqs::serve_sqs(genace_app::from_env().await?.recovery()).await
}
