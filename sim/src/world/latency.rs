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
    /// Per measured job given a learned expected end at its acceptance:
    /// whether it ended by the p50 first given, and by the p90.
    pub eta: Vec<(bool, bool)>,
    /// Measured jobs accepted before their class had enough renders for
    /// an expected end.
    pub eta_unlearned: usize,
    /// Per measured operation that waited for a slot and was given an
    /// expected start: seconds from the earliest expected to its claim,
    /// and whether the claim fell inside the window given.
    pub starts: Vec<(f64, bool)>,
    /// Per measured job: seconds from its end until a client saw it
    /// rendered, and that client's reads, for a client that reads when
    /// the service suggests (`next_look_at`) and one that reads every 2 s.
    pub follower: Vec<(f64, u32)>,
    pub poller: Vec<(f64, u32)>,
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

    /// The share of jobs that ended by the p50 first given, and by the p90.
    pub fn calibration(&self) -> (f64, f64) {
        let n = self.eta.len().max(1) as f64;
        let by50 = self.eta.iter().filter(|(a, _)| *a).count() as f64;
        let by90 = self.eta.iter().filter(|(_, b)| *b).count() as f64;
        (by50 / n, by90 / n)
    }

    /// The median and 90th percentile of the expected start's error
    /// (claim less earliest), in seconds, and the share claimed inside the
    /// window.
    pub fn start_error(&self) -> (f64, f64, f64) {
        let errors: Vec<f64> = self.starts.iter().map(|(e, _)| e.abs()).collect();
        let inside = self.starts.iter().filter(|(_, w)| *w).count() as f64 / self.starts.len().max(1) as f64;
        (quantile(errors.clone(), 0.5), quantile(errors, 0.9), inside)
    }

    /// A client's lag p50 and p90 (seconds) and reads per job.
    pub fn client(samples: &[(f64, u32)]) -> (f64, f64, f64) {
        let lags: Vec<f64> = samples.iter().map(|(l, _)| *l).collect();
        let reads = samples.iter().map(|(_, r)| f64::from(*r)).sum::<f64>() / samples.len().max(1) as f64;
        (quantile(lags.clone(), 0.5), quantile(lags, 0.9), reads)
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
    let (ids, drain, clients) =
        match world.latency_burst(opts, opts.jobs, "measured", &mut rng, &mut took, &mut learned) {
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
    let figures = world.latency_figures(opts, &ids, &took, began, drain);
    let seen = world.client_figures(&clients, &took);
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
        ..seen.merged(figures)
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

/// When `rec`'s render of `seconds` ended: it ran from its job's creation
/// (before the 202 was back and the acceptance written), else from the
/// acceptance.
fn render_ended(
    created: &BTreeMap<String, DateTime<Utc>>,
    rec: &OperationRecord,
    accepted: DateTime<Utc>,
    seconds: f64,
) -> DateTime<Utc> {
    let began = rec
        .remote_job_id
        .as_ref()
        .and_then(|j| created.get(j).copied())
        .unwrap_or(accepted);
    began + Duration::milliseconds((seconds * 1000.0) as i64)
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
    ) -> Result<(Vec<String>, DateTime<Utc>, Clients), String> {
        let mut ids = Vec::new();
        for i in 0..per_class {
            for (c, median) in opts.medians.iter().enumerate() {
                let id = self.video_intent(&format!("{name}-{c}-{i}"), LENGTHS[c % LENGTHS.len()]);
                took.insert(id.clone(), draw(rng, *median, opts.spread));
                ids.push(id);
            }
        }
        let began = self.now();
        let mut clients = Clients::new(&ids, began);
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
            if name == "measured" {
                // The clients' reads are not the service's: they take none
                // of its time (each would move the run's clock on).
                let chaos = self.chaos.clone();
                chaos.observe(|| self.watch(&mut clients, &records));
            }
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
        Ok((ids, last, clients))
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
            let ended = render_ended(&chaos.created_at, rec, accepted, *seconds);
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

/// What the clients of the measured burst saw, in virtual time, step by
/// step: the expected end each job was first given at its acceptance, the
/// expected start each waiting operation was first given and its claim,
/// and a client that reads when the service suggests.
pub(super) struct Clients {
    submitted: BTreeMap<String, DateTime<Utc>>,
    /// The p50 and p90 first given (none: its class had too few renders).
    eta: BTreeMap<String, Option<Window>>,
    start: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
    claimed: BTreeMap<String, DateTime<Utc>>,
    /// Each job's class's render times at its acceptance.
    times: BTreeMap<String, genace_core::render::RenderTimes>,
    follow: BTreeMap<String, Follow>,
    /// The records as they were until the last step, and since when.
    before: BTreeMap<String, OperationRecord>,
    before_at: DateTime<Utc>,
}

/// Two times: an expected end's p50 and p90.
type Window = (DateTime<Utc>, DateTime<Utc>);

/// A client that reads an operation when the service suggests.
struct Follow {
    next: DateTime<Utc>,
    reads: u32,
    seen: Option<DateTime<Utc>>,
}

/// How often the polling client reads.
const POLL_EVERY_SECONDS: i64 = 2;

impl Clients {
    fn new(ids: &[String], now: DateTime<Utc>) -> Self {
        let follow = ids
            .iter()
            .map(|id| {
                let first = Follow {
                    next: now,
                    reads: 0,
                    seen: None,
                };
                (id.clone(), first)
            })
            .collect();
        Self {
            submitted: ids.iter().map(|id| (id.clone(), now)).collect(),
            eta: BTreeMap::new(),
            start: BTreeMap::new(),
            claimed: BTreeMap::new(),
            times: BTreeMap::new(),
            follow,
            before: BTreeMap::new(),
            before_at: now,
        }
    }
}

/// A future of the in-memory stack, run to its end (nothing it awaits
/// waits in a calm run).
fn settle<T>(fut: impl std::future::Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
    }
    None
}

impl World {
    /// After a step: what the clients of the measured burst are given and
    /// see now.
    fn watch(&self, clients: &mut Clients, records: &[OperationRecord]) {
        let now = self.now();
        let api = self.app.api();
        for rec in records {
            let id = rec.operation_id.as_str();
            if !clients.submitted.contains_key(id) {
                continue;
            }
            if let (Some(accepted), false) = (rec.accepted_at, clients.eta.contains_key(id)) {
                let class = genace_core::render::RenderClass::of(rec);
                let times = settle(genace_stages::ports::table::RenderTimeLog::render_times(
                    &self.store,
                    &class,
                ))
                .and_then(Result::ok)
                .unwrap_or_default();
                let end = genace_core::progress::expected_end(accepted, &times, accepted);
                clients.times.insert(id.to_owned(), times.clone());
                let given = end.p50_at.zip(end.p90_at);
                clients.eta.insert(id.to_owned(), given);
            }
            let waits = matches!(rec.wait(), Some((genace_core::record::WaitReason::Capacity, _)));
            if waits && !clients.start.contains_key(id) {
                let progress = settle(api.progress(rec)).unwrap_or_default();
                if let Some(s) = progress.queue.and_then(|q| q.expected_start) {
                    clients.start.insert(id.to_owned(), (s.earliest, s.latest));
                }
            }
            if rec.phase != Phase::Prepared && !clients.claimed.contains_key(id) {
                clients.claimed.insert(id.to_owned(), now);
            }
            let Some(follow) = clients.follow.get_mut(id) else {
                continue;
            };
            while follow.seen.is_none() && follow.next <= now {
                // A read before this step saw the record as it was before it.
                let seen = match clients.before.get(id) {
                    Some(before) if follow.next < now && follow.next >= clients.before_at => before,
                    _ => rec,
                };
                follow.reads += 1;
                if seen.phase == Phase::Rendered || machine::is_finished(seen) {
                    follow.seen = Some(follow.next);
                } else {
                    let class = genace_core::render::RenderClass::of(seen);
                    let times = settle(genace_stages::ports::table::RenderTimeLog::render_times(
                        &self.store,
                        &class,
                    ))
                    .and_then(Result::ok);
                    let max_delay = f64::from(self.app.config.poll_max_delay_seconds.max(1));
                    let plan = times
                        .as_ref()
                        .and_then(|t| genace_core::render::PollPlan::from_times(t, max_delay));
                    let hints = genace_core::progress::LookHints {
                        plan: plan.as_ref(),
                        max_delay,
                        start: None,
                    };
                    let next = genace_core::progress::next_look(seen, hints, follow.next);
                    follow.next = next.unwrap_or(follow.next).max(follow.next + Duration::seconds(1));
                }
            }
        }
        clients.before = records
            .iter()
            .filter(|r| clients.submitted.contains_key(r.operation_id.as_str()))
            .map(|r| (r.operation_id.as_str().to_owned(), r.clone()))
            .collect();
        clients.before_at = now;
    }

    /// The clients' figures of the measured burst.
    fn client_figures(&self, clients: &Clients, took: &BTreeMap<String, f64>) -> LatencyFigures {
        let records: BTreeMap<String, OperationRecord> = self
            .store
            .records()
            .into_iter()
            .map(|r| (r.operation_id.as_str().to_owned(), r))
            .collect();
        let mut f = LatencyFigures::default();
        let secs = |a: DateTime<Utc>, b: DateTime<Utc>| (b - a).num_milliseconds() as f64 / 1000.0;
        for (id, submitted) in &clients.submitted {
            let (Some(rec), Some(seconds)) = (records.get(id), took.get(id)) else {
                continue;
            };
            let Some(accepted) = rec.accepted_at else { continue };
            let ended = render_ended(&self.chaos.lock().created_at, rec, accepted, *seconds);
            match clients.eta.get(id) {
                Some(Some((p50, p90))) => f.eta.push((ended <= *p50, ended <= *p90)),
                _ => f.eta_unlearned += 1,
            }
            if let (Some((earliest, latest)), Some(claimed)) = (clients.start.get(id), clients.claimed.get(id)) {
                let inside = claimed >= earliest && latest.is_none_or(|l| *claimed <= l);
                f.starts.push((secs(*earliest, *claimed), inside));
            }
            if let Some(Follow {
                seen: Some(seen),
                reads,
                ..
            }) = clients.follow.get(id)
            {
                f.follower.push((secs(ended, *seen).max(0.0), *reads));
            }
            if let Some(d) = &rec.detection {
                let polls = (secs(*submitted, d.ended_seen_at) / POLL_EVERY_SECONDS as f64)
                    .ceil()
                    .max(1.0);
                let seen = *submitted + Duration::seconds(polls as i64 * POLL_EVERY_SECONDS);
                f.poller.push((secs(ended, seen).max(0.0), polls as u32));
            }
        }
        f
    }
}

impl LatencyFigures {
    /// These clients' figures beside the service's.
    fn merged(self, service: LatencyFigures) -> LatencyFigures {
        LatencyFigures {
            eta: self.eta,
            eta_unlearned: self.eta_unlearned,
            starts: self.starts,
            follower: self.follower,
            poller: self.poller,
            ..service
        }
    }
}
