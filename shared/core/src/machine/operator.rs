//! The decisions a person takes: an operator's resolution, a cancel, an
//! erasure. Each is audited.

use chrono::{DateTime, Utc};

use crate::record::{
    AuditEntry, CancelReason, Cancellation, CaseReason, DeliveryState, Erasure, MAX_ERASED_KEYS, OperationRecord,
    Phase, Settlement,
};

use super::abandoned::{abandon, abandoned_job_over, abandoned_resolution_applies};
use super::input::Resolution;
use super::policy::Policy;
use super::steps::{case_is, finish};

/// Whether `resolution` applies to `rec` now: each decision where it
/// applies, and abandoning wherever a case waits for a person.
pub(super) fn resolution_applies(rec: &OperationRecord, resolution: &Resolution) -> bool {
    use CaseReason::{AccountProblem, RateLimited, RemoteJobMissing};
    use Phase::{Abandoned, Accepted, Prepared, Rendered, SubmitFailed, Submitting, Uncertain};
    use Resolution::{Abandon, AttachRemoteJob, ConfirmNotCreated, MarkSettled, RedriveDelivery, ReleaseHold};
    let applies = match rec.phase {
        Abandoned => return abandoned_resolution_applies(rec, resolution),
        // Not "nothing was created" while a recovery message named a job.
        Uncertain => {
            matches!(resolution, AttachRemoteJob { .. })
                || (*resolution == ConfirmNotCreated && rec.unsaved_jobs.is_empty())
        }
        Accepted => matches!(resolution, AttachRemoteJob { .. }) && case_is(rec, &[RemoteJobMissing]),
        Prepared => *resolution == ReleaseHold && case_is(rec, &[AccountProblem, RateLimited]),
        SubmitFailed => *resolution == MarkSettled && rec.settlement == Some(Settlement::Pending),
        // Not once erased: a delivery then would store what the tenant erased.
        Rendered => {
            *resolution == RedriveDelivery
                && rec.delivery_state == DeliveryState::DeliveryFailed
                && rec.outputs_erased.is_none()
        }
        _ => false,
    };
    // Never while a dispatcher holds the claim: it may be POSTing, and an
    // abandoned record would leave its job on no record and in no case.
    applies || (*resolution == Abandon && rec.phase != Submitting && rec.case.is_some())
}

/// Whether a rendered operation's outputs may be erased: once delivery is
/// over, and while no delivery holds its claim.
pub(super) fn erasable_once_delivered(rec: &OperationRecord) -> bool {
    matches!(
        rec.delivery_state,
        DeliveryState::Delivered | DeliveryState::DeliveryFailed
    ) && rec.delivery_claim.is_none()
}

/// Applies an operator's decision, valid only from the right phase, and
/// appends who decided, when, what and why to the audit trail.
pub(super) fn resolve(
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
            next.unsaved_jobs.retain(|j| j != job_id);
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
            next.unsaved_jobs.retain(|j| j != job_id);
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
pub(super) fn outputs_erased(
    rec: &OperationRecord,
    by: &str,
    objects: &[String],
    now: DateTime<Utc>,
) -> OperationRecord {
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
pub(super) fn cancel(
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
