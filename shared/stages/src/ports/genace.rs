//! The Genace port: the two calls the stages make.

use std::future::Future;

use genace_core::remote::{StatusOutcome, SubmitOutcome};
use serde_json::Value;

/// Talks to Genace: the HTTP client deployed, an in-memory one in tests.
pub trait Genace: Send + Sync {
    /// Sends one job-creating POST. Never retried.
    fn submit(&self, body: &Value) -> impl Future<Output = SubmitOutcome> + Send;

    /// Reads the status of a saved remote job id.
    fn status(&self, job_id: &str) -> impl Future<Output = StatusOutcome> + Send;
}
