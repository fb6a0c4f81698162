//! Recovery Lambda (SQS, restricted queue): applies saved Genace outcomes
//! that dispatch could not write. Creates nothing remote.

use shared::app::AwsApp;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    shared::stage::serve_sqs(AwsApp::from_env().await?.recovery()).await
}
