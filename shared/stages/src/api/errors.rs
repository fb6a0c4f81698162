//! One error per operation family of the API, each naming only what that
//! family can refuse; the edge maps each to problem+json in one place.

use genace_core::domain::{InvalidInput, OperationId};

use crate::ports::table::StoreError;

/// Why an intent was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The request is invalid (for a time-dependent check: as a new
    /// intent; a recorded one is replayed instead).
    #[error(transparent)]
    Invalid(InvalidInput),
    /// The key is taken by an intent with a different specification.
    #[error("operation key {key:?} is already used by operation {existing} with a different specification")]
    KeyReused { key: String, existing: OperationId },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a read or a change of one operation, by its tenant or an operator, was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// No live operation with this id belongs to the caller.
    #[error("no such operation")]
    NotFound,
    /// The lifecycle rules refuse the requested change in the current phase.
    #[error("{0}")]
    Refused(genace_core::machine::Refusal),
    /// The decision was made on another version of the operation than the
    /// stored one (a stale or replayed request): nothing was changed.
    #[error("the operation is at version {actual}, the request was made on version {expected}")]
    StaleVersion { expected: u64, actual: u64 },
    /// The remote job id is already the remote job of another operation.
    #[error("remote job {job_id} already belongs to another operation")]
    JobHeldElsewhere {
        job_id: String,
        holder: Option<OperationId>,
    },
    /// The remote job id cannot be attached here: it belongs to an
    /// operation outside the operator's scope, which is not named.
    #[error("remote job {job_id} cannot be attached to this operation")]
    JobNotAttachable { job_id: String },
    /// An operator scoped to one tenant named a job id that the
    /// operation's own evidence does not: only a global operator may
    /// attach a job found elsewhere.
    #[error("remote job {job_id} is not named by this operation's evidence")]
    JobNotInEvidence { job_id: String },
    /// The operation was claimed for dispatch (or is past it): a Genace job
    /// may exist, and Genace cannot stop one it accepted.
    #[error("the operation is {} and can no longer be cancelled", .phase.as_str())]
    TooLateToCancel { phase: genace_core::record::Phase },
    /// A delivery runs or may still run on its own: outputs could be
    /// stored after the erasure.
    #[error("the operation is {} with delivery {}; a delivery may still store outputs", .phase.as_str(), .delivery_state.as_str())]
    CannotErase {
        phase: genace_core::record::Phase,
        delivery_state: genace_core::record::DeliveryState,
    },
    /// The object store failed; nothing was recorded, and a repeat completes it.
    #[error("the object store failed: {0}")]
    Objects(String),
    /// The kept spans could not be read.
    #[error("the trace store failed: {0}")]
    Traces(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a page of a list (operations, cases, their counts, credits) was refused.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The request is invalid (for a time-dependent check: as a new
    /// intent; a recorded one is replayed instead).
    #[error(transparent)]
    Invalid(InvalidInput),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a tenant's or the account's settings (credits, limits, capacity, the single webhook) were not read or changed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// No live operation with this id belongs to the caller.
    #[error("no such operation")]
    NotFound,
    /// The change concerns the whole Genace account, and the operator is
    /// scoped to one tenant.
    #[error("only an operator of every tenant may change the whole account")]
    AccountWide,
    /// A tenant's spend limit and limit of jobs in flight are the
    /// platform's: an operator scoped to one tenant reads them only.
    #[error("only an operator of every tenant may set a tenant's limits")]
    PlatformLimit,
    /// The request is invalid (for a time-dependent check: as a new
    /// intent; a recorded one is replayed instead).
    #[error(transparent)]
    Invalid(InvalidInput),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a webhook endpoint request was refused.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The request is invalid (for a time-dependent check: as a new
    /// intent; a recorded one is replayed instead).
    #[error(transparent)]
    Invalid(InvalidInput),
    /// No webhook endpoint with this id belongs to the tenant.
    #[error("no such webhook endpoint")]
    NoSuchEndpoint,
    /// No kept event with this id belongs to the tenant (never one of its
    /// events, or kept no longer).
    #[error("no such event is kept for the tenant")]
    NoSuchEvent,
    /// The endpoint cannot take this event now: it is disabled, or it does
    /// not take events of this type. Nothing was queued.
    #[error("the event cannot be sent to this endpoint: {0}")]
    NotReplayable(String),
    /// A recovery of this endpoint ran within the window; its copies may
    /// still be on their way. Another may start at `until`.
    #[error("a recovery of this endpoint ran recently; another may start at {until}")]
    RecoveryRunning { until: chrono::DateTime<chrono::Utc> },
    /// The endpoint had as many replays as a window allows; the next may
    /// come at `until`.
    #[error("this endpoint had {most} replays in the last window; the next may come at {until}")]
    ReplayLimit {
        most: u32,
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The tenant has as many webhook endpoints as it may.
    #[error("the tenant already has {limit} webhook endpoints, the most it may have")]
    EndpointLimit { limit: usize },
    /// Secrets Manager failed; the endpoint was not changed.
    #[error("the secret store failed: {0}")]
    Secrets(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
