//! Dispatch Lambda (SQS): claim, POST once to Genace, save the outcome.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use shared::aws;
use shared::config::Config;
use shared::dispatch::Dispatcher;
use shared::genace::{GenaceClient, GenaceConfig};
use shared::queue::SqsQueue;
use shared::stage::process_batch;
use shared::store::DynamoStore;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let dispatcher = Dispatcher {
        store: DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        queue: SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        genace: GenaceClient::new(GenaceConfig::from_env()?)?,
        config,
    };
    let dispatcher = &dispatcher;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            process_batch(event.payload, |body| async move {
                dispatcher.handle_message(&body).await.map(|_| ())
            })
            .await,
        )
    }))
    .await
}
