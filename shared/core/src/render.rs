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
pub const BUCKETS: usize = 40;
/// The upper edge of the first bucket.
pub const FIRST_EDGE_SECONDS: f64 = 0.5;
/// Each bucket's upper edge over the one before: 40 buckets reach almost
/// four hours (the last holds every longer render).
pub const RATIO: f64 = 1.3;
/// Finished jobs a class needs before its plan replaces the age-based
/// schedule.
pub const MIN_SAMPLES: u32 = 8;
/// Planned looks at most; past them, the age-based schedule.
pub const MAX_PLANNED_LOOKS: u32 = 10;
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
                let low = if i == 0 {
                    FIRST_EDGE_SECONDS / RATIO
                } else {
                    edge(i - 1)
                };
                let within = ((target - below) / c).clamp(0.0, 1.0);
                return Some(low * (edge(i) / low).powf(within));
            }
            below += c;
        }
        Some(edge(BUCKETS - 1))
    }
}

/// When to look at a job of one class, from its learned render times.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PollPlan {
    /// Most renders are still going before this age (the 10th percentile).
    pub early: f64,
    /// The median render.
    pub median: f64,
    /// Most renders have ended by this age (the 95th percentile).
    pub late: f64,
}

impl PollPlan {
    /// The plan for a class with enough finished jobs; none before.
    pub fn from_times(times: &RenderTimes) -> Option<Self> {
        if times.samples() < MIN_SAMPLES {
            return None;
        }
        Some(Self {
            early: times.quantile(0.10)?,
            median: times.quantile(0.50)?,
            late: times.quantile(0.95)?,
        })
    }

    /// The spacing of looks through the likely window: the lag a look
    /// leaves is at most this, and half of it on average, so it grows with
    /// the render (a second and 4 % of the median), at least a second.
    pub fn spacing(&self) -> f64 {
        (1.0 + 0.04 * self.median).max(MIN_SPACING_SECONDS)
    }

    /// Seconds until the next look at a job `age` seconds after its
    /// acceptance, looked at `looks` times so far; `age_based` is the
    /// schedule without data, which takes over past the window or the
    /// planned looks.
    pub fn next_delay(&self, age: f64, looks: u32, age_based: f64) -> f64 {
        if looks >= MAX_PLANNED_LOOKS || age > self.late {
            return age_based;
        }
        if age + MIN_SPACING_SECONDS < self.early {
            // The first look near the early quantile.
            return self.early - age;
        }
        // The spacing the lag allows, or wider when the planned looks left
        // would not reach the end of the window.
        let left = f64::from(MAX_PLANNED_LOOKS - looks);
        self.spacing().max((self.late - age) / left)
    }
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
        assert_eq!(PollPlan::from_times(&times([10.0; 7])), None);
        assert!(PollPlan::from_times(&times([10.0; 8])).is_some());
    }

    #[test]
    fn the_plan_looks_first_near_the_early_quantile_then_densely_then_by_age() {
        // Renders of 6 to 14 s.
        let plan = PollPlan::from_times(&times((0..200).map(|i| 6.0 + f64::from(i % 81) * 0.1))).unwrap();
        assert!(plan.early > 5.0 && plan.late < 16.0, "{plan:?}");
        let first = plan.next_delay(0.0, 0, 5.0);
        assert!(
            (first - plan.early).abs() < 1e-9,
            "the first look waits for the early quantile"
        );
        // Inside the window: looks a second or so apart, whatever the age-based schedule says.
        let dense = plan.next_delay(plan.early, 1, 5.0);
        assert!((MIN_SPACING_SECONDS..=2.0).contains(&dense), "{dense}");
        // Past the window, or out of planned looks: the age-based schedule.
        assert_eq!(plan.next_delay(plan.late + 1.0, 3, 7.0), 7.0);
        assert_eq!(plan.next_delay(plan.early, MAX_PLANNED_LOOKS, 7.0), 7.0);
    }

    #[test]
    fn a_long_class_is_looked_at_sparser_and_within_the_planned_looks() {
        let plan = PollPlan::from_times(&times((0..200).map(|i| 180.0 + f64::from(i) * 1.2))).unwrap();
        let mut age = 0.0;
        let mut looks = 0;
        while age <= plan.late && looks < 40 {
            age += plan.next_delay(age, looks, age_based_delay(age, 300.0));
            looks += 1;
        }
        assert!(looks <= MAX_PLANNED_LOOKS + 1, "{looks} looks to pass the window");
        assert!(plan.spacing() > 5.0, "{plan:?}");
    }
}
