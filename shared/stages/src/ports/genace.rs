//! The Genace port: the two calls the stages make.

use std::future::Future;

use genace_core::remote::{StatusOutcome, SubmitOutcome};
use serde_json::Value;

/// Talks to Genace: the HTTP client deployed, an in-memory one in tests.
pub trait Genace: Send + Sync {
    /// Sends one job-creating POST. Never retried.
    fn submit(&self, body: &Value) -> impl Future<Output = SubmitOutcome> + Send;

    /// The longest one POST may take before it is given up (the client's
    /// timeout): dispatch starts a POST only with that much of its
    /// invocation left, and the time to save what it answers.
    fn longest_submit(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }

    /// Reads the status of a saved remote job id.
    fn status(&self, job_id: &str) -> impl Future<Output = StatusOutcome> + Send;
}
