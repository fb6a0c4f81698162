//! The operation record itself: one DynamoDB item per operation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{Fault, Intent, MediaType, OperationId, TenantId};

use super::case::{ReconciliationCase, Runbook};
use super::parts::{
    AuditEntry, Cancellation, Claim, DeliveredObject, Erasure, OutputRef, RemoteError, Settlement, WaitReason,
    bucket_rule_deletes, is_zero,
};
use super::phase::{DeliveryState, Phase};

/// Number of partitions of the sweep's due-time index. Changing it strands
/// items in shards the sweep no longer reads, so it is a constant.
pub const DUE_SHARDS: u32 = 8;

/// The most unsaved job ids a record keeps ([`OperationRecord::unsaved_jobs`]):
/// each claim POSTs at most once, so more means a fault to look at
/// anyway, and the recovery queue's dead-letter queue keeps the rest.
pub const MAX_UNSAVED_JOBS: usize = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub pk: String,
    pub operation_id: OperationId,
    pub tenant_id: TenantId,
    pub operation_key: String,
    pub media_type: MediaType,
    /// RFC 8785 canonical JSON of `{media_type, specification}`.
    pub specification: String,
    pub specification_hash: String,
    pub phase: Phase,
    pub delivery_state: DeliveryState,
    /// Incremented by every write; each transition is conditional on it.
    pub version: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    #[serde(default)]
    pub dispatch_attempts: u32,
    /// Epoch milliseconds before which no dispatch may claim (after a 429 or
    /// while an account problem holds the operation). Kept apart from
    /// `due_at`, which the sweep moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "retry_at")]
    pub retry_at_ms: Option<i64>,
    /// 429 answers in a row for this operation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rate_limited_count: u32,
    /// Its place against its tenant's other waiting operations; the first
    /// intent's (a replay does not change it).
    #[serde(default, skip_serializing_if = "crate::domain::Priority::is_interactive")]
    pub priority: crate::domain::Priority,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_credits: Option<f64>,
    /// Credits the dispatch claim reserved against the tenant's spend limit
    /// (an estimate by media type), until Genace reports `held_credits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_credits: Option<f64>,
    /// Why a `held_credits` Genace reported was not believed (not finite,
    /// negative, or above the bound): the reported value, kept as evidence.
    /// The reservation stands in for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_credits_refused: Option<String>,
    /// For an abandoned operation, the phase whose credits it keeps: where
    /// it was abandoned, or where Genace's later answer (the job rendered or
    /// failed) or an operator's decision (it never ran) moved its job. An
    /// abandon stops our work, not Genace's: see docs/decisions/0023-credits-ledger-and-spend-limits.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_phase: Option<Phase>,
    /// Since when dispatch has been waiting for the tenant's spend limit to
    /// leave room. The phase stays `prepared`; `retry_at` is the next look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_hold: Option<DateTime<Utc>>,
    /// Since when dispatch has been waiting for a slot of Genace's capacity
    /// (the account's `GENACE_MAX_IN_FLIGHT`). The phase stays `prepared`;
    /// `retry_at` is the next look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_hold: Option<DateTime<Utc>>,
    /// How the job's end was seen by the polls (set with the terminal
    /// observation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detection: Option<super::parts::Detection>,
    /// The shard of the Genace account that counts this operation's slot or
    /// its wait ([`crate::shard`]): set by the claim that admitted it or the
    /// wait that queued it, and kept, so that its end frees the shard that
    /// admitted it. None: shard 0, as every record before shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_shard: Option<u16>,
    /// The latest dispatch may claim the operation; past it, the operation
    /// is cancelled with reason `deadline` and never POSTed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_deadline: Option<DateTime<Utc>>,
    /// When every output was stored and verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<Utc>>,
    /// When the delivered objects were deleted from the bucket, and by whom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_erased: Option<Erasure>,
    /// Who took the operation back before its dispatch claim, when and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<Cancellation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Settlement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<OutputRef>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delivered_objects: Vec<DeliveredObject>,
    #[serde(default)]
    pub delivery_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_claim: Option<Claim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<RemoteError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<ReconciliationCase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditEntry>,
    /// Job ids Genace gave this operation that a recovery message carried
    /// but the record could not take (another claim, another job, a
    /// person's decision), at most [`MAX_UNSAVED_JOBS`]: each is a job to
    /// attach or account for. Only dispatch writes recovery messages, so
    /// each is this operation's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsaved_jobs: Vec<String>,

    /// Partition of the sparse due-time index (`DUE#<n>`), fixed at creation.
    pub due_pk: String,
    /// Epoch milliseconds at which the sweep should look at this operation;
    /// absent when nothing is due, which keeps the index sparse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "due_at")]
    pub due_at_ms: Option<i64>,
    /// The chain of looks at its job that may look on: the version of the
    /// write that started it (the job saved or attached, the sweep's
    /// restart). A look of an older chain ends before it reads Genace, so
    /// one chain of looks runs per job. Absent before any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_chain: Option<u64>,
    /// TTL (epoch seconds), set only once the operation is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "expires_at")]
    pub expires_at_seconds: Option<i64>,
}

impl OperationRecord {
    pub fn pk_for(id: &OperationId) -> String {
        crate::keys::operation_key(id.as_str())
    }

    /// A fresh `prepared` record for an intent.
    pub fn new_intent(
        tenant: &TenantId,
        intent: &Intent,
        fault: Option<Fault>,
        now: DateTime<Utc>,
        dispatch_grace: chrono::Duration,
    ) -> Self {
        let id = OperationId::derive(tenant, &intent.operation_key);
        Self {
            pk: Self::pk_for(&id),
            due_pk: crate::keys::due_partition(id.shard(DUE_SHARDS)),
            operation_id: id,
            tenant_id: tenant.clone(),
            operation_key: intent.operation_key.as_str().to_owned(),
            media_type: intent.media_type,
            specification: intent.canonical.json().to_owned(),
            specification_hash: intent.canonical.hash().as_str().to_owned(),
            phase: Phase::Prepared,
            delivery_state: DeliveryState::NotCollected,
            version: 1,
            created_at: now,
            updated_at: now,
            claim: None,
            dispatch_attempts: 0,
            retry_at_ms: None,
            rate_limited_count: 0,
            priority: intent.priority,
            remote_job_id: None,
            remote_state: None,
            remote_model: None,
            remote_created_at: None,
            held_credits: None,
            reserved_credits: None,
            held_credits_refused: None,
            ledger_phase: None,
            spend_hold: None,
            capacity_hold: None,
            account_shard: None,
            detection: None,
            delivered_at: None,
            outputs_erased: None,
            cancellation: None,
            accepted_at: None,
            observed_at: None,
            settlement: None,
            outputs: None,
            delivered_objects: Vec::new(),
            delivery_attempts: 0,
            delivery_claim: None,
            last_error: None,
            case: None,
            fault,
            audit: Vec::new(),
            unsaved_jobs: Vec::new(),
            dispatch_deadline: intent.deadline.map(|d| d.resolve(now)),
            due_at_ms: Some((now + dispatch_grace).timestamp_millis()),
            poll_chain: None,
            expires_at_seconds: None,
        }
        .due_by_its_deadline()
    }

    /// When a bucket rule deleting outputs `days` after they were stored
    /// removes this operation's: S3 adds the days to each object's creation
    /// and rounds up to the next midnight UTC. None before delivery, or
    /// once the outputs were erased.
    pub fn outputs_expire_at(&self, days: u32) -> Option<DateTime<Utc>> {
        if self.outputs_erased.is_some() {
            return None;
        }
        bucket_rule_deletes(self.delivered_at?, days)
    }

    /// Whether dispatch may no longer claim the operation at `now`.
    pub fn deadline_passed(&self, now: DateTime<Utc>) -> bool {
        use crate::planted;
        self.dispatch_deadline.is_some_and(|d| d <= now) && !planted::on(planted::DEADLINE_IGNORED)
    }

    /// A prepared operation with a dispatch deadline is due at it at the
    /// latest, so the sweep cancels it then whatever holds it (a wait, a
    /// hold, a lost message).
    #[must_use]
    pub fn due_by_its_deadline(mut self) -> Self {
        if let (Phase::Prepared, Some(deadline)) = (self.phase, self.dispatch_deadline) {
            let at = deadline.timestamp_millis();
            self.due_at_ms = Some(self.due_at_ms.map_or(at, |due| due.min(at)));
        }
        self
    }

    /// What the operation waits for before its dispatch claim, and since
    /// when: a slot of Genace's capacity, else its tenant's spend limit.
    /// None unless it is prepared and waits.
    pub fn wait(&self) -> Option<(WaitReason, DateTime<Utc>)> {
        if self.phase != Phase::Prepared {
            return None;
        }
        match (self.capacity_hold, self.spend_hold) {
            (Some(since), _) => Some((WaitReason::Capacity, since)),
            (None, Some(since)) => Some((WaitReason::SpendLimit, since)),
            (None, None) => None,
        }
    }

    /// Since when the operation waits in its tenant's waiting order, for a
    /// slot of Genace's capacity or for its tenant's spend limit; none when
    /// it does not wait there. A spend-limit wait recorded before waits were
    /// ordered carries its own recheck time (`retry_at`) and is not in the
    /// order, so the counts made before stay true; its next wait joins it.
    pub fn waits_in_order(&self) -> Option<DateTime<Utc>> {
        match self.wait()? {
            (WaitReason::Capacity, since) => Some(since),
            (WaitReason::SpendLimit, since) => self.retry_at_ms.is_none().then_some(since),
        }
    }

    /// True when the TTL has passed. DynamoDB may still return such an item
    /// for days, so every read treats it as absent.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at_seconds.is_some_and(|t| t <= now.timestamp())
    }

    /// The specification as a JSON object, for views.
    pub fn specification_value(&self) -> Value {
        serde_json::from_str::<Value>(&self.specification)
            .ok()
            .and_then(|mut v| v.get_mut("specification").map(Value::take))
            .unwrap_or(Value::Null)
    }
}

impl OperationRecord {
    /// The runbook of the record's open case, if any: its reason's, but
    /// once the outputs were erased a delivery case can only be abandoned
    /// (no delivery runs after an erasure).
    pub fn runbook(&self) -> Option<Runbook> {
        let case = self.case.as_ref()?;
        let book = case.reason.runbook();
        Some(match self.outputs_erased {
            Some(_) if book.actions.contains(&"redrive_delivery") => Runbook {
                actions: &["abandon"],
                advice: "The outputs were erased, so no delivery runs again: abandon to close the case.",
            },
            _ => book,
        })
    }
}

/// A fresh `prepared` record, for unit tests.
#[cfg(test)]
pub fn sample_prepared(now: DateTime<Utc>) -> OperationRecord {
    let intent = Intent::parse(
        &serde_json::json!({"operation_key": "k", "media_type": "video",
                "specification": {"model": "m", "prompt": "p"}}),
        None,
    )
    .expect("a valid intent");
    OperationRecord::new_intent(
        &TenantId::parse("t").expect("a valid tenant"),
        &intent,
        None,
        now,
        chrono::Duration::seconds(60),
    )
}
