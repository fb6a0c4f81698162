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

use serde::{Deserialize, Serialize};

use crate::record::{OperationRecord, Phase, Settlement};

/// Credits as integer thousandths: an amount, never a count. Arithmetic is
/// checked; a view shows it as credits ([`Millicredits::credits`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Millicredits(i64);

impl Millicredits {
    pub const ZERO: Millicredits = Millicredits(0);

    /// `n` thousandths of a credit.
    pub const fn new(n: i64) -> Self {
        Self(n)
    }

    /// The amount in thousandths, as stored.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// The amount as credits, for views.
    pub fn credits(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// `self - other`, at least zero.
    pub fn saturating_sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0))
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }
}

impl std::fmt::Display for Millicredits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::ops::Add for Millicredits {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self(self.0 + other.0)
    }
}

impl std::ops::Sub for Millicredits {
    type Output = Self;

    fn sub(self, other: Self) -> Self {
        Self(self.0 - other.0)
    }
}

impl std::ops::Neg for Millicredits {
    type Output = Self;

    fn neg(self) -> Self {
        Self(-self.0)
    }
}

impl std::ops::AddAssign for Millicredits {
    fn add_assign(&mut self, other: Self) {
        self.0 += other.0;
    }
}

impl std::ops::SubAssign for Millicredits {
    fn sub_assign(&mut self, other: Self) {
        self.0 -= other.0;
    }
}

impl std::iter::Sum for Millicredits {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        Self(iter.map(|m| m.0).sum())
    }
}

impl std::str::FromStr for Millicredits {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// The most credits one job may hold, as far as the ledger believes Genace.
/// A 202 reporting more (or a negative, or a non-finite amount) is still an
/// accepted job, but its amount is not: the claim's reservation stands in.
/// A constant, not a setting: a stored record's share must not change when
/// configuration does, or the counters would stop equalling their sum.
pub const MAX_HELD_CREDITS: f64 = 100_000.0;

/// The largest amount, in millicredits, any single figure of the ledger
/// takes (a spend limit, one record's share): a trillion credits. Sums of
/// such figures are checked, never wrapped.
pub const MAX_MILLIS: Millicredits = Millicredits(1_000_000_000_000_000);

/// What a claim of `rec` reserves under its tenant's spend limit: its
/// recorded reservation, or nothing (a record written before waits
/// recorded one: its claim decides).
pub fn reservation(rec: &OperationRecord) -> Millicredits {
    rec.reserved_credits
        .filter(|r| r.is_finite() && *r >= 0.0)
        .map_or(Millicredits::ZERO, millis)
}

/// Converts a credit amount to millicredits, rounding to the nearest and
/// clamping into `-MAX_MILLIS..=MAX_MILLIS`; a non-finite amount is 0.
/// Callers bound their inputs first ([`credible_held`], the spend-limit
/// parser); the clamp only keeps a slip from saturating a counter.
pub fn millis(credits: f64) -> Millicredits {
    if credits.is_finite() {
        let m = (credits * 1000.0).round();
        let bound = MAX_MILLIS.0 as f64;
        Millicredits(m.clamp(-bound, bound) as i64)
    } else {
        Millicredits::ZERO
    }
}

/// A `held_credits` Genace reported, if the ledger may believe it: finite,
/// at least 0 and at most [`MAX_HELD_CREDITS`].
pub fn credible_held(reported: f64) -> Option<f64> {
    (reported.is_finite() && (0.0..=MAX_HELD_CREDITS).contains(&reported)).then_some(reported)
}

/// Arithmetic on the ledger left its range: a bug or corrupt data, refused
/// rather than wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ledger arithmetic overflowed")]
pub struct Overflow;

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
    /// Jobs that hold a slot of Genace's capacity: 1 from the dispatch claim
    /// until Genace is known to be done with the job (the phases that hold
    /// credits), else 0. A count, not credits.
    pub in_flight: i64,
    /// Operations waiting in their tenant's order, for a slot of Genace's
    /// capacity or for the spend limit: 1 while the operation is `prepared`
    /// and waits in order ([`OperationRecord::waits_in_order`]), else 0.
    pub waiting: i64,
    /// Of those, the ones waiting for a slot of Genace's capacity: 1 while
    /// the operation is `prepared` with a capacity hold, else 0. While any
    /// wait, a claim that did not wait yields to them (the account's
    /// [`AccountCapacity::yields`]).
    pub queued: i64,
}

impl Shares {
    pub fn is_zero(&self) -> bool {
        *self == Shares::default()
    }

    fn zip(&self, other: &Shares, f: fn(i64, i64) -> Option<i64>) -> Result<Shares, Overflow> {
        let m = |a: Millicredits, b: Millicredits| f(a.0, b.0).map(Millicredits).ok_or(Overflow);
        Ok(Shares {
            held: m(self.held, other.held)?,
            spent: m(self.spent, other.spent)?,
            pending_refund: m(self.pending_refund, other.pending_refund)?,
            settled: m(self.settled, other.settled)?,
            in_flight: f(self.in_flight, other.in_flight).ok_or(Overflow)?,
            waiting: f(self.waiting, other.waiting).ok_or(Overflow)?,
            queued: f(self.queued, other.queued).ok_or(Overflow)?,
        })
    }

    /// `self - other`, field by field, checked.
    pub fn minus(&self, other: &Shares) -> Result<Shares, Overflow> {
        self.zip(other, i64::checked_sub)
    }

    /// `self + other`, field by field, checked.
    pub fn plus(&self, other: &Shares) -> Result<Shares, Overflow> {
        self.zip(other, i64::checked_add)
    }

    /// Whether any counter is below zero: never true of a tenant's totals.
    pub fn any_negative(&self) -> bool {
        self.held.is_negative()
            || self.spent.is_negative()
            || self.pending_refund.is_negative()
            || self.settled.is_negative()
            || self.in_flight < 0
            || self.waiting < 0
            || self.queued < 0
    }
}

/// The credits an operation commits: what Genace said it holds, when that
/// is credible, or else what the claim reserved.
pub fn committed(rec: &OperationRecord) -> Millicredits {
    let believed = match crate::planted::on(crate::planted::TRUST_NEGATIVE_CREDITS) {
        true => rec
            .held_credits
            .filter(|h| *h < 0.0)
            .or(rec.held_credits.and_then(credible_held)),
        false => rec.held_credits.and_then(credible_held),
    };
    believed
        .or(rec.reserved_credits.filter(|r| r.is_finite() && *r >= 0.0))
        .map(millis)
        .unwrap_or_default()
}

/// The phase whose credits the record counts: its own, or for an abandoned
/// operation the one it keeps ([`OperationRecord::ledger_phase`]). A record
/// abandoned before that field existed counts as nothing, as it always did.
pub fn counted_phase(rec: &OperationRecord) -> Phase {
    match rec.phase {
        Phase::Abandoned => rec.ledger_phase.unwrap_or(Phase::Abandoned),
        phase => phase,
    }
}

/// The operation's share of its tenant's ledger.
///
/// - `submitting` and `uncertain` hold the reservation: a job may exist.
/// - `accepted` holds what the 202 reported.
/// - those three, and only those, also hold a slot of Genace's capacity
///   (`in_flight`): a job may be running there.
/// - `rendered` spent it.
/// - `submit_failed` waits for its refund until an operator settles it.
/// - `prepared`, `rejected` and `render_failed` hold nothing: no job, a
///   refused request, a failed render (Genace releases its hold).
/// - `abandoned` counts as the phase it keeps ([`counted_phase`]): an abandon
///   after rendering keeps what was spent, one after a 502 keeps the pending
///   refund, one while a job may run keeps the hold until Genace says the
///   job is over or an operator confirms it never ran.
pub fn share(rec: &OperationRecord) -> Shares {
    use crate::planted;
    let amount = committed(rec);
    let mut s = Shares::default();
    let phase = match counted_phase(rec) {
        // Planted bugs (the simulator's builds only).
        _ if rec.phase == Phase::Abandoned && planted::on(planted::ABANDON_ERASES_CREDITS) => Phase::Abandoned,
        Phase::RenderFailed if planted::on(planted::RENDER_FAILED_SPENT) => Phase::Rendered,
        Phase::Accepted if planted::on(planted::ACCEPTED_HOLDS_NOTHING) => Phase::Prepared,
        phase => phase,
    };
    match phase {
        Phase::Submitting | Phase::Uncertain | Phase::Accepted => {
            s.held = amount;
            s.in_flight = 1;
        }
        Phase::Rendered => s.spent = amount,
        Phase::SubmitFailed => match rec.settlement {
            Some(Settlement::Settled) => s.settled = amount,
            _ => s.pending_refund = amount,
        },
        Phase::RenderFailed if planted::on(planted::RENDER_FAILED_KEEPS_SLOT) => s.in_flight = 1,
        Phase::Prepared if rec.waits_in_order().is_some() => {
            s.waiting = 1;
            s.queued = i64::from(matches!(rec.wait(), Some((crate::record::WaitReason::Capacity, _))));
        }
        Phase::Prepared | Phase::Rejected | Phase::RenderFailed | Phase::Abandoned | Phase::Cancelled => {}
    }
    s
}

/// How a write of `next` over `prev` moves the tenant's counters.
pub fn delta(prev: &OperationRecord, next: &OperationRecord) -> Result<Shares, Overflow> {
    share(next).minus(&share(prev))
}

/// True when the write is a dispatch claim: the one change the tenant's
/// spend limit may refuse. Facts Genace already reported (a 202 holding more
/// than was reserved) are recorded whatever the limit says.
pub fn reserves(prev: &OperationRecord, next: &OperationRecord) -> bool {
    prev.phase == Phase::Prepared && next.phase == Phase::Submitting
}

/// Whether the write of `next` over `prev` frees room a waiting operation
/// may need: a slot of the account (a job Genace is done with, or never
/// ran) or credits the tenant held (a 202 holding less than the claim
/// reserved, a 502 whose job failed). Judged on the record the write
/// replaced, not on an earlier read of it.
pub fn frees_room(prev: &OperationRecord, next: &OperationRecord) -> bool {
    let (before, after) = (share(prev), share(next));
    after.in_flight < before.in_flight || after.held < before.held
}

/// Whether the write of `next` over `prev` ends a job that Genace ran for
/// us: its slot frees and Genace had given it a job id. The account counts
/// these; a learned limit rises with them
/// ([`AccountCapacity::raised`](crate::capacity::AccountCapacity::raised)).
pub fn ends_a_job(prev: &OperationRecord, next: &OperationRecord) -> bool {
    share(next).in_flight < share(prev).in_flight && prev.remote_job_id.is_some()
}

/// A tenant's totals and limit, as stored on the tenant's ledger item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantLedger {
    pub tenant_id: String,
    pub totals: Shares,
    /// The most credits the tenant may hold at once; none means no limit.
    pub spend_limit: Option<Millicredits>,
    /// The most jobs the tenant may have in flight at once (its share of
    /// Genace's capacity); none means only the account's limit applies.
    pub max_in_flight: Option<u32>,
}

impl TenantLedger {
    /// Whether a claim fits under the tenant's own limit of jobs in flight.
    pub fn has_a_slot(&self) -> bool {
        self.max_in_flight
            .is_none_or(|max| self.totals.in_flight < i64::from(max))
    }

    /// Credits a new claim may still reserve, when a limit is set.
    pub fn headroom(&self) -> Option<Millicredits> {
        self.spend_limit.map(|l| l.saturating_sub(self.totals.held))
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
        assert_eq!(millis(12.5), Millicredits::new(12_500));
        assert_eq!(millis(0.1) + millis(0.2), millis(0.3));
        assert_eq!(millis(f64::NAN), Millicredits::ZERO);
        assert_eq!(millis(1e300), MAX_MILLIS, "clamped, never saturated");
        assert_eq!(millis(-1e300), -MAX_MILLIS);
        assert_eq!(Millicredits::new(1_250).credits(), 1.25);
    }

    #[test]
    fn each_phase_has_its_share() {
        assert!(share(&at(Phase::Prepared, Some(10.0), None)).is_zero());
        assert_eq!(
            share(&at(Phase::Submitting, Some(10.0), None)).held,
            Millicredits::new(10_000)
        );
        for phase in [Phase::Submitting, Phase::Uncertain, Phase::Accepted] {
            assert_eq!(
                share(&at(phase, Some(10.0), None)).in_flight,
                1,
                "{phase:?} holds a slot"
            );
        }
        for phase in [
            Phase::Prepared,
            Phase::Rendered,
            Phase::RenderFailed,
            Phase::Rejected,
            Phase::SubmitFailed,
        ] {
            assert_eq!(
                share(&at(phase, Some(10.0), None)).in_flight,
                0,
                "{phase:?} holds no slot"
            );
        }
        assert_eq!(
            share(&at(Phase::Uncertain, Some(10.0), None)).held,
            Millicredits::new(10_000)
        );
        // The 202's amount replaces the reservation.
        assert_eq!(
            share(&at(Phase::Accepted, Some(10.0), Some(12.5))).held,
            Millicredits::new(12_500)
        );
        assert_eq!(
            share(&at(Phase::Rendered, Some(10.0), Some(12.5))).spent,
            Millicredits::new(12_500)
        );
        assert!(share(&at(Phase::RenderFailed, Some(10.0), Some(12.5))).is_zero());
        assert!(share(&at(Phase::Rejected, Some(10.0), None)).is_zero());
        assert!(share(&at(Phase::Abandoned, Some(10.0), None)).is_zero());
        let mut failed = at(Phase::SubmitFailed, Some(10.0), None);
        failed.settlement = Some(Settlement::Pending);
        assert_eq!(share(&failed).pending_refund, Millicredits::new(10_000));
        failed.settlement = Some(Settlement::Settled);
        assert_eq!(
            share(&failed),
            Shares {
                settled: Millicredits::new(10_000),
                ..Shares::default()
            }
        );
    }

    #[test]
    fn a_delta_moves_credits_between_columns() {
        let accepted = at(Phase::Accepted, Some(10.0), Some(12.5));
        let rendered = at(Phase::Rendered, Some(10.0), Some(12.5));
        let d = delta(&accepted, &rendered).unwrap();
        assert_eq!(
            (d.held, d.spent, d.pending_refund, d.settled),
            (
                Millicredits::new(-12_500),
                Millicredits::new(12_500),
                Millicredits::ZERO,
                Millicredits::ZERO
            )
        );
        assert_eq!(d.in_flight, -1, "rendering frees the slot");
        assert!(delta(&rendered, &rendered).unwrap().is_zero());
        assert_eq!(share(&accepted).plus(&d), Ok(share(&rendered)));
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
        l.spend_limit = Some(Millicredits::new(30_000));
        l.totals.held = Millicredits::new(12_500);
        assert_eq!(l.headroom(), Some(Millicredits::new(17_500)));
    }

    #[test]
    fn only_credible_amounts_from_genace_are_believed() {
        for bad in [
            -0.001,
            -5.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            MAX_HELD_CREDITS + 1.0,
            1e300,
        ] {
            assert_eq!(credible_held(bad), None, "{bad}");
            let r = at(Phase::Accepted, Some(10.0), Some(bad));
            assert_eq!(
                share(&r).held,
                Millicredits::new(10_000),
                "{bad}: the reservation stands in"
            );
        }
        assert_eq!(credible_held(0.0), Some(0.0));
        assert_eq!(credible_held(MAX_HELD_CREDITS), Some(MAX_HELD_CREDITS));
    }

    #[test]
    fn sums_are_checked_not_wrapped() {
        let big = Shares {
            held: Millicredits::new(i64::MAX),
            ..Shares::default()
        };
        let one = Shares {
            held: Millicredits::new(1),
            ..Shares::default()
        };
        assert_eq!(big.plus(&one), Err(Overflow));
        assert_eq!(
            Shares::default().minus(&big).map(|s| s.held),
            Ok(Millicredits::new(-i64::MAX))
        );
        let low = Shares {
            spent: Millicredits::new(i64::MIN),
            ..Shares::default()
        };
        assert_eq!(
            low.minus(&Shares {
                spent: Millicredits::new(1),
                ..Shares::default()
            }),
            Err(Overflow)
        );
        let l = TenantLedger {
            spend_limit: Some(Millicredits::new(i64::MIN)),
            totals: big,
            ..TenantLedger::default()
        };
        assert_eq!(l.headroom(), Some(Millicredits::new(i64::MIN)));
    }

    /// An abandon stops our work, not Genace's: what the job cost stays.
    #[test]
    fn an_abandoned_operation_counts_as_the_phase_it_keeps() {
        let mut r = at(Phase::Abandoned, Some(10.0), Some(12.5));
        assert!(share(&r).is_zero(), "abandoned before ledger_phase existed: nothing");
        r.ledger_phase = Some(Phase::Rendered);
        assert_eq!(share(&r).spent, Millicredits::new(12_500));
        r.ledger_phase = Some(Phase::Accepted);
        assert_eq!(share(&r).held, Millicredits::new(12_500));
        r.ledger_phase = Some(Phase::Uncertain);
        assert_eq!(share(&r).held, Millicredits::new(12_500));
        r.ledger_phase = Some(Phase::SubmitFailed);
        r.settlement = Some(Settlement::Pending);
        assert_eq!(share(&r).pending_refund, Millicredits::new(12_500));
        r.settlement = Some(Settlement::Settled);
        assert_eq!(share(&r).settled, Millicredits::new(12_500));
        for nothing in [Phase::Prepared, Phase::RenderFailed, Phase::Rejected] {
            r.ledger_phase = Some(nothing);
            assert!(share(&r).is_zero());
        }
    }

    #[test]
    fn only_a_job_genace_ran_counts_as_ended() {
        let accepted = {
            let mut r = at(Phase::Accepted, Some(1.0), None);
            r.remote_job_id = Some("job_1".into());
            r
        };
        let mut rendered = accepted.clone();
        rendered.phase = Phase::Rendered;
        assert!(ends_a_job(&accepted, &rendered));
        // A claim released after a 429 frees its slot, but no job ran.
        let submitting = at(Phase::Submitting, Some(1.0), None);
        let released = at(Phase::Prepared, None, None);
        assert!(!ends_a_job(&submitting, &released));
    }
}
