//! The lifecycle's table: for each (phase, input), the step that makes the
//! next record, or the refusal. Its arms are tried in order, group by
//! group, as written; the first that matches decides.

use chrono::{DateTime, Utc};

use crate::record::{CaseReason, OperationRecord, Phase};

use super::abandoned::{accept_abandoned, observe_abandoned, submit_failed_abandoned};
use super::deliver::{claim_delivery, delivered, delivery_attempt_failed, delivery_refused, give_up_delivery};
use super::dispatch::{
    accept, accepted_again, claim_dispatch, hold_for_account, interrupt, keep_unsaved_job, lease_held, mark_uncertain,
    reject, release_claim, release_unused_claim, submit_failed, wait_for_capacity, wait_for_spend_limit,
};
use super::input::Input;
use super::observe::{observe, open_case, reschedule};
use super::operator::{cancel, erasable_once_delivered, outputs_erased, resolution_applies, resolve};
use super::policy::Policy;
use super::refusal::Refusal;
use super::steps::{case_is, lease_live};

/// What one group of arms decides: nothing (no arm matched), or the next
/// record, or a refusal.
type Arm = Option<Result<OperationRecord, Refusal>>;

/// The next record after `input`, by the first arm that matches.
pub(super) fn next(
    rec: &OperationRecord,
    input: Input<'_>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    dispatching(rec, input, now, policy)
        .or_else(|| observing(rec, input, now, policy))
        .or_else(|| delivering(rec, input, now, policy))
        .or_else(|| resolving(rec, input, now, policy))
        .or_else(|| taking_back(rec, input, now, policy))
        .or_else(|| following_abandoned(rec, input, now, policy))
        .unwrap_or_else(|| {
            Err(Refusal::WrongPhase {
                action: input.name(),
                actual: rec.phase,
                expected: input.expected(),
            })
        })
}

/// Claims, waits, and what Genace's answer to the POST says.
fn dispatching(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    use Phase::{Prepared, SubmitFailed, Submitting, Uncertain};
    Some(match (rec.phase, input) {
        (_, Input::JobUnsaved { job_id }) => Ok(keep_unsaved_job(rec, job_id)),
        (Prepared, Input::ClaimDispatch { token, shard }) => claim_dispatch(rec, token, shard, now, policy),
        (Prepared, Input::SpendLimitReached) => wait_for_spend_limit(rec, now, policy),
        (Prepared, Input::CapacityReached) => wait_for_capacity(rec, now, policy),
        (Submitting, Input::ClaimDispatch { .. }) if lease_live(rec, now) => Err(lease_held(rec, now)),
        (Submitting, Input::RateLimited { token, retry_at, busy }) => {
            release_claim(rec, token, retry_at, busy, now, policy)
        }
        (Submitting, Input::ClaimUnused { token, retry_at }) => release_unused_claim(rec, token, retry_at),
        (Submitting, Input::AccountRefused { token, error }) => {
            hold_for_account(rec, token, error.clone(), now, policy)
        }
        (_, Input::Accepted { job, .. }) if rec.remote_job_id.is_some() => accepted_again(rec, &job.job_id),
        (Submitting | Uncertain, Input::Accepted { token, job }) => accept(rec, token, job, now, policy),
        (SubmitFailed, Input::SubmitFailed { job_id, .. }) if rec.remote_job_id.as_deref() == Some(job_id) => {
            Ok(rec.clone())
        }
        (Submitting | Uncertain, Input::SubmitFailed { token, job_id, error }) => {
            submit_failed(rec, token, job_id, error.clone(), now)
        }
        (Submitting, Input::Rejected { token, error }) => reject(rec, token, error.clone(), now, policy),
        (Submitting, Input::OutcomeUnknown { token, evidence }) => mark_uncertain(rec, token, evidence, now),
        (Submitting, Input::LeaseExpired { evidence }) => interrupt(rec, evidence, now),
        _ => return None,
    })
}

/// What a look at the job saw, and the looks' schedule.
fn observing(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    use Phase::{Abandoned, Accepted};
    Some(Ok(match (rec.phase, input) {
        (Accepted, Input::Observed(l)) => observe(rec, l.snapshot, now, l.next_check, l.stalled, l.seen, policy),
        (Accepted, Input::CaseNeeded(c)) => open_case(rec, c.reason, c.evidence, c.keep_due, now),
        (Accepted | Abandoned, Input::LookDeferred { next_check }) if rec.due_at_ms.is_some() => {
            let due = rec.due_at_ms.and_then(DateTime::from_timestamp_millis);
            reschedule(rec, due.map_or(next_check, |d| d.max(next_check)))
        }
        (_, Input::Reschedule { due }) => reschedule(rec, due),
        _ => return None,
    }))
}

/// Storing the outputs.
fn delivering(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    use Phase::Rendered;
    Some(match (rec.phase, input) {
        (Rendered, Input::ClaimDelivery { token }) if rec.outputs_erased.is_none() => {
            claim_delivery(rec, token, now, policy)
        }
        (Rendered, Input::DeliveryLapsed) => give_up_delivery(rec, now),
        (Rendered, Input::DeliveryFailed { token, error, retry_at }) => {
            delivery_attempt_failed(rec, token, error, retry_at, now, policy)
        }
        (Rendered, Input::DeliveryRefused(r)) => delivery_refused(rec, r.token, r.reason, r.evidence, now),
        (Rendered, Input::Delivered { token, objects }) => delivered(rec, token, objects.to_vec(), now, policy),
        _ => return None,
    })
}

/// An operator's decision on a case, each where it applies.
fn resolving(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    let Input::Resolved(d) = input else {
        return None;
    };
    resolution_applies(rec, d.resolution).then(|| Ok(resolve(rec, d.resolution, d.actor, d.reason, now, policy)))
}

/// Taking it back before the claim (a repeat changes nothing), and erasing
/// outputs once no delivery can run (a repeat changes nothing, and no
/// delivery is claimed after it).
fn taking_back(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    use Phase::{Abandoned, Cancelled, Prepared, Rejected, RenderFailed, Rendered, SubmitFailed};
    Some(Ok(match (rec.phase, input) {
        (Prepared, Input::Cancel { by, reason }) => cancel(rec, by, reason, now, policy),
        (Cancelled, Input::Cancel { .. }) => rec.clone(),
        (_, Input::OutputsErased { .. }) if rec.outputs_erased.is_some() => rec.clone(),
        (Rendered, Input::OutputsErased { by, objects }) if erasable_once_delivered(rec) => {
            outputs_erased(rec, by, objects, now)
        }
        (Abandoned | Cancelled | Rejected | RenderFailed | SubmitFailed, Input::OutputsErased { by, objects }) => {
            outputs_erased(rec, by, objects, now)
        }
        _ => return None,
    }))
}

/// An abandoned operation whose credits still follow a job.
fn following_abandoned(rec: &OperationRecord, input: Input<'_>, now: DateTime<Utc>, policy: &Policy) -> Arm {
    use CaseReason::RemoteJobMissing;
    use Phase::{Abandoned, Accepted, Uncertain};
    if rec.phase != Abandoned {
        return None;
    }
    let job = rec.ledger_phase;
    Some(match input {
        Input::Accepted { token, job: j } if job == Some(Uncertain) => accept_abandoned(rec, token, j, now, policy),
        Input::SubmitFailed { token, job_id, error } if job == Some(Uncertain) => {
            submit_failed_abandoned(rec, token, job_id, error.clone(), now)
        }
        Input::Observed(l) if job == Some(Accepted) && !case_is(rec, &[RemoteJobMissing]) => {
            Ok(observe_abandoned(rec, l.snapshot, now, l.next_check, policy))
        }
        Input::CaseNeeded(c) if c.reason == RemoteJobMissing && job == Some(Accepted) => {
            Ok(open_case(rec, RemoteJobMissing, c.evidence, false, now))
        }
        _ => return None,
    })
}
