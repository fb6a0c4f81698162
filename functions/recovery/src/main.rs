//! Recovery Lambda (SQS, restricted queue): applies saved Genace outcomes
//! that dispatch could not write. Creates nothing remote.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use shared::config::Config;
use shared::queue::SqsQueue;
use shared::stage::process_batch;
use shared::store::DynamoStore;
use shared::{aws, recovery};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let store = DynamoStore::new(aws::dynamodb(&sdk), &config.table);
    let queue = SqsQueue::new(aws::sqs(&sdk), config.queues.clone());
    let (store, queue, policy) = (&store, &queue, &config.policy);
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, Error>(
            process_batch(event.payload, |body| async move {
                recovery::handle_message(store, queue, policy, &body).await.map(|_| ())
            })
            .await,
        )
    }))
    .await
}
