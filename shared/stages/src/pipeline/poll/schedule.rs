//! When a chain of looks looks next: the plan drawn from the class's
//! render times at every look, the delay to the next look (on the plan,
//! else on the age-based lattice, from the planned time of a look that
//! came on time), and how a poll message carries it (the queue's whole
//! seconds, the planned time the look waits for, and its place in a
//! batch).

use chrono::{DateTime, Utc};
use tracing::warn;

use crate::ports::table::prelude::*;
use genace_core::messages::{PollHistory, WorkMessage};
use genace_core::record::OperationRecord;
use genace_core::render::{PollPlan, RenderClass};

/// `history` with the job's plan, drawn from its class's render times as
/// they are now (none with too few): read at every look, so that a chain
/// follows the plan a view walks (`api::progress` reads the same times)
/// and its later looks learn from the renders that ended since its
/// first. A read that fails keeps the plan the message carried.
pub(crate) async fn planned<S: RenderTimeLog>(
    store: &S,
    rec: &OperationRecord,
    mut history: PollHistory,
    max_delay: u32,
) -> PollHistory {
    let class = RenderClass::of(rec);
    match store.render_times(&class).await {
        Ok(times) => history.plan = PollPlan::from_times(&times, f64::from(max_delay.max(1))),
        Err(e) => {
            warn!(operation_id = %rec.operation_id, error = %e, "render times unread; the carried plan stays");
        }
    }
    history.planned = true;
    history
}

/// Seconds until the look after the `history.looks` before it: the
/// plan's, to the tenth of a second it plans, else the age-based
/// schedule, within `max` (`POLL_MAX_DELAY_SECONDS`). A look that came
/// at its planned time (or up to a second after it) finds the next look
/// from that time, not from its own: a look a few milliseconds late would
/// otherwise pass over the plan's next look, a second away, and the
/// looks of a long render would drift later with each one. So the looks
/// keep to the schedule a view walks from the acceptance
/// ([`genace_core::render::next_planned_look`]), and a client that reads
/// just after the look it suggests sees what that look saw.
pub(crate) fn next_look_delay(rec: &OperationRecord, history: &PollHistory, now: DateTime<Utc>, max: u32) -> f64 {
    let since_acceptance = |ms: i64| {
        rec.accepted_at
            .map_or(0.0, |a| ms.saturating_sub(a.timestamp_millis()).max(0) as f64 / 1000.0)
    };
    let age = since_acceptance(now.timestamp_millis());
    let planned = history
        .look_at_ms
        .map(since_acceptance)
        .filter(|p| (age - 1.0..=age).contains(p))
        .unwrap_or(age);
    let max_delay = f64::from(max.max(1));
    let by_age = genace_core::render::next_age_based_look(planned, max_delay) - planned;
    let from_base = match &history.plan {
        _ if genace_core::planted::on(genace_core::planted::LOOKS_UNBOUNDED) => 1.0,
        Some(plan) => plan.next_delay(planned, history.looks + 1, by_age),
        None => by_age,
    };
    (planned + from_base - age).clamp(MIN_LOOK_DELAY_SECONDS, max_delay)
}

/// The shortest delay between two looks: half the plan's spacing, for a
/// look that came late to its planned time.
const MIN_LOOK_DELAY_SECONDS: f64 = genace_core::render::MIN_SPACING_SECONDS / 2.0;

/// Where a poll message goes in its batch: by its look's planned time, one
/// without a time (or a body that does not parse) first.
pub(super) fn look_order(body: &str) -> i64 {
    WorkMessage::parse(body)
        .ok()
        .and_then(|m| m.poll?.look_at_ms)
        .unwrap_or(i64::MIN)
}

/// The planned time (milliseconds since the epoch) of the look `delay`
/// seconds after `now`, as a poll message carries it
/// ([`PollHistory::look_at_ms`]).
pub(crate) fn look_at_ms(now: DateTime<Utc>, delay: f64) -> i64 {
    now.timestamp_millis().saturating_add((delay * 1000.0).round() as i64)
}

/// A look the queue hands over at most this late to its planned time
/// comes without a wait: a delay a few milliseconds short of a whole
/// second is sent as that second, not as one less and a wait of nearly
/// a second.
const LATE_OK_MS: i64 = 100;

/// The whole seconds a poll message sent at `sent` is delayed by for a
/// look at `at_ms`: SQS counts the delay from the send, and the look
/// waits out the rest once received.
pub(crate) fn queue_delay_until(at_ms: i64, sent: DateTime<Utc>) -> u32 {
    let ms = at_ms.saturating_sub(sent.timestamp_millis()).saturating_add(LATE_OK_MS);
    u32::try_from(ms.max(0) / 1000).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod queue_delay_tests {
    use super::*;

    #[test]
    fn a_look_is_sent_with_its_whole_seconds_and_none_a_tenth_short() {
        let sent = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let at = |ms: i64| 1_000_000 + ms;
        // The rest is waited out once received...
        assert_eq!(queue_delay_until(at(4_850), sent), 4);
        assert_eq!(queue_delay_until(at(4_899), sent), 4);
        // ...unless the message, a whole second later, is at most a tenth
        // of a second late: then it needs no wait.
        assert_eq!(queue_delay_until(at(4_900), sent), 5);
        assert_eq!(queue_delay_until(at(4_995), sent), 5);
        assert_eq!(queue_delay_until(at(5_000), sent), 5);
        // A look already due goes at once.
        assert_eq!(queue_delay_until(at(-3_000), sent), 0);
        assert_eq!(queue_delay_until(i64::MIN, sent), 0);
        assert_eq!(look_at_ms(sent, 2.25), at(2_250));
    }

    #[test]
    fn a_batch_of_looks_goes_by_their_planned_times() {
        let look = |at: Option<i64>| {
            let history = PollHistory {
                look_at_ms: at,
                ..PollHistory::default()
            };
            let message = WorkMessage {
                operation_id: genace_core::domain::OperationId::parse("op_0123456789abcdef0123456789abcdef").unwrap(),
                poll: Some(history),
                look: false,
            };
            serde_json::to_string(&message).unwrap()
        };
        assert_eq!(look_order(&look(Some(5_000))), 5_000);
        assert_eq!(look_order(&look(None)), i64::MIN);
        assert_eq!(look_order("not a message"), i64::MIN);
    }
}
