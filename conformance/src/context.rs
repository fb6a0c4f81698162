//! What every scenario is given (the deployment's API, the Genace stand-in,
//! the run's patience) and what it answers.

use std::time::Duration;

use genace_client::Client;

use crate::genace::GenaceDouble;

pub struct Context {
    /// The tenant's client; see [`crate::api`].
    pub api: Client,
    /// A second tenant, for the isolation scenario.
    pub api_other_tenant: Option<Client>,
    pub genace: GenaceDouble,
    /// Longest wait for an asynchronous outcome.
    pub patience: Duration,
    /// How long a "lost" 202 is held back; longer than the deployment's Genace timeout.
    pub lost_delay: Duration,
    /// Distinguishes this run's keys and markers from earlier runs.
    pub run_id: String,
    /// Where the target's lifecycle events can be read: a JSON-lines file of
    /// events as the bus carries them. Without one, the event scenarios
    /// have nothing to observe and pass vacuously (the summary says so).
    pub events: Option<std::path::PathBuf>,
    /// Where a trace receiver writes the target's spans (`crate::traces`).
    /// Without one, the trace checks are skipped (the summary says so).
    pub traces: Option<std::path::PathBuf>,
}

pub type Outcome = Result<(), String>;

/// `Ok` when `cond` holds, else the failure `what` describes.
pub fn check(cond: bool, what: impl Into<String>) -> Outcome {
    if cond { Ok(()) } else { Err(what.into()) }
}
