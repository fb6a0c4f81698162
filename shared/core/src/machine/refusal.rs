//! Why the rules refuse an input: the one error [`super::transition`] returns.

use chrono::{DateTime, Utc};

use crate::record::{CaseReason, DeliveryState, Phase};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the operation is {actual}, and {action} needs {expected}", actual = .actual.as_str())]
    WrongPhase {
        action: &'static str,
        actual: Phase,
        expected: &'static str,
    },
    #[error("the claim is held by another dispatcher until {until}")]
    LeaseLive { until: DateTime<Utc> },
    #[error("the claim token does not match the one on the record")]
    NotClaimant,
    #[error("the operation already holds remote job {existing}")]
    DifferentRemoteJob { existing: String },
    #[error("delivery has already ended ({actual:?})")]
    DeliveryFinished { actual: DeliveryState },
    /// A 429, an account hold or the spend limit set a time before which nobody may claim.
    #[error("dispatch must wait until {until}")]
    NotYet { until: DateTime<Utc> },
    /// The dispatch deadline passed: the operation is to be cancelled, never claimed.
    #[error("the dispatch deadline {deadline} has passed")]
    DeadlinePassed { deadline: DateTime<Utc> },
    /// A reconciliation case is open; only a person moves the operation on.
    #[error("a {} case is open", .0.as_str())]
    CaseOpen(CaseReason),
    /// The record moved on from the version a decision was made on.
    #[error("the operation is now at version {actual}")]
    StaleVersion { actual: u64 },
    /// Every delivery attempt allowed was used; see [`give_up_delivery`].
    #[error("all {0} delivery attempts were used")]
    AttemptsExhausted(u32),
}
