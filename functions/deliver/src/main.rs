//! Deliver Lambda (SQS): stream rendered outputs into S3 and verify them.

use shared::aws;
use shared::config::Config;
use shared::deliver::{Deliverer, download_client};
use shared::queue::SqsQueue;
use shared::stage::serve_sqs;
use shared::storage::S3Store;
use shared::store::DynamoStore;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let deliverer = &Deliverer {
        store: DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        queue: SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        objects: S3Store::new(aws::s3(&sdk), &config.bucket),
        http: download_client(&config.url_policy)?,
        config,
    };
    serve_sqs(move |body| async move { deliverer.handle_message(&body).await.map(|_| ()) }).await
}
