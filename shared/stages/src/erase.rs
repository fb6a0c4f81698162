//! Erasing an operation's delivered outputs at its tenant's request.
//!
//! The objects are deleted first, then the record says so: a failure
//! between the two leaves links that no longer resolve, and the request
//! repeated (deletes are idempotent) completes it. The opposite order could
//! claim an erasure that did not happen. Only a delivered operation's
//! outputs are erased: while delivery runs, or may run again after a
//! failure, new objects could appear behind the erasure.

use tracing::info;

use crate::admin::Admin;
use crate::clock::Clock;
use crate::intake::{Intake, IntakeError};
use crate::outputs::ObjectStore;
use crate::queue::WorkQueue;
use crate::stage::write_attempts;
use crate::table::{CommitError, OperationStore, commit};
use genace_core::domain::{OperationId, TenantId};
use genace_core::machine::{self, Event};
use genace_core::record::OperationRecord;

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock> Intake<S, Q, O, C> {
    /// The owning tenant erases its operation's outputs. Another tenant's
    /// or an unknown id is [`IntakeError::NotFound`].
    pub async fn erase_outputs(&self, tenant: &TenantId, id: &OperationId) -> Result<OperationRecord, IntakeError> {
        let rec = self.get(tenant, id, self.clock.now()).await?;
        self.erase(rec, tenant.as_str()).await
    }

    /// Deletes `rec`'s delivered objects, then records who erased them. A
    /// repeat answers the record as it is.
    async fn erase(&self, rec: OperationRecord, by: &str) -> Result<OperationRecord, IntakeError> {
        let now = self.clock.now();
        let policy = self.config.policy;
        let event = Event::OutputsErased { by };
        let refused = |r: &OperationRecord| IntakeError::CannotErase {
            phase: r.phase,
            delivery_state: r.delivery_state,
        };
        // Refused before anything is deleted.
        if machine::transition(&rec, event, now, &policy).is_err() {
            return Err(refused(&rec));
        }
        if rec.outputs_erased.is_some() {
            return Ok(rec);
        }
        for object in &rec.delivered_objects {
            self.objects
                .delete(&object.key)
                .await
                .map_err(|e| IntakeError::Objects(e.to_string()))?;
        }
        let next = commit(&self.store, rec, write_attempts(), |r| {
            machine::transition(r, event, now, &policy)
        })
        .await
        .map_err(|e| match e {
            CommitError::Refused { current, .. } => refused(&current),
            CommitError::Store(s) => IntakeError::Store(s),
        })?;
        info!(operation_id = %next.operation_id, tenant = %next.tenant_id, %by, objects = next.delivered_objects.len(), "outputs erased");
        self.metrics.count("OutputsErased", &[]);
        Ok(next)
    }
}

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock> Admin<'_, S, Q, O, C> {
    /// An operator erases the outputs of an operation in their scope.
    pub async fn erase_outputs(&self, id: &OperationId) -> Result<OperationRecord, IntakeError> {
        let rec = self.get(id).await?;
        self.erase(rec, &self.op.actor).await
    }
}
