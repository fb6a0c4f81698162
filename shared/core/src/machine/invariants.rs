//! The rules every stored record keeps, checked after every transition
//! and on every read in debug builds.

use crate::record::{CaseReason, DeliveryState, OperationRecord, Phase, Settlement};

use super::abandoned::abandoned_job_may_run;
use super::steps::held_for_a_person;

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
    if finished != rec.expires_at_seconds.is_some() {
        return Err(format!(
            "expires_at is {:?} on a {} operation",
            rec.expires_at_seconds,
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
