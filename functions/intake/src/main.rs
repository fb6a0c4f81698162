//! Intake Lambda: API Gateway HTTP API -> record an intent or read an operation.

use lambda_http::{Error, Request, run, service_fn};
use shared::{api, aws, config::Config, intake::Intake, queue::SqsQueue, storage::S3Store, store::DynamoStore};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::load().await;
    let intake = Intake::new(
        DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        S3Store::new(aws::s3(&sdk), &config.bucket),
        config,
    );
    let intake = &intake;
    run(service_fn(move |req: Request| async move {
        Ok::<_, Error>(api::handle(intake, req).await)
    }))
    .await
}
