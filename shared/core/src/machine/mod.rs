//! The lifecycle rules: one pure function, [`transition`], owns every change
//! of an operation record.
//!
//! It takes the record as last read and an [`Input`] and returns the next
//! record, or a [`Refusal`] saying why the rules forbid it. Its table of
//! (phase, input) is `table.rs`, one group of arms per concern, tried in
//! order; the simulator's planted bugs are arms of their own
//! (`planted_arms.rs`), outside it. It alone bumps `version`, consumes fault
//! directives, folds a stall case into an observation and decides when a
//! repeated outcome changes nothing; every record it returns satisfies
//! [`check_invariants`]. It performs no I/O. The store writes the difference
//! between the two records as one conditional write guarded by the version
//! that was read, so a decision made on stale data is never written.

use chrono::{DateTime, Utc};

use crate::record::{CaseReason, OperationRecord, Phase};
pub use crate::remote::AcceptedJob;

mod abandoned;
mod deliver;
mod dispatch;
mod input;
mod invariants;
mod observe;
mod operator;
mod planted_arms;
mod policy;
mod refusal;
mod steps;
mod table;

pub use input::{Decision, Input, Look, NeededCase, RefusedDelivery, Resolution};
pub use invariants::{check_invariants, debug_check, is_finished};
pub use policy::{CreditEstimate, Policy};
pub use refusal::Refusal;
pub use steps::OUTPUTS_REMOVED_WITHIN;

/// The lifecycle: the next record after `input`, or why the rules refuse
/// it. The table of (phase, input) is [`table::next`], in the order its
/// arms are tried; every pair it does not name is refused with
/// [`Refusal::WrongPhase`]. A planted bug (tests only) is tried first
/// ([`planted_arms::next`]). A result equal to `rec` means the input
/// changes nothing (a repeated outcome, an observation the schedule
/// already covers): it is returned as it is, and nothing needs writing.
/// Otherwise `version` moves by exactly one.
pub fn transition(
    rec: &OperationRecord,
    input: Input<'_>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    let restart = matches!(input, Input::Reschedule { .. });
    let next = match planted_arms::next(rec, input, now, policy) {
        Some(next) => next?,
        None => table::next(rec, input, now, policy)?,
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
            transition(rec, Input::Resolved(decision), now, &policy).is_ok_and(|next| next != *rec)
        })
        .map(Resolution::name)
        .collect()
}

#[cfg(test)]
mod tests;
