//! The Genace account's capacity as the table counts it: the jobs of every
//! tenant that hold a slot, the limits a claim is admitted under (the
//! deployment's, an operator's, and what Genace's 429s taught), and how a
//! learned limit falls and rises. Split over the account's shards by
//! [`crate::shard`]; a tenant's own credits and jobs are its ledger
//! ([`crate::ledger`]).

use serde::Serialize;

/// The most jobs the Genace account limit may be set to; a limit is at least 1.
pub const MAX_IN_FLIGHT_LIMIT: u32 = 10_000;

/// The Genace account's capacity as the table counts it: the jobs of every
/// tenant that hold a slot, and the limits a claim is admitted under.
///
/// Three limits meet here. `configured` is the deployment's
/// (`GENACE_MAX_IN_FLIGHT`). An operator may replace it at run time
/// (`set_limit`); whichever is in force is the most we ever admit
/// ([`Self::max_in_flight`]). Below that, `learned` is what Genace's 429s
/// taught: halved when Genace refuses while we believed there was room,
/// raised by one per `learned` jobs that end, and dropped once it is back
/// at the maximum. A claim is admitted under the lower of the two
/// ([`Self::limit`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AccountCapacity {
    /// The sum of [`Shares::in_flight`] over every record.
    pub in_flight: i64,
    /// The sum of [`Shares::waiting`] over every record: operations waiting
    /// in order, whatever their tenant and whatever for.
    pub waiting: i64,
    /// The sum of [`Shares::queued`]: operations waiting for a slot.
    pub queued: i64,
    /// `GENACE_MAX_IN_FLIGHT`; none: no limit.
    pub configured: Option<u32>,
    /// An operator's limit, set at run time; replaces `configured` while set.
    pub set_limit: Option<u32>,
    /// The limit learned from Genace's 429s; none: the maximum in force.
    pub learned: Option<u32>,
    /// Jobs that ended at Genace ([`ends_a_job`]), ever.
    pub jobs_ended: i64,
    /// `jobs_ended` when `learned` last changed.
    pub learned_mark: i64,
    /// Jobs that must end after `learned_mark` before the learned limit
    /// rises by one; none: as many as the learned limit. Doubled by every
    /// raise Genace refuses at once ([`Self::lowered_after_429`]).
    pub raise_every: Option<u32>,
    /// When a 429 last taught the learned limit or the sweep last probed
    /// it (milliseconds since the epoch): the sweep probes again only
    /// [`PROBE_AFTER_SECONDS`] (times the raise window's growth) later.
    pub learned_at_ms: Option<i64>,
}

/// How long after the last lesson or probe the sweep may probe a stuck
/// learned limit again, at a raise window of the limit itself; a window
/// doubled by refused raises doubles it too.
pub const PROBE_AFTER_SECONDS: i64 = 300;

/// What a 429 taught: the learned limit, and how many jobs must end before
/// it is raised again ([`AccountCapacity::raise_every`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lesson {
    pub learned: u32,
    pub raise_every: Option<u32>,
}

/// The most jobs, as a multiple of the learned limit, that must end before
/// it is raised, however many raises Genace refused.
pub const RAISE_EVERY_MAX_FACTOR: u32 = 16;

impl AccountCapacity {
    /// The most jobs we admit at once: the operator's limit, else the
    /// deployment's; none: no limit.
    pub fn max_in_flight(&self) -> Option<u32> {
        self.set_limit.or(self.configured)
    }

    /// The limit a claim is admitted under now: the maximum, or the learned
    /// limit when it is lower.
    pub fn limit(&self) -> Option<u32> {
        match (self.max_in_flight(), self.learned) {
            (Some(max), Some(learned)) => Some(max.min(learned)),
            (max, learned) => max.or(learned),
        }
    }

    /// Whether a claim would be admitted now.
    pub fn has_room(&self) -> bool {
        self.limit().is_none_or(|max| self.in_flight < i64::from(max))
    }

    /// Whether a claim of an operation that did not wait for a slot must
    /// wait now although a slot may be free: others wait for one, and the
    /// free slot is theirs in turn (their wake-up may be on its way). A
    /// fresh claim that took it would serve the queue first come, first
    /// served, and a tenant whose intents came late would wait behind
    /// every earlier one.
    pub fn yields(&self) -> bool {
        self.queued > 0
    }

    /// Whether nothing is counted: no job in flight, nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.waiting == 0 && self.queued == 0
    }

    /// Free slots under [`Self::limit`]; none: no limit.
    pub fn free_slots(&self) -> Option<u64> {
        self.limit()
            .map(|max| u64::try_from(i64::from(max) - self.in_flight).unwrap_or(0))
    }

    /// The learned limit after Genace refused a claim with 429 while
    /// `in_flight` (this claim's slot included) were ours: one less, the
    /// most Genace was seen to take, at least 1. We see exactly which count
    /// was refused, so the lesson is that count, not a guess (halving would
    /// also fall below slots held by operations that may never end, such as
    /// uncertain ones, and stop dispatch). None when that would not lower
    /// the limit, or when the claim was admitted under a higher limit than
    /// today's (its 429 is news from before the last lesson).
    pub fn lowered_after_429(&self) -> Option<Lesson> {
        let in_flight = u32::try_from(self.in_flight.max(1)).unwrap_or(u32::MAX);
        let limit = self.limit().unwrap_or(MAX_IN_FLIGHT_LIMIT);
        if in_flight > limit {
            return None;
        }
        let lowered = (in_flight - 1).max(1);
        if lowered >= limit {
            return None;
        }
        // The top slot of a limit raised less than a window ago was refused:
        // the raise did not hold, and the next waits twice as long. Any
        // other 429 is news of a lower limit, and the window starts again.
        let raise_failed = self.learned == Some(in_flight) && self.jobs_ended - self.learned_mark < self.raise_window();
        let raise_every = raise_failed.then(|| {
            self.raise_window()
                .saturating_mul(2)
                .min(i64::from(lowered.saturating_mul(RAISE_EVERY_MAX_FACTOR)))
        });
        Some(Lesson {
            learned: lowered,
            raise_every: raise_every.and_then(|w| u32::try_from(w).ok()),
        })
    }

    /// Jobs that must end after the learned limit last changed before it
    /// rises by one: [`Self::raise_every`], at least the limit itself.
    pub fn raise_window(&self) -> i64 {
        let learned = i64::from(self.learned.unwrap_or(0));
        self.raise_every.map_or(learned, |w| i64::from(w).max(learned))
    }

    /// The learned limit one higher, as the sweep probes when dispatch is
    /// stuck under it: operations wait for a slot, the limit is full, no
    /// job ended since it last changed, and the last lesson or probe is
    /// [`PROBE_AFTER_SECONDS`] old at least (more when refused raises
    /// widened the window). None once that reaches the maximum. Outer
    /// none: nothing to probe. Slots held by operations that may never end
    /// (uncertain ones wait for a person) can fill a learned limit, and
    /// then no job of ours ends to raise it; the probe makes sure dispatch
    /// goes on. While jobs end, [`Self::raised`] does it, and an account
    /// with nothing waiting learns nothing from a higher limit.
    pub fn probed(&self, now_ms: i64) -> Option<Option<u32>> {
        let learned = self.learned?;
        let stuck = self.queued > 0 && self.in_flight >= i64::from(learned) && self.jobs_ended <= self.learned_mark;
        let growth = self.raise_window() / i64::from(learned.max(1));
        let wait_ms = PROBE_AFTER_SECONDS * 1000 * growth.max(1);
        let due = self.learned_at_ms.is_none_or(|at| now_ms - at >= wait_ms);
        if !stuck || !due {
            return None;
        }
        Some(self.below_max(learned.saturating_add(1)))
    }

    /// The learned limit once enough jobs ended since it last changed: one
    /// more per [`Self::raise_window`] jobs ended (additive increase), none
    /// once that reaches the maximum (nothing learned holds any more).
    /// Outer none: nothing to change.
    pub fn raised(&self) -> Option<Option<u32>> {
        let learned = self.learned?;
        if self.below_max(learned).is_none() {
            return Some(None);
        }
        if self.jobs_ended.saturating_sub(self.learned_mark) < self.raise_window() {
            return None;
        }
        Some(self.below_max(learned + 1))
    }

    /// A learned limit worth keeping: one below the maximum (the
    /// operator's or deployment's, else [`MAX_IN_FLIGHT_LIMIT`]); none once it
    /// reaches it, when nothing learned holds any more.
    fn below_max(&self, learned: u32) -> Option<u32> {
        let max = self.max_in_flight().unwrap_or(MAX_IN_FLIGHT_LIMIT);
        (learned < max).then_some(learned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(in_flight: i64, configured: Option<u32>, learned: Option<u32>) -> AccountCapacity {
        AccountCapacity {
            in_flight,
            configured,
            learned,
            ..AccountCapacity::default()
        }
    }

    #[test]
    fn the_limit_in_force_is_the_operators_then_the_deployments_and_the_learned_one_only_lowers_it() {
        let mut a = account(3, Some(10), None);
        assert_eq!(
            (a.max_in_flight(), a.limit(), a.free_slots()),
            (Some(10), Some(10), Some(7))
        );
        a.set_limit = Some(4);
        assert_eq!(
            (a.max_in_flight(), a.limit(), a.free_slots()),
            (Some(4), Some(4), Some(1))
        );
        a.learned = Some(2);
        assert_eq!((a.limit(), a.free_slots()), (Some(2), Some(0)));
        assert!(!a.has_room());
        a.learned = Some(9);
        assert_eq!(
            a.limit(),
            Some(4),
            "a learned limit above the maximum does not raise it"
        );
        let unlimited = account(50, None, Some(6));
        assert_eq!(unlimited.limit(), Some(6));
        assert_eq!(account(50, None, None).limit(), None);
        assert!(account(50, None, None).has_room());
    }

    #[test]
    fn a_429_teaches_one_less_than_was_in_flight_once_per_lesson() {
        let learned = |a: AccountCapacity| a.lowered_after_429().map(|l| l.learned);
        // Ten of ours in flight (this claim's slot included) under a limit of ten.
        assert_eq!(learned(account(10, Some(10), None)), Some(9));
        assert_eq!(learned(account(1, Some(10), None)), Some(1));
        // Admitted under an older, higher limit: nothing new to learn.
        assert_eq!(learned(account(9, Some(10), Some(5))), None);
        // Under the learned limit: it falls again.
        assert_eq!(learned(account(4, Some(10), Some(5))), Some(3));
        // Already at 1: nothing lower to learn.
        assert_eq!(learned(account(1, Some(10), Some(1))), None);
        // No limit of ours at all: what was in flight teaches one.
        assert_eq!(learned(account(40, None, None)), Some(39));
        assert_eq!(account(40, None, None).lowered_after_429().unwrap().raise_every, None);
    }

    #[test]
    fn a_raise_refused_at_once_doubles_the_window_and_a_real_drop_resets_it() {
        // Raised to 6 two jobs ago; the claim on the sixth slot is refused.
        let mut a = account(6, Some(20), Some(6));
        (a.learned_mark, a.jobs_ended) = (100, 102);
        let lesson = a.lowered_after_429().unwrap();
        assert_eq!(
            lesson,
            Lesson {
                learned: 5,
                raise_every: Some(12)
            }
        );
        // Refused again after the longer wait: twice as long again.
        a.raise_every = Some(12);
        (a.learned_mark, a.jobs_ended) = (200, 201);
        assert_eq!(a.lowered_after_429().unwrap().raise_every, Some(24));
        // Never past the cap.
        a.raise_every = Some(5 * RAISE_EVERY_MAX_FACTOR);
        assert_eq!(
            a.lowered_after_429().unwrap().raise_every,
            Some(5 * RAISE_EVERY_MAX_FACTOR)
        );
        // A limit that held for a window and then fell: news, not a failed raise.
        a.jobs_ended = 200 + 5 * i64::from(RAISE_EVERY_MAX_FACTOR);
        assert_eq!(a.lowered_after_429().unwrap().raise_every, None);
        // A fall of more than one slot: news too.
        let mut b = account(3, Some(20), Some(6));
        b.raise_every = Some(24);
        assert_eq!(
            b.lowered_after_429(),
            Some(Lesson {
                learned: 2,
                raise_every: None
            })
        );
        // The window in force waits for its jobs.
        let mut c = account(0, Some(20), Some(5));
        (c.raise_every, c.learned_mark, c.jobs_ended) = (Some(20), 0, 19);
        assert_eq!(c.raised(), None);
        c.jobs_ended = 20;
        assert_eq!(c.raised(), Some(Some(6)));
    }

    #[test]
    fn the_sweep_probes_a_learned_limit_upward_only_when_dispatch_is_stuck_under_it() {
        let stuck = |in_flight, configured, learned| AccountCapacity {
            queued: 1,
            ..account(in_flight, configured, learned)
        };
        let now = 10_000_000;
        assert_eq!(stuck(3, Some(10), Some(3)).probed(now), Some(Some(4)));
        assert_eq!(stuck(9, Some(10), Some(9)).probed(now), Some(None));
        assert_eq!(stuck(5, Some(10), None).probed(now), None);
        assert_eq!(stuck(40, None, Some(40)).probed(now), Some(Some(41)));
        // Nothing waits, a slot is free, or a job ended since the last change: no probe.
        assert_eq!(account(3, Some(10), Some(3)).probed(now), None);
        assert_eq!(stuck(2, Some(10), Some(3)).probed(now), None);
        let mut ended = stuck(3, Some(10), Some(3));
        ended.jobs_ended = 1;
        assert_eq!(ended.probed(now), None);
        // Not within the wait after the last lesson or probe, twice as long
        // once a refused raise doubled the window.
        let mut recent = stuck(3, Some(10), Some(3));
        recent.learned_at_ms = Some(now - PROBE_AFTER_SECONDS * 1000 + 1);
        assert_eq!(recent.probed(now), None);
        recent.learned_at_ms = Some(now - PROBE_AFTER_SECONDS * 1000);
        assert_eq!(recent.probed(now), Some(Some(4)));
        recent.raise_every = Some(6);
        assert_eq!(recent.probed(now), None);
        recent.learned_at_ms = Some(now - 2 * PROBE_AFTER_SECONDS * 1000);
        assert_eq!(recent.probed(now), Some(Some(4)));
    }

    #[test]
    fn a_learned_limit_rises_by_one_per_window_of_ended_jobs_and_is_forgotten_at_the_maximum() {
        let mut a = account(0, Some(6), Some(4));
        a.learned_mark = 100;
        a.jobs_ended = 103;
        assert_eq!(a.raised(), None, "three of four jobs ended: not yet");
        a.jobs_ended = 104;
        assert_eq!(a.raised(), Some(Some(5)));
        a.learned = Some(5);
        a.learned_mark = 104;
        a.jobs_ended = 109;
        assert_eq!(a.raised(), Some(None), "back at the maximum: nothing learned holds");
        // A maximum lowered under what was learned forgets it at once.
        a.set_limit = Some(3);
        a.jobs_ended = 104;
        assert_eq!(a.raised(), Some(None));
        assert_eq!(account(0, Some(6), None).raised(), None);
    }
}
