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

use crate::record::{
    AuditEntry, CaseReason, Claim, DeliveredObject, DeliveryState, OperationRecord, Phase, ReconciliationCase,
    RemoteError, Settlement,
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
    /// How long a finished operation is kept before its TTL removes it.
    pub retention: Duration,
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
    /// How long an operation held by the spend limit waits before dispatch
    /// looks again.
    pub spend_recheck: Duration,
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
            delivery_lease: Duration::minutes(16),
            delivery_max_attempts: 8,
            account_hold: Duration::minutes(10),
            rate_limit_max: 10,
            credit_estimate: CreditEstimate::default(),
            spend_recheck: Duration::seconds(30),
        }
    }
}

/// Opens a case on `next` and takes it off the sweep's schedule: a person
/// moves it on from here.
fn hold_with_case(next: &mut OperationRecord, reason: CaseReason, evidence: String, now: DateTime<Utc>) {
    next.due_at = None;
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence,
    });
}

fn finish(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
    next.due_at = None;
    next.claim = None;
    next.expires_at = Some((now + policy.retention).timestamp());
}

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
    if let Some(until) = rec.retry_at.filter(|t| *t > now.timestamp_millis()) {
        return Err(Refusal::NotYet {
            until: DateTime::from_timestamp_millis(until).unwrap_or(now),
        });
    }
    // A held operation (account problem) is tried again once its hold ends;
    // one held for repeated rate limits waits for a person.
    match rec.case.as_ref().map(|c| c.reason) {
        None | Some(CaseReason::AccountProblem) => {}
        Some(other) => return Err(Refusal::CaseOpen(other)),
    }
    let mut next = rec.clone();
    let lease_expires_at = now + policy.dispatch_lease;
    next.phase = Phase::Submitting;
    next.claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.dispatch_attempts = rec.dispatch_attempts + 1;
    next.due_at = Some(lease_expires_at.timestamp_millis());
    next.reserved_credits = Some(policy.credit_estimate.for_media(rec.media_type));
    next.spend_hold = None;
    // A dispatch fault directive fires once: the claim consumes it.
    consume_fault(&mut next, Fault::fires_in_dispatch);
    Ok(next)
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
/// After `policy.rate_limit_max` answers in a row the operation is held with
/// a `rate_limited` case instead, so a stuck limit reaches a person.
fn release_claim(
    rec: &OperationRecord,
    token: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::Prepared;
    next.claim = None;
    next.rate_limited_count = rec.rate_limited_count + 1;
    next.last_error = Some(RemoteError {
        kind: "rate_limited".into(),
        status: Some(429),
        detail: format!("Genace asked us to retry after {retry_at}"),
    });
    // A 429 means Genace took our credentials: an earlier account hold is over.
    if rec
        .case
        .as_ref()
        .is_some_and(|c| c.reason == CaseReason::AccountProblem)
    {
        next.case = None;
    }
    if next.rate_limited_count >= policy.rate_limit_max {
        next.retry_at = None;
        let evidence = format!("Genace answered 429 {} times in a row", next.rate_limited_count);
        hold_with_case(&mut next, CaseReason::RateLimited, evidence, now);
    } else {
        next.retry_at = Some(retry_at.timestamp_millis());
        next.due_at = Some(retry_at.timestamp_millis());
    }
    Ok(next)
}

/// `prepared -> prepared`, waiting: the claim would take the tenant past
/// its spend limit, so nothing was POSTed. Dispatch looks again at
/// `retry_at` (the sweep re-sends it), and claims as soon as credits are free.
fn wait_for_spend_limit(rec: &OperationRecord, retry_at: DateTime<Utc>, now: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.spend_hold = Some(rec.spend_hold.unwrap_or(now));
    next.retry_at = Some(retry_at.timestamp_millis());
    next.due_at = Some(retry_at.timestamp_millis());
    next
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
    next.retry_at = Some(retry_at);
    next.due_at = Some(retry_at);
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
    next.retry_at = None;
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
    next.due_at = Some((now + policy.observe_grace).timestamp_millis());
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
    next.due_at = None;
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
    next.retry_at = None;
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
    next.due_at = None;
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

fn observe_snapshot(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let due = next_check.timestamp_millis();
    // A non-terminal snapshot is written only when the sweep's deadline must
    // move past the next check: a job that goes queued -> running -> done
    // within the deadline costs no write until it ends. The recorded remote
    // state may lag meanwhile (by at most the deadline).
    if snap.status == RenderStatus::Running && rec.due_at.is_some_and(|d| d >= due) {
        return rec.clone();
    }
    let mut next = rec.clone();
    next.remote_state = Some(snap.state.clone());
    next.observed_at = Some(now);
    match snap.status {
        RenderStatus::Running => next.due_at = Some(due),
        RenderStatus::Succeeded => {
            next.phase = Phase::Rendered;
            next.outputs = Some(snap.outputs.clone().unwrap_or_default());
            next.case = None;
            next.due_at = Some((now + policy.observe_grace).timestamp_millis());
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
        next.due_at = None;
    }
    next
}

/// Moves the sweep's next look at an operation, without changing anything else.
fn reschedule(rec: &OperationRecord, due: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.due_at = Some(due.timestamp_millis());
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
    next.due_at = Some(lease_expires_at.timestamp_millis());
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
        next.due_at = Some(retry_at.timestamp_millis());
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

/// Known bugs that can be planted again, to prove the simulator finds
/// them. Only a build with the feature `planted-bugs` can turn one on (the
/// simulator's); every other build reads them as off.
pub mod planted {
    /// A dispatch claim whose lease lapsed is claimed again and POSTs again,
    /// instead of becoming `uncertain` with a case.
    pub const REPOST_AFTER_LEASE: u32 = 1;
    /// A case is opened whatever the phase (a racing poll on a rendered or
    /// delivered record).
    pub const CASE_WITHOUT_PHASE_CHECK: u32 = 2;
    /// An abandoned operation counts as nothing, whatever its job cost (the
    /// ledger before it followed the job).
    pub const ABANDON_ERASES_CREDITS: u32 = 4;
    /// A negative `held_credits` in a 202 is believed.
    pub const TRUST_NEGATIVE_CREDITS: u32 = 8;
    /// A failed render counts as spent.
    pub const RENDER_FAILED_SPENT: u32 = 16;
    /// An accepted job holds nothing: the hold ends at the 202.
    pub const ACCEPTED_HOLDS_NOTHING: u32 = 32;
    /// Intake answers a changed specification as a replay of the stored one.
    pub const REPLAY_CHANGED_SPEC: u32 = 64;
    /// Intake answers a changed specification as a new operation, without
    /// storing it.
    pub const CHANGED_SPEC_ANSWERED_NEW: u32 = 128;
    /// Intake answers a new intent with an id minted for the request, not
    /// the stored record's.
    pub const OPERATION_ID_PER_SUBMIT: u32 = 256;

    /// Every planted bug by the name `scripts/simulate.sh --bug` takes.
    pub const ALL: [(&str, u32); 9] = [
        ("repost", REPOST_AFTER_LEASE),
        ("case", CASE_WITHOUT_PHASE_CHECK),
        ("abandon-erases-credits", ABANDON_ERASES_CREDITS),
        ("trust-negative-credits", TRUST_NEGATIVE_CREDITS),
        ("render-failed-spent", RENDER_FAILED_SPENT),
        ("accepted-holds-nothing", ACCEPTED_HOLDS_NOTHING),
        ("replay-changed-spec", REPLAY_CHANGED_SPEC),
        ("changed-spec-answered-new", CHANGED_SPEC_ANSWERED_NEW),
        ("operation-id-per-submit", OPERATION_ID_PER_SUBMIT),
    ];

    #[cfg(feature = "planted-bugs")]
    static ON: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

    /// Turns on exactly the bugs in `bugs` (0: none).
    #[cfg(feature = "planted-bugs")]
    pub fn set(bugs: u32) {
        ON.store(bugs, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether `bug` is planted.
    pub fn on(_bug: u32) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            ON.load(std::sync::atomic::Ordering::SeqCst) & _bug != 0
        }
        #[cfg(not(feature = "planted-bugs"))]
        {
            false
        }
    }
}

/// Everything that can happen to an operation, as a stage or an operator
/// reports it.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Dispatch claims a prepared operation: the only road to a POST.
    ClaimDispatch { token: &'a str },
    /// The claim would take the tenant past its spend limit: wait.
    SpendLimitReached { retry_at: DateTime<Utc> },
    /// Genace answered 429: it did not process the request.
    RateLimited { token: &'a str, retry_at: DateTime<Utc> },
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
            Event::SpendLimitReached { .. } => "wait for the spend limit",
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
        }
    }

    /// Where the event applies, as a refusal names it.
    pub fn expected(&self) -> &'static str {
        match self {
            Event::ClaimDispatch { .. } | Event::SpendLimitReached { .. } => "prepared",
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
        (Prepared, Event::SpendLimitReached { retry_at }) => wait_for_spend_limit(rec, retry_at, now),
        (Submitting, Event::ClaimDispatch { .. }) if rec.claim.as_ref().is_some_and(|c| c.lease_expires_at > now) => {
            let until = rec.claim.as_ref().map_or(now, |c| c.lease_expires_at);
            return Err(Refusal::LeaseLive { until });
        }
        // A planted bug (tests only): the lapsed claim is claimed again.
        (Submitting, Event::ClaimDispatch { token }) if planted::on(planted::REPOST_AFTER_LEASE) => {
            claim_dispatch(rec, token, now, policy)?
        }
        (Submitting, Event::RateLimited { token, retry_at }) => release_claim(rec, token, retry_at, now, policy)?,
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
        (Rendered, Event::ClaimDelivery { token }) => claim_delivery(rec, token, now, policy)?,
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
        (Rendered, Event::Resolved(d))
            if *d.resolution == RedriveDelivery && rec.delivery_state == DeliveryState::DeliveryFailed =>
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
        // ---- an abandoned operation whose credits still follow a job
        (Abandoned, Event::Accepted { token, job }) if rec.ledger_phase == Some(Uncertain) => {
            let mut next = accept(rec, token, job, now, policy)?;
            next.phase = Abandoned;
            next.ledger_phase = Some(Accepted);
            next.due_at = Some(now.timestamp_millis());
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
fn versioned(rec: &OperationRecord, mut next: OperationRecord, now: DateTime<Utc>) -> OperationRecord {
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

/// Whether the operation is done: nothing more will happen to it without a
/// person, and its retention clock runs.
pub fn is_finished(rec: &OperationRecord) -> bool {
    match rec.phase {
        Phase::Abandoned => {
            let refund_pending =
                rec.ledger_phase == Some(Phase::SubmitFailed) && rec.settlement == Some(Settlement::Pending);
            !(abandoned_job_may_run(rec) || refund_pending)
        }
        Phase::Rejected | Phase::RenderFailed => true,
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
    if finished != rec.expires_at.is_some() {
        return Err(format!(
            "expires_at is {:?} on a {} operation",
            rec.expires_at,
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
            Phase::RenderFailed | Phase::Rejected => &[],
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
    if rec.spend_hold.is_some() && rec.phase != Phase::Prepared {
        return Err(format!("a spend-limit hold on a {} operation", rec.phase.as_str()));
    }
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
    if !finished && rec.case.is_none() && rec.due_at.is_none() {
        return Err(format!(
            "an unfinished {} operation with neither a due time nor a case",
            rec.phase.as_str()
        ));
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
    next.retry_at = None;
    let job_missing = case_is(next, &[CaseReason::RemoteJobMissing]);
    match from {
        Phase::Uncertain => next.due_at = None,
        Phase::SubmitFailed if next.settlement == Some(Settlement::Pending) => next.due_at = None,
        Phase::Accepted if job_missing => next.due_at = None,
        Phase::Accepted => {
            next.case = None;
            next.due_at = Some(now.timestamp_millis());
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
    let due = next_check.timestamp_millis();
    if snap.status == RenderStatus::Running && rec.due_at.is_some_and(|d| d >= due) {
        return rec.clone();
    }
    let mut next = rec.clone();
    next.remote_state = Some(snap.state.clone());
    next.observed_at = Some(now);
    match snap.status {
        RenderStatus::Running => {
            next.due_at = Some(due);
            next
        }
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
            next.due_at = Some(now.timestamp_millis());
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
            next.due_at = Some((now + policy.observe_grace).timestamp_millis());
        }
        Resolution::ReleaseHold => {
            next.case = None;
            next.retry_at = None;
            next.rate_limited_count = 0;
            next.due_at = Some(now.timestamp_millis());
        }
        Resolution::ConfirmNotCreated => {
            next.phase = Phase::Prepared;
            next.claim = None;
            next.case = None;
            next.last_error = None;
            next.due_at = Some(now.timestamp_millis());
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
            next.due_at = Some(now.timestamp_millis());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{DeliveredObject, OutputRef};
    pub use crate::remote::AcceptedJob;
    use crate::remote::{JobSnapshot, RenderStatus};
    use serde_json::json;

    // The tests speak of each transition by name; every one goes through
    // the one table, [`transition`].
    type Next = Result<OperationRecord, Refusal>;

    fn claim_dispatch(r: &OperationRecord, token: &str, now: DateTime<Utc>, p: &Policy) -> Next {
        transition(r, Event::ClaimDispatch { token }, now, p)
    }
    fn release_claim(
        r: &OperationRecord,
        token: &str,
        retry_at: DateTime<Utc>,
        now: DateTime<Utc>,
        p: &Policy,
    ) -> Next {
        transition(r, Event::RateLimited { token, retry_at }, now, p)
    }
    fn hold_for_account(r: &OperationRecord, token: &str, error: RemoteError, now: DateTime<Utc>, p: &Policy) -> Next {
        transition(r, Event::AccountRefused { token, error: &error }, now, p)
    }
    fn accept(r: &OperationRecord, token: &str, job: &AcceptedJob, now: DateTime<Utc>, p: &Policy) -> Next {
        transition(r, Event::Accepted { token, job }, now, p)
    }
    fn submit_failed(r: &OperationRecord, token: &str, job_id: &str, error: RemoteError, now: DateTime<Utc>) -> Next {
        transition(
            r,
            Event::SubmitFailed {
                token,
                job_id,
                error: &error,
            },
            now,
            &Policy::default(),
        )
    }
    fn reject(r: &OperationRecord, token: &str, error: RemoteError, now: DateTime<Utc>, p: &Policy) -> Next {
        transition(r, Event::Rejected { token, error: &error }, now, p)
    }
    fn mark_uncertain(r: &OperationRecord, token: &str, evidence: &str, now: DateTime<Utc>) -> Next {
        transition(r, Event::OutcomeUnknown { token, evidence }, now, &Policy::default())
    }
    fn interrupt(r: &OperationRecord, evidence: &str, now: DateTime<Utc>) -> Next {
        transition(r, Event::LeaseExpired { evidence }, now, &Policy::default())
    }
    fn observe(
        r: &OperationRecord,
        snapshot: &JobSnapshot,
        now: DateTime<Utc>,
        next_check: DateTime<Utc>,
        p: &Policy,
    ) -> Next {
        transition(
            r,
            Event::Observed {
                snapshot,
                next_check,
                stalled: None,
            },
            now,
            p,
        )
    }
    fn open_case(r: &OperationRecord, reason: CaseReason, evidence: &str, keep_due: bool, now: DateTime<Utc>) -> Next {
        transition(
            r,
            Event::CaseNeeded {
                reason,
                evidence,
                keep_due,
            },
            now,
            &Policy::default(),
        )
    }
    fn reschedule(r: &OperationRecord, due: DateTime<Utc>, now: DateTime<Utc>) -> OperationRecord {
        transition(r, Event::Reschedule { due }, now, &Policy::default()).unwrap()
    }
    fn claim_delivery(r: &OperationRecord, token: &str, now: DateTime<Utc>, p: &Policy) -> Next {
        transition(r, Event::ClaimDelivery { token }, now, p)
    }
    fn give_up_delivery(r: &OperationRecord, now: DateTime<Utc>) -> Next {
        transition(r, Event::DeliveryLapsed, now, &Policy::default())
    }
    fn delivery_attempt_failed(
        r: &OperationRecord,
        token: &str,
        error: &str,
        retry_at: DateTime<Utc>,
        now: DateTime<Utc>,
        p: &Policy,
    ) -> Next {
        transition(r, Event::DeliveryFailed { token, error, retry_at }, now, p)
    }
    fn delivery_refused(
        r: &OperationRecord,
        token: &str,
        reason: CaseReason,
        evidence: &str,
        now: DateTime<Utc>,
    ) -> Next {
        transition(
            r,
            Event::DeliveryRefused {
                token,
                reason,
                evidence,
            },
            now,
            &Policy::default(),
        )
    }
    fn delivered(
        r: &OperationRecord,
        token: &str,
        objects: Vec<DeliveredObject>,
        now: DateTime<Utc>,
        p: &Policy,
    ) -> Next {
        transition(
            r,
            Event::Delivered {
                token,
                objects: &objects,
            },
            now,
            p,
        )
    }
    fn resolve(
        r: &OperationRecord,
        resolution: &Resolution,
        actor: &str,
        reason: &str,
        now: DateTime<Utc>,
        p: &Policy,
    ) -> Next {
        transition(
            r,
            Event::Resolved(Decision {
                resolution,
                actor,
                reason,
            }),
            now,
            p,
        )
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn prepared() -> OperationRecord {
        crate::record::sample_prepared(t0())
    }

    fn job(id: &str) -> AcceptedJob {
        AcceptedJob {
            job_id: id.into(),
            state: Some("running".into()),
            model: Some("m".into()),
            created_at: Some("2026-01-01T00:00:01Z".into()),
            held_credits: Some(12.5),
        }
    }

    fn err(kind: &str) -> RemoteError {
        RemoteError {
            kind: kind.into(),
            status: Some(502),
            detail: "boom".into(),
        }
    }

    fn submitting() -> OperationRecord {
        claim_dispatch(&prepared(), "tok", t0(), &Policy::default()).unwrap()
    }

    fn with_phase(phase: Phase) -> OperationRecord {
        let mut r = prepared();
        r.phase = phase;
        r
    }

    #[test]
    fn a_new_intent_is_prepared_and_due_for_dispatch() {
        let r = prepared();
        assert_eq!(r.phase, Phase::Prepared);
        assert_eq!(r.delivery_state, DeliveryState::NotCollected);
        assert_eq!(r.version, 1);
        assert_eq!(r.due_at, Some((t0() + Duration::seconds(60)).timestamp_millis()));
        assert!(r.due_pk.starts_with("DUE#"));
        assert_eq!(r.expires_at, None);
    }

    #[test]
    fn claim_moves_prepared_to_submitting_with_a_lease() {
        let r = submitting();
        assert_eq!(r.phase, Phase::Submitting);
        assert_eq!(r.version, 2);
        assert_eq!(r.dispatch_attempts, 1);
        let c = r.claim.as_ref().unwrap();
        assert_eq!(c.token, "tok");
        assert_eq!(c.lease_expires_at, t0() + Duration::seconds(120));
        assert_eq!(r.due_at, Some(c.lease_expires_at.timestamp_millis()));
    }

    #[test]
    fn claim_is_refused_outside_prepared() {
        let live = claim_dispatch(&submitting(), "other", t0(), &Policy::default());
        assert!(matches!(live, Err(Refusal::LeaseLive { .. })));
        let later = t0() + Duration::seconds(121);
        let expired = claim_dispatch(&submitting(), "other", later, &Policy::default());
        assert!(matches!(
            expired,
            Err(Refusal::WrongPhase {
                actual: Phase::Submitting,
                ..
            })
        ));
        for phase in [
            Phase::Accepted,
            Phase::Rendered,
            Phase::RenderFailed,
            Phase::SubmitFailed,
            Phase::Rejected,
            Phase::Uncertain,
            Phase::Abandoned,
        ] {
            let r = claim_dispatch(&with_phase(phase), "tok", t0(), &Policy::default());
            assert!(matches!(r, Err(Refusal::WrongPhase { actual, .. }) if actual == phase));
        }
    }

    #[test]
    fn accept_needs_the_claim_token() {
        let p = Policy::default();
        let r = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
        assert_eq!(r.phase, Phase::Accepted);
        assert_eq!(r.remote_job_id.as_deref(), Some("J1"));
        assert_eq!(r.remote_state.as_deref(), Some("running"));
        assert_eq!(r.held_credits, Some(12.5));
        assert_eq!(r.claim, None);
        assert_eq!(r.accepted_at, Some(t0()));
        assert_eq!(
            accept(&submitting(), "stolen", &job("J1"), t0(), &p),
            Err(Refusal::NotClaimant)
        );
        assert!(matches!(
            accept(&prepared(), "tok", &job("J1"), t0(), &p),
            Err(Refusal::WrongPhase {
                actual: Phase::Prepared,
                ..
            })
        ));
    }

    #[test]
    fn accept_is_idempotent_for_the_same_job_and_refuses_another() {
        let p = Policy::default();
        let accepted = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
        assert_eq!(accept(&accepted, "tok", &job("J1"), t0(), &p).unwrap(), accepted);
        assert_eq!(
            accept(&accepted, "tok", &job("J2"), t0(), &p),
            Err(Refusal::DifferentRemoteJob { existing: "J1".into() })
        );
    }

    #[test]
    fn accept_from_uncertain_keeps_the_job_and_closes_the_case() {
        let p = Policy::default();
        let later = t0() + Duration::seconds(200);
        let interrupted = interrupt(&submitting(), "lease expired", later).unwrap();
        let r = accept(&interrupted, "tok", &job("J9"), later, &p).unwrap();
        assert_eq!(r.phase, Phase::Accepted);
        assert_eq!(r.case, None);
        assert_eq!(
            accept(&interrupted, "other", &job("J9"), later, &p),
            Err(Refusal::NotClaimant)
        );
    }

    #[test]
    fn submit_failed_saves_the_job_and_opens_settlement() {
        let r = submit_failed(&submitting(), "tok", "J5", err("http_502"), t0()).unwrap();
        assert_eq!(r.phase, Phase::SubmitFailed);
        assert_eq!(r.remote_job_id.as_deref(), Some("J5"));
        assert_eq!(r.settlement, Some(Settlement::Pending));
        assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::SettlementPending);
        assert_eq!(r.due_at, None);
        assert_eq!(
            submit_failed(&submitting(), "x", "J5", err("e"), t0()),
            Err(Refusal::NotClaimant)
        );
        assert!(submit_failed(&prepared(), "tok", "J5", err("e"), t0()).is_err());
        let later = t0() + Duration::seconds(200);
        let interrupted = interrupt(&submitting(), "lease expired", later).unwrap();
        let late = submit_failed(&interrupted, "tok", "J5", err("http_502"), later).unwrap();
        assert_eq!(late.phase, Phase::SubmitFailed);
        assert_eq!(late.case.unwrap().reason, CaseReason::SettlementPending);
    }

    #[test]
    fn reject_finishes_the_operation() {
        let p = Policy::default();
        let r = reject(&submitting(), "tok", err("http_400"), t0(), &p).unwrap();
        assert_eq!(r.phase, Phase::Rejected);
        assert_eq!(r.claim, None);
        assert_eq!(r.due_at, None);
        assert_eq!(r.expires_at, Some((t0() + Duration::days(30)).timestamp()));
        assert!(reject(&with_phase(Phase::Accepted), "tok", err("e"), t0(), &p).is_err());
    }

    #[test]
    fn release_after_429_returns_to_prepared() {
        let retry = t0() + Duration::seconds(30);
        let r = release_claim(&submitting(), "tok", retry, t0(), &Policy::default()).unwrap();
        assert_eq!(r.phase, Phase::Prepared);
        assert_eq!(r.claim, None);
        assert_eq!(r.due_at, Some(retry.timestamp_millis()));
        assert_eq!(
            release_claim(&submitting(), "x", retry, t0(), &Policy::default()),
            Err(Refusal::NotClaimant)
        );
        assert!(release_claim(&with_phase(Phase::Uncertain), "tok", retry, t0(), &Policy::default()).is_err());
    }

    #[test]
    fn unknown_outcome_is_uncertain_with_a_case() {
        let r = mark_uncertain(&submitting(), "tok", "timed out after 30s", t0()).unwrap();
        assert_eq!(r.phase, Phase::Uncertain);
        let case = r.case.unwrap();
        assert_eq!(case.reason, CaseReason::UnknownSubmitOutcome);
        assert_eq!(case.evidence, "timed out after 30s");
        assert_eq!(r.due_at, None);
        assert_eq!(mark_uncertain(&submitting(), "x", "e", t0()), Err(Refusal::NotClaimant));
    }

    #[test]
    fn interrupt_needs_an_expired_lease_and_never_returns_to_prepared() {
        assert!(matches!(
            interrupt(&submitting(), "e", t0()),
            Err(Refusal::LeaseLive { .. })
        ));
        let later = t0() + Duration::seconds(120);
        let r = interrupt(&submitting(), "lease expired", later).unwrap();
        assert_eq!(r.phase, Phase::Uncertain);
        assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::InterruptedDispatch);
        assert_eq!(r.claim.as_ref().unwrap().token, "tok");
        // An uncertain operation can never be claimed again by itself.
        assert!(claim_dispatch(&r, "new", later, &Policy::default()).is_err());
        assert!(interrupt(&prepared(), "e", later).is_err());
    }

    fn accepted_rec() -> OperationRecord {
        accept(&submitting(), "tok", &job("J1"), t0(), &Policy::default()).unwrap()
    }

    fn snap(state: &str, status: RenderStatus) -> JobSnapshot {
        JobSnapshot {
            id: Some("J1".into()),
            state: state.into(),
            status,
            outputs: (status == RenderStatus::Succeeded).then(|| {
                vec![OutputRef {
                    url: "https://cdn.example/o.mp4".into(),
                    content_type: Some("video/mp4".into()),
                }]
            }),
            outputs_unreadable: None,
            client_reference: None,
            error: (status == RenderStatus::Failed).then(|| json!({"code": "nsfw"})),
        }
    }

    #[test]
    fn observe_records_progress_and_skips_writes_that_change_nothing() {
        let p = Policy::default();
        let later = t0() + Duration::seconds(10);
        // Past the deadline the acceptance set (observe_grace): written.
        let next_check = t0() + p.observe_grace + Duration::seconds(60);
        let r = observe(
            &accepted_rec(),
            &snap("queued", RenderStatus::Running),
            later,
            next_check,
            &p,
        )
        .unwrap();
        assert_eq!(r.phase, Phase::Accepted);
        assert_eq!(r.remote_state.as_deref(), Some("queued"));
        assert_eq!(r.observed_at, Some(later));
        assert_eq!(r.due_at, Some(next_check.timestamp_millis()));
        // The deadline still covers the next check: nothing to write, even
        // for a new non-terminal state.
        let same = observe(&r, &snap("queued", RenderStatus::Running), later, next_check, &p).unwrap();
        assert_eq!(same, r);
        let moved = observe(&r, &snap("running", RenderStatus::Running), later, next_check, &p).unwrap();
        assert_eq!(moved, r);
        // Past the deadline, the write carries the state seen.
        let beyond = next_check + Duration::seconds(1);
        let extended = observe(&r, &snap("running", RenderStatus::Running), later, beyond, &p).unwrap();
        assert_eq!(extended.version, r.version + 1);
        assert_eq!(extended.remote_state.as_deref(), Some("running"));
        assert_eq!(extended.due_at, Some(beyond.timestamp_millis()));
        // A terminal state is always written.
        let done = observe(&r, &snap("completed", RenderStatus::Succeeded), later, next_check, &p).unwrap();
        assert_eq!(done.phase, Phase::Rendered);
    }

    #[test]
    fn observe_completes_once_and_never_overwrites_a_terminal_state() {
        let p = Policy::default();
        let done = observe(
            &accepted_rec(),
            &snap("completed", RenderStatus::Succeeded),
            t0(),
            t0(),
            &p,
        )
        .unwrap();
        assert_eq!(done.phase, Phase::Rendered);
        assert_eq!(done.outputs.as_ref().unwrap().len(), 1);
        assert_eq!(done.delivery_state, DeliveryState::NotCollected);
        assert!(done.due_at.is_some(), "delivery is due");
        assert!(observe(&done, &snap("failed", RenderStatus::Failed), t0(), t0(), &p).is_err());

        let failed = observe(&accepted_rec(), &snap("failed", RenderStatus::Failed), t0(), t0(), &p).unwrap();
        assert_eq!(failed.phase, Phase::RenderFailed);
        assert!(failed.last_error.as_ref().unwrap().detail.contains("nsfw"));
        assert!(failed.expires_at.is_some());
        assert_eq!(failed.due_at, None);
        assert!(observe(&failed, &snap("completed", RenderStatus::Succeeded), t0(), t0(), &p).is_err());
        assert!(observe(&prepared(), &snap("queued", RenderStatus::Running), t0(), t0(), &p).is_err());
    }

    #[test]
    fn cases_on_accepted_operations() {
        let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
        assert_eq!(missing.phase, Phase::Accepted);
        assert_eq!(missing.case.as_ref().unwrap().reason, CaseReason::RemoteJobMissing);
        assert_eq!(missing.due_at, None);
        assert_eq!(
            open_case(&missing, CaseReason::RemoteJobMissing, "again", false, t0()).unwrap(),
            missing
        );
        let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "6h", true, t0()).unwrap();
        assert!(stalled.due_at.is_some(), "polling goes on");
        let done = observe(
            &stalled,
            &snap("completed", RenderStatus::Succeeded),
            t0(),
            t0(),
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(done.case, None, "completion closes a stall case");
    }

    fn rendered() -> OperationRecord {
        observe(
            &accepted_rec(),
            &snap("completed", RenderStatus::Succeeded),
            t0(),
            t0(),
            &Policy::default(),
        )
        .unwrap()
    }

    fn object() -> DeliveredObject {
        DeliveredObject {
            key: "outputs/t/op/output-0.mp4".into(),
            bytes: 3,
            sha256: "ab".into(),
            content_type: "video/mp4".into(),
        }
    }

    #[test]
    fn delivery_is_claimed_once_and_finishes_delivered() {
        let p = Policy::default();
        let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
        assert_eq!(claimed.delivery_state, DeliveryState::Collecting);
        assert!(matches!(
            claim_delivery(&claimed, "d2", t0(), &p),
            Err(Refusal::LeaseLive { .. })
        ));
        let after_lease = t0() + p.delivery_lease + Duration::seconds(1);
        assert!(
            claim_delivery(&claimed, "d2", after_lease, &p).is_ok(),
            "an expired delivery claim may be taken over"
        );
        assert_eq!(
            delivered(&claimed, "other", vec![object()], t0(), &p),
            Err(Refusal::NotClaimant)
        );
        let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
        assert_eq!(done.delivery_state, DeliveryState::Delivered);
        assert_eq!(done.delivered_objects, vec![object()]);
        assert!(done.expires_at.is_some());
        assert!(matches!(
            claim_delivery(&done, "d3", t0(), &p),
            Err(Refusal::DeliveryFinished { .. })
        ));
        assert!(claim_delivery(&accepted_rec(), "d1", t0(), &p).is_err());
    }

    #[test]
    fn failed_deliveries_retry_then_give_up_with_a_case() {
        let p = Policy {
            delivery_max_attempts: 2,
            ..Policy::default()
        };
        let retry_at = t0() + Duration::seconds(30);
        let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
        let once = delivery_attempt_failed(&claimed, "d1", "503 from cdn", retry_at, t0(), &p).unwrap();
        assert_eq!(once.delivery_attempts, 1);
        assert_eq!(once.delivery_state, DeliveryState::Collecting);
        assert_eq!(once.delivery_claim, None);
        assert_eq!(once.due_at, Some(retry_at.timestamp_millis()));
        assert_eq!(once.phase, Phase::Rendered, "never re-rendered");
        let again = claim_delivery(&once, "d2", t0(), &p).unwrap();
        let gave_up = delivery_attempt_failed(&again, "d2", "503 again", retry_at, t0(), &p).unwrap();
        assert_eq!(gave_up.delivery_state, DeliveryState::DeliveryFailed);
        assert_eq!(gave_up.case.unwrap().reason, CaseReason::DeliveryFailed);
        assert_eq!(gave_up.due_at, None);
    }

    #[test]
    fn operators_resolve_only_from_the_right_phase_and_are_audited() {
        let p = Policy::default();
        let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
        let attach = Resolution::AttachRemoteJob { job_id: "J7".into() };
        let attached = resolve(
            &uncertain,
            &attach,
            "ops@example",
            "found it in the Genace console",
            t0(),
            &p,
        )
        .unwrap();
        assert_eq!(attached.phase, Phase::Accepted);
        assert_eq!(attached.remote_job_id.as_deref(), Some("J7"));
        assert_eq!(attached.case, None);
        let entry = attached.audit.last().unwrap();
        assert_eq!(
            (entry.actor.as_str(), entry.action.as_str(), entry.job_id.as_deref()),
            ("ops@example", "attach_remote_job", Some("J7"))
        );

        let retry = resolve(
            &uncertain,
            &Resolution::ConfirmNotCreated,
            "ops",
            "not in Genace",
            t0(),
            &p,
        )
        .unwrap();
        assert_eq!(retry.phase, Phase::Prepared);
        assert!(
            claim_dispatch(&retry, "new", t0(), &p).is_ok(),
            "one new dispatch is authorized"
        );

        for wrong in [Resolution::MarkSettled, Resolution::RedriveDelivery] {
            assert!(matches!(
                resolve(&uncertain, &wrong, "ops", "r", t0(), &p),
                Err(Refusal::WrongPhase { .. })
            ));
        }
        assert!(resolve(&accepted_rec(), &Resolution::ConfirmNotCreated, "ops", "r", t0(), &p).is_err());
        assert!(resolve(&accepted_rec(), &attach, "ops", "r", t0(), &p).is_err());
        assert!(
            resolve(&prepared(), &Resolution::Abandon, "ops", "r", t0(), &p).is_err(),
            "abandon needs a case"
        );

        let failed = submit_failed(&submitting(), "tok", "J5", err("http_502"), t0()).unwrap();
        let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "refunded", t0(), &p).unwrap();
        assert_eq!(settled.settlement, Some(Settlement::Settled));
        assert!(settled.expires_at.is_some());
        assert!(resolve(&settled, &Resolution::MarkSettled, "ops", "again", t0(), &p).is_err());

        let p2 = Policy {
            delivery_max_attempts: 1,
            ..p
        };
        let claimed = claim_delivery(&rendered(), "d", t0(), &p2).unwrap();
        let failed_delivery = delivery_attempt_failed(&claimed, "d", "cdn down", t0(), t0(), &p2).unwrap();
        let redriven = resolve(
            &failed_delivery,
            &Resolution::RedriveDelivery,
            "ops",
            "cdn back",
            t0(),
            &p,
        )
        .unwrap();
        assert_eq!(
            (redriven.delivery_state, redriven.delivery_attempts),
            (DeliveryState::NotCollected, 0)
        );
        assert!(claim_delivery(&redriven, "d2", t0(), &p).is_ok());

        let abandoned = resolve(&uncertain, &Resolution::Abandon, "ops", "customer cancelled", t0(), &p).unwrap();
        assert_eq!(abandoned.phase, Phase::Abandoned);
        assert_eq!(abandoned.ledger_phase, Some(Phase::Uncertain));
        assert!(
            abandoned.expires_at.is_none() && abandoned.case.is_some(),
            "a job may exist: the case stays until an operator says"
        );
        let closed = resolve(&abandoned, &Resolution::ConfirmNotCreated, "ops", "none", t0(), &p).unwrap();
        assert!(closed.expires_at.is_some() && closed.case.is_none());
    }

    /// Records in every state a resolution can meet, reached through the
    /// transitions themselves: each case reason of each phase, a spend-limit
    /// wait on top of an account hold, and a finished operation or two.
    fn resolvable_states() -> Vec<OperationRecord> {
        let p = Policy {
            rate_limit_max: 1,
            ..Policy::default()
        };
        let later = t0() + Duration::hours(3);
        let held = hold_for_account(&submitting(), "tok", err("http_402"), t0(), &p).unwrap();
        let held_then_waiting = transition(&held, Event::SpendLimitReached { retry_at: later }, t0(), &p).unwrap();
        let rate_limited = release_claim(&submitting(), "tok", later, t0(), &p).unwrap();
        let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
        let interrupted = interrupt(&submitting(), "lapsed", later).unwrap();
        let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
        let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "slow", true, t0()).unwrap();
        let failed = submit_failed(&submitting(), "tok", "J7", err("x"), t0()).unwrap();
        let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "r", t0(), &p).unwrap();
        let mut no_outputs = snap("completed", RenderStatus::Succeeded);
        no_outputs.outputs = None;
        let outputs_missing = observe(&accepted_rec(), &no_outputs, t0(), t0(), &p).unwrap();
        let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
        let refused = delivery_refused(&claimed, "d", CaseReason::OutputUrlRefused, "port", t0()).unwrap();
        let render_failed = observe(&accepted_rec(), &snap("failed", RenderStatus::Failed), t0(), t0(), &p).unwrap();
        let rejected = reject(&submitting(), "tok", err("http_400"), t0(), &p).unwrap();
        vec![
            prepared(),
            held,
            held_then_waiting,
            rate_limited,
            submitting(),
            uncertain,
            interrupted,
            accepted_rec(),
            missing,
            stalled,
            failed,
            settled,
            rendered(),
            outputs_missing,
            refused,
            render_failed,
            rejected,
        ]
    }

    fn all_resolutions() -> [Resolution; 6] {
        [
            Resolution::AttachRemoteJob { job_id: "J9".into() },
            Resolution::ConfirmNotCreated,
            Resolution::ReleaseHold,
            Resolution::MarkSettled,
            Resolution::RedriveDelivery,
            Resolution::Abandon,
        ]
    }

    /// Found by review: an abandon erased credits Genace charged, and an
    /// abandon over a spend-limit wait left the wait on an abandoned record.
    /// Every resolution from every state keeps the invariants; an abandon
    /// moves no credit at all, and so does not the write after it.
    #[test]
    fn every_resolution_from_every_state_keeps_the_invariants_and_an_abandon_keeps_the_credits() {
        use crate::ledger::share;
        let p = Policy::default();
        let mut applied = 0;
        for rec in resolvable_states() {
            check_invariants(&rec).unwrap_or_else(|e| panic!("fixture {:?}: {e}", rec.phase));
            for resolution in all_resolutions() {
                let Ok(next) = resolve(&rec, &resolution, "ops", "r", t0(), &p) else {
                    continue;
                };
                applied += 1;
                let what = format!(
                    "{} from {:?} ({:?})",
                    resolution.name(),
                    rec.phase,
                    rec.case.as_ref().map(|c| c.reason)
                );
                check_invariants(&next).unwrap_or_else(|e| panic!("{what}: {e}"));
                if resolution == Resolution::Abandon {
                    assert_eq!(share(&next), share(&rec), "{what} moved credits");
                    assert_eq!(next.spend_hold, None, "{what} kept a spend-limit wait");
                    // Whatever the abandoned operation still takes keeps the invariants too.
                    for then in all_resolutions() {
                        if let Ok(after) = resolve(&next, &then, "ops", "r", t0(), &p) {
                            check_invariants(&after).unwrap_or_else(|e| panic!("{what}, then {}: {e}", then.name()));
                        }
                    }
                }
            }
        }
        assert!(applied >= 20, "only {applied} resolutions applied");
    }

    #[test]
    fn an_abandoned_job_keeps_its_hold_until_genace_says_it_is_over() {
        use crate::ledger::share;
        let p = Policy::default();
        let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "slow", true, t0()).unwrap();
        let abandoned = resolve(&stalled, &Resolution::Abandon, "ops", "user left", t0(), &p).unwrap();
        assert_eq!(share(&abandoned).held, 12_500);
        assert!(
            abandoned.due_at.is_some() && abandoned.case.is_none(),
            "polling goes on"
        );
        let later = t0() + Duration::minutes(1);
        let next_check = later + Duration::minutes(5);
        let observed = |r: &OperationRecord, s: &JobSnapshot| {
            transition(
                r,
                Event::Observed {
                    snapshot: s,
                    next_check,
                    stalled: Some("slow"),
                },
                later,
                &p,
            )
        };
        let running = observed(&abandoned, &snap("running", RenderStatus::Running)).unwrap();
        assert_eq!(
            (running.phase, running.case.clone()),
            (Phase::Abandoned, None),
            "no stall case"
        );
        let done = observed(&running, &snap("completed", RenderStatus::Succeeded)).unwrap();
        assert_eq!(
            (done.phase, done.ledger_phase),
            (Phase::Abandoned, Some(Phase::Rendered))
        );
        assert_eq!(share(&done).spent, 12_500, "Genace charged it: spent");
        assert!(done.expires_at.is_some() && done.delivery_state == DeliveryState::NotCollected);
        let failed = observed(&running, &snap("failed", RenderStatus::Failed)).unwrap();
        assert!(share(&failed).is_zero(), "a failed render is released");
        assert!(observed(&done, &snap("completed", RenderStatus::Succeeded)).is_err());

        // Genace does not know the job: a person confirms it never ran.
        let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
        let abandoned = resolve(&missing, &Resolution::Abandon, "ops", "r", t0(), &p).unwrap();
        assert_eq!((share(&abandoned).held, abandoned.due_at), (12_500, None));
        assert!(observed(&abandoned, &snap("running", RenderStatus::Running)).is_err());
        let confirmed = resolve(&abandoned, &Resolution::ConfirmNotCreated, "ops", "r", t0(), &p).unwrap();
        assert!(share(&confirmed).is_zero() && confirmed.expires_at.is_some());
    }

    #[test]
    fn an_abandoned_uncertain_operation_still_takes_its_job_id_or_a_confirmation() {
        use crate::ledger::share;
        let p = Policy::default();
        let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
        let abandoned = resolve(&uncertain, &Resolution::Abandon, "ops", "r", t0(), &p).unwrap();
        assert_eq!(share(&abandoned).held, 10_000, "the reservation stays held");
        // A late recovery message: the job id is saved, never lost.
        let recovered = accept(&abandoned, "tok", &job("J5"), t0(), &p).unwrap();
        assert_eq!(
            (
                recovered.phase,
                recovered.ledger_phase,
                recovered.remote_job_id.as_deref()
            ),
            (Phase::Abandoned, Some(Phase::Accepted), Some("J5"))
        );
        assert_eq!(share(&recovered).held, 12_500);
        assert!(recovered.case.is_none() && recovered.due_at.is_some());
        let attached = resolve(
            &abandoned,
            &Resolution::AttachRemoteJob { job_id: "J6".into() },
            "ops",
            "r",
            t0(),
            &p,
        )
        .unwrap();
        assert_eq!(attached.ledger_phase, Some(Phase::Accepted));
        let failed = submit_failed(&abandoned, "tok", "J7", err("x"), t0()).unwrap();
        assert_eq!(share(&failed).pending_refund, 10_000);
        let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "r", t0(), &p).unwrap();
        assert_eq!((share(&settled).settled, settled.expires_at.is_some()), (10_000, true));
    }

    #[test]
    fn held_credits_genace_cannot_mean_are_replaced_by_the_reservation_with_evidence() {
        let p = Policy::default();
        for bad in [-5.0, f64::INFINITY, crate::ledger::MAX_HELD_CREDITS * 2.0] {
            let mut j = job("J1");
            j.held_credits = Some(bad);
            let r = accept(&submitting(), "tok", &j, t0(), &p).unwrap();
            assert_eq!(
                r.remote_job_id.as_deref(),
                Some("J1"),
                "the job is saved whatever its credits say"
            );
            assert_eq!(r.held_credits, None);
            assert!(r.held_credits_refused.as_deref().unwrap().contains("outside"));
            assert_eq!(crate::ledger::share(&r).held, 10_000);
        }
        let r = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
        assert_eq!((r.held_credits, r.held_credits_refused), (Some(12.5), None));
    }

    const ALL_PHASES: [Phase; 9] = [
        Phase::Prepared,
        Phase::Submitting,
        Phase::Accepted,
        Phase::Rendered,
        Phase::RenderFailed,
        Phase::SubmitFailed,
        Phase::Rejected,
        Phase::Uncertain,
        Phase::Abandoned,
    ];

    /// A record in `phase` whose other fields let every transition get past
    /// its own preconditions (expired claims held by "tok" and "d").
    fn in_phase(phase: Phase) -> OperationRecord {
        let mut r = prepared();
        r.phase = phase;
        let lapsed = Claim {
            token: "tok".into(),
            lease_expires_at: t0() - Duration::seconds(1),
        };
        r.claim = Some(lapsed.clone());
        // A delivery claim exists only while a rendered operation is collecting.
        if phase == Phase::Rendered {
            r.delivery_claim = Some(Claim {
                token: "d".into(),
                ..lapsed
            });
            r.delivery_state = DeliveryState::Collecting;
        }
        r.outputs = Some(vec![OutputRef {
            url: "https://cdn.example/o.mp4".into(),
            content_type: None,
        }]);
        r
    }

    type Transition = Box<dyn Fn(&OperationRecord) -> Result<OperationRecord, Refusal>>;

    /// The phases each event starts from, written out apart from the table
    /// in [`transition`], which must agree.
    #[test]
    fn every_transition_states_its_phases_and_refuses_all_others() {
        use Phase::*;
        let p = Policy::default();
        let now = t0();
        let table: Vec<(&str, &[Phase], Transition)> = vec![
            (
                "claim_dispatch",
                &[Prepared],
                Box::new(move |r| claim_dispatch(r, "new", now, &p)),
            ),
            (
                "release_claim",
                &[Submitting],
                Box::new(move |r| release_claim(r, "tok", now, now, &p)),
            ),
            (
                "hold_for_account",
                &[Submitting],
                Box::new(move |r| hold_for_account(r, "tok", err("http_401"), now, &p)),
            ),
            (
                "accept",
                &[Submitting, Uncertain],
                Box::new(move |r| accept(r, "tok", &job("J1"), now, &p)),
            ),
            (
                "submit_failed",
                &[Submitting, Uncertain],
                Box::new(move |r| submit_failed(r, "tok", "J1", err("x"), now)),
            ),
            (
                "reject",
                &[Submitting],
                Box::new(move |r| reject(r, "tok", err("http_400"), now, &p)),
            ),
            (
                "mark_uncertain",
                &[Submitting],
                Box::new(move |r| mark_uncertain(r, "tok", "e", now)),
            ),
            ("interrupt", &[Submitting], Box::new(move |r| interrupt(r, "e", now))),
            (
                "observe",
                &[Accepted],
                Box::new(move |r| observe(r, &snap("running", RenderStatus::Running), now, now, &p)),
            ),
            (
                "open_case",
                &[Accepted],
                Box::new(move |r| open_case(r, CaseReason::RemoteJobMissing, "404", false, now)),
            ),
            (
                "claim_delivery",
                &[Rendered],
                Box::new(move |r| claim_delivery(r, "d2", now, &p)),
            ),
            (
                "give_up_delivery",
                &[Rendered],
                Box::new(move |r| give_up_delivery(r, now)),
            ),
            (
                "delivery_attempt_failed",
                &[Rendered],
                Box::new(move |r| delivery_attempt_failed(r, "d", "e", now, now, &p)),
            ),
            (
                "delivery_refused",
                &[Rendered],
                Box::new(move |r| delivery_refused(r, "d", CaseReason::OutputUrlRefused, "e", now)),
            ),
            (
                "delivered",
                &[Rendered],
                Box::new(move |r| delivered(r, "d", vec![object()], now, &p)),
            ),
        ];
        for (name, allowed, transition) in &table {
            for phase in ALL_PHASES {
                let result = transition(&in_phase(phase));
                let wrong_phase = matches!(result, Err(Refusal::WrongPhase { .. }));
                assert_eq!(
                    wrong_phase,
                    !allowed.contains(&phase),
                    "{name} from {phase:?}: {result:?}"
                );
            }
        }
        let resolutions: [(Resolution, &[Phase]); 6] = [
            (
                Resolution::AttachRemoteJob { job_id: "J9".into() },
                &[Uncertain, Accepted],
            ),
            (Resolution::ConfirmNotCreated, &[Uncertain]),
            (Resolution::ReleaseHold, &[Prepared]),
            (Resolution::MarkSettled, &[SubmitFailed]),
            (Resolution::RedriveDelivery, &[Rendered]),
            (
                Resolution::Abandon,
                &[
                    Prepared,
                    Accepted,
                    Rendered,
                    RenderFailed,
                    SubmitFailed,
                    Rejected,
                    Uncertain,
                ],
            ),
        ];
        for (resolution, allowed) in &resolutions {
            for phase in ALL_PHASES.into_iter().filter(|ph| !allowed.contains(ph)) {
                let result = resolve(&in_phase(phase), resolution, "ops", "r", now, &p);
                assert!(
                    matches!(result, Err(Refusal::WrongPhase { .. })),
                    "{} from {phase:?}: {result:?}",
                    resolution.name()
                );
            }
        }
    }

    #[test]
    fn a_racing_poll_cannot_open_a_case_on_a_rendered_or_delivered_record() {
        let p = Policy::default();
        let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
        let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
        for rec in [rendered(), done] {
            assert!(matches!(
                open_case(&rec, CaseReason::RemoteJobMissing, "404", false, t0()),
                Err(Refusal::WrongPhase { .. })
            ));
        }
    }

    #[test]
    fn a_completed_job_without_usable_outputs_opens_outputs_missing() {
        let p = Policy::default();
        let mut cases = Vec::new();
        for (outputs, unreadable) in [
            (None, None),
            (Some(vec![]), None),
            (None, Some("outputs is not a list".to_owned())),
        ] {
            let mut s = snap("completed", RenderStatus::Succeeded);
            s.outputs = outputs;
            s.outputs_unreadable = unreadable;
            cases.push(observe(&accepted_rec(), &s, t0(), t0(), &p).unwrap());
        }
        for r in cases {
            assert_eq!(r.phase, Phase::Rendered);
            assert_eq!(r.delivery_state, DeliveryState::NotCollected);
            assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::OutputsMissing);
            assert_eq!(r.due_at, None, "nothing is scheduled; a person decides");
            assert_eq!(
                claim_delivery(&r, "d", t0(), &p),
                Err(Refusal::CaseOpen(CaseReason::OutputsMissing))
            );
        }
        let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
        assert!(
            delivered(&claimed, "d", vec![], t0(), &p).is_err(),
            "never delivered with zero objects"
        );
    }

    #[test]
    fn an_account_refusal_holds_the_operation_and_a_later_try_or_an_operator_releases_it() {
        let p = Policy::default();
        let held = hold_for_account(&submitting(), "tok", err("http_401"), t0(), &p).unwrap();
        assert_eq!(held.phase, Phase::Prepared, "not rejected: the key stays usable");
        assert_eq!(held.case.as_ref().unwrap().reason, CaseReason::AccountProblem);
        assert_eq!(held.claim, None);
        let until = t0() + p.account_hold;
        assert_eq!(held.retry_at, Some(until.timestamp_millis()));
        assert!(matches!(
            claim_dispatch(&held, "n", t0() + Duration::seconds(1), &p),
            Err(Refusal::NotYet { .. })
        ));
        let retried = claim_dispatch(&held, "n", until, &p).unwrap();
        let accepted = accept(&retried, "n", &job("J1"), until, &p).unwrap();
        assert_eq!(accepted.case, None, "a later successful POST closes the case");
        assert_eq!(accepted.retry_at, None);

        // Whatever ends the hold closes its case.
        let retried_again = claim_dispatch(&held, "m", until, &p).unwrap();
        let rejected = reject(&retried_again, "m", err("http_400"), until, &p).unwrap();
        assert_eq!(rejected.case, None, "a finished operation keeps no case");
        let limited = release_claim(&retried_again, "m", until + Duration::seconds(5), until, &p).unwrap();
        assert_eq!(limited.case, None, "a 429 shows the account works again");

        let released = resolve(&held, &Resolution::ReleaseHold, "ops", "key rotated", t0(), &p).unwrap();
        assert_eq!(
            (released.phase, released.case.clone(), released.retry_at),
            (Phase::Prepared, None, None)
        );
        assert!(claim_dispatch(&released, "n", t0(), &p).is_ok());
        assert!(resolve(&prepared(), &Resolution::ReleaseHold, "ops", "r", t0(), &p).is_err());
    }

    #[test]
    fn rate_limits_keep_their_own_retry_time_and_are_bounded() {
        let p = Policy {
            rate_limit_max: 2,
            ..Policy::default()
        };
        let retry = t0() + Duration::seconds(30);
        let once = release_claim(&submitting(), "tok", retry, t0(), &p).unwrap();
        assert_eq!(once.retry_at, Some(retry.timestamp_millis()));
        // The sweep pushes due_at; the claim still opens at retry_at.
        let pushed = reschedule(&once, retry + Duration::seconds(300), t0());
        assert!(matches!(
            claim_dispatch(&pushed, "n", t0(), &p),
            Err(Refusal::NotYet { .. })
        ));
        let again = claim_dispatch(&pushed, "n", retry, &p).unwrap();
        let held = release_claim(&again, "n", retry + Duration::seconds(30), retry, &p).unwrap();
        assert_eq!(held.case.as_ref().unwrap().reason, CaseReason::RateLimited);
        assert_eq!(held.due_at, None);
        assert_eq!(
            claim_dispatch(&held, "m", retry + Duration::hours(1), &p),
            Err(Refusal::CaseOpen(CaseReason::RateLimited))
        );
        let released = resolve(&held, &Resolution::ReleaseHold, "ops", "limit raised", retry, &p).unwrap();
        assert_eq!(released.rate_limited_count, 0);
        assert!(claim_dispatch(&released, "m", retry, &p).is_ok());
    }

    #[test]
    fn delivery_attempts_count_at_claim_so_silent_stops_are_bounded_too() {
        let p = Policy {
            delivery_max_attempts: 2,
            delivery_lease: Duration::seconds(10),
            ..Policy::default()
        };
        let first = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
        assert_eq!(first.delivery_attempts, 1);
        let later = t0() + Duration::seconds(11);
        let second = claim_delivery(&first, "d2", later, &p).unwrap();
        assert_eq!(second.delivery_attempts, 2);
        let much_later = later + Duration::seconds(11);
        assert_eq!(
            claim_delivery(&second, "d3", much_later, &p),
            Err(Refusal::AttemptsExhausted(2))
        );
        assert!(matches!(
            give_up_delivery(&second, later),
            Err(Refusal::LeaseLive { .. })
        ));
        let gave_up = give_up_delivery(&second, much_later).unwrap();
        assert_eq!(gave_up.delivery_state, DeliveryState::DeliveryFailed);
        assert_eq!(gave_up.case.unwrap().reason, CaseReason::DeliveryFailed);
    }

    #[test]
    fn a_refused_output_fails_delivery_at_once_with_its_own_case() {
        let p = Policy::default();
        let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
        let r = delivery_refused(
            &claimed,
            "d",
            CaseReason::OutputUrlRefused,
            "output 0: port 8080 is not allowed",
            t0(),
        )
        .unwrap();
        assert_eq!(r.delivery_state, DeliveryState::DeliveryFailed);
        assert_eq!(r.delivery_attempts, 1);
        let case = r.case.unwrap();
        assert_eq!(case.reason, CaseReason::OutputUrlRefused);
        assert!(case.evidence.contains("output 0"));
        assert_eq!(r.due_at, None);
    }
    #[test]
    fn the_table_alone_moves_the_version_once_and_not_at_all_for_no_change() {
        let p = Policy::default();
        let claimed = submitting();
        assert_eq!(claimed.version, prepared().version + 1);
        assert_eq!(claimed.updated_at, t0());
        // A repeated outcome is the record itself: nothing to write.
        let accepted = accepted_rec();
        assert_eq!(accept(&accepted, "tok", &job("J1"), t0(), &p), Ok(accepted.clone()));
        let failed = submit_failed(&submitting(), "tok", "J7", err("x"), t0()).unwrap();
        assert_eq!(
            submit_failed(&failed, "tok", "J7", err("x"), t0() + Duration::seconds(5)),
            Ok(failed.clone()),
            "a recovery message applied twice changes nothing"
        );
        assert!(matches!(
            submit_failed(&failed, "tok", "J8", err("x"), t0()),
            Err(Refusal::WrongPhase { .. })
        ));
        let later = t0() + Duration::seconds(5);
        let running = snap("running", RenderStatus::Running);
        assert_eq!(observe(&accepted, &running, later, later, &p), Ok(accepted.clone()));
    }

    #[test]
    fn claims_consume_their_own_fault_directives_only() {
        let p = Policy::default();
        let mut r = prepared();
        r.fault = Some(Fault::DispatchAfterCommit);
        assert_eq!(claim_dispatch(&r, "tok", t0(), &p).unwrap().fault, None);
        r.fault = Some(Fault::DeliverUploadFails);
        let claimed = claim_dispatch(&r, "tok", t0(), &p).unwrap();
        assert_eq!(
            claimed.fault,
            Some(Fault::DeliverUploadFails),
            "not dispatch's to consume"
        );
        let accepted = accept(&claimed, "tok", &job("J1"), t0(), &p).unwrap();
        let rendered = observe(&accepted, &snap("completed", RenderStatus::Succeeded), t0(), t0(), &p).unwrap();
        let collecting = claim_delivery(&rendered, "d", t0(), &p).unwrap();
        assert_eq!(collecting.fault, None);
        // A poll fault is consumed by the observation, which is then written
        // even when the snapshot alone would not be.
        let mut a = accepted_rec();
        a.fault = Some(Fault::PollAfterObserve);
        let later = t0() + Duration::seconds(5);
        let seen = observe(&a, &snap("running", RenderStatus::Running), later, later, &p).unwrap();
        assert_eq!((seen.fault, seen.version), (None, a.version + 1));
    }

    #[test]
    fn a_stall_rides_on_the_observation_in_one_version() {
        let p = Policy::default();
        let a = accepted_rec();
        let later = t0() + Duration::hours(3);
        let running = snap("running", RenderStatus::Running);
        let event = Event::Observed {
            snapshot: &running,
            next_check: later + Duration::minutes(5),
            stalled: Some("no terminal state in 2 h"),
        };
        let stalled = transition(&a, event, later, &p).unwrap();
        assert_eq!(stalled.version, a.version + 1);
        assert_eq!(stalled.case.as_ref().map(|c| c.reason), Some(CaseReason::RenderStalled));
        assert!(stalled.due_at.is_some(), "polling goes on");
        assert_eq!(
            transition(&stalled, event, later, &p),
            Ok(stalled.clone()),
            "already open: no write"
        );
        let done = snap("completed", RenderStatus::Succeeded);
        let finished = Event::Observed {
            snapshot: &done,
            next_check: later + Duration::minutes(5),
            stalled: Some("no terminal state in 2 h"),
        };
        let rendered = transition(&stalled, finished, later, &p).unwrap();
        assert_eq!(
            (rendered.phase, rendered.case.clone()),
            (Phase::Rendered, None),
            "a rendered job is not stalled"
        );
    }

    #[test]
    fn the_invariants_catch_each_broken_rule() {
        let ok = prepared();
        assert_eq!(check_invariants(&ok), Ok(()));
        let mut r = ok.clone();
        r.expires_at = Some(1);
        assert!(check_invariants(&r).unwrap_err().contains("expires_at"));
        let mut r = ok.clone();
        r.phase = Phase::Uncertain;
        assert!(check_invariants(&r).unwrap_err().contains("without a case"));
        let mut r = accepted_rec();
        r.case = Some(ReconciliationCase {
            reason: CaseReason::SettlementPending,
            opened_at: t0(),
            evidence: String::new(),
        });
        assert!(check_invariants(&r).unwrap_err().contains("case on a accepted"));
        let mut r = ok.clone();
        r.phase = Phase::Submitting;
        assert!(check_invariants(&r).unwrap_err().contains("without a claim"));
        let mut r = ok.clone();
        r.delivery_claim = r.claim.clone().or(Some(Claim {
            token: "d".into(),
            lease_expires_at: t0(),
        }));
        assert!(check_invariants(&r).unwrap_err().contains("delivery claim"));
        let mut r = ok.clone();
        r.due_at = None;
        assert!(
            check_invariants(&r)
                .unwrap_err()
                .contains("neither a due time nor a case")
        );
        let rendered = rendered();
        let collecting = claim_delivery(&rendered, "d", t0(), &Policy::default()).unwrap();
        let done = delivered(&collecting, "d", vec![object()], t0(), &Policy::default()).unwrap();
        assert_eq!(check_invariants(&done), Ok(()));
        let mut r = done.clone();
        r.expires_at = None;
        assert!(check_invariants(&r).is_err());
    }
    /// Found by the simulator (seed 862): an operator abandoned an operation
    /// held for its account while a dispatcher had just claimed it; the job
    /// that dispatcher created was on no record and in no case.
    #[test]
    fn a_claimed_operation_cannot_be_abandoned() {
        let p = Policy::default();
        let held = hold_for_account(&submitting(), "tok", err("http_401"), t0(), &p).unwrap();
        let later = t0() + p.account_hold + Duration::seconds(1);
        let claimed = claim_dispatch(&held, "tok2", later, &p).unwrap();
        assert_eq!(
            claimed.case.as_ref().map(|c| c.reason),
            Some(CaseReason::AccountProblem)
        );
        assert!(matches!(
            resolve(&claimed, &Resolution::Abandon, "ops", "r", later, &p),
            Err(Refusal::WrongPhase { .. })
        ));
        assert!(resolve(&held, &Resolution::Abandon, "ops", "r", later, &p).is_ok());
    }
}
