//! Planted bugs (tests only): each an arm the lifecycle's table must not
//! have, tried before the table when the simulator plants it, and never
//! otherwise ([`crate::planted::on`] is false outside the simulator).

use chrono::{DateTime, Utc};

use crate::planted;
use crate::record::{OperationRecord, Phase};

use super::dispatch::claim_dispatch;
use super::input::{Input, NeededCase};
use super::observe::open_case;
use super::operator::cancel;
use super::policy::Policy;
use super::refusal::Refusal;

/// The next record by a planted arm that matches, if any.
pub(super) fn next(
    rec: &OperationRecord,
    input: Input<'_>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Option<Result<OperationRecord, Refusal>> {
    match (rec.phase, input) {
        // The lapsed claim is claimed again (a live one still refuses).
        (Phase::Submitting, Input::ClaimDispatch { token, shard })
            if planted::on(planted::REPOST_AFTER_LEASE) && !super::steps::lease_live(rec, now) =>
        {
            Some(claim_dispatch(rec, token, shard, now, policy))
        }
        // A case whatever the phase.
        (
            _,
            Input::CaseNeeded(NeededCase {
                reason,
                evidence,
                keep_due,
            }),
        ) if planted::on(planted::CASE_WITHOUT_PHASE_CHECK) => {
            Some(Ok(open_case(rec, reason, evidence, keep_due, now)))
        }
        // A cancel after the claim, while a POST may be under way.
        (Phase::Submitting, Input::Cancel { by, reason }) if planted::on(planted::CANCEL_AFTER_CLAIM) => {
            Some(Ok(cancel(rec, by, reason, now, policy)))
        }
        _ => None,
    }
}
