//! Recording intents and reading operations, independent of HTTP: the
//! intake routes of [`Api`].

use crate::api::context::Api;
use crate::ports::Ports;
use crate::ports::table::prelude::*;
use chrono::{DateTime, Utc};
use tracing::{error, info};

use crate::api::errors::{OperationError, SubmitError};
use crate::ports::outputs::ObjectStore;
use crate::ports::queue::WorkQueue;
use crate::ports::table::Created;
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::messages::Queue;
use genace_core::record::OperationRecord;

#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new operation was recorded and announced to dispatch.
    New(Box<OperationRecord>),
    /// The same intent was recorded before; this is its current state.
    Replayed(Box<OperationRecord>),
}

impl<P: Ports> Api<P> {
    /// One conditional put decides: a new record, a replay of the same intent,
    /// or a refused reuse of the key. A duplicate costs exactly that request.
    pub async fn submit(
        &self,
        tenant: &TenantId,
        intent: &Intent,
        now: DateTime<Utc>,
    ) -> Result<Submitted, SubmitError> {
        use genace_core::planted;
        let record = OperationRecord::new_intent(
            tenant,
            intent,
            intent.fault.filter(|_| self.config.fault_injection),
            now,
            self.config.dispatch_grace,
        );
        // Time-dependent checks (a deadline already past, or too far
        // ahead) judge a new intent only: a retry of a recorded one, whose
        // first answer was lost, is a replay whenever it comes.
        if let Some(invalid) = intent.deadline.and_then(|d| d.check(now).err()) {
            return match self.store.get(&record.operation_id, now).await? {
                Some(existing) => self.answer_existing(tenant, Box::new(existing), &record),
                None => Err(SubmitError::Invalid(invalid)),
            };
        }
        match self.store.create(&record, now).await? {
            // Planted bugs (the simulator's builds only) for a changed specification.
            Created::Existing(existing)
                if existing.specification_hash != record.specification_hash
                    && planted::on(planted::CHANGED_SPEC_ANSWERED_NEW) =>
            {
                Ok(Submitted::New(Box::new(record)))
            }
            Created::Existing(existing) if planted::on(planted::REPLAY_CHANGED_SPEC) => {
                Ok(Submitted::Replayed(existing))
            }
            Created::Existing(existing) => self.answer_existing(tenant, existing, &record),
            Created::New => {
                info!(operation_id = %record.operation_id, tenant = %tenant, phase = "prepared", "intent recorded");
                self.metrics.count("IntentsCreated", &[]);
                // The record is the truth. If this message is lost, the sweep
                // finds the prepared operation through the due-time index.
                if let Err(e) = self.queue.enqueue(Queue::Dispatch, &record.operation_id, 0).await {
                    error!(operation_id = %record.operation_id, error = %e, "dispatch enqueue failed; the sweep will re-enqueue");
                }
                let mut answered = record;
                if planted::on(planted::OPERATION_ID_PER_SUBMIT) {
                    // A planted bug (the simulator's builds only): the answer
                    // names an id minted for the request, not the stored one.
                    let minted = format!(
                        "{}-{}",
                        intent.operation_key.as_str(),
                        now.timestamp_nanos_opt().unwrap_or(0)
                    );
                    if let Ok(key) = genace_core::domain::OperationKey::try_from(minted) {
                        answered.operation_id = OperationId::derive(tenant, &key);
                    }
                }
                Ok(Submitted::New(Box::new(answered)))
            }
        }
    }

    /// The answer to an intent whose key is recorded already: a replay of
    /// the same intent, or a refused reuse of the key.
    fn answer_existing(
        &self,
        tenant: &TenantId,
        existing: Box<OperationRecord>,
        sent: &OperationRecord,
    ) -> Result<Submitted, SubmitError> {
        if existing.specification_hash == sent.specification_hash {
            info!(operation_id = %existing.operation_id, tenant = %tenant, phase = existing.phase.as_str(), "intent replayed");
            self.metrics.count("IntentDuplicates", &[]);
            Ok(Submitted::Replayed(existing))
        } else {
            info!(operation_id = %existing.operation_id, tenant = %tenant, "operation key reused with a different specification");
            self.metrics.count("KeyConflicts", &[]);
            Err(SubmitError::KeyReused {
                key: existing.operation_key.clone(),
                existing: existing.operation_id.clone(),
            })
        }
    }

    /// The operation as stored, if it exists, is live and belongs to `tenant`.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &OperationId,
        now: DateTime<Utc>,
    ) -> Result<OperationRecord, OperationError> {
        match self.store.get(id, now).await? {
            Some(rec) if rec.tenant_id == *tenant => Ok(rec),
            _ => Err(OperationError::NotFound),
        }
    }
}

impl<P: Ports> Api<P> {
    /// Presigned GET links to the delivered objects, in output order. A link
    /// that cannot be signed is left out (and logged); the object list says what exists.
    pub async fn links(&self, rec: &OperationRecord) -> Vec<Option<String>> {
        if rec.outputs_erased.is_some() {
            return Vec::new();
        }
        let mut links = Vec::with_capacity(rec.delivered_objects.len());
        for obj in &rec.delivered_objects {
            match self.objects.presign_get(&obj.key, self.config.presign_expiry).await {
                Ok(url) => links.push(Some(url)),
                Err(e) => {
                    error!(operation_id = %rec.operation_id, key = %obj.key, error = %e, "presigning failed");
                    links.push(None);
                }
            }
        }
        links
    }
}
