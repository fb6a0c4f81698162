//! Taking an operation back before any paid job exists.
//!
//! Genace cannot stop a job it accepted, so the one promise a cancel makes
//! is this: when it wins, no POST is ever made for the operation. It wins
//! or loses against the dispatch claim in one conditional write of the
//! record (both need `prepared`; whichever commits first, the other finds
//! the phase moved on). A lost race answers with the phase it lost to.

use crate::ports::Ports;
use tracing::info;

use crate::api::context::Api;
use crate::api::errors::OperationError;
use crate::api::operator::OperatorApi;
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit_with, write_attempts};
use genace_core::domain::{OperationId, TenantId};
use genace_core::machine::{self, Input};
use genace_core::record::{CancelReason, OperationRecord};

impl<P: Ports> Api<P> {
    /// The owning tenant takes its operation back. Another tenant's or an
    /// unknown id is [`OperationError::NotFound`].
    pub async fn cancel(&self, tenant: &TenantId, id: &OperationId) -> Result<OperationRecord, OperationError> {
        let rec = self.get(tenant, id, self.clock.now()).await?;
        // Its owner's: a span of the operation's trace.
        genace_trace::traced("cancel", id, self.take_back(rec, tenant.as_str())).await
    }

    /// Cancels `rec` for `by`: the cancelled record (a repeat changes
    /// nothing and answers the same), or [`OperationError::TooLateToCancel`]
    /// once the dispatch claim was made.
    async fn take_back(&self, rec: OperationRecord, by: &str) -> Result<OperationRecord, OperationError> {
        let now = self.clock.now();
        let policy = self.config.policy;
        let id = rec.operation_id.clone();
        let input = Input::Cancel {
            by,
            reason: CancelReason::Requested,
        };
        // Judged on the record the cancel was written over, which a lost
        // race makes a later one than `rec`: whether it waited in order (a
        // wake-up may have been sent for it), and whether it was already
        // cancelled (a repeat: nothing to count or pass on).
        let (next, (waited, repeat)) = commit_with(&self.store, rec, write_attempts(), |r| {
            let before = (
                r.waits_in_order().is_some(),
                r.phase == genace_core::record::Phase::Cancelled,
            );
            machine::transition(r, input, now, &policy).map(|next| (next, before))
        })
        .await
        .map_err(|e| match e {
            CommitError::Refused { current, .. } => OperationError::TooLateToCancel { phase: current.phase },
            CommitError::Store(s) => OperationError::Store(s),
        })?;
        if !repeat {
            info!(operation_id = %id, tenant = %next.tenant_id, %by, "operation cancelled before its dispatch claim");
            self.metrics
                .count("Cancelled", &[("Reason", CancelReason::Requested.as_str())]);
            if waited {
                // A wake-up may have been sent for it: pass it on.
                crate::pipeline::wake::wake_if_room(&self.store, &self.queue).await;
            }
        }
        Ok(next)
    }
}

impl<P: Ports> OperatorApi<'_, P> {
    /// An operator takes back an operation in their scope; the record names
    /// them.
    pub async fn cancel(&self, id: &OperationId) -> Result<OperationRecord, OperationError> {
        let rec = self.get(id).await?;
        genace_trace::traced("cancel", id, self.api.take_back(rec, &self.op.actor)).await
    }
}
