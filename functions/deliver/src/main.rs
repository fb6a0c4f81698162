//! Deliver Lambda (SQS): stream rendered outputs into S3 and verify them.

use shared::app::AwsApp;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    shared::stage::serve_sqs(AwsApp::from_env().await?.deliverer()?).await
}
