//! Events Lambda (EventBridge Pipes enrichment): the table's committed
//! changes in, their lifecycle events out, to the pipe's event bus; each
//! marked when a receiver of its tenant takes it, for the webhook rule.

#![recursion_limit = "256"]

use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    genace_app::telemetry::init_with_secrets().await;
    let enrichment = Arc::new(genace_app::Enrichment::from_env().await?);
    genace_edge::pipe::serve_enrichment(move |batch| {
        let enrichment = enrichment.clone();
        async move { enrichment.enrich(&batch).await }
    })
    .await
}
