//! Deliver Lambda (SQS): stream rendered outputs into S3 and verify them.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use shared::aws;
use shared::config::Config;
use shared::deliver::{Deliverer, download_client};
use shared::queue::SqsQueue;
use shared::stage::process_batch;
use shared::storage::S3Store;
use shared::store::DynamoStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let deliverer = Deliverer {
        store: DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        queue: SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        objects: S3Store::new(aws::s3(&sdk), &config.bucket),
        http: download_client(&config.url_policy)?,
        config,
    };
    let deliverer = &deliverer;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            process_batch(event.payload, |body| async move {
                deliverer.handle_message(&body).await.map(|_| ())
            })
            .await,
        )
    }))
    .await
}
