//! The observation section of the table: what a status snapshot of the
//! saved job, a missing job or a rescheduled look does to the record.

use chrono::{DateTime, Utc};

use crate::domain::Fault;
use crate::record::{CaseReason, OperationRecord, Phase, ReconciliationCase, RemoteError};
use crate::remote::{JobSnapshot, RenderStatus};

use super::policy::Policy;
use super::steps::{consume_fault, finish, hold_with_case};

/// Folds one status snapshot of the saved job into an `accepted` operation.
/// Terminal states are recorded once: a rendered or failed operation refuses
/// further observations. A non-terminal snapshot, while the sweep's deadline
/// still covers `next_check`, is not written at all.
pub(super) fn observe(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    stalled: Option<&str>,
    seen: &crate::record::Looks,
    policy: &Policy,
) -> OperationRecord {
    let mut next = observe_snapshot(rec, snap, now, next_check, policy);
    if snap.status != RenderStatus::Running && next.phase != rec.phase {
        // The end, seen: by this look, after the ones before.
        let keep = crate::record::MAX_LOOKS_KEPT - 1;
        let mut looked_at: Vec<DateTime<Utc>> = seen.at[seen.at.len().saturating_sub(keep)..].to_vec();
        looked_at.push(now);
        next.detection = Some(crate::record::Detection {
            looks: seen.count + 1,
            first_running_at: seen.first_running_at,
            last_running_at: seen.last_running_at,
            ended_seen_at: now,
            looked_at,
        });
    }
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
pub(super) fn noted(
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
pub(super) fn open_case(
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
pub(super) fn reschedule(rec: &OperationRecord, due: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.due_at_ms = Some(due.timestamp_millis());
    next
}
