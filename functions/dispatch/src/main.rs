//! Dispatch Lambda (SQS): claim, POST once to Genace, save the outcome.

use shared::app::AwsApp;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    shared::stage::serve_sqs(AwsApp::from_env_with_genace().await?.dispatcher()).await
}
