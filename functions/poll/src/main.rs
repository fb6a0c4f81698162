//! Poll Lambda (SQS): observe an accepted job by its saved id until it ends.

use shared::aws;
use shared::config::Config;
use shared::genace::{GenaceClient, GenaceConfig};
use shared::poll::Poller;
use shared::queue::SqsQueue;
use shared::stage::serve_sqs;
use shared::store::DynamoStore;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let poller = &Poller {
        store: DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        queue: SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        genace: GenaceClient::new(GenaceConfig::load(&sdk).await?)?,
        config,
    };
    serve_sqs(move |body| async move { poller.handle_message(&body).await.map(|_| ()) }).await
}
