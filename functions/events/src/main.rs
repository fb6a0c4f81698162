//! Events Lambda (EventBridge Pipes enrichment): the table's committed
//! changes in, their lifecycle events out, to the pipe's event bus.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init();
    let ctx = genace_app::events_context();
    genace_edge::pipe::serve_enrichment(move |batch| genace_app::lifecycle_events(batch, &ctx)).await
}
