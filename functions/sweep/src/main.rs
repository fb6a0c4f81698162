//! Sweep Lambda (EventBridge schedule, every minute): re-enqueue due work
//! found through the sparse due-time index.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use shared::aws;
use shared::config::Config;
use shared::queue::SqsQueue;
use shared::store::DynamoStore;
use shared::sweep::Sweeper;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let sweeper = Sweeper::new(
        DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        config,
    );
    let sweeper = &sweeper;
    run(service_fn(move |_event: LambdaEvent<Value>| async move {
        let report = sweeper.run().await?;
        Ok::<Value, Error>(serde_json::json!({
            "examined": report.examined,
            "dispatch": report.dispatch,
            "poll": report.poll,
            "deliver": report.deliver,
            "interrupted": report.interrupted,
            "truncated": report.truncated,
        }))
    }))
    .await
}
