//! How long Genace takes to render, learned from the jobs it finished, and
//! the polls a job's plan makes from that.
//!
//! - [`RenderClass`]: the kind of job whose render times are alike: the
//!   model, the media type, the video's length (in steps) and the
//!   resolution asked for.
//! - [`RenderTimes`]: a histogram of a class's render times in
//!   [`BUCKETS`] buckets, each [`RATIO`] times wider than the last, from
//!   [`FIRST_EDGE_SECONDS`]: a few dozen numbers on one item, moved by an
//!   atomic add per finished job.
//! - [`PollPlan`]: when to look next at a job of that class: not before
//!   the early quantile, densely through the likely window, then the
//!   age-based back-off; never more than [`MAX_PLANNED_LOOKS`] planned
//!   looks, and never below one second apart.

use serde_json::Value;

use crate::record::OperationRecord;

/// Buckets of a class's histogram.
pub const BUCKETS: usize = 100;
/// The upper edge of the first bucket.
pub const FIRST_EDGE_SECONDS: f64 = 0.5;
/// Each bucket's upper edge over the one before: 100 buckets reach about
/// 100 minutes (the last holds every longer render), and a bucket is a
/// tenth of its render wide, so a narrow class plans a narrow window.
pub const RATIO: f64 = 1.1;
/// Finished jobs a class needs before its plan replaces the age-based
/// schedule.
pub const MIN_SAMPLES: u32 = 8;
/// Planned looks at most; past them, the age-based schedule.
pub const MAX_PLANNED_LOOKS: u32 = 20;
/// The shortest time between two looks.
pub const MIN_SPACING_SECONDS: f64 = 1.0;
/// The age-based schedule's shortest delay, before any data.
pub const FALLBACK_MIN_SECONDS: f64 = 5.0;

/// The kind of job whose render times are learned together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RenderClass(String);

impl RenderClass {
    /// The class of the record's job: `<model>|<media>|<length>|<resolution>`,
    /// the length a video's duration rounded up to 5, 10, 20, 40 or more
    /// seconds (`-` for an image or no duration), the resolution as asked
    /// (`-` when not).
    pub fn of(rec: &OperationRecord) -> Self {
        let spec = rec.specification_value();
        let text = |name: &str| {
            spec.get(name)
                .and_then(Value::as_str)
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
        };
        let length = spec.get("duration").and_then(Value::as_f64).map_or("-", |d| match d {
            d if d <= 5.0 => "5",
            d if d <= 10.0 => "10",
            d if d <= 20.0 => "20",
            d if d <= 40.0 => "40",
            _ => "more",
        });
        let clean = |s: String| s.replace(['|', '#'], "_");
        Self(format!(
            "{}|{}|{length}|{}",
            clean(text("model").unwrap_or_else(|| "-".into())),
            rec.media_type.as_str(),
            clean(text("resolution").unwrap_or_else(|| "-".into())),
        ))
    }

    /// The class as it was stored.
    pub fn from_stored(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A class's render times: how many finished jobs fell in each bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderTimes {
    counts: [u32; BUCKETS],
}

impl Default for RenderTimes {
    fn default() -> Self {
        Self { counts: [0; BUCKETS] }
    }
}

/// The upper edge of bucket `i`.
fn edge(i: usize) -> f64 {
    FIRST_EDGE_SECONDS * RATIO.powi(i as i32)
}

impl RenderTimes {
    /// The bucket a render of `seconds` falls in (the last holds every
    /// longer one).
    pub fn bucket(seconds: f64) -> usize {
        if !seconds.is_finite() || seconds <= FIRST_EDGE_SECONDS {
            return 0;
        }
        let i = ((seconds / FIRST_EDGE_SECONDS).ln() / RATIO.ln()).ceil() as usize;
        i.min(BUCKETS - 1)
    }

    /// The histogram from stored counts, bucket by bucket (missing: 0).
    pub fn from_counts(counts: impl IntoIterator<Item = (usize, u32)>) -> Self {
        let mut t = Self::default();
        for (i, n) in counts {
            if let Some(c) = t.counts.get_mut(i) {
                *c = n;
            }
        }
        t
    }

    /// One more render of `seconds`.
    pub fn add(&mut self, seconds: f64) {
        let c = &mut self.counts[Self::bucket(seconds)];
        *c = c.saturating_add(1);
    }

    /// Each bucket's count.
    pub fn counts(&self) -> &[u32; BUCKETS] {
        &self.counts
    }

    /// Renders counted.
    pub fn samples(&self) -> u32 {
        self.counts.iter().fold(0u32, |a, c| a.saturating_add(*c))
    }

    /// The share (0 to 1) of the renders that ended by `seconds`,
    /// interpolated within its bucket on a log scale as [`Self::quantile`]
    /// is, so the two are inverses; none without data.
    pub fn cdf(&self, seconds: f64) -> Option<f64> {
        let total = f64::from(self.samples());
        if total == 0.0 {
            return None;
        }
        let i = Self::bucket(seconds);
        let below: f64 = self.counts[..i].iter().map(|c| f64::from(*c)).sum();
        let (low, high) = bucket_bounds(i);
        let within = if seconds <= low {
            0.0
        } else {
            ((seconds / low).ln() / (high / low).ln()).clamp(0.0, 1.0)
        };
        Some(((below + within * f64::from(self.counts[i])) / total).clamp(0.0, 1.0))
    }

    /// The time below which a share `q` (0 to 1) of the renders ended,
    /// interpolated within its bucket on a log scale; none without data.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = f64::from(self.samples());
        if total == 0.0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * total;
        let mut below = 0.0;
        for (i, c) in self.counts.iter().enumerate() {
            let c = f64::from(*c);
            if c > 0.0 && below + c >= target {
                let (low, high) = bucket_bounds(i);
                let within = ((target - below) / c).clamp(0.0, 1.0);
                return Some(low * (high / low).powf(within));
            }
            below += c;
        }
        Some(edge(BUCKETS - 1))
    }
}

/// When to look at a job of one class, from its learned render times: the
/// ages of its planned looks, carried in its poll messages.
///
/// The looks lie on a grid from the age by which [`TAIL`] of the class's
/// renders ended to the one by which all but [`TAIL`] did. A job ending
/// inside a gap is seen at most the gap late and half of it on average.
/// The gap after a look at age `t` is `stretch` × ([`GAP_SECONDS`] +
/// [`GAP_SHARE`] × `t`) × a weight: at a stretch of 1 and a weight of 1
/// that is the goal of a lag of 1 s + 2 % of the render at the median,
/// and within 3 s + 5 % for every job. The weight is 1 where the class's
/// renders end most often and grows, up to [`WEIGHT_MAX`], as the square
/// root of how much rarer ends are elsewhere: the spacing that minimises
/// the mean lag for a given number of looks. The stretch is the smallest
/// whose expected GETs, over the class's histogram, fit [`GET_BUDGET`]
/// and whose looks fit [`MAX_PLANNED_LOOKS`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PollPlan {
    /// The planned looks' ages, in seconds after acceptance, ascending (a
    /// plan carried in an older form: none, the age-based schedule).
    #[serde(default)]
    pub looks: Vec<f64>,
}

/// The gap's fixed part, in seconds, at a stretch and weight of 1.
pub const GAP_SECONDS: f64 = 2.0;
/// The gap's part that grows with the age, at a stretch and weight of 1.
pub const GAP_SHARE: f64 = 0.04;
/// The GETs a job of a class may take on average, as its render times
/// say (429s, unreadable reads and redeliveries come on top).
pub const GET_BUDGET: f64 = 8.0;
/// How much sparser than at the densest ends the grid may be where ends
/// are rare.
pub const WEIGHT_MAX: f64 = 4.0;
/// The densest and the sparsest grid.
const STRETCH_MIN: f64 = 0.25;
const STRETCH_MAX: f64 = 16.0;
/// The share of renders the window leaves before its first look, and the
/// share after its end.
pub const TAIL: f64 = 0.01;
/// Buckets each side that smooth the histogram for the weight (a bucket
/// is a tenth of its render wide).
const SMOOTHING: usize = 3;

impl PollPlan {
    /// The plan for a class with enough finished jobs (none before);
    /// `max_delay` bounds the age-based schedule past the window.
    pub fn from_times(times: &RenderTimes, max_delay: f64) -> Option<Self> {
        if times.samples() < MIN_SAMPLES {
            return None;
        }
        let early = times.quantile(TAIL)?;
        let late = times.quantile(1.0 - TAIL)?.max(early);
        let weights = Weights::of(times);
        let mut stretch = STRETCH_MIN;
        loop {
            let plan = Self {
                looks: grid(early, late, stretch, &weights),
            };
            let fits =
                plan.looks.len() as u32 <= MAX_PLANNED_LOOKS && plan.expected_gets(times, max_delay) <= GET_BUDGET;
            if fits || stretch >= STRETCH_MAX {
                return Some(plan);
            }
            stretch *= 1.1;
        }
    }

    /// The first planned look's age.
    pub fn first(&self) -> Option<f64> {
        self.looks.first().copied()
    }

    /// The last planned look's age: past it, the age-based schedule.
    pub fn last(&self) -> Option<f64> {
        self.looks.last().copied()
    }

    /// The GETs a job of `seconds` takes: the planned looks before its
    /// end, the one that sees it, and past the window the age-based ones.
    pub fn gets_for(&self, seconds: f64, max_delay: f64) -> f64 {
        let mut gets = 0.0;
        let mut last = 0.0;
        for at in &self.looks {
            gets += 1.0;
            if *at >= seconds {
                return gets;
            }
            last = *at;
        }
        while last < seconds {
            last += age_based_delay(last, max_delay);
            gets += 1.0;
        }
        gets
    }

    /// The GETs a job of the class takes on average, over its histogram
    /// (four renders spread over each bucket).
    pub fn expected_gets(&self, times: &RenderTimes, max_delay: f64) -> f64 {
        let total = f64::from(times.samples()).max(1.0);
        let mut sum = 0.0;
        for (i, c) in times.counts().iter().enumerate().filter(|(_, c)| **c > 0) {
            let (low, high) = bucket_bounds(i);
            let each = f64::from(*c) / 4.0;
            for k in [0.125, 0.375, 0.625, 0.875] {
                sum += each * self.gets_for(low * (high / low).powf(k), max_delay);
            }
        }
        sum / total
    }

    /// Seconds until the next look at a job `age` seconds after its
    /// acceptance, looked at `looks` times so far: the next planned look
    /// at least a second away; `age_based` past the plan, or after more
    /// looks than it plans.
    pub fn next_delay(&self, age: f64, looks: u32, age_based: f64) -> f64 {
        if looks > MAX_PLANNED_LOOKS {
            return age_based;
        }
        self.looks
            .iter()
            // A look rounded to the tenth a second after this one is not
            // passed over for a float's last bit.
            .find(|at| **at >= age + MIN_SPACING_SECONDS - 1e-9)
            .map_or(age_based, |at| at - age)
    }
}

/// The age of the poll stage's next look at a job `age` seconds after its
/// acceptance, by the schedule the poll stage follows: the first look at
/// the plan's first (else `first_delay`), then the plan's looks, then the
/// age-based schedule within `max_delay` (a look waits out the part of a
/// second its message's whole-second delay leaves, so it comes when
/// planned). Looks come a little later than planned (a look takes time),
/// so this is when the service looks at the earliest.
pub fn next_planned_look(plan: Option<&PollPlan>, age: f64, first_delay: f64, max_delay: f64) -> f64 {
    let max = max_delay.max(1.0);
    let mut at = plan.and_then(PollPlan::first).unwrap_or(first_delay);
    let mut looks = 1;
    while at <= age && looks < 100_000 {
        let by_age = next_age_based_look(at, max) - at;
        let delay = plan.map_or(by_age, |p| p.next_delay(at, looks + 1, by_age));
        at += delay.clamp(1.0, max);
        looks += 1;
    }
    at
}

/// Where a class's renders end, smoothed: the weight of a gap at each age.
struct Weights {
    smoothed: [f64; BUCKETS],
    peak: f64,
}

impl Weights {
    fn of(times: &RenderTimes) -> Self {
        let mut smoothed = [0.0; BUCKETS];
        for (i, s) in smoothed.iter_mut().enumerate() {
            for (j, c) in times.counts().iter().enumerate() {
                let d = i.abs_diff(j);
                if d <= SMOOTHING {
                    *s += f64::from(*c) * (SMOOTHING + 1 - d) as f64;
                }
            }
        }
        let peak = smoothed.iter().copied().fold(0.0, f64::max);
        Self { smoothed, peak }
    }

    /// 1 where ends are densest, up to [`WEIGHT_MAX`] where they are rare.
    fn at(&self, age: f64) -> f64 {
        let here = self.smoothed[RenderTimes::bucket(age)];
        let floor = self.peak / (WEIGHT_MAX * WEIGHT_MAX);
        (self.peak / here.max(floor).max(f64::MIN_POSITIVE))
            .sqrt()
            .min(WEIGHT_MAX)
    }
}

/// The looks from `early` until one at or past `late`, rounded to a tenth
/// of a second (at most one past [`MAX_PLANNED_LOOKS`], so that a grid
/// too long is seen to be).
fn grid(early: f64, late: f64, stretch: f64, weights: &Weights) -> Vec<f64> {
    let mut looks = Vec::new();
    let mut at = early;
    while looks.len() as u32 <= MAX_PLANNED_LOOKS {
        looks.push((at * 10.0).round() / 10.0);
        if at >= late {
            break;
        }
        let gap = stretch * (GAP_SECONDS + GAP_SHARE * at) * weights.at(at);
        at += gap.max(MIN_SPACING_SECONDS);
    }
    looks
}

/// The bounds of bucket `i`.
fn bucket_bounds(i: usize) -> (f64, f64) {
    let low = if i == 0 {
        FIRST_EDGE_SECONDS / RATIO
    } else {
        edge(i - 1)
    };
    (low, edge(i))
}

/// The most looks a chain of polls makes at a job seen to end `age`
/// seconds after its acceptance: the first look, every planned one, the
/// age-based schedule ([`age_based_delay`] within `max_delay`) from the
/// start, and one more for the look that sees the end. An unreadable
/// status waits at least the age-based delay, so it adds no look.
pub fn look_bound(age: f64, max_delay: f64) -> u32 {
    let mut looks = MAX_PLANNED_LOOKS + 3;
    let mut at = 0.0;
    while at < age {
        at += age_based_delay(at, max_delay);
        looks += 1;
    }
    looks
}

/// The age-based schedule's next look after one at `age`: its looks fall
/// on one lattice of ages walked from the acceptance (0, 5, 10, ... 50,
/// 55, 60, 66, 72, ...: each step a tenth of the age, in whole seconds,
/// at least [`FALLBACK_MIN_SECONDS`], at most `max`), the first of them at
/// least [`MIN_SPACING_SECONDS`] after `age`. Whatever plan a chain of
/// looks had before (a view may walk another, drawn from more renders),
/// past it every chain looks at the same ages.
///
/// The walk takes a few dozen steps at most whatever the age: once the
/// steps reach `max` they stay there, and the rest is counted, not walked.
pub fn next_age_based_look(age: f64, max: f64) -> f64 {
    let longest = max.max(FALLBACK_MIN_SECONDS);
    let step = |at: f64| (at / 10.0).floor().clamp(FALLBACK_MIN_SECONDS, longest);
    let target = age + MIN_SPACING_SECONDS - 1e-9;
    let mut at = 0.0;
    while at < target && step(at) < longest {
        at += step(at);
    }
    if at >= target || target.is_nan() {
        return at;
    }
    at + ((target - at) / longest).ceil() * longest
}

/// The age-based schedule: a tenth of the job's age, at least
/// [`FALLBACK_MIN_SECONDS`], at most `max`.
pub fn age_based_delay(age: f64, max: f64) -> f64 {
    (age / 10.0).clamp(FALLBACK_MIN_SECONDS, max.max(FALLBACK_MIN_SECONDS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(renders: impl IntoIterator<Item = f64>) -> RenderTimes {
        let mut t = RenderTimes::default();
        renders.into_iter().for_each(|s| t.add(s));
        t
    }

    #[test]
    fn buckets_are_ordered_and_quantiles_land_within_a_bucket() {
        assert_eq!(RenderTimes::bucket(0.1), 0);
        assert_eq!(RenderTimes::bucket(f64::NAN), 0);
        assert_eq!(RenderTimes::bucket(1e9), BUCKETS - 1);
        let mut last = 0;
        for s in [1.0, 2.0, 5.0, 10.0, 60.0, 300.0, 3600.0] {
            let b = RenderTimes::bucket(s);
            assert!(b > last, "{s}");
            assert!(edge(b) >= s && (b == 0 || edge(b - 1) < s), "{s} in bucket {b}");
            last = b;
        }
        let t = times((0..100).map(|i| 10.0 + f64::from(i) * 0.01));
        let median = t.quantile(0.5).unwrap();
        assert!((median / 10.0 - 1.0).abs() < RATIO - 1.0, "{median}");
        assert_eq!(RenderTimes::default().quantile(0.5), None);
    }

    #[test]
    fn without_enough_data_there_is_no_plan() {
        assert_eq!(PollPlan::from_times(&times([10.0; 7]), 300.0), None);
        assert!(PollPlan::from_times(&times([10.0; 8]), 300.0).is_some());
    }

    /// Renders log-normal around `median`, one standard deviation of the
    /// log `ln(1 + spread)`, at evenly spaced quantiles.
    fn spread(median: f64, spread: f64) -> RenderTimes {
        let sigma = (1.0 + spread).ln();
        times((1..200).map(|i| {
            let p = f64::from(i) / 200.0;
            // The normal quantile, by bisection over the error function's
            // series-free approximation (Abramowitz-Stegun 7.1.26).
            let cdf = |z: f64| {
                let t = 1.0 / (1.0 + 0.3275911 * z.abs() / 2f64.sqrt());
                let erf = 1.0
                    - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
                        * (-(z * z) / 2.0).exp();
                0.5 * (1.0 + z.signum() * erf)
            };
            let (mut lo, mut hi) = (-6.0, 6.0);
            for _ in 0..60 {
                let mid = (lo + hi) / 2.0;
                if cdf(mid) < p { lo = mid } else { hi = mid }
            }
            median * (sigma * lo).exp()
        }))
    }

    #[test]
    fn the_plan_looks_first_near_the_early_quantile_then_on_its_grid_then_by_age() {
        // Renders of 6 to 14 s.
        let plan = PollPlan::from_times(&times((0..200).map(|i| 6.0 + f64::from(i % 81) * 0.1)), 300.0).unwrap();
        let (first, last) = (plan.first().unwrap(), plan.last().unwrap());
        assert!(first > 5.0 && first < 7.0 && last < 16.0, "{plan:?}");
        assert!(
            (plan.next_delay(0.0, 0, 5.0) - first).abs() < 1e-9,
            "the first look waits for the early quantile"
        );
        // Inside the window: the next grid point, a second or two away.
        let dense = plan.next_delay(first, 1, 5.0);
        assert!((MIN_SPACING_SECONDS..=2.5).contains(&dense), "{dense}");
        assert!((dense - (plan.looks[1] - first)).abs() < 1e-9);
        // A look that came late goes on to the next grid point at least a
        // second away.
        let age = plan.looks[1] + 0.5;
        let next = plan.looks.iter().find(|at| **at >= age + 1.0).unwrap();
        assert!(*next > plan.looks[2] || plan.looks[2] - age >= 1.0);
        assert!((plan.next_delay(age, 2, 5.0) - (next - age)).abs() < 1e-9);
        // Past the window, or out of planned looks: the age-based schedule.
        assert_eq!(plan.next_delay(last + 5.0, 3, 7.0), 7.0);
        assert_eq!(plan.next_delay(first, MAX_PLANNED_LOOKS + 1, 7.0), 7.0);
    }

    #[test]
    fn a_narrow_class_is_planned_within_the_lag_goal() {
        for median in [8.0, 60.0, 300.0] {
            let plan = PollPlan::from_times(&spread(median, 0.05), 300.0).unwrap();
            // Every job ending inside the window is seen within 3 s + 5 %.
            for pair in plan.looks.windows(2) {
                assert!(pair[1] - pair[0] <= 3.0 + 0.05 * pair[0], "{median} s: {plan:?}");
            }
            assert!(
                plan.first().unwrap() <= median * 0.95 && plan.last().unwrap() >= median * 1.05,
                "{plan:?}"
            );
        }
    }

    #[test]
    fn a_wide_class_is_widened_to_the_get_budget_and_denser_where_ends_are() {
        for median in [10.0, 60.0, 300.0] {
            let times = spread(median, 0.4);
            let plan = PollPlan::from_times(&times, 300.0).unwrap();
            let gets = plan.expected_gets(&times, 300.0);
            assert!(gets <= GET_BUDGET, "{median} s: {gets} GETs, {plan:?}");
            assert!(plan.looks.len() as u32 <= MAX_PLANNED_LOOKS, "{plan:?}");
            // Denser around the median than in the tails, relative to the age.
            let relative_gap = |age: f64| {
                let i = plan.looks.iter().position(|at| *at >= age).unwrap().max(1);
                (plan.looks[i] - plan.looks[i - 1]) / (GAP_SECONDS + GAP_SHARE * plan.looks[i - 1])
            };
            assert!(
                relative_gap(median) < relative_gap(median * 1.9),
                "{median} s: {plan:?}"
            );
            eprintln!("{median} s: {plan:?}, {gets:.2} GETs");
        }
    }

    #[test]
    fn the_look_bound_covers_the_planned_looks_and_the_age_based_ones() {
        let plan = PollPlan::from_times(&spread(60.0, 0.4), 300.0).unwrap();
        for end in [1.0, 30.0, 60.0, 200.0, 3600.0] {
            let gets = plan.gets_for(end, 300.0);
            let bound = look_bound(end, 300.0);
            assert!(gets <= f64::from(bound), "{end} s: {gets} > {bound}");
        }
        assert!(look_bound(3600.0, 300.0) > look_bound(60.0, 300.0));
        assert!(
            look_bound(3600.0, 60.0) > look_bound(3600.0, 300.0),
            "a shorter longest delay: more looks"
        );
    }

    #[test]
    fn a_plan_carried_in_an_older_form_reads_as_none() {
        let old: PollPlan = serde_json::from_str(r#"{"early":5.0,"median":8.0,"late":12.0}"#).unwrap();
        assert_eq!(old.first(), None);
        assert_eq!(old.next_delay(3.0, 1, 5.0), 5.0);
    }

    #[test]
    fn age_based_looks_fall_on_one_lattice_whatever_the_age_they_start_from() {
        let lattice: Vec<f64> = std::iter::successors(Some(0.0), |at| Some(next_age_based_look(*at, 900.0)))
            .take(16)
            .collect();
        assert_eq!(
            lattice,
            [
                0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 66.0, 72.0, 79.0
            ]
        );
        // From any age: the first lattice age at least a second on.
        for age in [0.3, 4.2, 54.5, 65.1, 71.0, 78.95, 1000.0, 50_000.0] {
            let next = next_age_based_look(age, 900.0);
            assert!(next >= age + MIN_SPACING_SECONDS, "{age} -> {next}");
            let mut at = 0.0;
            while at < next {
                at = next_age_based_look(at, 900.0);
            }
            assert_eq!(at, next, "{next} is on the lattice");
            assert!(next - age <= 901.0, "within the longest delay: {age} -> {next}");
        }
        // Past the growing steps the rest is counted, not walked: the same
        // ages as a walk step by step, for any longest delay.
        for max in [5.0, 7.5, 60.0, 900.0] {
            let mut walked = 0.0;
            for _ in 0..2_000 {
                let next = next_age_based_look(walked, max);
                let step = (walked / 10.0)
                    .floor()
                    .clamp(FALLBACK_MIN_SECONDS, max.max(FALLBACK_MIN_SECONDS));
                assert_eq!(next, walked + step, "max {max}, from {walked}");
                walked = next;
            }
        }
        assert_eq!(next_age_based_look(f64::NAN, 900.0), 0.0);
        // A job a year old with the shortest longest delay: no long walk.
        let year = 365.0 * 86_400.0;
        assert_eq!(next_age_based_look(year, 5.0), year + 5.0);
    }
}
