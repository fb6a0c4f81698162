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
    /// A slot freed by a detection to the next accepted POST, while jobs
    /// were still to be submitted.
    pub handover: Span,
}

/// The halves from the stand-in's `jobs` on an account of `slots`. The
/// k-th detection frees the slot the (k + slots)-th accepted POST takes:
/// once the account is full, every POST waits for one more job to end.
pub(crate) fn slot_idle(jobs: &[JobTimes], slots: usize) -> SlotIdle {
    let detection = jobs
        .iter()
        .filter_map(|j| Some(j.seen_ended?.saturating_duration_since(j.ended)))
        .collect();
    let mut created: Vec<Instant> = jobs.iter().map(|j| j.created).collect();
    created.sort();
    let mut seen: Vec<Instant> = jobs.iter().filter_map(|j| j.seen_ended).collect();
    seen.sort();
    let handover = seen
        .iter()
        .zip(created.iter().skip(slots))
        .map(|(freed, next)| next.saturating_duration_since(*freed))
        .collect();
    SlotIdle {
        detection: Span::of(detection),
        handover: Span::of(handover),
    }
}

/// The halves as table rows.
pub(crate) fn print(idle: &SlotIdle) {
    let row = |what: &str, s: &Span| {
        println!(
            "| {what} | {} | {:.2} s | {:.2} s | {:.2} s |",
            s.count,
            s.p50.as_secs_f64(),
            s.p90.as_secs_f64(),
            s.mean.as_secs_f64()
        );
    };
    println!("| where a slot idles (from Genace's side) | jobs | p50 | p90 | mean |");
    println!("|---|---|---|---|---|");
    row("a job's end → the first read that saw it", &idle.detection);
    row("that read (the slot freed) → the next POST", &idle.handover);
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
    fn each_post_is_paired_with_the_detection_that_freed_its_slot() {
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
    }
}
