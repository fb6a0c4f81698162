//! The operation record: one DynamoDB item per operation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::domain::Fault;
use crate::domain::{Intent, MediaType, OperationId, TenantId};

/// Number of partitions of the sweep's due-time index. Changing it strands
/// items in shards the sweep no longer reads, so it is a constant.
pub const DUE_SHARDS: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Recorded, not yet claimed for dispatch.
    Prepared,
    /// One dispatcher holds the claim and may POST once.
    Submitting,
    /// Genace accepted the job and its id is saved.
    Accepted,
    /// Genace reported the job completed.
    Rendered,
    /// Genace reported the job failed.
    RenderFailed,
    /// Genace answered 502 with a job id: a failed job whose refund needs settling.
    SubmitFailed,
    /// Genace refused the request definitively; nothing was created.
    Rejected,
    /// The outcome of a POST is unknown; a reconciliation case is open.
    Uncertain,
    /// An operator closed the operation without further work.
    Abandoned,
    /// Taken back before the dispatch claim (by its tenant, an operator, or
    /// its dispatch deadline): no job was ever created for it.
    Cancelled,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 10] = [
        Phase::Prepared,
        Phase::Submitting,
        Phase::Uncertain,
        Phase::Accepted,
        Phase::Rendered,
        Phase::RenderFailed,
        Phase::SubmitFailed,
        Phase::Rejected,
        Phase::Abandoned,
        Phase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepared => "prepared",
            Phase::Submitting => "submitting",
            Phase::Accepted => "accepted",
            Phase::Rendered => "rendered",
            Phase::RenderFailed => "render_failed",
            Phase::SubmitFailed => "submit_failed",
            Phase::Rejected => "rejected",
            Phase::Uncertain => "uncertain",
            Phase::Abandoned => "abandoned",
            Phase::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    NotCollected,
    Collecting,
    Delivered,
    DeliveryFailed,
}

impl DeliveryState {
    /// Every delivery state, in order.
    pub const ALL: [DeliveryState; 4] = [
        DeliveryState::NotCollected,
        DeliveryState::Collecting,
        DeliveryState::Delivered,
        DeliveryState::DeliveryFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::NotCollected => "not_collected",
            DeliveryState::Collecting => "collecting",
            DeliveryState::Delivered => "delivered",
            DeliveryState::DeliveryFailed => "delivery_failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseReason {
    /// The POST's outcome is unknown (timeout, reset, 5xx without id, malformed 202).
    UnknownSubmitOutcome,
    /// A dispatcher's lease expired while it was submitting: it may have POSTed.
    InterruptedDispatch,
    /// Genace does not know the saved job id, or answered for another id.
    RemoteJobMissing,
    /// No terminal state was observed within the deadline.
    RenderStalled,
    /// Delivery failed after the bounded number of attempts.
    DeliveryFailed,
    /// A 502 with a job id: a failed remote job whose refund needs settling.
    SettlementPending,
    /// Genace reported the job completed, but its outputs were null, empty or
    /// unreadable: nothing can be delivered.
    OutputsMissing,
    /// An output URL was refused by the URL guard (scheme, host, address or
    /// port); retrying cannot change that.
    OutputUrlRefused,
    /// An output is larger than the configured byte cap.
    OutputTooLarge,
    /// Genace refused our account (401, 402, 403, a wrong path): the
    /// operation is held undispatched, not rejected.
    AccountProblem,
    /// Genace kept answering 429 past the bound: the operation is held.
    RateLimited,
}

impl CaseReason {
    pub const ALL: [CaseReason; 11] = [
        CaseReason::UnknownSubmitOutcome,
        CaseReason::InterruptedDispatch,
        CaseReason::RemoteJobMissing,
        CaseReason::RenderStalled,
        CaseReason::DeliveryFailed,
        CaseReason::SettlementPending,
        CaseReason::OutputsMissing,
        CaseReason::OutputUrlRefused,
        CaseReason::OutputTooLarge,
        CaseReason::AccountProblem,
        CaseReason::RateLimited,
    ];

    /// The reason named `s` (its `as_str`).
    pub fn parse(s: &str) -> Option<CaseReason> {
        CaseReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CaseReason::UnknownSubmitOutcome => "unknown_submit_outcome",
            CaseReason::InterruptedDispatch => "interrupted_dispatch",
            CaseReason::RemoteJobMissing => "remote_job_missing",
            CaseReason::RenderStalled => "render_stalled",
            CaseReason::DeliveryFailed => "delivery_failed",
            CaseReason::SettlementPending => "settlement_pending",
            CaseReason::OutputsMissing => "outputs_missing",
            CaseReason::OutputUrlRefused => "output_url_refused",
            CaseReason::OutputTooLarge => "output_too_large",
            CaseReason::AccountProblem => "account_problem",
            CaseReason::RateLimited => "rate_limited",
        }
    }

    /// What the operators' runbook says to do about a case of this reason:
    /// the decisions to consider, the usual one first, and the checks that
    /// choose between them. The API shows it with every case, so the CLI
    /// and the console give the same advice.
    pub fn runbook(self) -> Runbook {
        let (actions, advice): (&'static [&'static str], &'static str) = match self {
            CaseReason::UnknownSubmitOutcome | CaseReason::InterruptedDispatch => (
                &["attach_remote_job", "confirm_not_created"],
                "A job may exist at Genace. Look for it there by the operation id (its client_reference) \
                 around the time the case opened. Found: attach its id and observation resumes. \
                 Certainly absent: confirm it was not created, which allows exactly one new POST.",
            ),
            CaseReason::RemoteJobMissing => (
                &["attach_remote_job", "abandon"],
                "Genace does not know the saved job id, or answered for another operation. Find the job \
                 that carries this operation id as client_reference and attach it; abandon if none exists.",
            ),
            CaseReason::RenderStalled => (
                &["abandon"],
                "No final state within the stall deadline. Check the job at Genace: polling goes on, and a \
                 final state closes the case by itself. Abandon only a job Genace has lost for good.",
            ),
            CaseReason::DeliveryFailed => (
                &["redrive_delivery", "abandon"],
                "Every delivery attempt failed. Fix the cause named in the evidence (the bucket, the network, \
                 Genace's output host), then redrive: rendering is never repeated.",
            ),
            CaseReason::SettlementPending => (
                &["mark_settled"],
                "Genace failed the job after taking it. Confirm the refund with Genace's billing, then mark \
                 it settled.",
            ),
            CaseReason::OutputsMissing => (
                &["abandon"],
                "Genace reported the job completed with no readable outputs. Ask Genace's support; abandon \
                 when nothing can be recovered.",
            ),
            CaseReason::OutputUrlRefused => (
                &["redrive_delivery", "abandon"],
                "The URL guard refused an output's address. If Genace really serves outputs from that host, \
                 allow it in the delivery policy and redrive; otherwise abandon.",
            ),
            CaseReason::OutputTooLarge => (
                &["redrive_delivery", "abandon"],
                "An output is over MAX_OUTPUT_BYTES. Raise the limit and redrive, or abandon.",
            ),
            CaseReason::AccountProblem => (
                &["release_hold"],
                "Genace refused our account (key, billing or path). Fix the account, then release the hold; \
                 a later try that succeeds also closes the case by itself.",
            ),
            CaseReason::RateLimited => (
                &["release_hold"],
                "Genace kept refusing with 429 while nothing of ours was rendering: an account problem. \
                 Check the account's limits with Genace, then release the hold.",
            ),
        };
        Runbook { actions, advice }
    }
}

/// The runbook's advice for one case reason ([`CaseReason::runbook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Runbook {
    /// Decisions (resolution actions) to consider, the usual one first.
    pub actions: &'static [&'static str],
    /// How to choose between them.
    pub advice: &'static str,
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

/// An open question a person must answer. While a case is open nothing
/// automatic creates remote work for the operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconciliationCase {
    pub reason: CaseReason,
    pub opened_at: DateTime<Utc>,
    pub evidence: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub token: String,
    pub lease_expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteError {
    /// `http_<status>`, `remote`, `transport`, ...
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRef {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveredObject {
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
    pub content_type: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    Pending,
    Settled,
}

/// One operator decision, kept on the record for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Who decided: the operator's `sub` claim.
    pub actor: String,
    pub at: DateTime<Utc>,
    pub action: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

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
    /// abandon stops our work, not Genace's: see docs/decisions.md.
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

    /// Partition of the sparse due-time index (`DUE#<n>`), fixed at creation.
    pub due_pk: String,
    /// Epoch milliseconds at which the sweep should look at this operation;
    /// absent when nothing is due, which keeps the index sparse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "due_at")]
    pub due_at_ms: Option<i64>,
    /// TTL (epoch seconds), set only once the operation is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "expires_at")]
    pub expires_at_s: Option<i64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl OperationRecord {
    pub fn pk_for(id: &OperationId) -> String {
        format!("OP#{}", id.as_str())
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
            due_pk: format!("DUE#{}", id.shard(DUE_SHARDS)),
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
            dispatch_deadline: intent.deadline.map(|d| d.resolve(now)),
            due_at_ms: Some((now + dispatch_grace).timestamp_millis()),
            expires_at_s: None,
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
        self.expires_at_s.is_some_and(|t| t <= now.timestamp())
    }

    /// The specification as a JSON object, for views.
    pub fn specification_value(&self) -> Value {
        serde_json::from_str::<Value>(&self.specification)
            .ok()
            .and_then(|mut v| v.get_mut("specification").map(Value::take))
            .unwrap_or(Value::Null)
    }
}

/// The delivered objects were deleted from the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    pub at: DateTime<Utc>,
    /// The tenant that asked, or the operator's `sub`.
    pub by: String,
    /// The keys deleted, in key order: every object stored under the
    /// operation's prefix, by any delivery attempt, up to
    /// [`MAX_ERASED_KEYS`] (none recorded before this field existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
    /// How many more keys were deleted than `objects` lists, so that an
    /// erasure of many objects keeps the record far inside DynamoDB's
    /// 400 KB item limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_objects: u32,
}

/// Erased keys a record lists at most: about 10 KB of keys.
pub const MAX_ERASED_KEYS: usize = 100;

/// An operation taken back before any job was created for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancellation {
    pub at: DateTime<Utc>,
    /// Who asked: the tenant, an operator's `sub`, or `dispatch_deadline`.
    pub by: String,
    pub reason: CancelReason,
}

/// Why an operation was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// Its tenant or an operator asked.
    Requested,
    /// Its dispatch deadline passed before it was claimed.
    Deadline,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Deadline => "deadline",
        }
    }
}

/// Why a prepared operation waits for its dispatch claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Every slot of the Genace account (or the tenant's) is taken.
    Capacity,
    /// The tenant's spend limit leaves no room for the estimate.
    SpendLimit,
}

impl WaitReason {
    /// The name views and events give the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Capacity => "capacity",
            Self::SpendLimit => "spend_limit",
        }
    }
}

/// A fresh `prepared` record, for unit tests.
/// When a bucket rule deleting objects `days` after they were stored
/// removes one stored at `stored`: S3 adds the days and rounds up to the
/// next midnight UTC.
pub fn bucket_rule_deletes(stored: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    let due = stored + chrono::Duration::days(i64::from(days));
    let midnight = due.date_naive().and_hms_opt(0, 0, 0)?.and_utc();
    Some(if midnight == due {
        due
    } else {
        midnight + chrono::Duration::days(1)
    })
}

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

#[cfg(test)]
mod listing_tests {
    use super::*;

    /// `ALL` lists each variant once: a new variant fails to compile here
    /// until it is placed.
    #[test]
    fn every_phase_and_delivery_state_is_listed_once() {
        let place = |p: Phase| match p {
            Phase::Prepared
            | Phase::Submitting
            | Phase::Uncertain
            | Phase::Accepted
            | Phase::Rendered
            | Phase::RenderFailed
            | Phase::SubmitFailed
            | Phase::Rejected
            | Phase::Abandoned
            | Phase::Cancelled => Phase::ALL.iter().filter(|q| **q == p).count(),
        };
        assert!(Phase::ALL.iter().all(|p| place(*p) == 1));
        let names: std::collections::BTreeSet<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names.len(), Phase::ALL.len());
        let delivery = |d: DeliveryState| match d {
            DeliveryState::NotCollected
            | DeliveryState::Collecting
            | DeliveryState::Delivered
            | DeliveryState::DeliveryFailed => DeliveryState::ALL.iter().filter(|e| **e == d).count(),
        };
        assert!(DeliveryState::ALL.iter().all(|d| delivery(*d) == 1));
    }
}
