//! Events Lambda (EventBridge Pipes enrichment): the table's committed
//! changes in, their lifecycle events out, to the pipe's event bus.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_stages::telemetry::init();
    let ctx = genace_core::events::Context {
        bucket: std::env::var("OUTPUT_BUCKET").ok(),
    };
    genace_edge::pipe::serve_enrichment(move |batch| genace_aws::stream::lifecycle_events(batch, &ctx)).await
}
