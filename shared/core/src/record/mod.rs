//! The operation record: one DynamoDB item per operation.
//!
//! - `operation`: [`OperationRecord`] and what it answers about itself.
//! - `phase`: [`Phase`] and [`DeliveryState`].
//! - `case`: [`CaseReason`], the open [`ReconciliationCase`] and its [`Runbook`].
//! - `for_tenant`: the record as its tenant may see it.
//! - `parts`: claims, errors, outputs, the audit trail, erasures, cancellations, waits.

mod case;
mod for_tenant;
mod operation;
mod parts;
mod phase;

pub use crate::domain::Fault;
pub use case::{CaseReason, ReconciliationCase, Runbook};
pub use for_tenant::{ACCOUNT_REFUSED, DEADLINE_ACTOR, SERVICE_ACTORS};
#[cfg(test)]
pub use operation::sample_prepared;
pub use operation::{DUE_SHARDS, MAX_UNSAVED_JOBS, OperationRecord};
pub use parts::{
    AuditEntry, CancelReason, Cancellation, Claim, DeliveredObject, Detection, Erasure, Looks, MAX_ERASED_KEYS,
    MAX_LOOKS_KEPT, OutputRef, RemoteError, Settlement, WaitReason, bucket_rule_deletes,
};
pub use phase::{DeliveryState, Phase};

#[cfg(test)]
mod tests;
