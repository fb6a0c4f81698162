//! The lifecycle rules: one pure function, [`transition`], owns every change
//! of an operation record.
//!
//! It takes the record as last read and an [`Event`] and returns the next
//! record, or a [`Refusal`] saying why the rules forbid it. Its table is one
//! `match` over (phase, event). It alone bumps `version`, consumes fault
//! directives, folds a stall case into an observation and decides when a
//! repeated outcome changes nothing; every record it returns satisfies
//! [`check_invariants`]. It performs no I/O. The store writes the difference
//! between the two records as one conditional write guarded by the version
//! that was read, so a decision made on stale data is never written.

use chrono::{DateTime, Duration, Utc};

use crate::domain::Fault;
use crate::planted;

use crate::record::{
    AuditEntry, CancelReason, Cancellation, CaseReason, Claim, DeliveredObject, DeliveryState, Erasure,
    MAX_ERASED_KEYS, OperationRecord, Phase, ReconciliationCase, RemoteError, Settlement,
};
pub use crate::remote::AcceptedJob;
use crate::remote::{JobSnapshot, RenderStatus};

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

/// Timing rules the transitions need. Values come from configuration.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long a dispatcher may hold a claim. Longer than the Genace client timeout.
    pub dispatch_lease: Duration,
    /// After acceptance, when the sweep should check that observation happened.
    pub observe_grace: Duration,
    /// How long a finished operation is kept before its TTL removes it, at
    /// least: never less than the outputs it stored ([`Self::output_days`]).
    pub retention: Duration,
    /// Days after which the bucket's rule deletes an output it stored:
    /// `OUTPUT_EXPIRY_DAYS`, or `RETENTION_DAYS` when that is 0.
    pub output_days: u32,
    /// How long a delivery claim lasts (the deliver function's timeout and some).
    pub delivery_lease: Duration,
    /// Delivery attempts before `delivery_failed` and a case.
    pub delivery_max_attempts: u32,
    /// How long an account problem holds an operation before one new try.
    pub account_hold: Duration,
    /// 429 answers in a row before the operation is held with a case.
    pub rate_limit_max: u32,
    /// Credits a dispatch claim reserves against the tenant's spend limit,
    /// by media type, until Genace's 202 says what it holds.
    pub credit_estimate: CreditEstimate,
}

/// Credits reserved per claim, by media type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreditEstimate {
    pub image: f64,
    pub video: f64,
}

impl CreditEstimate {
    pub fn for_media(&self, media: crate::domain::MediaType) -> f64 {
        match media {
            crate::domain::MediaType::Image => self.image,
            crate::domain::MediaType::Video => self.video,
        }
    }
}

impl Default for CreditEstimate {
    fn default() -> Self {
        Self {
            image: 1.0,
            video: 10.0,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            dispatch_lease: Duration::seconds(120),
            observe_grace: Duration::seconds(300),
            retention: Duration::days(30),
            output_days: 30,
            delivery_lease: Duration::minutes(16),
            delivery_max_attempts: 8,
            account_hold: Duration::minutes(10),
            rate_limit_max: 10,
            credit_estimate: CreditEstimate::default(),
        }
    }
}

/// Opens a case on `next` and takes it off the sweep's schedule: a person
/// moves it on from here.
fn hold_with_case(next: &mut OperationRecord, reason: CaseReason, evidence: String, now: DateTime<Utc>) {
    next.due_at_ms = None;
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence,
    });
}

/// Takes the finished operation off every schedule and sets its TTL: the
/// retention, and for one whose delivery stored anything never before the
/// bucket's rule has deleted it (all of it stored by now; S3 removes what
/// is due within [`OUTPUTS_REMOVED_WITHIN`]), so that an output never
/// outlives the record that lets it be found and erased.
fn finish(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
    next.due_at_ms = None;
    next.claim = None;
    let kept = now + policy.retention;
    let outputs_gone = match next.delivery_attempts {
        0 => None,
        _ => crate::record::bucket_rule_deletes(now, policy.output_days).map(|due| due + OUTPUTS_REMOVED_WITHIN),
    };
    next.expires_at_s = Some(outputs_gone.map_or(kept, |gone| kept.max(gone)).timestamp());
}

/// How long after an object is due S3's lifecycle rule may take to remove
/// it: the rule runs asynchronously, typically within a day.
pub const OUTPUTS_REMOVED_WITHIN: Duration = Duration::days(2);

fn require_claimant(rec: &OperationRecord, token: &str) -> Result<(), Refusal> {
    match &rec.claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// `prepared -> submitting`: the only road to a POST. The claim carries a
/// fresh token and a lease; the sweep treats an expired lease as an
/// interrupted dispatch.
fn claim_dispatch(
    rec: &OperationRecord,
    token: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    // Past its deadline nothing may claim it, whatever else holds it.
    if rec.deadline_passed(now) {
        return Err(Refusal::DeadlinePassed {
            deadline: rec.dispatch_deadline.unwrap_or(now),
        });
    }
    if let Some(until) = rec.retry_at_ms.filter(|t| *t > now.timestamp_millis()) {
        return Err(Refusal::NotYet {
            until: DateTime::from_timestamp_millis(until).unwrap_or(now),
        });
    }
    if let Some(reason) = held_for_a_person(rec) {
        return Err(Refusal::CaseOpen(reason));
    }
    let mut next = rec.clone();
    let lease_expires_at = now + policy.dispatch_lease;
    next.phase = Phase::Submitting;
    next.claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.dispatch_attempts = rec.dispatch_attempts + 1;
    next.due_at_ms = Some(lease_expires_at.timestamp_millis());
    next.reserved_credits = Some(policy.credit_estimate.for_media(rec.media_type));
    next.spend_hold = None;
    next.capacity_hold = None;
    // A dispatch fault directive fires once: the claim consumes it.
    consume_fault(&mut next, Fault::fires_in_dispatch);
    Ok(next)
}

/// The open case that only a person can close, if the record has one. A
/// held operation (account problem) is tried again once its hold ends;
/// one held for repeated rate limits, or any other case, waits for a
/// person: no claim takes it, and it never joins a waiting order, where
/// every fresh claim would yield to it.
fn held_for_a_person(rec: &OperationRecord) -> Option<CaseReason> {
    rec.case
        .as_ref()
        .map(|c| c.reason)
        .filter(|reason| *reason != CaseReason::AccountProblem)
}

/// A held operation waits for a person, never in a waiting order: a
/// refused claim's re-read may find that a 429 opened a case meanwhile.
fn refuse_wait_when_held(rec: &OperationRecord) -> Result<(), Refusal> {
    held_for_a_person(rec).map_or(Ok(()), |reason| Err(Refusal::CaseOpen(reason)))
}

/// Clears the record's fault directive when it belongs to this stage; the
/// stage fires the one it read on the record it claimed.
fn consume_fault(next: &mut OperationRecord, here: fn(Fault) -> bool) {
    if next.fault.is_some_and(here) {
        next.fault = None;
    }
}

/// `submitting -> prepared` after a 429: Genace said definitively that it did
/// not process the request, so the claim may be released and retried later.
/// After `policy.rate_limit_max` answers in a row while nothing else of ours
/// was in flight there, the operation is held with a `rate_limited` case
/// instead, so a stuck limit (an account problem) reaches a person. A 429
/// while other jobs of ours held slots (`busy`) is the account being full:
/// the operation waits for capacity and the count does not move.
fn release_claim(
    rec: &OperationRecord,
    token: &str,
    retry_at: DateTime<Utc>,
    busy: bool,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::Prepared;
    next.claim = None;
    // A 429 means Genace took our credentials: an earlier account hold is over.
    if rec
        .case
        .as_ref()
        .is_some_and(|c| c.reason == CaseReason::AccountProblem)
    {
        next.case = None;
    }
    if busy {
        // Waiting for one of our slots to free, like a refused claim: woken
        // then, with no timer of its own. A 429 is not its fault, so it
        // keeps its place: waiting since it was made sorts it before every
        // operation made after it.
        next.capacity_hold = Some(rec.created_at);
        next.retry_at_ms = None;
        next.due_at_ms = None;
        next.last_error = Some(RemoteError {
            kind: "rate_limited".into(),
            status: Some(429),
            detail: "Genace's account was full of our jobs; waiting for a slot".into(),
        });
        return Ok(next);
    }
    next.rate_limited_count = rec.rate_limited_count + 1;
    next.last_error = Some(RemoteError {
        kind: "rate_limited".into(),
        status: Some(429),
        detail: format!("Genace asked us to retry after {retry_at}"),
    });
    if next.rate_limited_count >= policy.rate_limit_max {
        next.retry_at_ms = None;
        let evidence = format!("Genace answered 429 {} times in a row", next.rate_limited_count);
        hold_with_case(&mut next, CaseReason::RateLimited, evidence, now);
    } else {
        next.retry_at_ms = Some(retry_at.timestamp_millis());
        next.due_at_ms = Some(retry_at.timestamp_millis());
    }
    Ok(next)
}

/// `prepared -> prepared`, waiting: the claim would take the tenant past
/// its spend limit, so nothing was POSTed. The operation joins its tenant's
/// waiting order like a capacity wait, keeping its place if it waited
/// already, and is woken when credits may be free (a job of ours ends, a
/// limit is raised, a waiter is admitted). A lost wake-up is repaired by
/// the sweep's look at the account, not by a timer of the operation's own.
/// Both waits record what the claim will reserve (`reserved_credits`), so
/// that a wake-up can pass over a waiter short of credits for one that fits.
fn wait_for_spend_limit(
    rec: &OperationRecord,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    refuse_wait_when_held(rec)?;
    let mut next = rec.clone();
    next.spend_hold = Some(rec.waits_in_order().unwrap_or(now));
    next.reserved_credits = Some(policy.credit_estimate.for_media(rec.media_type));
    // One wait at a time: what holds the operation now is credits.
    next.capacity_hold = None;
    // Claimable the moment it is woken, and on no timer: the sweep sees it
    // only at its dispatch deadline, if it has one.
    next.retry_at_ms = None;
    next.due_at_ms = None;
    Ok(next)
}

/// `prepared -> prepared`, waiting: every slot of the Genace account's
/// capacity is taken by jobs of ours, so nothing was POSTed. Not a failure
/// and never a case: the operation joins its tenant's waiting order and is
/// woken when a slot frees. A lost wake-up is repaired by the sweep's look
/// at the account (free slots while operations wait), so a wait costs the
/// same however long it lasts.
fn wait_for_capacity(rec: &OperationRecord, now: DateTime<Utc>, policy: &Policy) -> Result<OperationRecord, Refusal> {
    refuse_wait_when_held(rec)?;
    let mut next = rec.clone();
    next.capacity_hold = Some(rec.waits_in_order().unwrap_or(now));
    next.reserved_credits = Some(policy.credit_estimate.for_media(rec.media_type));
    // One wait at a time: what holds the operation now is capacity.
    next.spend_hold = None;
    // Claimable the moment it is woken, and on no timer: the sweep sees it
    // only at its dispatch deadline, if it has one.
    next.retry_at_ms = None;
    next.due_at_ms = None;
    Ok(next)
}

/// `submitting -> prepared`, held: Genace refused our account (401, 402,
/// 403, or a 404/405 from a wrong path), which is not the intent's fault.
/// Nothing was created. An `account_problem` case is opened, and one new try
/// is allowed after `policy.account_hold` (or sooner, by an operator's
/// `release_hold`). The operation key stays usable.
fn hold_for_account(
    rec: &OperationRecord,
    token: &str,
    error: RemoteError,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    let retry_at = (now + policy.account_hold).timestamp_millis();
    next.phase = Phase::Prepared;
    next.claim = None;
    next.case = Some(ReconciliationCase {
        reason: CaseReason::AccountProblem,
        opened_at: rec
            .case
            .as_ref()
            .filter(|c| c.reason == CaseReason::AccountProblem)
            .map_or(now, |c| c.opened_at),
        evidence: format!("Genace answered HTTP {}: {}", error.status.unwrap_or(0), error.detail),
    });
    next.last_error = Some(error);
    next.retry_at_ms = Some(retry_at);
    next.due_at_ms = Some(retry_at);
    Ok(next)
}

/// `submitting | uncertain -> accepted`, only for the dispatcher (or the
/// recovery channel) holding the claim token the job was created under.
/// Applying the same job id again is a no-op, so the write can be retried.
fn accept(
    rec: &OperationRecord,
    token: &str,
    job: &AcceptedJob,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::Accepted;
    next.claim = None;
    next.case = None;
    next.retry_at_ms = None;
    next.remote_job_id = Some(job.job_id.clone());
    next.remote_state = job.state.clone();
    next.remote_model = job.model.clone();
    next.remote_created_at = job.created_at.clone();
    // The job exists whatever its credits say; an amount the ledger cannot
    // believe is kept as evidence and the reservation stands in for it.
    next.held_credits = job.held_credits.and_then(crate::ledger::credible_held);
    if planted::on(planted::TRUST_NEGATIVE_CREDITS) && job.held_credits.is_some_and(|h| h < 0.0) {
        next.held_credits = job.held_credits;
    }
    next.held_credits_refused = job
        .held_credits
        .filter(|h| crate::ledger::credible_held(*h).is_none())
        .map(|h| {
            format!(
                "Genace reported held_credits {h}, outside 0..={}; the reservation of {} stands in",
                crate::ledger::MAX_HELD_CREDITS,
                rec.reserved_credits.unwrap_or_default()
            )
        });
    next.accepted_at = Some(now);
    next.due_at_ms = Some((now + policy.observe_grace).timestamp_millis());
    Ok(next)
}

/// `submitting | uncertain -> submit_failed`: a 502 that names the failed
/// remote job, applied by the claimant or later from the recovery channel.
/// The id is kept for accounting and a settlement case is opened.
fn submit_failed(
    rec: &OperationRecord,
    token: &str,
    job_id: &str,
    error: RemoteError,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::SubmitFailed;
    next.claim = None;
    next.remote_job_id = Some(job_id.to_owned());
    next.settlement = Some(Settlement::Pending);
    next.case = Some(ReconciliationCase {
        reason: CaseReason::SettlementPending,
        opened_at: now,
        evidence: error.detail.clone(),
    });
    next.last_error = Some(error);
    next.due_at_ms = None;
    Ok(next)
}

/// `submitting -> rejected`: a definitive 4xx. Nothing was created; the client
/// needs a new operation key to try again.
fn reject(
    rec: &OperationRecord,
    token: &str,
    error: RemoteError,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::Rejected;
    next.last_error = Some(error);
    // A finished operation keeps no case (an earlier account hold is over).
    next.case = None;
    next.retry_at_ms = None;
    finish(&mut next, now, policy);
    Ok(next)
}

/// `submitting -> uncertain`: the dispatcher does not know whether Genace
/// created a job. A case is opened; nothing automatic POSTs again.
fn mark_uncertain(
    rec: &OperationRecord,
    token: &str,
    evidence: &str,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    Ok(open_uncertain(rec, CaseReason::UnknownSubmitOutcome, evidence, now))
}

/// `submitting -> uncertain` for a claim whose lease expired: its dispatcher
/// stopped somewhere between claim and commit and may have POSTed. The claim
/// token is kept so a late recovery message can still be applied.
fn interrupt(rec: &OperationRecord, evidence: &str, now: DateTime<Utc>) -> Result<OperationRecord, Refusal> {
    if let Some(c) = rec.claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    Ok(open_uncertain(rec, CaseReason::InterruptedDispatch, evidence, now))
}

fn open_uncertain(rec: &OperationRecord, reason: CaseReason, evidence: &str, now: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.phase = Phase::Uncertain;
    next.due_at_ms = None;
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence: evidence.to_owned(),
    });
    next
}

/// Folds one status snapshot of the saved job into an `accepted` operation.
/// Terminal states are recorded once: a rendered or failed operation refuses
/// further observations. A non-terminal snapshot, while the sweep's deadline
/// still covers `next_check`, is not written at all.
fn observe(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    stalled: Option<&str>,
    policy: &Policy,
) -> OperationRecord {
    let mut next = observe_snapshot(rec, snap, now, next_check, policy);
    consume_fault(&mut next, |f| f == Fault::PollAfterObserve);
    // A job silent past the deadline: the stall case rides on the same write,
    // and polling goes on.
    if let Some(evidence) = stalled.filter(|_| next.phase == Phase::Accepted) {
        next = open_case(&next, CaseReason::RenderStalled, evidence, true, now);
    }
    next
}

/// The record with a snapshot noted (remote state, when it was seen, and
/// for a running job the sweep's next deadline), or `None` when nothing
/// needs writing. A non-terminal snapshot is written only when the sweep's
/// deadline must move past the next check: a job that goes queued ->
/// running -> done within the deadline costs no write until it ends. The
/// recorded remote state may lag meanwhile (by at most the deadline).
fn noted(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
) -> Option<OperationRecord> {
    let due = next_check.timestamp_millis();
    if snap.status == RenderStatus::Running && rec.due_at_ms.is_some_and(|d| d >= due) {
        return None;
    }
    let mut next = rec.clone();
    next.remote_state = Some(snap.state.clone());
    next.observed_at = Some(now);
    if snap.status == RenderStatus::Running {
        next.due_at_ms = Some(due);
    }
    Some(next)
}

fn observe_snapshot(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let Some(mut next) = noted(rec, snap, now, next_check) else {
        return rec.clone();
    };
    match snap.status {
        RenderStatus::Running => {}
        RenderStatus::Succeeded => {
            next.phase = Phase::Rendered;
            next.outputs = Some(snap.outputs.clone().unwrap_or_default());
            next.case = None;
            next.due_at_ms = Some((now + policy.observe_grace).timestamp_millis());
            let missing = match (&snap.outputs, &snap.outputs_unreadable) {
                (_, Some(why)) => Some(format!("the outputs could not be read: {why}")),
                (None, None) => Some("the completed job has no outputs (null)".to_owned()),
                (Some(list), None) if list.is_empty() => Some("the completed job has an empty outputs list".to_owned()),
                _ => None,
            };
            if let Some(evidence) = missing {
                // Nothing to deliver: a person decides, delivery never starts.
                hold_with_case(&mut next, CaseReason::OutputsMissing, evidence, now);
            }
        }
        RenderStatus::Failed => {
            next.phase = Phase::RenderFailed;
            next.case = None;
            next.last_error = Some(RemoteError {
                kind: "render_failed".into(),
                status: None,
                detail: snap
                    .error
                    .as_ref()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| format!("Genace reported the job {}", snap.state)),
            });
            finish(&mut next, now, policy);
        }
    }
    next
}

/// Opens a reconciliation case on an operation whose remote job needs a
/// person (missing at Genace, or silent past the deadline). The phase stays.
/// `keep_due` keeps the operation on the sweep's schedule (polling goes on).
fn open_case(
    rec: &OperationRecord,
    reason: CaseReason,
    evidence: &str,
    keep_due: bool,
    now: DateTime<Utc>,
) -> OperationRecord {
    if rec.case.as_ref().is_some_and(|c| c.reason == reason) {
        return rec.clone();
    }
    let mut next = rec.clone();
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence: evidence.to_owned(),
    });
    if !keep_due {
        next.due_at_ms = None;
    }
    next
}

/// Moves the sweep's next look at an operation, without changing anything else.
fn reschedule(rec: &OperationRecord, due: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.due_at_ms = Some(due.timestamp_millis());
    next
}

/// `rendered` with delivery pending -> `collecting` under a delivery claim.
fn claim_delivery(
    rec: &OperationRecord,
    token: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    if matches!(
        rec.delivery_state,
        DeliveryState::Delivered | DeliveryState::DeliveryFailed
    ) {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
        });
    }
    if let Some(case) = &rec.case {
        return Err(Refusal::CaseOpen(case.reason));
    }
    if let Some(c) = rec.delivery_claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    if rec.delivery_attempts >= policy.delivery_max_attempts {
        return Err(Refusal::AttemptsExhausted(rec.delivery_attempts));
    }
    let mut next = rec.clone();
    let lease_expires_at = now + policy.delivery_lease;
    // The attempt counts when it starts, so attempts that stop without
    // reporting (a timeout, a crash) still use up the bound.
    next.delivery_attempts = rec.delivery_attempts + 1;
    next.delivery_state = DeliveryState::Collecting;
    next.delivery_claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.due_at_ms = Some(lease_expires_at.timestamp_millis());
    consume_fault(&mut next, Fault::fires_in_delivery);
    Ok(next)
}

/// `collecting -> delivery_failed` with a case, when every attempt was used
/// and the last one stopped without reporting (its claim lapsed).
fn give_up_delivery(rec: &OperationRecord, now: DateTime<Utc>) -> Result<OperationRecord, Refusal> {
    if !matches!(
        rec.delivery_state,
        DeliveryState::NotCollected | DeliveryState::Collecting
    ) {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
        });
    }
    if let Some(c) = rec.delivery_claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::DeliveryFailed;
    next.delivery_claim = None;
    let evidence = format!(
        "{} delivery attempts were used; the last stopped without reporting{}",
        rec.delivery_attempts,
        rec.last_error
            .as_ref()
            .map(|e| format!(" (earlier: {})", e.detail))
            .unwrap_or_default()
    );
    hold_with_case(&mut next, CaseReason::DeliveryFailed, evidence, now);
    Ok(next)
}

fn require_delivery_holder(rec: &OperationRecord, token: &str) -> Result<(), Refusal> {
    if rec.delivery_state != DeliveryState::Collecting {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
        });
    }
    match &rec.delivery_claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// A delivery attempt failed: count it and release the claim for a retry at
/// `retry_at`, or, at the bound, give up with `delivery_failed` and a case.
/// Rendering is never repeated.
fn delivery_attempt_failed(
    rec: &OperationRecord,
    token: &str,
    error: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = rec.clone();
    next.delivery_claim = None;
    next.last_error = Some(RemoteError {
        kind: "delivery".into(),
        status: None,
        detail: error.to_owned(),
    });
    if next.delivery_attempts >= policy.delivery_max_attempts {
        next.delivery_state = DeliveryState::DeliveryFailed;
        let evidence = format!("{} delivery attempts failed; last: {error}", next.delivery_attempts);
        hold_with_case(&mut next, CaseReason::DeliveryFailed, evidence, now);
    } else {
        next.due_at_ms = Some(retry_at.timestamp_millis());
    }
    Ok(next)
}

/// `collecting -> delivery_failed` at once: an output can never be fetched
/// (its URL is refused, or it is over the byte cap), so retrying is pointless.
/// The case names the output and the rule, never the URL's query string.
fn delivery_refused(
    rec: &OperationRecord,
    token: &str,
    reason: CaseReason,
    evidence: &str,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::DeliveryFailed;
    next.delivery_claim = None;
    next.last_error = Some(RemoteError {
        kind: "delivery".into(),
        status: None,
        detail: evidence.to_owned(),
    });
    hold_with_case(&mut next, reason, evidence.to_owned(), now);
    Ok(next)
}

/// `collecting -> delivered`: every output is stored and verified.
fn delivered(
    rec: &OperationRecord,
    token: &str,
    objects: Vec<DeliveredObject>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    if objects.is_empty() {
        return Err(Refusal::CaseOpen(CaseReason::OutputsMissing));
    }
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::Delivered;
    next.delivery_claim = None;
    next.delivered_objects = objects;
    next.delivered_at = Some(now);
    next.last_error = None;
    finish(&mut next, now, policy);
    Ok(next)
}

/// An operator's decision on an operation that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// A job was found at Genace: record it and resume observation.
    AttachRemoteJob { job_id: String },
    /// Nothing was created at Genace: authorize one new dispatch. The only
    /// road back to `prepared`.
    ConfirmNotCreated,
    /// The account problem or rate limit that held a prepared operation is
    /// fixed: dispatch it now, under the same operation key.
    ReleaseHold,
    /// The failed job's refund is settled.
    MarkSettled,
    /// Try delivery again from the first output.
    RedriveDelivery,
    /// Close the operation without further work.
    Abandon,
}

impl Resolution {
    pub fn name(&self) -> &'static str {
        match self {
            Resolution::AttachRemoteJob { .. } => "attach_remote_job",
            Resolution::ConfirmNotCreated => "confirm_not_created",
            Resolution::ReleaseHold => "release_hold",
            Resolution::MarkSettled => "mark_settled",
            Resolution::RedriveDelivery => "redrive_delivery",
            Resolution::Abandon => "abandon",
        }
    }
}

/// Everything that can happen to an operation, as a stage or an operator
/// reports it.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Dispatch claims a prepared operation: the only road to a POST.
    ClaimDispatch { token: &'a str },
    /// The claim would take the tenant past its spend limit: wait to be
    /// woken by a write that may free credits.
    SpendLimitReached,
    /// Every slot of the Genace account is taken by our jobs: wait to be
    /// woken when a slot frees.
    CapacityReached,
    /// Genace answered 429: it did not process the request. `busy`: other
    /// jobs of ours held slots at Genace meanwhile, so the refusal is the
    /// account being full, which never counts toward a case.
    RateLimited {
        token: &'a str,
        retry_at: DateTime<Utc>,
        busy: bool,
    },
    /// Genace refused our account (401, 402, 403, a wrong path).
    AccountRefused { token: &'a str, error: &'a RemoteError },
    /// A 202 with a job id.
    Accepted { token: &'a str, job: &'a AcceptedJob },
    /// A 502 naming the failed job.
    SubmitFailed {
        token: &'a str,
        job_id: &'a str,
        error: &'a RemoteError,
    },
    /// 400, 409 or 422: the request itself is wrong.
    Rejected { token: &'a str, error: &'a RemoteError },
    /// Nobody knows whether Genace created a job.
    OutcomeUnknown { token: &'a str, evidence: &'a str },
    /// A dispatcher's claim lapsed before it recorded an outcome.
    LeaseExpired { evidence: &'a str },
    /// A status snapshot of the saved job. `stalled` carries the evidence
    /// when the job is silent past the deadline: the stall case rides on
    /// the same write.
    Observed {
        snapshot: &'a JobSnapshot,
        next_check: DateTime<Utc>,
        stalled: Option<&'a str>,
    },
    /// The remote job needs a person (missing, answered for another id, or
    /// silent past the deadline with no snapshot). `keep_due` keeps polling.
    CaseNeeded {
        reason: CaseReason,
        evidence: &'a str,
        keep_due: bool,
    },
    /// The sweep moves its next look.
    Reschedule { due: DateTime<Utc> },
    /// Deliver claims a rendered operation's outputs.
    ClaimDelivery { token: &'a str },
    /// Every delivery attempt was used and the last stopped without reporting.
    DeliveryLapsed,
    /// One delivery attempt failed; the next comes at `retry_at`.
    DeliveryFailed {
        token: &'a str,
        error: &'a str,
        retry_at: DateTime<Utc>,
    },
    /// An output can never be fetched.
    DeliveryRefused {
        token: &'a str,
        reason: CaseReason,
        evidence: &'a str,
    },
    /// Every output is stored and verified.
    Delivered {
        token: &'a str,
        objects: &'a [DeliveredObject],
    },
    /// An operator's audited decision.
    Resolved(Decision<'a>),
    /// The operation is taken back before its dispatch claim: by `by` (its
    /// tenant or an operator) or by its deadline. It wins or loses against
    /// the claim in one conditional write.
    Cancel { by: &'a str, reason: CancelReason },
    /// The delivered objects were deleted from the bucket at `by`'s request.
    /// The tenant's or an operator's erasure; `objects`: the keys deleted.
    OutputsErased { by: &'a str, objects: &'a [String] },
}

/// Who decided what, and why.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    pub resolution: &'a Resolution,
    pub actor: &'a str,
    pub reason: &'a str,
}

impl Event<'_> {
    /// What the event asks for, as a refusal names it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::ClaimDispatch { .. } => "claim",
            Event::SpendLimitReached => "wait for the spend limit",
            Event::CapacityReached => "wait for capacity",
            Event::RateLimited { .. } => "release",
            Event::AccountRefused { .. } => "hold",
            Event::Accepted { .. } => "accept",
            Event::SubmitFailed { .. } => "record a submission failure",
            Event::Rejected { .. } => "reject",
            Event::OutcomeUnknown { .. } => "mark uncertain",
            Event::LeaseExpired { .. } => "interrupt",
            Event::Observed { .. } => "observe",
            Event::CaseNeeded { .. } => "open a case",
            Event::Reschedule { .. } => "reschedule",
            Event::ClaimDelivery { .. } => "deliver",
            Event::DeliveryLapsed => "give up delivery",
            Event::DeliveryFailed { .. } => "record a failed delivery",
            Event::DeliveryRefused { .. } => "record a refused delivery",
            Event::Delivered { .. } => "record delivery",
            Event::Resolved(d) => d.resolution.name(),
            Event::Cancel { .. } => "cancel",
            Event::OutputsErased { .. } => "erase outputs",
        }
    }

    /// Where the event applies, as a refusal names it.
    pub fn expected(&self) -> &'static str {
        match self {
            Event::ClaimDispatch { .. } | Event::SpendLimitReached | Event::CapacityReached => "prepared",
            Event::Cancel { .. } => "prepared, or cancelled already",
            Event::RateLimited { .. }
            | Event::AccountRefused { .. }
            | Event::Rejected { .. }
            | Event::OutcomeUnknown { .. }
            | Event::LeaseExpired { .. } => "submitting",
            Event::Accepted { .. } | Event::SubmitFailed { .. } => "submitting or uncertain",
            Event::Observed { .. } | Event::CaseNeeded { .. } => "accepted",
            Event::Reschedule { .. } => "any phase",
            Event::ClaimDelivery { .. }
            | Event::DeliveryLapsed
            | Event::DeliveryFailed { .. }
            | Event::DeliveryRefused { .. }
            | Event::Delivered { .. } => "rendered",
            Event::OutputsErased { .. } => "finished, or rendered with its delivery over",
            Event::Resolved(d) => match d.resolution {
                Resolution::AttachRemoteJob { .. } => "uncertain, or accepted with its remote job missing",
                Resolution::ConfirmNotCreated => "uncertain",
                Resolution::ReleaseHold => "prepared and held (account_problem or rate_limited)",
                Resolution::MarkSettled => "submit_failed with settlement pending",
                Resolution::RedriveDelivery => "rendered with delivery_failed",
                Resolution::Abandon => "an open reconciliation case",
            },
        }
    }
}

fn case_is(rec: &OperationRecord, reasons: &[CaseReason]) -> bool {
    rec.case.as_ref().is_some_and(|c| reasons.contains(&c.reason))
}

/// The lifecycle: the next record after `event`, or why the rules refuse
/// it. The one `match` below is the whole table of (phase, event); every
/// pair it does not name is refused with [`Refusal::WrongPhase`]. A result
/// equal to `rec` means the event changes nothing (a repeated outcome, an
/// observation the schedule already covers): it is returned as it is, and
/// nothing needs writing. Otherwise `version` moves by exactly one.
#[allow(
    clippy::too_many_lines,
    reason = "the lifecycle's table is one match over (phase, event) by design: each arm is one line or a call"
)]
pub fn transition(
    rec: &OperationRecord,
    event: Event<'_>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    use CaseReason::{AccountProblem, RateLimited, RemoteJobMissing};
    use Phase::*;
    use Resolution::*;
    let next = match (rec.phase, event) {
        // ---- dispatch
        (Prepared, Event::ClaimDispatch { token }) => claim_dispatch(rec, token, now, policy)?,
        (Prepared, Event::SpendLimitReached) => wait_for_spend_limit(rec, now, policy)?,
        (Prepared, Event::CapacityReached) => wait_for_capacity(rec, now, policy)?,
        (Submitting, Event::ClaimDispatch { .. }) if rec.claim.as_ref().is_some_and(|c| c.lease_expires_at > now) => {
            let until = rec.claim.as_ref().map_or(now, |c| c.lease_expires_at);
            return Err(Refusal::LeaseLive { until });
        }
        // A planted bug (tests only): the lapsed claim is claimed again.
        (Submitting, Event::ClaimDispatch { token }) if planted::on(planted::REPOST_AFTER_LEASE) => {
            claim_dispatch(rec, token, now, policy)?
        }
        (Submitting, Event::RateLimited { token, retry_at, busy }) => {
            release_claim(rec, token, retry_at, busy, now, policy)?
        }
        (Submitting, Event::AccountRefused { token, error }) => {
            hold_for_account(rec, token, error.clone(), now, policy)?
        }
        // A job id already saved: the same one again changes nothing (a
        // retried write, a recovery message applied twice); another is refused.
        (SubmitFailed, Event::Accepted { .. }) if rec.remote_job_id.is_some() => {
            return Err(Refusal::DifferentRemoteJob {
                existing: rec.remote_job_id.clone().unwrap_or_default(),
            });
        }
        (_, Event::Accepted { job, .. }) if rec.remote_job_id.is_some() => match &rec.remote_job_id {
            Some(existing) if *existing == job.job_id => rec.clone(),
            existing => {
                return Err(Refusal::DifferentRemoteJob {
                    existing: existing.clone().unwrap_or_default(),
                });
            }
        },
        (Submitting | Uncertain, Event::Accepted { token, job }) => accept(rec, token, job, now, policy)?,
        (SubmitFailed, Event::SubmitFailed { job_id, .. }) if rec.remote_job_id.as_deref() == Some(job_id) => {
            rec.clone()
        }
        (Submitting | Uncertain, Event::SubmitFailed { token, job_id, error }) => {
            submit_failed(rec, token, job_id, error.clone(), now)?
        }
        (Submitting, Event::Rejected { token, error }) => reject(rec, token, error.clone(), now, policy)?,
        (Submitting, Event::OutcomeUnknown { token, evidence }) => mark_uncertain(rec, token, evidence, now)?,
        (Submitting, Event::LeaseExpired { evidence }) => interrupt(rec, evidence, now)?,
        // ---- observation
        (
            Accepted,
            Event::Observed {
                snapshot,
                next_check,
                stalled,
            },
        ) => observe(rec, snapshot, now, next_check, stalled, policy),
        (
            Accepted,
            Event::CaseNeeded {
                reason,
                evidence,
                keep_due,
            },
        ) => open_case(rec, reason, evidence, keep_due, now),
        // A planted bug (tests only): a case whatever the phase.
        (
            _,
            Event::CaseNeeded {
                reason,
                evidence,
                keep_due,
            },
        ) if planted::on(planted::CASE_WITHOUT_PHASE_CHECK) => open_case(rec, reason, evidence, keep_due, now),
        (_, Event::Reschedule { due }) => reschedule(rec, due),
        // ---- delivery
        (Rendered, Event::ClaimDelivery { token }) if rec.outputs_erased.is_none() => {
            claim_delivery(rec, token, now, policy)?
        }
        (Rendered, Event::DeliveryLapsed) => give_up_delivery(rec, now)?,
        (Rendered, Event::DeliveryFailed { token, error, retry_at }) => {
            delivery_attempt_failed(rec, token, error, retry_at, now, policy)?
        }
        (
            Rendered,
            Event::DeliveryRefused {
                token,
                reason,
                evidence,
            },
        ) => delivery_refused(rec, token, reason, evidence, now)?,
        (Rendered, Event::Delivered { token, objects }) => delivered(rec, token, objects.to_vec(), now, policy)?,
        // ---- operators
        (Uncertain, Event::Resolved(d)) if matches!(d.resolution, AttachRemoteJob { .. } | ConfirmNotCreated) => {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        (Accepted, Event::Resolved(d))
            if matches!(d.resolution, AttachRemoteJob { .. }) && case_is(rec, &[RemoteJobMissing]) =>
        {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        (Prepared, Event::Resolved(d))
            if *d.resolution == ReleaseHold && case_is(rec, &[AccountProblem, RateLimited]) =>
        {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        (SubmitFailed, Event::Resolved(d))
            if *d.resolution == MarkSettled && rec.settlement == Some(Settlement::Pending) =>
        {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        // Not once erased: a delivery then would store what the tenant erased.
        (Rendered, Event::Resolved(d))
            if *d.resolution == RedriveDelivery
                && rec.delivery_state == DeliveryState::DeliveryFailed
                && rec.outputs_erased.is_none() =>
        {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        // Never while a dispatcher holds the claim: it may be POSTing, and an
        // abandoned record would leave its job on no record and in no case.
        (phase, Event::Resolved(d))
            if *d.resolution == Abandon && !matches!(phase, Abandoned | Submitting) && rec.case.is_some() =>
        {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        // ---- taking it back: before the claim only; a repeat changes nothing
        (Prepared, Event::Cancel { by, reason }) => cancel(rec, by, reason, now, policy),
        // A planted bug (tests only): a cancel after the claim, while a POST may be under way.
        (Submitting, Event::Cancel { by, reason }) if planted::on(planted::CANCEL_AFTER_CLAIM) => {
            cancel(rec, by, reason, now, policy)
        }
        (Cancelled, Event::Cancel { .. }) => rec.clone(),
        // ---- erasure: once no delivery can run, whatever was stored; a
        // repeat changes nothing, and no delivery is claimed after it
        (_, Event::OutputsErased { .. }) if rec.outputs_erased.is_some() => rec.clone(),
        (Rendered, Event::OutputsErased { by, objects })
            if matches!(
                rec.delivery_state,
                DeliveryState::Delivered | DeliveryState::DeliveryFailed
            ) && rec.delivery_claim.is_none() =>
        {
            outputs_erased(rec, by, objects, now)
        }
        (Abandoned | Cancelled | Rejected | RenderFailed | SubmitFailed, Event::OutputsErased { by, objects }) => {
            outputs_erased(rec, by, objects, now)
        }
        // ---- an abandoned operation whose credits still follow a job
        (Abandoned, Event::Accepted { token, job }) if rec.ledger_phase == Some(Uncertain) => {
            let mut next = accept(rec, token, job, now, policy)?;
            next.phase = Abandoned;
            next.ledger_phase = Some(Accepted);
            next.due_at_ms = Some(now.timestamp_millis());
            next
        }
        (Abandoned, Event::SubmitFailed { token, job_id, error }) if rec.ledger_phase == Some(Uncertain) => {
            let mut next = submit_failed(rec, token, job_id, error.clone(), now)?;
            next.phase = Abandoned;
            next.ledger_phase = Some(SubmitFailed);
            next
        }
        (
            Abandoned,
            Event::Observed {
                snapshot, next_check, ..
            },
        ) if rec.ledger_phase == Some(Accepted) && !case_is(rec, &[RemoteJobMissing]) => {
            observe_abandoned(rec, snapshot, now, next_check, policy)
        }
        (
            Abandoned,
            Event::CaseNeeded {
                reason: RemoteJobMissing,
                evidence,
                ..
            },
        ) if rec.ledger_phase == Some(Accepted) => open_case(rec, RemoteJobMissing, evidence, false, now),
        (Abandoned, Event::Resolved(d)) if abandoned_resolution_applies(rec, d.resolution) => {
            resolve(rec, d.resolution, d.actor, d.reason, now, policy)
        }
        // ---- everything else
        (actual, event) => {
            return Err(Refusal::WrongPhase {
                action: event.name(),
                actual,
                expected: event.expected(),
            });
        }
    };
    Ok(versioned(rec, next, now))
}

/// `next` with the version moved by one and `updated_at` set, or `rec`
/// itself when nothing but those would differ.
fn versioned(rec: &OperationRecord, next: OperationRecord, now: DateTime<Utc>) -> OperationRecord {
    let mut next = next.due_by_its_deadline();
    next.version = rec.version;
    next.updated_at = rec.updated_at;
    if next == *rec {
        return next;
    }
    next.version = rec.version + 1;
    next.updated_at = now;
    debug_assert!(
        check_invariants(&next).is_ok(),
        "a transition broke an invariant: {:?}",
        check_invariants(&next)
    );
    next
}

/// The decisions an abandoned operation still takes: attach or confirm for
/// a job that may exist but is not observed, settle a pending refund.
fn abandoned_resolution_applies(rec: &OperationRecord, resolution: &Resolution) -> bool {
    let unobserved_job = match rec.ledger_phase {
        Some(Phase::Uncertain) => true,
        Some(Phase::Accepted) => case_is(rec, &[CaseReason::RemoteJobMissing]),
        _ => false,
    };
    match resolution {
        Resolution::AttachRemoteJob { .. } | Resolution::ConfirmNotCreated => unobserved_job,
        Resolution::MarkSettled => {
            rec.ledger_phase == Some(Phase::SubmitFailed) && rec.settlement == Some(Settlement::Pending)
        }
        _ => false,
    }
}

/// The operator decisions `rec` takes now, by action name: each is tried on
/// the lifecycle's own table ([`transition`]), so the list cannot disagree
/// with what a resolution request would be allowed to do.
pub fn resolutions_allowed(rec: &OperationRecord, now: DateTime<Utc>) -> Vec<&'static str> {
    let policy = Policy::default();
    let candidates = [
        Resolution::AttachRemoteJob {
            job_id: "job-under-consideration".to_owned(),
        },
        Resolution::ConfirmNotCreated,
        Resolution::ReleaseHold,
        Resolution::MarkSettled,
        Resolution::RedriveDelivery,
        Resolution::Abandon,
    ];
    candidates
        .iter()
        .filter(|resolution| {
            let decision = Decision {
                resolution,
                actor: "console",
                reason: "allowed?",
            };
            transition(rec, Event::Resolved(decision), now, &policy).is_ok_and(|next| next != *rec)
        })
        .map(Resolution::name)
        .collect()
}

/// Whether the operation is done: nothing more will happen to it without a
/// person, and its retention clock runs.
pub fn is_finished(rec: &OperationRecord) -> bool {
    match rec.phase {
        Phase::Abandoned => {
            let refund_pending =
                rec.ledger_phase == Some(Phase::SubmitFailed) && rec.settlement == Some(Settlement::Pending);
            !(abandoned_job_may_run(rec) || refund_pending)
        }
        Phase::Rejected | Phase::RenderFailed | Phase::Cancelled => true,
        Phase::Rendered => rec.delivery_state == DeliveryState::Delivered,
        Phase::SubmitFailed => rec.settlement == Some(Settlement::Settled),
        _ => false,
    }
}

/// The rules every stored record keeps:
/// - `expires_at` is set if and only if the operation is finished;
/// - a case is open whenever the phase or delivery state needs a person
///   (uncertain, a settlement pending, delivery failed), and only with a
///   reason that belongs to the phase; a finished operation has none;
/// - a claimed phase has its claim (a token and a lease): `submitting` a
///   dispatch claim; a delivery claim exists only while a rendered
///   operation is collecting;
/// - an unfinished operation without a case has a due time, so the sweep
///   finds it: nothing is left waiting silently.
pub fn check_invariants(rec: &OperationRecord) -> Result<(), String> {
    use CaseReason::*;
    let finished = is_finished(rec);
    if finished != rec.expires_at_s.is_some() {
        return Err(format!(
            "expires_at is {:?} on a {} operation",
            rec.expires_at_s,
            if finished { "finished" } else { "unfinished" }
        ));
    }
    let counted = crate::ledger::counted_phase(rec);
    let needs_case = counted == Phase::Uncertain
        || (counted == Phase::SubmitFailed && rec.settlement == Some(Settlement::Pending))
        || (rec.phase == Phase::Rendered && rec.delivery_state == DeliveryState::DeliveryFailed);
    if needs_case && rec.case.is_none() {
        return Err(format!("a {} operation without a case", rec.phase.as_str()));
    }
    if let Some(case) = &rec.case {
        let allowed: &[CaseReason] = match rec.phase {
            _ if finished => &[],
            Phase::Prepared | Phase::Submitting => &[AccountProblem, RateLimited],
            Phase::Accepted => &[RemoteJobMissing, RenderStalled],
            Phase::Rendered => &[OutputsMissing, DeliveryFailed, OutputUrlRefused, OutputTooLarge],
            Phase::Uncertain => &[UnknownSubmitOutcome, InterruptedDispatch],
            Phase::SubmitFailed => &[SettlementPending],
            Phase::Abandoned => match rec.ledger_phase {
                Some(Phase::Uncertain) => &[UnknownSubmitOutcome, InterruptedDispatch],
                Some(Phase::Accepted) => &[RemoteJobMissing],
                Some(Phase::SubmitFailed) => &[SettlementPending],
                _ => &[],
            },
            Phase::RenderFailed | Phase::Rejected | Phase::Cancelled => &[],
        };
        if !allowed.contains(&case.reason) {
            return Err(format!(
                "a {} case on a {} operation",
                case.reason.as_str(),
                rec.phase.as_str()
            ));
        }
    }
    if rec.ledger_phase.is_some() && rec.phase != Phase::Abandoned {
        return Err(format!("a ledger phase on a {} operation", rec.phase.as_str()));
    }
    check_holds(rec)?;
    if rec.phase == Phase::Submitting && rec.claim.is_none() {
        return Err("submitting without a claim".into());
    }
    // Between attempts a collecting operation holds no claim; a claim
    // exists only while a rendered operation is collecting.
    if rec.delivery_claim.is_some() && (rec.delivery_state != DeliveryState::Collecting || rec.phase != Phase::Rendered)
    {
        return Err(format!(
            "a delivery claim on a {} operation with delivery {:?}",
            rec.phase.as_str(),
            rec.delivery_state
        ));
    }
    // Something must find an unfinished operation again: the sweep by its
    // due time, a person by its case, or a wake-up by its place in its
    // tenant's waiting order.
    if !finished && rec.case.is_none() && rec.due_at_ms.is_none() && rec.waits_in_order().is_none() {
        return Err(format!(
            "an unfinished {} operation with neither a due time, a case nor a place in a waiting order",
            rec.phase.as_str()
        ));
    }
    Ok(())
}

/// The invariants of a wait: only a prepared operation waits, for one
/// thing at a time, and never while a case only a person can close is open.
fn check_holds(rec: &OperationRecord) -> Result<(), String> {
    if rec.spend_hold.is_some() && rec.phase != Phase::Prepared {
        return Err(format!("a spend-limit hold on a {} operation", rec.phase.as_str()));
    }
    if rec.capacity_hold.is_some() && rec.phase != Phase::Prepared {
        return Err(format!("a capacity hold on a {} operation", rec.phase.as_str()));
    }
    if rec.capacity_hold.is_some() && rec.spend_hold.is_some() {
        return Err("waiting for credits and for a slot at once".into());
    }
    if rec.waits_in_order().is_some()
        && let Some(reason) = held_for_a_person(rec)
    {
        return Err(format!("waiting in order with a {} case open", reason.as_str()));
    }
    Ok(())
}

/// Checks a record as read from storage, in debug builds and tests: a
/// stored record that breaks a rule is a bug somewhere, caught where it shows.
pub fn debug_check(rec: &OperationRecord) {
    if cfg!(debug_assertions)
        && let Err(broken) = check_invariants(rec)
    {
        panic!("operation {} breaks an invariant: {broken}", rec.operation_id);
    }
}

/// `* -> abandoned`: our work stops, Genace's does not, so the credits
/// follow the job ([`OperationRecord::ledger_phase`]):
/// - before any job (prepared, held): nothing is kept, every hold is gone;
/// - rendered: the credits stay spent;
/// - a 502 naming a job: the refund stays pending, with its case, until an
///   operator marks it settled;
/// - uncertain: the hold and the case stay until an operator attaches the
///   job or confirms it never ran (or a late recovery message names it);
/// - accepted: the hold stays, and polling goes on until Genace reports the
///   job over; a job Genace does not know keeps its case for an operator.
fn abandon(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
    let from = next.phase;
    next.phase = Phase::Abandoned;
    next.ledger_phase = Some(from);
    next.delivery_claim = None;
    next.spend_hold = None;
    next.capacity_hold = None;
    next.retry_at_ms = None;
    let job_missing = case_is(next, &[CaseReason::RemoteJobMissing]);
    match from {
        Phase::Uncertain => next.due_at_ms = None,
        Phase::SubmitFailed if next.settlement == Some(Settlement::Pending) => next.due_at_ms = None,
        Phase::Accepted if job_missing => next.due_at_ms = None,
        Phase::Accepted => {
            next.case = None;
            next.due_at_ms = Some(now.timestamp_millis());
        }
        _ => {
            next.case = None;
            finish(next, now, policy);
        }
    }
}

/// The job of an abandoned operation is over (Genace reported it rendered
/// or failed, or an operator confirmed it never ran): the operation keeps
/// what that outcome costs and its retention clock starts.
fn abandoned_job_over(rec: &OperationRecord, outcome: Phase, now: DateTime<Utc>, policy: &Policy) -> OperationRecord {
    let mut next = rec.clone();
    next.ledger_phase = Some(outcome);
    next.case = None;
    finish(&mut next, now, policy);
    next
}

/// A status snapshot of an abandoned operation's job: nothing is delivered,
/// only the credits move once the job is over.
fn observe_abandoned(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let Some(next) = noted(rec, snap, now, next_check) else {
        return rec.clone();
    };
    match snap.status {
        RenderStatus::Running => next,
        RenderStatus::Succeeded => abandoned_job_over(&next, Phase::Rendered, now, policy),
        RenderStatus::Failed => abandoned_job_over(&next, Phase::RenderFailed, now, policy),
    }
}

/// Whether an abandoned operation still waits on a job that may run.
fn abandoned_job_may_run(rec: &OperationRecord) -> bool {
    rec.phase == Phase::Abandoned && matches!(rec.ledger_phase, Some(Phase::Accepted | Phase::Uncertain))
}

/// Applies an operator's decision, valid only from the right phase, and
/// appends who decided, when, what and why to the audit trail.
fn resolve(
    rec: &OperationRecord,
    resolution: &Resolution,
    actor: &str,
    reason: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let mut next = rec.clone();
    match resolution {
        Resolution::AttachRemoteJob { job_id } if rec.phase == Phase::Abandoned => {
            next.ledger_phase = Some(Phase::Accepted);
            next.remote_job_id = Some(job_id.clone());
            next.remote_state = None;
            next.observed_at = None;
            next.accepted_at = Some(rec.accepted_at.unwrap_or(now));
            next.claim = None;
            next.case = None;
            next.due_at_ms = Some(now.timestamp_millis());
        }
        Resolution::ConfirmNotCreated if rec.phase == Phase::Abandoned => {
            next = abandoned_job_over(rec, Phase::Prepared, now, policy);
        }
        Resolution::AttachRemoteJob { job_id } => {
            next.phase = Phase::Accepted;
            next.remote_job_id = Some(job_id.clone());
            next.remote_state = None;
            next.observed_at = None;
            next.accepted_at = Some(rec.accepted_at.unwrap_or(now));
            next.claim = None;
            next.case = None;
            next.due_at_ms = Some((now + policy.observe_grace).timestamp_millis());
        }
        Resolution::ReleaseHold => {
            next.case = None;
            next.retry_at_ms = None;
            next.rate_limited_count = 0;
            next.due_at_ms = Some(now.timestamp_millis());
        }
        Resolution::ConfirmNotCreated => {
            next.phase = Phase::Prepared;
            next.claim = None;
            next.case = None;
            next.last_error = None;
            next.due_at_ms = Some(now.timestamp_millis());
        }
        Resolution::MarkSettled => {
            next.settlement = Some(Settlement::Settled);
            next.case = None;
            finish(&mut next, now, policy);
        }
        Resolution::RedriveDelivery => {
            next.delivery_state = DeliveryState::NotCollected;
            next.delivery_attempts = 0;
            next.delivery_claim = None;
            next.case = None;
            next.due_at_ms = Some(now.timestamp_millis());
        }
        Resolution::Abandon => abandon(&mut next, now, policy),
    }
    next.audit.push(AuditEntry {
        actor: actor.to_owned(),
        at: now,
        action: resolution.name().to_owned(),
        reason: reason.to_owned(),
        job_id: match resolution {
            Resolution::AttachRemoteJob { job_id } => Some(job_id.clone()),
            _ => None,
        },
    });
    next
}

/// The delivered objects are gone from the bucket: the record keeps their
/// keys and digests as evidence, and the audit names who asked.
fn outputs_erased(rec: &OperationRecord, by: &str, objects: &[String], now: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.outputs_erased = Some(Erasure {
        at: now,
        by: by.to_owned(),
        objects: objects.iter().take(MAX_ERASED_KEYS).cloned().collect(),
        more_objects: u32::try_from(objects.len().saturating_sub(MAX_ERASED_KEYS)).unwrap_or(u32::MAX),
    });
    next.audit.push(AuditEntry {
        actor: by.to_owned(),
        at: now,
        action: "erase_outputs".to_owned(),
        reason: "erasure requested".to_owned(),
        job_id: None,
    });
    next
}

/// `prepared -> cancelled`: no claim was ever made, so no POST ever
/// follows; a held operation's case closes with it, and it leaves the
/// waiting order.
fn cancel(
    rec: &OperationRecord,
    by: &str,
    reason: CancelReason,
    now: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let mut next = rec.clone();
    next.phase = Phase::Cancelled;
    next.cancellation = Some(Cancellation {
        at: now,
        by: by.to_owned(),
        reason,
    });
    next.case = None;
    next.retry_at_ms = None;
    next.spend_hold = None;
    next.capacity_hold = None;
    finish(&mut next, now, policy);
    // The audit names who took it back (and so who closed a case it had).
    next.audit.push(AuditEntry {
        actor: by.to_owned(),
        at: now,
        action: "cancel".to_owned(),
        reason: reason.as_str().to_owned(),
        job_id: None,
    });
    next
}

#[cfg(test)]
mod tests;
