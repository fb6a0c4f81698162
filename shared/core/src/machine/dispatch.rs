//! The dispatch section of the table: from a claim to the POST's outcome,
//! and the waits for a slot or for credits before it.

use chrono::{DateTime, Utc};

use crate::domain::Fault;
use crate::planted;
use crate::record::{CaseReason, Claim, OperationRecord, Phase, ReconciliationCase, RemoteError, Settlement};
use crate::remote::AcceptedJob;

use super::policy::Policy;
use super::refusal::Refusal;
use super::steps::{consume_fault, finish, held_for_a_person, hold_with_case, require_claimant};

/// `prepared -> submitting`: the only road to a POST. The claim carries a
/// fresh token and a lease; the sweep treats an expired lease as an
/// interrupted dispatch.
pub(super) fn claim_dispatch(
    rec: &OperationRecord,
    token: &str,
    shard: u16,
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
    // The account shard whose slot it takes (and frees at its end).
    next.account_shard = Some(shard);
    next.due_at_ms = Some(lease_expires_at.timestamp_millis());
    next.reserved_credits = Some(policy.credit_estimate.for_media(rec.media_type));
    next.spend_hold = None;
    next.capacity_hold = None;
    // A dispatch fault directive fires once: the claim consumes it.
    consume_fault(&mut next, Fault::fires_in_dispatch);
    Ok(next)
}

/// A held operation waits for a person, never in a waiting order: a
/// refused claim's re-read may find that a 429 opened a case meanwhile.
fn refuse_wait_when_held(rec: &OperationRecord) -> Result<(), Refusal> {
    held_for_a_person(rec).map_or(Ok(()), |reason| Err(Refusal::CaseOpen(reason)))
}

/// `submitting -> prepared` after a 429: Genace said definitively that it did
/// not process the request, so the claim may be released and retried later.
/// After `policy.rate_limit_max` answers in a row while nothing else of ours
/// was in flight there, the operation is held with a `rate_limited` case
/// instead, so a stuck limit (an account problem) reaches a person. A 429
/// while other jobs of ours held slots (`busy`) is the account being full:
/// the operation waits for capacity and the count does not move.
pub(super) fn release_claim(
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

/// `submitting -> prepared` with nothing POSTed: the claimant had too
/// little time left to POST and save the answer. Nothing is counted and no
/// case changes; the next dispatch comes at `retry_at`.
pub(super) fn release_unused_claim(
    rec: &OperationRecord,
    token: &str,
    retry_at: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token)?;
    let mut next = rec.clone();
    next.phase = Phase::Prepared;
    next.claim = None;
    next.retry_at_ms = Some(retry_at.timestamp_millis());
    next.due_at_ms = Some(retry_at.timestamp_millis());
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
pub(super) fn wait_for_spend_limit(
    rec: &OperationRecord,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    refuse_wait_when_held(rec)?;
    let mut next = rec.clone();
    next.spend_hold = Some(rec.waits_in_order().unwrap_or(now));
    next.account_shard = Some(policy.account_shards.home(rec));
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
pub(super) fn wait_for_capacity(
    rec: &OperationRecord,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    refuse_wait_when_held(rec)?;
    let mut next = rec.clone();
    next.capacity_hold = Some(rec.waits_in_order().unwrap_or(now));
    next.account_shard = Some(policy.account_shards.home(rec));
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
pub(super) fn hold_for_account(
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

/// A claim while another dispatcher's lease is live: refused until it ends.
pub(super) fn lease_held(rec: &OperationRecord, now: DateTime<Utc>) -> Refusal {
    let until = rec.claim.as_ref().map_or(now, |c| c.lease_expires_at);
    Refusal::LeaseLive { until }
}

/// A 202 for an operation whose job id is already saved: the same one
/// again changes nothing (a retried write, a recovery message applied
/// twice); another is refused, and so is any once a 502 named the job.
pub(super) fn accepted_again(rec: &OperationRecord, job_id: &str) -> Result<OperationRecord, Refusal> {
    match &rec.remote_job_id {
        Some(existing) if existing == job_id && rec.phase != Phase::SubmitFailed => Ok(rec.clone()),
        existing => Err(Refusal::DifferentRemoteJob {
            existing: existing.clone().unwrap_or_default(),
        }),
    }
}

/// `submitting | uncertain -> accepted`, only for the dispatcher (or the
/// recovery channel) holding the claim token the job was created under.
/// Applying the same job id again is a no-op, so the write can be retried.
pub(super) fn accept(
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
pub(super) fn submit_failed(
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
pub(super) fn reject(
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
pub(super) fn mark_uncertain(
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
pub(super) fn interrupt(rec: &OperationRecord, evidence: &str, now: DateTime<Utc>) -> Result<OperationRecord, Refusal> {
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

/// A job id a recovery message carried that the record refused, kept
/// beside it: once, never the saved job, and at most
/// [`MAX_UNSAVED_JOBS`](crate::record::MAX_UNSAVED_JOBS) (the recovery
/// dead-letter queue keeps any beyond). Nothing else changes.
pub(super) fn keep_unsaved_job(rec: &OperationRecord, job_id: &str) -> OperationRecord {
    let known = rec.remote_job_id.as_deref() == Some(job_id) || rec.unsaved_jobs.iter().any(|j| j == job_id);
    let mut next = rec.clone();
    if !known && !job_id.is_empty() && rec.unsaved_jobs.len() < crate::record::MAX_UNSAVED_JOBS {
        next.unsaved_jobs.push(job_id.to_owned());
    }
    next
}
