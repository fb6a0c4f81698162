//! `genace-bench`: what one operation costs and how fast the stack is, on the
//! local stack (moto for DynamoDB, SQS and S3; the in-process runner hosting
//! the real handlers; the Genace stand-in in-process).
//!
//! - `pipeline` (default): N intents through to `delivered`; every AWS request
//!   by service and operation (an SDK interceptor on every client), handler
//!   invocations per stage with their durations, intake latency in-process
//!   and over HTTP, and dollars per million operations at the list prices of
//!   `docs/prices.json`.
//! - `delivery`: one large output served by a local HTTP server, delivered
//!   into S3 through the real deliver stage; throughput and peak RSS, beside a
//!   raw download of the same URL and a raw multipart upload of as many bytes.
//! - `load`: intents at a fixed offered rate with a share of duplicates;
//!   checks one Genace POST per distinct intent and empty DLQs.
//! - `events`: the same burst twice with the events pipe on, every event
//!   queued for the webhook function and then only the marked ones: what
//!   the pipe's mark saves a tenant without receivers.
//!
//! - `scale`: one tenant's burst beside 3, 100 and 1,000 tenants: the AWS
//!   requests per operation must not grow with the tenants.
//!
//! - `console`: many open cases, and the operator console's first page of
//!   them loaded afresh in headless Chromium, beside the API's own latency.
//!
//! A crate of its own so that the local stack (`genace-local`) does not
//! carry the workloads, and each workload is a file.

mod capacity;
mod cli;
mod console;
mod delivery;
mod events;
mod idle;
mod latency;
mod load;
mod model;
mod pipeline;
mod pricing;
mod report;
mod scale;
mod stack;
mod tracing_cost;

pub use cli::{Cli, Workload};

/// Runs the workload the command line names.
pub async fn run(cli: Cli) -> Result<(), String> {
    let endpoint = cli
        .endpoint
        .ok_or("AWS_ENDPOINT_URL must point at local AWS (use scripts/bench.sh)")?;
    match cli.workload {
        None => pipeline(&endpoint, &cli.pipeline).await,
        Some(Workload::Pipeline(a)) => pipeline(&endpoint, &a).await,
        Some(Workload::Delivery(a)) => delivery::run(&endpoint, &a).await,
        Some(Workload::Load(a)) => load::run(&endpoint, &a).await,
        Some(Workload::Capacity(a)) => capacity::run(&endpoint, &a).await,
        Some(Workload::Scale(a)) => scale::run(&endpoint, &a).await,
        Some(Workload::Latency(a)) => latency::run(&a),
        Some(Workload::Events(a)) => events::run(&endpoint, &a).await,
        Some(Workload::Console(a)) => console::run(&endpoint, &a).await,
    }
}

/// The pipeline, or its runs without and with tracing compared.
async fn pipeline(endpoint: &str, args: &cli::PipelineArgs) -> Result<(), String> {
    if args.compare_tracing {
        tracing_cost::run(endpoint, args).await
    } else {
        pipeline::run(endpoint, args).await
    }
}
