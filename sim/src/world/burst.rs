//! A calm burst in virtual time, for the scale benchmark: the real stages
//! on the in-memory adapters, without crashes or Genace's odd answers,
//! where every request takes the latency model's time (5 ms by default)
//! and Genace renders each job in a fixed time. One tenant sends the whole
//! burst at once; every other tenant has a ledger and waits for nothing.
//!
//! Handlers run one after another, each to its end, as soon as their
//! message is visible: a handler's requests move the clock on, so a busy
//! moment is drawn out rather than run in parallel, and the drain errs
//! long. The sweep runs every minute, as scheduled.
//!
//! For the account's ceiling, the intents may come from several tenants at
//! once (`senders`), against an account split into shards.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;
use std::collections::BTreeSet;

/// The burst to run.
#[derive(Debug, Clone)]
pub struct BurstOptions {
    /// Tenants with a ledger (at least 2).
    pub tenants: usize,
    /// Intents one tenant sends at once.
    pub intents: usize,
    /// The Genace account's slots (the stack's limit and Genace's own).
    pub limit: u32,
    /// How long Genace renders each job.
    pub render_seconds: i64,
    /// How long each request takes.
    pub latency_ms: i64,
    /// Tenants that send the intents, in turn (1: one tenant sends all).
    pub senders: usize,
    /// The shards the account's counters are split into.
    pub shards: genace_core::shard::AccountShards,
}

impl Default for BurstOptions {
    fn default() -> Self {
        Self {
            tenants: 10_000,
            intents: 30,
            limit: 3,
            render_seconds: 10,
            latency_ms: 5,
            senders: 1,
            shards: genace_core::shard::AccountShards::ONE,
        }
    }
}

/// What a burst cost.
#[derive(Debug, Clone, Default)]
pub struct BurstFigures {
    pub operations: usize,
    pub delivered: usize,
    pub cases: usize,
    /// Requests to DynamoDB, SQS, S3 and Genace (a read of the waiting set
    /// counted as the queries and the batch read DynamoDB needs).
    pub requests: u64,
    /// Wake-ups that read the waiting set, and what they requested.
    pub wake_ups: u64,
    pub wake_requests: u64,
    /// From the first intent to the last delivery, in virtual seconds.
    pub drain_seconds: f64,
    /// `intents × render ÷ limit`.
    pub ideal_seconds: f64,
    /// What the store's write meter saw.
    pub writes: genace_memory::WriteReport,
}

impl BurstFigures {
    pub fn requests_per_operation(&self) -> f64 {
        self.requests as f64 / self.operations.max(1) as f64
    }

    pub fn requests_per_wake_up(&self) -> f64 {
        self.wake_requests as f64 / self.wake_ups.max(1) as f64
    }

    /// The busiest item's write units a second over the drain.
    pub fn busiest_units_per_second(&self) -> f64 {
        self.writes.busiest_units as f64 / self.drain_seconds.max(1e-9)
    }
}

/// How long a burst may take at most before it is given up: the ideal
/// many times over, and an hour more.
const GIVE_UP_FACTOR: f64 = 10.0;

/// Runs one burst; the same options give the same figures.
pub fn burst(opts: &BurstOptions) -> BurstFigures {
    let world_opts = Options {
        crash_per_mille: 0,
        intents: 0,
        max_in_flight: Some(opts.limit),
        tenants: opts.tenants.max(TENANTS.len()).max(opts.senders),
        account_shards: opts.shards,
        ..Options::default()
    };
    let (mut world, runtime) = calm_world(0, &world_opts, Some(opts.latency_ms));
    let _context = runtime.enter();
    world.run_burst(opts)
}

/// A world for the models: calm (no crash, no odd answer), each request
/// taking `latency_ms` of the run's clock when given, with the runtime its
/// timers (a download's deadline) are made in; the caller enters it and
/// polls the handlers by hand.
pub(super) fn calm_world(seed: u64, opts: &Options, latency_ms: Option<i64>) -> (World, tokio::runtime::Runtime) {
    let world = World::new(seed, opts);
    {
        let mut chaos = world.chaos.lock();
        chaos.calm = true;
        chaos.latency = latency_ms.map(|ms| (world.clock.clone(), Duration::milliseconds(ms)));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // A deployment that has run before: its first read of the account
    // split the limits for its shard count. (On a new table, the first
    // claims wait one round trip for that read: docs/decisions/0003.)
    {
        use genace_stages::ports::table::TenantLedgers;
        let _ = runtime.block_on(world.store.account_shards());
    }
    (world, runtime)
}

impl World {
    fn run_burst(&mut self, opts: &BurstOptions) -> BurstFigures {
        let began = self.now();
        // Every intent at once, each as soon as intake answered the last.
        let senders = tenant_names(opts.senders.max(1));
        let ids: Vec<String> = (0..opts.intents)
            .map(|i| self.image_intent(&senders[i % senders.len()], &format!("burst-{i}")))
            .collect();
        let mut renders: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        let mut next_sweep = began + Duration::seconds(60);
        let ideal = opts.intents as f64 * opts.render_seconds as f64 / f64::from(opts.limit.max(1));
        let give_up = began + Duration::seconds((ideal * GIVE_UP_FACTOR) as i64 + 3600);
        let mut last_delivery = began;
        let mut delivered = BTreeSet::new();
        while delivered.len() < ids.len() && self.now() < give_up {
            self.note_new_jobs(&mut renders, |_| opts.render_seconds as f64);
            if !self.calm_step(&mut renders, &mut next_sweep) {
                break;
            }
            for r in self.store.records() {
                let id = r.operation_id.as_str();
                if r.delivery_state == DeliveryState::Delivered
                    && ids.iter().any(|i| i == id)
                    && delivered.insert(id.to_owned())
                {
                    last_delivery = self.now();
                }
            }
        }
        let records = self.store.records();
        let chaos = self.chaos.lock();
        BurstFigures {
            operations: ids.len(),
            delivered: delivered.len(),
            cases: records.iter().filter(|r| r.case.is_some()).count(),
            requests: chaos.requests,
            wake_ups: chaos.wake_ups,
            wake_requests: chaos.wake_requests,
            drain_seconds: (last_delivery - began).num_milliseconds() as f64 / 1000.0,
            ideal_seconds: ideal,
            writes: self.store.write_report().unwrap_or_default(),
        }
    }

    /// A new image intent of `tenant` under `key`, sent now and accepted;
    /// its operation id. Its dispatch message is on the queue.
    pub(super) fn image_intent(&mut self, tenant: &str, key: &str) -> String {
        let body = serde_json::json!({"operation_key": key, "media_type": "image",
            "specification": {"model": "genace-image-1", "prompt": key}});
        self.submit_intent(tenant, &body)
    }

    /// The intent `body` of `tenant`, sent now and accepted; its operation id.
    pub(super) fn submit_intent(&mut self, tenant: &str, body: &serde_json::Value) -> String {
        let intent = Intent::parse(body, None).expect("a valid intent");
        let tenant = TenantId::parse(tenant).expect("a valid tenant");
        let api = self.app.api();
        let now = self.now();
        run_to_end(Box::pin(async move {
            match api.submit(&tenant, &intent, now).await {
                Ok(genace_stages::api::intake::Submitted::New(r)) => Ok(r.operation_id.as_str().to_owned()),
                other => Err(format!("{other:?}")),
            }
        }))
        .expect("a new intent is accepted")
    }

    /// Jobs Genace took since the last look render from now on, each for
    /// `seconds(operation id)`.
    pub(super) fn note_new_jobs(&self, renders: &mut BTreeMap<String, DateTime<Utc>>, seconds: impl Fn(&str) -> f64) {
        for job in self.genace.jobs() {
            if (job.state == "queued" || job.state == "running") && !renders.contains_key(&job.id) {
                let took = seconds(job.client_reference.as_deref().unwrap_or_default());
                // The render began when Genace created the job (under the
                // latency model, a few requests before this step).
                let began = self.chaos.lock().created_at.get(&job.id).copied();
                let end = began.unwrap_or_else(|| self.now()) + Duration::milliseconds((took * 1000.0) as i64);
                self.chaos.lock().render_ends.insert(job.id.clone(), end);
                renders.insert(job.id.clone(), end);
            }
        }
    }

    /// One step of a calm run: the clock moves to the next thing due (a
    /// render's end, a visible message, the minute's sweep) and it
    /// happens. False when nothing is left to happen.
    pub(super) fn calm_step(
        &mut self,
        renders: &mut BTreeMap<String, DateTime<Utc>>,
        next_sweep: &mut DateTime<Utc>,
    ) -> bool {
        let next_message = self
            .queue
            .messages()
            .into_iter()
            .filter(|m| m.queue != Queue::Recovery)
            .map(|m| m.visible_at)
            .min();
        let next_render = renders.values().min().copied();
        let next = [next_message, next_render, Some(*next_sweep)]
            .into_iter()
            .flatten()
            .min();
        let Some(at) = next else { return false };
        if at > self.now() {
            self.clock.set(at);
        }
        if next_render.is_some_and(|r| r <= self.now()) {
            self.finish_renders(renders);
        } else if next_message.is_some_and(|m| m <= self.now()) {
            self.handle_next_message();
        } else {
            *next_sweep = self.now() + Duration::seconds(60);
            let sweeper = self.app.sweeper();
            // A failed run is the next run's to repeat, as deployed.
            let _ = run_to_end(Box::pin(async move {
                sweeper.run().await.map(|r| format!("{r:?}")).map_err(|e| e.to_string())
            }));
        }
        true
    }

    /// Jobs whose render time is up complete, with one small output each.
    pub(super) fn finish_renders(&self, renders: &mut BTreeMap<String, DateTime<Utc>>) {
        let now = self.now();
        let done: Vec<String> = renders
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            let url = crate::common::output_url(&id);
            self.downloads.serve(&url, Some("image/png"), id.as_bytes().repeat(16));
            let outputs = serde_json::json!([{"url": url, "content_type": "image/png"}]);
            self.genace.set_job(&id, "completed", Some(outputs));
            // Marked far in the future: never looked at again.
            renders.insert(id, DateTime::<Utc>::MAX_UTC);
        }
    }

    /// Receives the oldest visible message and runs its handler to its end;
    /// a handler that succeeded deletes its message.
    pub(super) fn handle_next_message(&mut self) {
        for queue in [Queue::Dispatch, Queue::Wake, Queue::Poll, Queue::Deliver] {
            let Some(m) = self.queue.receive(queue, 1, Duration::seconds(60)).pop() else {
                continue;
            };
            let fut = match queue {
                Queue::Dispatch | Queue::Wake => handler(self.app.dispatcher(), m.body.clone()),
                Queue::Poll => handler(self.app.poller(), m.body.clone()),
                _ => handler(self.app.deliverer(), m.body.clone()),
            };
            // Each handler's GETs are its own, as in a chaotic run.
            let after_end = queue == Queue::Poll && self.end_seen(&m.body);
            self.chaos.lock().polling = Some((self.next_actor, after_end));
            self.next_actor += 1;
            let ran = run_to_end(fut);
            self.chaos.lock().polling = None;
            if ran.is_ok() {
                self.queue.delete(m.id, m.receipt);
            }
            return;
        }
    }
}

/// Polls a handler until it ends: nothing in a calm run waits on anything
/// but the scheduler, so each poll moves it on. A handler that waits on a
/// timer (a store's pause after a failure) would never end here: it is
/// given up after many polls, as an error.
pub(super) fn run_to_end(mut fut: Handler) -> Result<String, String> {
    const MAX_POLLS: usize = 1_000_000;
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..MAX_POLLS {
        if let Poll::Ready(result) = fut.as_mut().poll(&mut cx) {
            return result;
        }
    }
    Err("the handler waited on something a calm run never gives".into())
}
