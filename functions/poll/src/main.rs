//! Poll Lambda (SQS): observe an accepted job by its saved id until it ends.

use shared::app::AwsApp;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    shared::stage::serve_sqs(AwsApp::from_env_with_genace().await?.poller()).await
}
