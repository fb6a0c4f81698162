//! What an operation commits of its tenant's credits, as a pure function of
//! the record, and the per-tenant totals those shares add up to.
//!
//! The totals are never computed by adding what a stage thinks happened:
//! every write of a record moves its tenant's counters by
//! `share(next) - share(prev)` in the same transaction, so the counters
//! equal the sum of [`share`] over the tenant's records at every commit.
//!
//! Amounts are kept in millicredits (integers), so sums are exact in every
//! store.

use serde::Serialize;

use crate::record::{OperationRecord, Phase, Settlement};

/// Credits as integer thousandths.
pub type Millicredits = i64;

/// Converts a credit amount Genace reported (a JSON number) to millicredits.
pub fn millis(credits: f64) -> Millicredits {
    if credits.is_finite() {
        (credits * 1000.0).round() as Millicredits
    } else {
        0
    }
}

/// Millicredits as credits, for views.
pub fn credits(millis: Millicredits) -> f64 {
    millis as f64 / 1000.0
}

/// One operation's part of its tenant's ledger, or a change of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Shares {
    /// Credits Genace holds (or may hold) for a job not yet finished: a claim
    /// about to POST, an uncertain outcome, an accepted job.
    pub held: Millicredits,
    /// Credits of jobs that rendered.
    pub spent: Millicredits,
    /// Credits of failed submissions (a 502 naming a job) whose refund is
    /// not settled yet.
    pub pending_refund: Millicredits,
    /// Credits of failed submissions whose refund an operator settled.
    pub settled: Millicredits,
}

impl Shares {
    pub fn is_zero(&self) -> bool {
        *self == Shares::default()
    }

    /// `self - other`, field by field.
    pub fn minus(&self, other: &Shares) -> Shares {
        Shares {
            held: self.held - other.held,
            spent: self.spent - other.spent,
            pending_refund: self.pending_refund - other.pending_refund,
            settled: self.settled - other.settled,
        }
    }

    /// `self + other`, field by field.
    pub fn plus(&self, other: &Shares) -> Shares {
        Shares {
            held: self.held + other.held,
            spent: self.spent + other.spent,
            pending_refund: self.pending_refund + other.pending_refund,
            settled: self.settled + other.settled,
        }
    }
}

/// The credits an operation commits: what Genace said it holds, or, until
/// it said so, what the claim reserved.
pub fn committed(rec: &OperationRecord) -> Millicredits {
    rec.held_credits
        .map(millis)
        .or_else(|| rec.reserved_credits.map(millis))
        .unwrap_or(0)
}

/// The operation's share of its tenant's ledger.
///
/// - `submitting` and `uncertain` hold the reservation: a job may exist.
/// - `accepted` holds what the 202 reported.
/// - `rendered` spent it.
/// - `submit_failed` waits for its refund until an operator settles it.
/// - `prepared`, `rejected`, `render_failed` and `abandoned` hold nothing:
///   no job, a refused request, a failed render (Genace releases its hold),
///   or an operator's decision that nothing was created.
pub fn share(rec: &OperationRecord) -> Shares {
    let amount = committed(rec);
    let mut s = Shares::default();
    match rec.phase {
        Phase::Submitting | Phase::Uncertain | Phase::Accepted => s.held = amount,
        Phase::Rendered => s.spent = amount,
        Phase::SubmitFailed => match rec.settlement {
            Some(Settlement::Settled) => s.settled = amount,
            _ => s.pending_refund = amount,
        },
        Phase::Prepared | Phase::Rejected | Phase::RenderFailed | Phase::Abandoned => {}
    }
    s
}

/// How a write of `next` over `prev` moves the tenant's counters.
pub fn delta(prev: &OperationRecord, next: &OperationRecord) -> Shares {
    share(next).minus(&share(prev))
}

/// True when the write is a dispatch claim: the one change the tenant's
/// spend limit may refuse. Facts Genace already reported (a 202 holding more
/// than was reserved) are recorded whatever the limit says.
pub fn reserves(prev: &OperationRecord, next: &OperationRecord) -> bool {
    prev.phase == Phase::Prepared && next.phase == Phase::Submitting
}

/// A tenant's totals and limit, as stored on the tenant's ledger item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantLedger {
    pub tenant_id: String,
    pub totals: Shares,
    /// The most credits the tenant may hold at once; none means no limit.
    pub spend_limit: Option<Millicredits>,
}

impl TenantLedger {
    /// Credits a new claim may still reserve, when a limit is set.
    pub fn headroom(&self) -> Option<Millicredits> {
        self.spend_limit.map(|l| l - self.totals.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::sample_prepared;

    fn at(phase: Phase, reserved: Option<f64>, held: Option<f64>) -> OperationRecord {
        let mut r = sample_prepared(chrono::Utc::now());
        r.phase = phase;
        r.reserved_credits = reserved;
        r.held_credits = held;
        r
    }

    #[test]
    fn amounts_are_exact_thousandths() {
        assert_eq!(millis(12.5), 12_500);
        assert_eq!(millis(0.1) + millis(0.2), millis(0.3));
        assert_eq!(millis(f64::NAN), 0);
        assert_eq!(credits(1_250), 1.25);
    }

    #[test]
    fn each_phase_has_its_share() {
        assert!(share(&at(Phase::Prepared, Some(10.0), None)).is_zero());
        assert_eq!(share(&at(Phase::Submitting, Some(10.0), None)).held, 10_000);
        assert_eq!(share(&at(Phase::Uncertain, Some(10.0), None)).held, 10_000);
        // The 202's amount replaces the reservation.
        assert_eq!(share(&at(Phase::Accepted, Some(10.0), Some(12.5))).held, 12_500);
        assert_eq!(share(&at(Phase::Rendered, Some(10.0), Some(12.5))).spent, 12_500);
        assert!(share(&at(Phase::RenderFailed, Some(10.0), Some(12.5))).is_zero());
        assert!(share(&at(Phase::Rejected, Some(10.0), None)).is_zero());
        assert!(share(&at(Phase::Abandoned, Some(10.0), None)).is_zero());
        let mut failed = at(Phase::SubmitFailed, Some(10.0), None);
        failed.settlement = Some(Settlement::Pending);
        assert_eq!(share(&failed).pending_refund, 10_000);
        failed.settlement = Some(Settlement::Settled);
        assert_eq!(
            share(&failed),
            Shares {
                settled: 10_000,
                ..Shares::default()
            }
        );
    }

    #[test]
    fn a_delta_moves_credits_between_columns() {
        let accepted = at(Phase::Accepted, Some(10.0), Some(12.5));
        let rendered = at(Phase::Rendered, Some(10.0), Some(12.5));
        let d = delta(&accepted, &rendered);
        assert_eq!((d.held, d.spent, d.pending_refund, d.settled), (-12_500, 12_500, 0, 0));
        assert!(delta(&rendered, &rendered).is_zero());
        assert_eq!(share(&accepted).plus(&d), share(&rendered));
    }

    #[test]
    fn only_a_claim_is_subject_to_the_limit() {
        let prepared = at(Phase::Prepared, None, None);
        let submitting = at(Phase::Submitting, Some(10.0), None);
        let accepted = at(Phase::Accepted, Some(10.0), Some(50.0));
        assert!(reserves(&prepared, &submitting));
        assert!(!reserves(&submitting, &accepted));
        assert!(!reserves(&prepared, &prepared));
    }

    #[test]
    fn headroom_is_the_limit_less_what_is_held() {
        let mut l = TenantLedger::default();
        assert_eq!(l.headroom(), None);
        l.spend_limit = Some(30_000);
        l.totals.held = 12_500;
        assert_eq!(l.headroom(), Some(17_500));
    }
}
