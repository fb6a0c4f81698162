//! The operation record: one DynamoDB item per operation.
//!
//! - `operation`: [`OperationRecord`] and what it answers about itself.
//! - `phase`: [`Phase`] and [`DeliveryState`].
//! - `case`: [`CaseReason`], the open [`ReconciliationCase`] and its [`Runbook`].
//! - `parts`: claims, errors, outputs, the audit trail, erasures, cancellations, waits.

mod case;
mod operation;
mod parts;
mod phase;

pub use crate::domain::Fault;
pub use case::{CaseReason, ReconciliationCase, Runbook};
#[cfg(test)]
pub use operation::sample_prepared;
pub use operation::{DUE_SHARDS, OperationRecord};
pub use parts::{
    AuditEntry, CancelReason, Cancellation, Claim, DeliveredObject, Detection, Erasure, Looks, MAX_ERASED_KEYS,
    MAX_LOOKS_KEPT, OutputRef, RemoteError, Settlement, WaitReason, bucket_rule_deletes,
};
pub use phase::{DeliveryState, Phase};

#[cfg(test)]
mod tests;
