//! Poll latency in virtual time, for the latency benchmark: the real stages
//! on the in-memory adapters, calm, where Genace renders each job for a
//! time drawn from a log-normal spread around its class's median. A
//! warm-up burst teaches the stack each class's render times; then a
//! measured burst runs, and its figures are read from what happened: how
//! late each job's end was seen, how many GETs it took, how long its slot
//! was held against its render, and the drain against the ideal.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;
use std::collections::BTreeSet;

/// The runs to make.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// The classes' median render times, in seconds: each its own class
    /// (videos of different lengths).
    pub medians: Vec<f64>,
    /// The spread: one standard deviation of the log is `ln(1 + spread)`.
    pub spread: f64,
    /// Jobs per class in the warm-up burst, and in the measured one.
    pub warmup: usize,
    pub jobs: usize,
    /// The Genace account's slots.
    pub slots: u32,
    /// Whether the stack is told the limit (`GENACE_MAX_IN_FLIGHT`) or must
    /// learn it from Genace's 429s.
    pub configured: bool,
    /// How long each request takes.
    pub latency_ms: i64,
    /// A 429 storm on status reads: this share of GETs (percent) answered
    /// 429 with a Retry-After of this many seconds.
    pub status_storm: Option<(u64, u32)>,
    pub seed: u64,
}

impl Default for LatencyOptions {
    fn default() -> Self {
        Self {
            medians: vec![10.0, 60.0, 300.0],
            spread: 0.4,
            warmup: 20,
            jobs: 40,
            slots: 10,
            configured: true,
            latency_ms: 5,
            status_storm: None,
            seed: 1,
        }
    }
}

/// What the measured burst showed.
#[derive(Debug, Clone, Default)]
pub struct LatencyFigures {
    pub jobs: usize,
    pub delivered: usize,
    pub cases: usize,
    /// Per job seen to end: seconds from its end to the look that saw it,
    /// and that over its render time.
    pub lags: Vec<(f64, f64)>,
    /// GETs of the measured jobs.
    pub gets: u64,
    /// The slots' time held over the renders' time, summed over the jobs.
    pub slot_over_render: f64,
    /// From the first measured intent to the last delivery, and the ideal:
    /// the same renders, in the same order, each started on the first
    /// slot free and seen done the moment it ends (no lag, no overhead).
    pub drain_seconds: f64,
    pub ideal_seconds: f64,
    /// Genace's 429s over both bursts, and over the warm-up burst alone.
    pub refused: u64,
    pub refused_warmup: u64,
    /// How the learned limit moved from the first burst's start: seconds
    /// from then, and the limit (none: nothing learned).
    pub learned: Vec<(f64, Option<u32>)>,
    /// The account's slots at Genace.
    pub slots: u32,
    /// The median render time over every class.
    pub median_render: f64,
    /// The first look the run made that it must not have: a GET after the
    /// end was seen, two in one handler, or more than the look bound.
    pub violation: Option<String>,
}

impl LatencyFigures {
    /// The lag below which a share `q` of the jobs' ends were seen.
    pub fn lag_quantile(&self, q: f64) -> f64 {
        quantile(self.lags.iter().map(|(lag, _)| *lag).collect(), q)
    }

    /// The same, over each job's render time.
    pub fn relative_lag_quantile(&self, q: f64) -> f64 {
        quantile(self.lags.iter().map(|(_, rel)| *rel).collect(), q)
    }

    pub fn gets_per_job(&self) -> f64 {
        self.gets as f64 / self.jobs.max(1) as f64
    }

    /// The share of jobs seen within `base` seconds + `share` of their
    /// render.
    pub fn within(&self, base: f64, share: f64) -> f64 {
        let within = self
            .lags
            .iter()
            .filter(|(lag, rel)| *lag <= base + share * (lag / rel.max(1e-12)))
            .count();
        within as f64 / self.lags.len().max(1) as f64
    }

    /// Seconds from the first burst's start until the learned limit last
    /// left the band of one below the account's slots to one above (0: it
    /// never left it after it first changed; none: it was never in it).
    pub fn steady_after(&self) -> Option<f64> {
        let band = |l: &Option<u32>| l.is_some_and(|l| l + 1 >= self.slots && l <= self.slots + 1);
        match self.learned.iter().rposition(|(_, l)| !band(l)) {
            None => Some(0.0),
            Some(i) => self.learned.get(i + 1).map(|(at, _)| *at),
        }
    }
}

fn quantile(mut values: Vec<f64>, q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1;
    values[i]
}

/// Runs the warm-up and the measured burst; the same options give the same
/// figures.
pub fn latency(opts: &LatencyOptions) -> LatencyFigures {
    let world_opts = Options {
        crash_per_mille: 0,
        intents: 0,
        max_in_flight: opts.configured.then_some(opts.slots),
        genace_limit: (!opts.configured).then_some(opts.slots),
        ..Options::default()
    };
    let (mut world, runtime) = super::burst::calm_world(opts.seed, &world_opts, Some(opts.latency_ms));
    world.chaos.lock().status_storm = opts.status_storm;
    let _context = runtime.enter();
    let mut rng = Rng::new(opts.seed);
    let mut took = BTreeMap::new();
    let mut learned = vec![(world.now(), None)];
    if let Err(v) = world.latency_burst(opts, opts.warmup, "warmup", &mut rng, &mut took, &mut learned) {
        return LatencyFigures {
            violation: Some(v),
            ..LatencyFigures::default()
        };
    }
    let refused_warmup = world.genace.refused_full();
    let began = world.now();
    let (ids, drain) = match world.latency_burst(opts, opts.jobs, "measured", &mut rng, &mut took, &mut learned) {
        Ok(burst) => burst,
        Err(v) => {
            return LatencyFigures {
                violation: Some(v),
                ..LatencyFigures::default()
            };
        }
    };
    let start = learned[0].0;
    let mut renders: Vec<f64> = took.values().copied().collect();
    LatencyFigures {
        refused_warmup,
        learned: learned
            .into_iter()
            .map(|(at, l)| ((at - start).num_milliseconds() as f64 / 1000.0, l))
            .collect(),
        slots: opts.slots,
        median_render: {
            renders.sort_by(f64::total_cmp);
            renders.get(renders.len() / 2).copied().unwrap_or_default()
        },
        ..world.latency_figures(opts, &ids, &took, began, drain)
    }
}

/// How long `renders`, in this order, take on `slots` slots when each
/// starts on the first slot free and frees it the moment it ends.
fn zero_lag_drain(renders: &[f64], slots: u32) -> f64 {
    let mut free = vec![0.0_f64; slots.max(1) as usize];
    for took in renders {
        let first = free
            .iter_mut()
            .min_by(|a, b| a.total_cmp(b))
            .expect("at least one slot");
        *first += took;
    }
    free.into_iter().fold(0.0, f64::max)
}

/// A render time around `median`: log-normal, `ln(1 + spread)` one
/// standard deviation of its log (Box-Muller over the seeded draws).
fn draw(rng: &mut Rng, median: f64, spread: f64) -> f64 {
    let unit = |rng: &mut Rng| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let (u, v) = (unit(rng).max(f64::MIN_POSITIVE), unit(rng));
    let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
    (median * ((1.0 + spread).ln() * z).exp()).max(0.5)
}

/// A video length per class, so each median is its own class.
const LENGTHS: [f64; 5] = [5.0, 10.0, 20.0, 40.0, 60.0];

impl World {
    /// `per_class` intents of every class at once, each with its render
    /// time drawn (in `took`, by operation id), run until every one is
    /// delivered; their ids, and when the last was delivered.
    fn latency_burst(
        &mut self,
        opts: &LatencyOptions,
        per_class: usize,
        name: &str,
        rng: &mut Rng,
        took: &mut BTreeMap<String, f64>,
        learned: &mut Vec<(DateTime<Utc>, Option<u32>)>,
    ) -> Result<(Vec<String>, DateTime<Utc>), String> {
        let mut ids = Vec::new();
        for i in 0..per_class {
            for (c, median) in opts.medians.iter().enumerate() {
                let id = self.video_intent(&format!("{name}-{c}-{i}"), LENGTHS[c % LENGTHS.len()]);
                took.insert(id.clone(), draw(rng, *median, opts.spread));
                ids.push(id);
            }
        }
        let began = self.now();
        let mut renders = BTreeMap::new();
        let mut next_sweep = began + Duration::seconds(60);
        let total: f64 = ids.iter().filter_map(|id| took.get(id)).sum();
        let give_up = began + Duration::seconds((total * 10.0) as i64 + 3600);
        let wanted: BTreeSet<&String> = ids.iter().collect();
        let mut delivered = BTreeSet::new();
        let mut last = began;
        while delivered.len() < ids.len() && self.now() < give_up {
            self.note_new_jobs(&mut renders, |op| took.get(op).copied().unwrap_or(1.0));
            if !self.calm_step(&mut renders, &mut next_sweep) {
                break;
            }
            let records = self.store.records();
            self.check_looks(&records)?;
            self.check_gets_bound(&records)?;
            let now_learned = self.store.account_now().learned;
            if learned.last().is_none_or(|(_, l)| *l != now_learned) {
                learned.push((self.now(), now_learned));
            }
            for r in self.store.records() {
                let id = r.operation_id.as_str();
                if r.delivery_state == DeliveryState::Delivered
                    && wanted.contains(&id.to_owned())
                    && delivered.insert(id.to_owned())
                {
                    last = self.now();
                }
            }
        }
        Ok((ids, last))
    }

    fn latency_figures(
        &self,
        opts: &LatencyOptions,
        ids: &[String],
        took: &BTreeMap<String, f64>,
        began: DateTime<Utc>,
        drain: DateTime<Utc>,
    ) -> LatencyFigures {
        let records: BTreeMap<String, OperationRecord> = self
            .store
            .records()
            .into_iter()
            .map(|r| (r.operation_id.as_str().to_owned(), r))
            .collect();
        let chaos = self.chaos.lock();
        let mut f = LatencyFigures {
            jobs: ids.len(),
            refused: self.genace.refused_full(),
            drain_seconds: (drain - began).num_milliseconds() as f64 / 1000.0,
            ..LatencyFigures::default()
        };
        let mut slot = 0.0;
        let mut render = 0.0;
        for id in ids {
            let (Some(rec), Some(seconds)) = (records.get(id), took.get(id)) else {
                continue;
            };
            f.delivered += usize::from(rec.delivery_state == DeliveryState::Delivered);
            f.cases += usize::from(rec.case.is_some());
            render += seconds;
            if let Some(job) = &rec.remote_job_id {
                f.gets += u64::from(chaos.gets.get(job).copied().unwrap_or(0));
            }
            let (Some(d), Some(accepted)) = (rec.detection.as_ref(), rec.accepted_at) else {
                continue;
            };
            let ended = accepted + Duration::milliseconds((seconds * 1000.0) as i64);
            let lag = ((d.ended_seen_at - ended).num_milliseconds() as f64 / 1000.0).max(0.0);
            f.lags.push((lag, lag / seconds));
            slot += (d.ended_seen_at - accepted).num_milliseconds() as f64 / 1000.0;
        }
        f.slot_over_render = slot / render.max(1e-9);
        let renders: Vec<f64> = ids.iter().filter_map(|id| took.get(id).copied()).collect();
        f.ideal_seconds = zero_lag_drain(&renders, opts.slots);
        f
    }

    /// A new video intent of tenant-a, `length` seconds long, sent now and
    /// accepted; its operation id.
    fn video_intent(&mut self, key: &str, length: f64) -> String {
        let body = serde_json::json!({"operation_key": key, "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": key, "duration": length}});
        self.submit_intent(TENANTS[0], &body)
    }
}
