//! Intake Lambda: API Gateway HTTP API -> record an intent or read an operation.

use lambda_http::{Error, Request, run, service_fn};
use shared::app::AwsApp;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let intake = &AwsApp::from_env().await?.intake();
    run(service_fn(move |req: Request| async move {
        Ok::<_, Error>(shared::api::handle(intake, req).await)
    }))
    .await
}
