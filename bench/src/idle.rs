//! Where a full account's slots idle, measured from Genace's side: the
//! stand-in's own clock says when each job was created, when its render
//! ended and when a status read first reported that end. Between two jobs
//! on one slot the account idles for two spans: from a job's end to its
//! detection (the first read that saw it), and from that detection, which
//! frees the slot, to the next job's POST.

use std::time::{Duration, Instant};

use genace_local::standin::JobTimes;

use crate::report::percentile;

/// One span's figures over its jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub mean: Duration,
}

impl Span {
    fn of(mut v: Vec<Duration>) -> Self {
        v.sort();
        let total: Duration = v.iter().sum();
        Self {
            count: v.len(),
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            mean: total
                .checked_div(u32::try_from(v.len()).unwrap_or(u32::MAX))
                .unwrap_or_default(),
        }
    }
}

/// The two halves of a slot's idle time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SlotIdle {
    /// A job's end to the first status read that saw it.
    pub detection: Span,
    /// That read (which frees the slot) to the POST that took the slot,
    /// while jobs were still to be submitted.
    pub handover: Span,
    /// POSTs Genace accepted before the read that saw the end they are
    /// paired with: ends seen in another order than they came, or a
    /// learned limit one above the account's.
    pub before_seen: usize,
    /// Idle slot-seconds between jobs, over the slots: what the account's
    /// idling added to the drain, each half apart.
    pub detection_per_slot: Duration,
    pub handover_per_slot: Duration,
}

/// The halves from the stand-in's `jobs` on an account of `slots`, as
/// Genace counts its slots: the k-th job to end frees the slot the
/// (k + slots)-th job created takes. The gap between the two is split at
/// the first read that saw the k-th end; a POST that came before that
/// read leaves no handover, and is counted.
pub(crate) fn slot_idle(jobs: &[JobTimes], slots: usize) -> SlotIdle {
    let detection = jobs
        .iter()
        .filter_map(|j| Some(j.seen_ended?.saturating_duration_since(j.ended)))
        .collect();
    let mut created: Vec<Instant> = jobs.iter().map(|j| j.created).collect();
    created.sort();
    let mut by_end: Vec<&JobTimes> = jobs.iter().collect();
    by_end.sort_by_key(|j| j.ended);
    let (mut handover, mut before_seen) = (Vec::new(), 0);
    let (mut idle_detection, mut idle_handover) = (Duration::ZERO, Duration::ZERO);
    for (freed, next) in by_end.iter().zip(created.iter().skip(slots)) {
        let seen = freed.seen_ended.unwrap_or(*next);
        idle_detection += seen.min(*next).saturating_duration_since(freed.ended);
        let after = next.saturating_duration_since(seen);
        idle_handover += after;
        if *next < seen {
            before_seen += 1;
        } else {
            handover.push(after);
        }
    }
    let per_slot = |d: Duration| d / u32::try_from(slots.max(1)).unwrap_or(u32::MAX);
    SlotIdle {
        detection: Span::of(detection),
        handover: Span::of(handover),
        before_seen,
        detection_per_slot: per_slot(idle_detection),
        handover_per_slot: per_slot(idle_handover),
    }
}

/// The halves as table rows.
pub(crate) fn print(idle: &SlotIdle) {
    let row = |what: &str, s: &Span, per_slot: Duration| {
        println!(
            "| {what} | {} | {:.2} s | {:.2} s | {:.2} s | {:.1} s |",
            s.count,
            s.p50.as_secs_f64(),
            s.p90.as_secs_f64(),
            s.mean.as_secs_f64(),
            per_slot.as_secs_f64()
        );
    };
    println!("| where a slot idles (from Genace's side) | jobs | p50 | p90 | mean | added to the drain |");
    println!("|---|---|---|---|---|---|");
    row(
        "a job's end → the first read that saw it",
        &idle.detection,
        idle.detection_per_slot,
    );
    row(
        "that read (the slot freed) → the next POST",
        &idle.handover,
        idle.handover_per_slot,
    );
    if idle.before_seen > 0 {
        println!();
        println!(
            "{} POSTs came before the read that saw the end they are paired with (ends seen in another order \
             than they came, or a limit above the account's).",
            idle.before_seen
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(t0: Instant, created: u64, render: u64, seen_after_end_ms: Option<u64>) -> JobTimes {
        let created = t0 + Duration::from_secs(created);
        let ended = created + Duration::from_secs(render);
        JobTimes {
            created,
            ended,
            seen_ended: seen_after_end_ms.map(|ms| ended + Duration::from_millis(ms)),
        }
    }

    #[test]
    fn each_post_is_paired_with_the_end_that_freed_its_slot() {
        let t0 = Instant::now();
        // Two slots, 10 s renders: jobs 0 and 1 at once; job 2 after job 0
        // is seen (at 10.5 s) and POSTed at 12; job 3 after job 1 (seen at
        // 11.0) at 13.
        let jobs = [
            job(t0, 0, 10, Some(500)),
            job(t0, 0, 10, Some(1000)),
            job(t0, 12, 10, Some(0)),
            job(t0, 13, 10, None),
        ];
        let idle = slot_idle(&jobs, 2);
        assert_eq!(idle.detection.count, 3);
        assert_eq!(idle.detection.p50, Duration::from_millis(500));
        assert_eq!(idle.detection.mean, Duration::from_millis(500));
        assert_eq!(idle.handover.count, 2);
        assert_eq!(idle.handover.p50, Duration::from_millis(1500));
        assert_eq!(idle.handover.p90, Duration::from_secs(2));
        assert_eq!(idle.handover.mean, Duration::from_millis(1750));
        assert_eq!(idle.before_seen, 0);
        // Slot-seconds over the slots: (0.5 + 1.0) / 2 and (1.5 + 2.0) / 2.
        assert_eq!(idle.detection_per_slot, Duration::from_millis(750));
        assert_eq!(idle.handover_per_slot, Duration::from_millis(1750));
    }

    #[test]
    fn a_post_before_the_end_was_seen_is_counted_not_paired_with_the_wrong_end() {
        let t0 = Instant::now();
        // One slot: job 0 ends at 10 s, seen at 12 s; job 1 was POSTed at
        // 10.5 s (a probe of the limit), job 2 at 21 s after job 1's end
        // (20.5 s) was seen at 20.7 s.
        let jobs = [
            JobTimes {
                created: t0,
                ended: t0 + Duration::from_secs(10),
                seen_ended: Some(t0 + Duration::from_secs(12)),
            },
            JobTimes {
                created: t0 + Duration::from_millis(10_500),
                ended: t0 + Duration::from_millis(20_500),
                seen_ended: Some(t0 + Duration::from_millis(20_700)),
            },
            JobTimes {
                created: t0 + Duration::from_secs(21),
                ended: t0 + Duration::from_secs(31),
                seen_ended: None,
            },
        ];
        let idle = slot_idle(&jobs, 1);
        assert_eq!(idle.before_seen, 1);
        assert_eq!(idle.handover.count, 1);
        assert_eq!(idle.handover.p50, Duration::from_millis(300));
        // The slot idled 0.5 s (end to the early POST) and 0.2 + 0.3 s.
        assert_eq!(idle.detection_per_slot, Duration::from_millis(700));
        assert_eq!(idle.handover_per_slot, Duration::from_millis(300));
    }
}
