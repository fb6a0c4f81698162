//! The abandoned section of the table: our work stops, Genace's does not,
//! so the credits follow the job until it is over.

use chrono::{DateTime, Utc};

use crate::record::{CaseReason, OperationRecord, Phase, RemoteError, Settlement};
use crate::remote::{AcceptedJob, JobSnapshot, RenderStatus};

use super::dispatch::{accept, submit_failed};
use super::input::Resolution;
use super::observe::noted;
use super::policy::Policy;
use super::refusal::Refusal;
use super::steps::{case_is, finish};

/// The decisions an abandoned operation still takes: attach or confirm for
/// a job that may exist but is not observed, settle a pending refund.
pub(super) fn abandoned_resolution_applies(rec: &OperationRecord, resolution: &Resolution) -> bool {
    let unobserved_job = match rec.ledger_phase {
        Some(Phase::Uncertain) => true,
        Some(Phase::Accepted) => case_is(rec, &[CaseReason::RemoteJobMissing]),
        _ => false,
    };
    match resolution {
        Resolution::AttachRemoteJob { .. } => unobserved_job,
        // Not "nothing was created" while a recovery message named a job.
        Resolution::ConfirmNotCreated => unobserved_job && rec.unsaved_jobs.is_empty(),
        Resolution::MarkSettled => {
            rec.ledger_phase == Some(Phase::SubmitFailed) && rec.settlement == Some(Settlement::Pending)
        }
        _ => false,
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
pub(super) fn abandon(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
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
pub(super) fn abandoned_job_over(
    rec: &OperationRecord,
    outcome: Phase,
    now: DateTime<Utc>,
    policy: &Policy,
) -> OperationRecord {
    let mut next = rec.clone();
    next.ledger_phase = Some(outcome);
    next.case = None;
    finish(&mut next, now, policy);
    next
}

/// A status snapshot of an abandoned operation's job: nothing is delivered,
/// only the credits move once the job is over.
pub(super) fn observe_abandoned(
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
pub(super) fn abandoned_job_may_run(rec: &OperationRecord) -> bool {
    rec.phase == Phase::Abandoned && matches!(rec.ledger_phase, Some(Phase::Accepted | Phase::Uncertain))
}

/// A late 202 for an abandoned, uncertain operation: the job is saved and
/// its credits follow it, but the operation stays abandoned; the next look
/// is due at once.
pub(super) fn accept_abandoned(
    rec: &OperationRecord,
    token: &str,
    job: &AcceptedJob,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    accept(rec, token, job, now, policy).map(|mut next| {
        next.phase = Phase::Abandoned;
        next.ledger_phase = Some(Phase::Accepted);
        next.due_at_ms = Some(now.timestamp_millis());
        next
    })
}

/// A late 502 naming a job for an abandoned, uncertain operation: the
/// refund is pending, and the operation stays abandoned.
pub(super) fn submit_failed_abandoned(
    rec: &OperationRecord,
    token: &str,
    job_id: &str,
    error: RemoteError,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    submit_failed(rec, token, job_id, error, now).map(|mut next| {
        next.phase = Phase::Abandoned;
        next.ledger_phase = Some(Phase::SubmitFailed);
        next
    })
}
