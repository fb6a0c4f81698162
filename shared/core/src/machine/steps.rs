//! The small steps every section of the table shares: opening a case,
//! finishing an operation, checking the claimant, consuming a fault.

use chrono::{DateTime, Duration, Utc};

use crate::domain::Fault;
use crate::record::{CaseReason, OperationRecord, ReconciliationCase};

use super::policy::Policy;
use super::refusal::Refusal;

/// Opens a case on `next` and takes it off the sweep's schedule: a person
/// moves it on from here.
pub(super) fn hold_with_case(next: &mut OperationRecord, reason: CaseReason, evidence: String, now: DateTime<Utc>) {
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
pub(super) fn finish(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
    next.due_at_ms = None;
    next.claim = None;
    let kept = now + policy.retention;
    let outputs_gone = match next.delivery_attempts {
        0 => None,
        _ => crate::record::bucket_rule_deletes(now, policy.output_days).map(|due| due + OUTPUTS_REMOVED_WITHIN),
    };
    next.expires_at_seconds = Some(outputs_gone.map_or(kept, |gone| kept.max(gone)).timestamp());
}

/// How long after an object is due S3's lifecycle rule may take to remove
/// it: the rule runs asynchronously, typically within a day.
pub const OUTPUTS_REMOVED_WITHIN: Duration = Duration::days(2);

pub(super) fn require_claimant(rec: &OperationRecord, token: &str) -> Result<(), Refusal> {
    match &rec.claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// The open case that only a person can close, if the record has one. A
/// held operation (account problem) is tried again once its hold ends;
/// one held for repeated rate limits, or any other case, waits for a
/// person: no claim takes it, and it never joins a waiting order, where
/// every fresh claim would yield to it.
pub(super) fn held_for_a_person(rec: &OperationRecord) -> Option<CaseReason> {
    rec.case
        .as_ref()
        .map(|c| c.reason)
        .filter(|reason| *reason != CaseReason::AccountProblem)
}

/// Clears the record's fault directive when it belongs to this stage; the
/// stage fires the one it read on the record it claimed.
pub(super) fn consume_fault(next: &mut OperationRecord, here: fn(Fault) -> bool) {
    if next.fault.is_some_and(here) {
        next.fault = None;
    }
}

pub(super) fn case_is(rec: &OperationRecord, reasons: &[CaseReason]) -> bool {
    rec.case.as_ref().is_some_and(|c| reasons.contains(&c.reason))
}

/// Whether a dispatcher's claim on `rec` is still live at `now`.
pub(super) fn lease_live(rec: &OperationRecord, now: DateTime<Utc>) -> bool {
    rec.claim.as_ref().is_some_and(|c| c.lease_expires_at > now)
}
