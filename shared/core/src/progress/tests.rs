use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::record::{CaseReason, ReconciliationCase, sample_prepared};

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A deterministic stream of numbers in (0, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A render of a median of `median` seconds, log-normal with a spread
    /// of 0.35.
    fn render(&mut self, median: f64) -> f64 {
        let (u, v) = (self.next(), self.next());
        let normal = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
        median * (0.35 * normal).exp()
    }
}

fn seconds(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

#[test]
fn too_few_renders_give_no_estimate() {
    let mut times = RenderTimes::default();
    for _ in 0..MIN_SAMPLES - 1 {
        times.add(10.0);
    }
    let end = expected_end(t0(), &times, t0());
    assert_eq!(end.basis, Basis::TooLittleData);
    assert_eq!((end.p50_at, end.p90_at), (None, None));
}

#[test]
fn the_expected_end_is_calibrated_and_moves_with_the_age() {
    let mut rng = Lcg(7);
    let mut times = RenderTimes::default();
    for _ in 0..2_000 {
        times.add(rng.render(60.0));
    }
    // New jobs of the class: about half end before the first p50 given,
    // about nine in ten before the first p90.
    let (mut by50, mut by90, jobs) = (0, 0, 4_000);
    for _ in 0..jobs {
        let end = expected_end(t0(), &times, t0());
        let render = rng.render(60.0);
        by50 += usize::from(render <= seconds(t0(), end.p50_at.unwrap()));
        by90 += usize::from(render <= seconds(t0(), end.p90_at.unwrap()));
    }
    let (share50, share90) = (by50 as f64 / jobs as f64, by90 as f64 / jobs as f64);
    assert!((share50 - 0.5).abs() <= 0.03, "{share50}");
    assert!((share90 - 0.9).abs() <= 0.03, "{share90}");
    // Given that a job has run 80 s, its end is later than a new job's,
    // never before now, and conditioned the same way.
    let now = t0() + Duration::seconds(80);
    let later = expected_end(t0(), &times, now);
    assert_eq!(later.basis, Basis::Learned);
    assert!(later.p50_at.unwrap() >= now && later.p50_at.unwrap() < later.p90_at.unwrap());
    let (mut by50, mut long) = (0, 0);
    for _ in 0..40_000 {
        let render = rng.render(60.0);
        if render > 80.0 {
            long += 1;
            by50 += usize::from(render <= seconds(t0(), later.p50_at.unwrap()));
        }
    }
    let share = by50 as f64 / f64::from(long);
    assert!((share - 0.5).abs() <= 0.05, "{share} of {long}");
    // Past nearly every render of the class: no estimate.
    let past = expected_end(t0(), &times, t0() + Duration::seconds(600));
    assert_eq!(past.basis, Basis::PastLearned);
    assert_eq!(past.p50_at, None);
}

#[test]
fn cdf_and_quantile_are_inverses() {
    let mut rng = Lcg(3);
    let mut times = RenderTimes::default();
    for _ in 0..500 {
        times.add(rng.render(20.0));
    }
    for q in [0.05, 0.25, 0.5, 0.75, 0.95] {
        let s = times.quantile(q).unwrap();
        assert!((times.cdf(s).unwrap() - q).abs() < 1e-9, "{q}");
    }
    assert_eq!(RenderTimes::default().cdf(3.0), None);
}

fn queue(place: u32, own_in_flight: i64, rivals: &[(i64, i64)], complete: bool) -> Queue {
    Queue {
        place: Some(place),
        own_in_flight,
        rivals: rivals
            .iter()
            .map(|(waiting, in_flight)| Rival {
                waiting: *waiting,
                in_flight: *in_flight,
            })
            .collect(),
        rivals_complete: complete,
        free_slots: 0,
        limit: Some(4),
        tenant_may_start: true,
    }
}

#[test]
fn the_rotation_serves_a_range_before_an_operation() {
    // Third in its tenant's order, two jobs in flight. A rival with none
    // in flight and five waiting catches up two, then alternates: all
    // five may go first. A rival with four in flight and one waiting: one.
    let q = queue(3, 2, &[(5, 0), (1, 4)], true);
    assert_eq!(ahead_in_account(&q), Some(Ahead { min: 2, max: Some(8) }));
    // A rival with more in flight than ours alternates with us from the
    // start: as many as our own before us, and ours.
    assert_eq!(
        ahead_in_account(&queue(3, 0, &[(50, 3)], true)),
        Some(Ahead { min: 2, max: Some(5) })
    );
    // Not every waiting tenant read: no upper bound.
    assert_eq!(
        ahead_in_account(&queue(1, 0, &[(2, 0)], false)),
        Some(Ahead { min: 0, max: None })
    );
    let mut unplaced = queue(1, 0, &[], true);
    unplaced.place = None;
    assert_eq!(ahead_in_account(&unplaced), None);
}

#[test]
fn the_expected_start_is_a_slots_turn_per_operation_ahead() {
    let q = queue(3, 0, &[], true);
    let ahead = Ahead { min: 2, max: Some(6) };
    // Four slots, renders of 8 s: a slot frees every 2 s; third in line
    // with none free starts at the third.
    let start = expected_start(&q, ahead, Some(8.0), t0()).unwrap();
    assert_eq!(start.earliest, t0() + Duration::seconds(6));
    assert_eq!(start.latest, Some(t0() + Duration::seconds(14)));
    let free = Queue {
        free_slots: 3,
        ..q.clone()
    };
    assert_eq!(expected_start(&free, ahead, Some(8.0), t0()).unwrap().earliest, t0());
    assert_eq!(expected_start(&q, ahead, None, t0()), None);
    let unlimited = Queue {
        limit: None,
        ..q.clone()
    };
    assert_eq!(expected_start(&unlimited, ahead, Some(8.0), t0()), None);
    // At its own limit, or out of credits: it starts when its own jobs
    // end, which the account's turnover does not say.
    let held = Queue {
        tenant_may_start: false,
        ..q.clone()
    };
    assert_eq!(expected_start(&held, ahead, Some(8.0), t0()), None);
    // Absurd inputs stay in range instead of panicking.
    let huge = Ahead {
        min: u32::MAX,
        max: Some(u32::MAX),
    };
    let far = expected_start(&q, huge, Some(f64::MAX), t0()).unwrap();
    assert!(far.earliest > t0());
    assert!(expected_start(&q, ahead, Some(f64::NAN), t0()).is_none());
}

#[test]
fn the_next_look_follows_the_polls_plan_and_ends_with_the_operation() {
    let now = t0();
    let mut rec = sample_prepared(now);
    rec.phase = Phase::Accepted;
    rec.accepted_at = Some(now);
    // The sweep's deadline is minutes away: the look follows the poll
    // stage's schedule instead. Without a plan: at 5 s, then by age.
    rec.due_at_ms = Some((now + Duration::seconds(125)).timestamp_millis());
    let hints = LookHints {
        max_delay: 900.0,
        ..LookHints::default()
    };
    let at = |age: i64| next_look(&rec, hints, now + Duration::seconds(age)).unwrap();
    assert_eq!(at(0), now + Duration::milliseconds(5_000 + LOOK_MARGIN_MS));
    assert_eq!(at(5), now + Duration::milliseconds(10_000 + LOOK_MARGIN_MS));
    // With a plan learned from renders of 60 s: a look inside its window.
    let mut rng = Lcg(11);
    let mut times = RenderTimes::default();
    for _ in 0..200 {
        times.add(rng.render(60.0));
    }
    let plan = PollPlan::from_times(&times, 900.0).unwrap();
    let planned = LookHints {
        plan: Some(&plan),
        max_delay: 900.0,
        start: None,
    };
    let first = next_look(&rec, planned, now).unwrap();
    let plan_first = plan.first().unwrap();
    assert_eq!(
        first,
        now + Duration::milliseconds((plan_first * 1000.0) as i64 + LOOK_MARGIN_MS)
    );
    let mid = next_look(&rec, planned, now + Duration::seconds(60)).unwrap();
    assert!(
        mid > now + Duration::seconds(60) && mid < now + Duration::seconds(75),
        "{mid}"
    );
    // A stalled render is still looked at; a job Genace does not know
    // waits for a person: rarely.
    rec.case = Some(ReconciliationCase {
        reason: CaseReason::RenderStalled,
        opened_at: now,
        evidence: String::new(),
    });
    assert_eq!(next_look(&rec, planned, now), Some(first));
    rec.case = Some(ReconciliationCase {
        reason: CaseReason::RemoteJobMissing,
        opened_at: now,
        evidence: String::new(),
    });
    assert_eq!(
        next_look(&rec, hints, now),
        Some(now + Duration::seconds(PERSON_LOOK_SECONDS))
    );
}

#[test]
fn the_next_look_of_work_to_come_is_soon_and_of_a_wait_at_its_start() {
    let now = t0();
    let hints = LookHints {
        max_delay: 900.0,
        ..LookHints::default()
    };
    // Dispatch to come: soon, whatever the sweep's deadline says; a 429's
    // retry: just after it.
    let mut pending = sample_prepared(now);
    pending.due_at_ms = Some((now + Duration::seconds(300)).timestamp_millis());
    assert_eq!(
        next_look(&pending, hints, now),
        Some(now + Duration::seconds(BUSY_LOOK_SECONDS))
    );
    pending.retry_at_ms = Some((now + Duration::seconds(20)).timestamp_millis());
    assert_eq!(
        next_look(&pending, hints, now),
        Some(now + Duration::milliseconds(20_000 + LOOK_MARGIN_MS))
    );
    // Waiting for a slot: at the expected start, within bounds.
    let mut waiting = sample_prepared(now);
    waiting.capacity_hold = Some(now);
    let start = StartWindow {
        earliest: now + Duration::seconds(8),
        latest: None,
    };
    let with = |start| LookHints {
        start: Some(start),
        ..hints
    };
    assert_eq!(next_look(&waiting, with(&start), now), Some(now + Duration::seconds(8)));
    let far = StartWindow {
        earliest: now + Duration::seconds(900),
        latest: None,
    };
    assert_eq!(
        next_look(&waiting, with(&far), now),
        Some(now + Duration::seconds(WAITING_LOOK_SECONDS))
    );
    // Finished: nothing to look for.
    let mut done = sample_prepared(now);
    done.phase = Phase::Cancelled;
    assert_eq!(next_look(&done, hints, now), None);
}
