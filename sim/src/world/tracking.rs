//! What the simulator keeps of the handlers and messages it watches, for
//! the checks of one live chain of looks per job ([`super::chains`]) and
//! of every shard reached by a sweep ([`super::reach`]).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

/// What the simulator knows of each poll message.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    pub(crate) links: BTreeMap<u64, Link>,
    /// Messages the simulator duplicated (copies of any queue).
    pub(crate) copies: BTreeSet<u64>,
    /// Chains the queue forked: a copy was made of one of their messages,
    /// or a redelivered message's handler continued them beside the
    /// continuation its earlier receive sent.
    pub(crate) forked: BTreeSet<u64>,
    pub(crate) next: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) operation: String,
    pub(crate) chain: u64,
    /// Sent more than 60 s (`chains::LATE_SECONDS`) after its handler began.
    pub(crate) late: bool,
}

/// The handler that was polled: what its message was.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    pub(crate) id: usize,
    pub(crate) label: String,
    pub(crate) message: Option<u64>,
    pub(crate) receives: u32,
    pub(crate) started_at: DateTime<Utc>,
}

/// A sweep in flight: when it began, and the shards that held due items.
#[derive(Debug, Clone)]
pub(crate) struct SweepStart {
    pub(crate) at: DateTime<Utc>,
    pub(crate) budget: Duration,
    pub(crate) due_shards: BTreeSet<u32>,
}
