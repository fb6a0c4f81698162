//! Erasing an operation's stored outputs at its tenant's request.
//!
//! Every object under the operation's prefix is deleted, whichever delivery
//! attempt stored it (a delivered operation's, and the partial outputs of a
//! delivery that failed, was refused or was abandoned), then the record
//! says so, with the keys deleted. A failure between the two leaves links
//! that no longer resolve, and the request repeated (deletes are
//! idempotent) completes it. The opposite order could claim an erasure that
//! did not happen. Only once no delivery can run: while one runs, or may
//! run again on its own, new objects could appear behind the erasure; and
//! after it, no delivery is claimed or redriven.

use crate::ports::Ports;
use tracing::info;

use crate::api::context::Api;
use crate::api::errors::OperationError;
use crate::api::operator::OperatorApi;
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, write_attempts};
use crate::ports::outputs::{MAX_DELETE_KEYS, ObjectStore};
use genace_core::domain::{OperationId, TenantId};
use genace_core::machine::{self, Input};
use genace_core::record::OperationRecord;

impl<P: Ports> Api<P> {
    /// The owning tenant erases its operation's outputs. Another tenant's
    /// or an unknown id is [`OperationError::NotFound`].
    pub async fn erase_outputs(&self, tenant: &TenantId, id: &OperationId) -> Result<OperationRecord, OperationError> {
        let rec = self.get(tenant, id, self.clock.now()).await?;
        // Its owner's: a span of the operation's trace.
        genace_trace::traced("erase", id, self.erase(rec, tenant.as_str())).await
    }

    /// Deletes `rec`'s delivered objects, then records who erased them. A
    /// repeat answers the record as it is.
    async fn erase(&self, rec: OperationRecord, by: &str) -> Result<OperationRecord, OperationError> {
        let now = self.clock.now();
        let policy = self.config.policy;
        let refused = |r: &OperationRecord| OperationError::CannotErase {
            phase: r.phase,
            delivery_state: r.delivery_state,
        };
        // Refused before anything is deleted.
        let asked = Input::OutputsErased { by, objects: &[] };
        if machine::transition(&rec, asked, now, &policy).is_err() {
            return Err(refused(&rec));
        }
        if rec.outputs_erased.is_some() {
            return Ok(rec);
        }
        let deleted = self.delete_stored(&rec).await?;
        let input = Input::OutputsErased { by, objects: &deleted };
        let read = (rec.delivery_attempts, rec.delivered_at, rec.delivery_state);
        let next = commit(&self.store, rec, write_attempts(), |r| {
            // A delivery redriven and run since the listing may have stored
            // what it did not see: refuse, and a repeat lists again.
            if (r.delivery_attempts, r.delivered_at, r.delivery_state) != read {
                return Err(genace_core::machine::Refusal::StaleVersion { actual: r.version });
            }
            machine::transition(r, input, now, &policy)
        })
        .await
        .map_err(|e| match e {
            CommitError::Refused { current, .. } => refused(&current),
            CommitError::Store(s) => OperationError::Store(s),
        })?;
        info!(operation_id = %next.operation_id, tenant = %next.tenant_id, %by, objects = deleted.len(), "outputs erased");
        self.metrics.count("OutputsErased", &[]);
        Ok(next)
    }

    /// Deletes every object under the operation's prefix and every key its
    /// record names (stored under an older prefix setting, say): the keys
    /// deleted, in order. Lists a page at a time until a page is short.
    async fn delete_stored(&self, rec: &OperationRecord) -> Result<Vec<String>, OperationError> {
        let failed = |e: crate::ports::outputs::StorageError| OperationError::Objects(e.to_string());
        // Only the operation's own objects: listing the operation's prefix
        // would meet first (`op_` sorts before `output-`) any keys of a
        // nested tenant stored before tenant segments were escaped, and a
        // page full of them would hide ours.
        let prefix = crate::ports::outputs::outputs_prefix(&self.config.output_prefix, rec);
        let mut deleted: std::collections::BTreeSet<String> =
            rec.delivered_objects.iter().map(|o| o.key.clone()).collect();
        let named: Vec<String> = deleted.iter().cloned().collect();
        for keys in named.chunks(MAX_DELETE_KEYS) {
            self.objects.delete_all(keys).await.map_err(failed)?;
        }
        // Parts of an upload a killed delivery left incomplete are stored
        // data too; the bucket's abort rule would take up to a day.
        for _ in 0..ERASE_PAGES {
            if self
                .objects
                .abort_uploads(&prefix, MAX_DELETE_KEYS)
                .await
                .map_err(failed)?
                < MAX_DELETE_KEYS
            {
                break;
            }
        }
        // Each page is deleted before the next listing, which therefore
        // starts again from the prefix. A key with a `/` after it is not
        // one deliver wrote: it is left alone.
        for _ in 0..ERASE_PAGES {
            let page = self.objects.list(&prefix, MAX_DELETE_KEYS).await.map_err(failed)?;
            let listed = page.len();
            let own: Vec<String> = page
                .into_iter()
                .filter(|key| {
                    key.strip_prefix(prefix.as_str())
                        .is_some_and(|rest| !rest.contains('/'))
                })
                .collect();
            self.objects.delete_all(&own).await.map_err(failed)?;
            // A full page of keys not ours only: none of ours is left to find.
            let done = listed < MAX_DELETE_KEYS || own.is_empty();
            deleted.extend(own);
            if done {
                return Ok(deleted.into_iter().collect());
            }
        }
        Err(OperationError::Objects(format!(
            "more than {} objects under {prefix}; erase again to go on",
            ERASE_PAGES * MAX_DELETE_KEYS
        )))
    }
}

/// Pages of keys (each one listing and one DeleteObjects) at most per
/// request: an operation stores one object per output, so a few keys in
/// practice.
const ERASE_PAGES: usize = 10;

impl<P: Ports> OperatorApi<'_, P> {
    /// An operator erases the outputs of an operation in their scope.
    pub async fn erase_outputs(&self, id: &OperationId) -> Result<OperationRecord, OperationError> {
        let rec = self.get(id).await?;
        genace_trace::traced("erase", id, self.api.erase(rec, &self.op.actor)).await
    }
}
