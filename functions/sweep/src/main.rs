//! Sweep Lambda (EventBridge schedule, every minute): re-enqueue due work
//! found through the sparse due-time index.
// The run's future nests the sweep's look at the account (its shards read,
// split again, written) past the default layout depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    genace_app::telemetry::init_with_secrets().await;
    let sweeper = &genace_app::from_env().await?.sweeper();
    run(service_fn(move |_event: LambdaEvent<Value>| async move {
        // The repairs' spans leave before the function is frozen.
        let report = genace_app::telemetry::flushed(sweeper.run()).await?;
        Ok::<Value, Error>(serde_json::to_value(report)?)
    }))
    .await
}
