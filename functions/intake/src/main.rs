//! Intake Lambda: API Gateway HTTP API -> record an intent or read an operation.

use lambda_http::{Error, Request, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    genace_app::telemetry::init_with_secrets().await;
    let api = &genace_app::from_env().await?.api();
    run(service_fn(move |req: Request| async move {
        Ok::<_, Error>(genace_edge::http::handle(api, req).await)
    }))
    .await
}
