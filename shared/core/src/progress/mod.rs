//! What a client is shown of an unfinished operation's progress, so a UI
//! can tell a queued operation from a stuck one:
//!
//! - while it waits for a slot: its place in its tenant's order, how many
//!   operations of all tenants the fair rotation serves before it (a
//!   range), and when it is expected to start ([`QueueProgress`]);
//! - while its job renders: when it is expected to end, as the 50th and
//!   90th percentiles of its class's learned render times given how long
//!   it has run, or that there is too little data to say ([`ExpectedEnd`]);
//! - always: when to look again ([`next_look`]), just after the poll
//!   stage's next planned look, so a client that follows it sees the end
//!   about as soon as the service does.
//!
//! Pure: the API reads what this needs once per view (the class's render
//! times, the waiting tenants' ledgers, the account) and passes it in.

use chrono::{DateTime, Duration, Utc};

use crate::machine::is_finished;
use crate::record::{CaseReason, DeliveryState, OperationRecord, Phase, WaitReason};
use crate::render::{MIN_SAMPLES, PollPlan, RenderTimes, next_planned_look};

/// How long after the poll stage's next planned look a client should look:
/// the look itself, its write and the queue's delivery.
pub const LOOK_MARGIN_MS: i64 = 1_000;
/// The next look while work runs that ends in seconds (a claim, a POST, a
/// delivery).
pub const BUSY_LOOK_SECONDS: i64 = 2;
/// The longest a waiting operation's client is told to wait before it
/// looks again, whatever the estimate: a wait may end sooner than
/// expected, and a short render then ends soon after.
pub const WAITING_LOOK_SECONDS: i64 = 10;
/// The next look while an operation waits for its tenant's credits.
pub const CREDIT_WAIT_LOOK_SECONDS: i64 = 60;
/// The next look while a person must decide (a case is open).
pub const PERSON_LOOK_SECONDS: i64 = 300;
/// The share of a class's renders past which an estimate is no longer
/// given: the job has run longer than all but this share of them.
pub const PAST_LEARNED: f64 = 0.995;

/// The longest span a progress time is put from its base: past it, the
/// figure says nothing a client could use, and chrono's range is near.
const LONGEST_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// `base` plus `seconds`, the seconds bounded to [0, [`LONGEST_SECONDS`]]
/// (a NaN counts as 0), never out of chrono's range.
fn after(base: DateTime<Utc>, seconds: f64) -> DateTime<Utc> {
    let s = if seconds.is_nan() {
        0.0
    } else {
        seconds.clamp(0.0, LONGEST_SECONDS)
    };
    Duration::try_milliseconds((s * 1000.0) as i64)
        .and_then(|d| base.checked_add_signed(d))
        .unwrap_or(base)
}

/// How an expected end was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// From the class's learned render times.
    Learned,
    /// The class has fewer than [`MIN_SAMPLES`] finished renders.
    TooLittleData,
    /// The job has run longer than nearly every render of its class.
    PastLearned,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Learned => "learned",
            Basis::TooLittleData => "too_little_data",
            Basis::PastLearned => "past_learned",
        }
    }
}

/// When a rendering job is expected to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedEnd {
    pub basis: Basis,
    /// Finished renders of the class the estimate draws on.
    pub samples: u32,
    /// Half of the class's renders that ran this long ended by then; none
    /// unless learned.
    pub p50_at: Option<DateTime<Utc>>,
    /// Nine in ten did.
    pub p90_at: Option<DateTime<Utc>>,
}

/// The expected end of a job accepted at `accepted_at`, at `now`: the
/// quantiles of its class's render times among those at least as long
/// as it has run. A job that has run `age` seconds ends by the time `t`
/// with probability `(F(t) - F(age)) / (1 - F(age))`, so the share `q`
/// ends by `F⁻¹(F(age) + q (1 - F(age)))`.
pub fn expected_end(accepted_at: DateTime<Utc>, times: &RenderTimes, now: DateTime<Utc>) -> ExpectedEnd {
    let samples = times.samples();
    let none = |basis| ExpectedEnd {
        basis,
        samples,
        p50_at: None,
        p90_at: None,
    };
    if samples < MIN_SAMPLES {
        return none(Basis::TooLittleData);
    }
    let age = ((now - accepted_at).num_milliseconds().max(0) as f64) / 1000.0;
    let done = times.cdf(age).unwrap_or(0.0);
    if done >= PAST_LEARNED {
        return none(Basis::PastLearned);
    }
    let at = |q: f64| {
        times
            .quantile(done + q * (1.0 - done))
            .map(|s| after(accepted_at, s.max(age)))
    };
    ExpectedEnd {
        basis: Basis::Learned,
        samples,
        p50_at: at(0.5),
        p90_at: at(0.9),
    }
}

/// A waiting tenant as the fair rotation weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rival {
    pub waiting: i64,
    pub in_flight: i64,
}

/// What is known of the queue an operation waits in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// Its place in its tenant's order (1: next); none when not counted.
    pub place: Option<u32>,
    /// Its tenant's jobs in flight.
    pub own_in_flight: i64,
    /// The other waiting tenants.
    pub rivals: Vec<Rival>,
    /// Whether `rivals` names every waiting tenant.
    pub rivals_complete: bool,
    /// The account's slots free now (its limit less its jobs in flight).
    pub free_slots: i64,
    /// The account's limit of jobs in flight; none: no limit.
    pub limit: Option<u32>,
    /// Whether its own tenant may take a slot now: under its own limit of
    /// jobs in flight, with credits free. If not, it starts when its own
    /// jobs end, which the account's turnover does not say.
    pub tenant_may_start: bool,
}

/// How many operations of all tenants the account serves before one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    pub min: u32,
    /// None when not every waiting tenant was read.
    pub max: Option<u32>,
}

/// Where a waiting operation stands, and when it is expected to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueProgress {
    pub place: Option<u32>,
    pub ahead: Option<Ahead>,
    pub expected_start: Option<StartWindow>,
}

/// When a waiting operation is expected to be dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartWindow {
    pub earliest: DateTime<Utc>,
    /// None when how many are ahead has no upper bound.
    pub latest: Option<DateTime<Utc>>,
}

/// Operations of all tenants served before one at `place` in its tenant's
/// order. The rotation gives each free slot to the waiting tenant with the
/// fewest jobs in flight (taken slots counted), so its own tenant's
/// `place - 1` go first, and each rival serves at most as many as it
/// waits, and at most `place` plus however many more jobs in flight its
/// own tenant has: past that, the two alternate.
pub fn ahead_in_account(queue: &Queue) -> Option<Ahead> {
    let own = queue.place?.saturating_sub(1);
    let rivals: i64 = queue
        .rivals
        .iter()
        .map(|r| {
            let lead = queue.own_in_flight.saturating_sub(r.in_flight).max(0);
            r.waiting
                .max(0)
                .min(i64::from(own).saturating_add(1).saturating_add(lead))
        })
        .fold(0, i64::saturating_add);
    let max = u32::try_from(i64::from(own).saturating_add(rivals)).unwrap_or(u32::MAX);
    Some(Ahead {
        min: own,
        max: queue.rivals_complete.then_some(max),
    })
}

/// When an operation with `ahead` before it is expected to start, slots
/// freeing at the account's limit over a typical render (`typical`
/// seconds): the first `free_slots` start at once, each further one a
/// slot's turn later. None without a limit (nothing waits for a slot
/// then) or a typical render, or while its own tenant may not take a slot.
pub fn expected_start(queue: &Queue, ahead: Ahead, typical: Option<f64>, now: DateTime<Utc>) -> Option<StartWindow> {
    let limit = f64::from(queue.limit?.max(1));
    let typical = typical.filter(|t| t.is_finite() && *t > 0.0)?;
    if !queue.tenant_may_start {
        return None;
    }
    let at = |before: u32| {
        let turns = (i64::from(before) + 1).saturating_sub(queue.free_slots.max(0)).max(0) as f64;
        after(now, turns * typical / limit)
    };
    Some(StartWindow {
        earliest: at(ahead.min),
        latest: ahead.max.map(at),
    })
}

/// The queue progress of an operation waiting for a slot; none for one
/// that waits for credits (its start depends on the tenant's other jobs'
/// costs, which nothing here knows) or does not wait.
pub fn queue_progress(
    rec: &OperationRecord,
    queue: &Queue,
    typical: Option<f64>,
    now: DateTime<Utc>,
) -> Option<QueueProgress> {
    let (reason, _) = rec.wait()?;
    let ahead = ahead_in_account(queue);
    let expected_start = match reason {
        WaitReason::Capacity => ahead.and_then(|a| expected_start(queue, a, typical, now)),
        WaitReason::SpendLimit => None,
    };
    Some(QueueProgress {
        place: queue.place,
        ahead,
        expected_start,
    })
}

/// What the next look is drawn from beside the record.
#[derive(Debug, Clone, Copy)]
pub struct LookHints<'a> {
    /// The class's poll plan ([`PollPlan::from_times`] of its render
    /// times; none: the age-based schedule, as the poll stage follows
    /// without a plan).
    pub plan: Option<&'a PollPlan>,
    /// The poll stage's longest delay (`POLL_MAX_DELAY_SECONDS`; at least
    /// 1, as the poll stage takes it).
    pub max_delay: f64,
    /// A waiting operation's expected start.
    pub start: Option<&'a StartWindow>,
}

impl Default for LookHints<'_> {
    /// No plan, no start, the longest delay SQS allows.
    fn default() -> Self {
        Self {
            plan: None,
            max_delay: MAX_DELAY_SECONDS,
            start: None,
        }
    }
}

/// The poll stage's first look without a plan, and its longest delay when
/// the deployment says nothing (SQS's longest).
pub const FIRST_LOOK_SECONDS: f64 = 5.0;
pub const MAX_DELAY_SECONDS: f64 = 900.0;

/// When a client should look at the operation again; none once it is
/// finished. Just after the poll stage's next planned look while its job
/// renders; soon while work that ends in seconds runs; at the expected
/// start (within [`WAITING_LOOK_SECONDS`]) while it waits; rarely while a
/// person must decide.
pub fn next_look(rec: &OperationRecord, hints: LookHints<'_>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if is_finished(rec) {
        return None;
    }
    let soon = now + Duration::seconds(BUSY_LOOK_SECONDS);
    let person = now + Duration::seconds(PERSON_LOOK_SECONDS);
    // A job whose looks go on (a stalled render's case rides along) is
    // looked at on the poll stage's schedule; any other case waits for a
    // person, or for the retry it names.
    let looked_at = matches!(rec.phase, Phase::Accepted | Phase::Abandoned)
        && rec.case.as_ref().is_none_or(|c| c.reason == CaseReason::RenderStalled);
    let at = match rec.phase {
        _ if rec.case.is_some() && !looked_at => rec
            .retry_at_ms
            .and_then(DateTime::from_timestamp_millis)
            .map_or(person, |r| r.clamp(soon, person)),
        Phase::Accepted | Phase::Abandoned => match rec.accepted_at {
            Some(accepted) => {
                let max = if hints.max_delay.is_nan() {
                    1.0
                } else {
                    hints.max_delay.max(1.0)
                };
                let age = ((now - accepted).num_milliseconds().max(0) as f64) / 1000.0;
                let look = next_planned_look(hints.plan, age, FIRST_LOOK_SECONDS, max);
                // An acceptance time ahead of this clock says nothing of
                // when the look comes: at most one longest delay away.
                after(accepted, look + LOOK_MARGIN_MS as f64 / 1000.0).min(after(now, max + 1.0))
            }
            None => person,
        },
        // Credits free when the tenant's other jobs end: minutes, not seconds.
        Phase::Prepared if matches!(rec.wait(), Some((WaitReason::SpendLimit, _))) => {
            now + Duration::seconds(CREDIT_WAIT_LOOK_SECONDS)
        }
        Phase::Prepared if rec.wait().is_some() => {
            let cap = now + Duration::seconds(WAITING_LOOK_SECONDS);
            hints.start.map_or(cap, |s| s.earliest.clamp(soon, cap))
        }
        Phase::Rendered if rec.delivery_state == DeliveryState::DeliveryFailed => person,
        // A claim, a POST or a delivery to come, or one that runs: soon, or
        // when a retry is due (a 429's, a failed delivery's). The due time
        // is the sweep's safety deadline, minutes late: never this.
        _ => rec
            .retry_at_ms
            .and_then(DateTime::from_timestamp_millis)
            .map_or(soon, |r| (r + Duration::milliseconds(LOOK_MARGIN_MS)).max(soon)),
    };
    Some(at.max(now + Duration::seconds(1)))
}

#[cfg(test)]
mod tests;
