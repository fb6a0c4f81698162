//! The state of the time model ([`super::time`]): what kind of call takes
//! time, each handler's spent time, and which windows are brownouts.

use chrono::{DateTime, Duration, Utc};
use genace_memory::ManualClock;

use crate::rng::Rng;

/// What kind of call takes time.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    /// DynamoDB, SQS, S3: the AWS clients' 5 s bound.
    Aws,
    /// Genace over HTTP.
    Genace,
}

/// The time model's state.
#[derive(Debug, Default)]
pub(crate) struct TimeState {
    /// Set when calls take time: the run's clock, the seed, and the share
    /// of two-minute windows (percent) that are brownouts.
    pub(crate) model: Option<(ManualClock, u64, u64)>,
    /// What each handler has spent in its calls, by actor id.
    pub(crate) spent: std::collections::BTreeMap<usize, Duration>,
}

/// Whether the two-minute window at `now` is a brownout.
pub(crate) fn brownout(seed: u64, share: u64, now: DateTime<Utc>) -> bool {
    let window = now.timestamp().div_euclid(120) as u64;
    Rng::new(seed ^ window.wrapping_mul(0x9e37_79b9)).below(100) < share
}
