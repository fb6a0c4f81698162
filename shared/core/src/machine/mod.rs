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

use chrono::{DateTime, Utc};

use crate::planted;

use crate::record::{CaseReason, DeliveryState, OperationRecord, Phase, Settlement};
pub use crate::remote::AcceptedJob;

mod abandoned;
mod deliver;
mod dispatch;
mod event;
mod invariants;
mod observe;
mod operator;
mod policy;
mod refusal;
mod steps;

pub use event::{Decision, Event, Resolution};
pub use invariants::{check_invariants, debug_check, is_finished};
pub use policy::{CreditEstimate, Policy};
pub use refusal::Refusal;
pub use steps::OUTPUTS_REMOVED_WITHIN;

use abandoned::{abandoned_resolution_applies, observe_abandoned};
use deliver::{claim_delivery, delivered, delivery_attempt_failed, delivery_refused, give_up_delivery};
use dispatch::{
    accept, claim_dispatch, hold_for_account, interrupt, mark_uncertain, reject, release_claim, release_unused_claim,
    submit_failed, wait_for_capacity, wait_for_spend_limit,
};
use observe::{observe, open_case, reschedule};
use operator::{cancel, outputs_erased, resolve};
use steps::case_is;

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
    let restart = matches!(event, Event::Reschedule { .. });
    let next = match (rec.phase, event) {
        // ---- dispatch
        (Prepared, Event::ClaimDispatch { token, shard }) => claim_dispatch(rec, token, shard, now, policy)?,
        (Prepared, Event::SpendLimitReached) => wait_for_spend_limit(rec, now, policy)?,
        (Prepared, Event::CapacityReached) => wait_for_capacity(rec, now, policy)?,
        (Submitting, Event::ClaimDispatch { .. }) if rec.claim.as_ref().is_some_and(|c| c.lease_expires_at > now) => {
            let until = rec.claim.as_ref().map_or(now, |c| c.lease_expires_at);
            return Err(Refusal::LeaseLive { until });
        }
        // A planted bug (tests only): the lapsed claim is claimed again.
        (Submitting, Event::ClaimDispatch { token, shard }) if planted::on(planted::REPOST_AFTER_LEASE) => {
            claim_dispatch(rec, token, shard, now, policy)?
        }
        (Submitting, Event::RateLimited { token, retry_at, busy }) => {
            release_claim(rec, token, retry_at, busy, now, policy)?
        }
        (Submitting, Event::ClaimUnused { token, retry_at }) => release_unused_claim(rec, token, retry_at)?,
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
                seen,
            },
        ) => observe(rec, snapshot, now, next_check, stalled, seen, policy),
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
        (Accepted | Abandoned, Event::LookDeferred { next_check }) if rec.due_at_ms.is_some() => {
            let due = rec.due_at_ms.and_then(DateTime::from_timestamp_millis);
            reschedule(rec, due.map_or(next_check, |d| d.max(next_check)))
        }
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
    Ok(versioned(rec, next, now, restart))
}

/// Whether looks at `rec`'s job go on: a saved job that runs for an
/// accepted operation, or for an abandoned one whose credits wait on it,
/// and no person asked to find it.
pub fn looked_at(rec: &OperationRecord) -> bool {
    let missing = rec
        .case
        .as_ref()
        .is_some_and(|c| c.reason == CaseReason::RemoteJobMissing);
    let observed =
        rec.phase == Phase::Accepted || (rec.phase == Phase::Abandoned && rec.ledger_phase == Some(Phase::Accepted));
    rec.remote_job_id.is_some() && observed && !missing
}

/// `next` with the version moved by one and `updated_at` set, or `rec`
/// itself when nothing but those would differ. A write that makes a job
/// looked at (saved, attached, a person's search over) or that restarts
/// its looks (the sweep's `restart`) names a new chain of looks.
fn versioned(rec: &OperationRecord, next: OperationRecord, now: DateTime<Utc>, restart: bool) -> OperationRecord {
    let mut next = next.due_by_its_deadline();
    next.version = rec.version;
    next.updated_at = rec.updated_at;
    if next == *rec {
        return next;
    }
    next.version = rec.version + 1;
    next.updated_at = now;
    // A phase that changes under a looked-at job (an operator's abandon of
    // a stalled one) renames the chain too: the message sent after it
    // carries the new name, and the old chain ends.
    let moved_on = rec.phase != next.phase || rec.remote_job_id != next.remote_job_id;
    if looked_at(&next) && (restart || moved_on || !looked_at(rec)) {
        next.poll_chain = Some(next.version);
    }
    debug_assert!(
        check_invariants(&next).is_ok(),
        "a transition broke an invariant: {:?}",
        check_invariants(&next)
    );
    next
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

#[cfg(test)]
mod tests;
