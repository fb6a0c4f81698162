//! Recovery Lambda (SQS, restricted queue): applies saved Genace outcomes
//! that dispatch could not write. Creates nothing remote.

use shared::config::Config;
use shared::queue::SqsQueue;
use shared::stage::serve_sqs;
use shared::store::DynamoStore;
use shared::{aws, recovery};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let store = &DynamoStore::new(aws::dynamodb(&sdk), &config.table);
    let queue = &SqsQueue::new(aws::sqs(&sdk), config.queues.clone());
    let policy = &config.policy;
    serve_sqs(move |body| async move { recovery::handle_message(store, queue, policy, &body).await.map(|_| ()) }).await
}
