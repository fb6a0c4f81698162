//! Poll Lambda (SQS): observe an accepted job by its saved id until it ends.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use shared::aws;
use shared::config::Config;
use shared::genace::{GenaceClient, GenaceConfig};
use shared::poll::Poller;
use shared::queue::SqsQueue;
use shared::stage::process_batch;
use shared::store::DynamoStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let poller = Poller {
        store: DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        queue: SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        genace: GenaceClient::new(GenaceConfig::from_env()?)?,
        config,
    };
    let poller = &poller;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            process_batch(event.payload, |body| async move {
                poller.handle_message(&body).await.map(|_| ())
            })
            .await,
        )
    }))
    .await
}
