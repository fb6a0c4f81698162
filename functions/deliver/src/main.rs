//! Deliver Lambda (SQS). Not built yet: until it is, every message is reported
//! as a batch item failure, so SQS keeps it (and finally moves it to the DLQ)
//! instead of it being acknowledged and lost.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

async fn handler(event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let mut response = SqsBatchResponse::default();
    for record in event.payload.records {
        tracing::error!(message_id = ?record.message_id, "the deliver stage is not implemented; message left on the queue");
        response.add_failure(record.message_id.unwrap_or_default());
    }
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    run(service_fn(handler)).await
}
