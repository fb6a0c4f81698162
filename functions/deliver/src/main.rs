//! Deliver Lambda (SQS): stream rendered outputs into S3 and verify them.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init_with_secrets().await;
    genace_edge::sqs::serve_sqs(genace_app::from_env_with_downloads().await?.deliverer()).await
}
