//! The world of one run: the app on chaotic adapters, the running
//! handlers, the scheduler's steps and the quiet phase. Its promises are
//! checked in [`checks`]; [`trace`] writes what a run did.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use crate::*;

mod checks;
mod trace;

pub(crate) use trace::{short, state_line};

// ------------------------------------------------------------ the world

pub(crate) type SimApp = App<
    Chaotic<MemoryStore>,
    Chaotic<MemoryQueue>,
    Chaotic<MemoryObjects>,
    Chaotic<MemoryGenace>,
    Chaotic<MemoryDownloads>,
    ManualClock,
>;

pub(crate) type Handler = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// One invocation of a queue-driven stage on one message body.
pub(crate) fn handler<S: Stage + 'static>(stage: S, body: String) -> Handler {
    Box::pin(async move {
        handle_body(&stage, &body)
            .await
            .map(|o| format!("{o:?}"))
            .map_err(|e| e.to_string())
    })
}

/// A running handler: a Lambda invocation in flight.
pub(crate) struct Actor {
    id: usize,
    label: String,
    fut: Handler,
    /// The message it handles (queue message id and receipt).
    message: Option<(u64, u64)>,
    /// When its function's timeout kills it.
    deadline: DateTime<Utc>,
}

/// What to plant and how long to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Scheduler steps before the quiet phase.
    pub steps: usize,
    /// Intents offered at most.
    pub intents: usize,
    /// Crashes per thousand port calls.
    pub crash_per_mille: u64,
    /// Planted bugs (`genace_core::planted`), 0 for none.
    pub bugs: u32,
    /// A spend limit on `tenant-a`, in credits: dispatch must wait for room,
    /// and the limit must never be passed.
    pub spend_limit: Option<f64>,
    /// Genace renders at most this many jobs at once (and answers 429 past
    /// it), and the store admits claims under the same account limit.
    pub max_in_flight: Option<u32>,
    /// Genace's own limit when lower than `max_in_flight`: dispatch learns
    /// it from 429s.
    pub genace_limit: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            steps: 300,
            intents: 6,
            crash_per_mille: 30,
            bugs: 0,
            spend_limit: None,
            max_in_flight: None,
            genace_limit: None,
        }
    }
}

/// The end of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub seed: u64,
    /// The broken promise, if any.
    pub violation: Option<String>,
    /// One line per step.
    pub trace: Vec<String>,
}

pub(crate) struct World {
    seed: u64,
    rng: Rng,
    chaos: Chaos,
    app: SimApp,
    store: MemoryStore,
    queue: MemoryQueue,
    objects: MemoryObjects,
    genace: MemoryGenace,
    downloads: MemoryDownloads,
    clock: ManualClock,
    actors: Vec<Actor>,
    next_actor: usize,
    pub(crate) trace: Vec<String>,
    intents_left: usize,
    /// Per operation: highest version seen, first specification hash, confirmations.
    seen: BTreeMap<String, (u64, String)>,
    /// Per operation: its state as last logged.
    shown: BTreeMap<String, String>,
    confirmations: BTreeMap<String, usize>,
    /// Operations a tenant asked to erase: their objects may be gone
    /// before the record says so (the objects are deleted first).
    erasing: std::collections::BTreeSet<String>,
    /// What intake answered clients, in the order the answers were given;
    /// drained and checked after every step.
    answers: Arc<Mutex<Vec<Answer>>>,
    /// Per (tenant, key, specification hash): the operation id first answered.
    answered_ids: BTreeMap<(String, String, String), String>,
}

/// One answer intake gave a client.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    tenant: String,
    key: String,
    /// The hash of the specification the client sent.
    sent: String,
    reply: Reply,
}

#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 202 (new) or 200 (replay): the operation id and the specification the answer carries.
    Operation { id: String, carried: String, replay: bool },
    /// 409: the key holds another specification.
    KeyReused,
    /// Anything else (a store failure): says nothing about the key.
    Failed,
}

pub(crate) const TENANTS: [&str; 2] = ["tenant-a", "tenant-b"];
pub(crate) const KEYS: [&str; 3] = ["k1", "k2", "k3"];
pub(crate) const PROMPTS: [&str; 2] = ["a lighthouse", "a harbour"];

impl World {
    pub(crate) fn new(seed: u64, opts: &Options) -> Self {
        let chaos = Chaos::new(seed, opts.crash_per_mille);
        // Learning Genace's limit: every 429 is the account's, so none may
        // reach a person.
        chaos.lock().plants_429s = opts.genace_limit.is_none();
        let mem = genace_stages::memory::memory_app(start());
        let clock = mem.clock.clone();
        let (store, objects, genace, downloads) = (mem.store, mem.objects, mem.genace, mem.downloads);
        let queue = mem.queue.clone();
        let mut config = mem.config;
        config.part_size = 1024;
        if let Some(limit) = opts.spend_limit {
            store.set_spend_limit_now(TENANTS[0], Some(genace_core::ledger::millis(limit)));
        }
        let store = store.with_account_limit(opts.max_in_flight);
        let genace = match opts.genace_limit.or(opts.max_in_flight) {
            Some(jobs) => genace.with_concurrency(jobs as usize),
            None => genace,
        };
        let app = App {
            store: Chaotic {
                inner: store.clone(),
                chaos: chaos.clone(),
            },
            queue: Chaotic {
                inner: queue.clone(),
                chaos: chaos.clone(),
            },
            objects: Chaotic {
                inner: objects.clone(),
                chaos: chaos.clone(),
            },
            genace: Chaotic {
                inner: genace.clone(),
                chaos: chaos.clone(),
            },
            downloads: Chaotic {
                inner: downloads.clone(),
                chaos: chaos.clone(),
            },
            clock: clock.clone(),
            config,
            metrics: genace_stages::ports::metrics::Metrics::off(),
            vault: std::sync::Arc::new(genace_stages::ports::webhooks::NoVault),
        };
        Self {
            seed,
            rng: Rng::new(seed),
            chaos,
            app,
            store,
            queue,
            objects,
            genace,
            downloads,
            clock,
            actors: Vec::new(),
            next_actor: 0,
            trace: Vec::new(),
            intents_left: opts.intents,
            seen: BTreeMap::new(),
            shown: BTreeMap::new(),
            erasing: std::collections::BTreeSet::new(),
            confirmations: BTreeMap::new(),
            answers: Arc::new(Mutex::new(Vec::new())),
            answered_ids: BTreeMap::new(),
        }
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        use genace_stages::ports::clock::Clock;
        self.clock.now()
    }

    pub(crate) fn log(&mut self, line: String) {
        let at = (self.now() - start()).num_seconds();
        self.trace.push(format!("{:>5} t+{at:>6}s {line}", self.trace.len()));
    }

    pub(crate) fn spawn(&mut self, label: String, timeout_seconds: i64, message: Option<(u64, u64)>, fut: Handler) {
        let id = self.next_actor;
        self.next_actor += 1;
        self.log(format!("start #{id} {label}"));
        let deadline = self.now() + Duration::seconds(timeout_seconds);
        self.actors.push(Actor {
            id,
            label,
            fut,
            message,
            deadline,
        });
    }

    // ---- steps

    pub(crate) fn intake(&mut self) {
        self.intents_left -= 1;
        let tenant = *self.rng.pick(&TENANTS);
        let key = *self.rng.pick(&KEYS);
        let prompt = *self.rng.pick(&PROMPTS);
        // Videos and images under the same keys: reservations of 10 and 1
        // credits meet under a spend limit, and a key sent again with the
        // other media type is a changed intent (409).
        let (media, model) = *self
            .rng
            .pick(&[("video", "genace-video-2"), ("image", "genace-image-1")]);
        let mut body = serde_json::json!({"operation_key": key, "media_type": media,
            "specification": {"model": model, "prompt": prompt}});
        // A quarter carry a dispatch deadline, which is part of the intent.
        if self.rng.chance(250) {
            body["dispatch_within_seconds"] = serde_json::json!(*self.rng.pick(&[60, 600]));
        }
        let intent = Intent::parse(&body, None).expect("a valid intent");
        let tenant_id = TenantId::parse(tenant).expect("a valid tenant");
        let intake = self.app.intake();
        let now = self.now();
        let answers = self.answers.clone();
        let sent = intent.canonical.hash().as_str().to_owned();
        self.spawn(
            format!("intake {tenant}/{key} {media} {prompt:?}"),
            10,
            None,
            Box::pin(async move {
                use genace_stages::api::intake::{IntakeError, Submitted};
                let result = intake.submit(&tenant_id, &intent, now).await;
                let reply = match &result {
                    Ok(Submitted::New(r)) | Ok(Submitted::Replayed(r)) => Reply::Operation {
                        id: r.operation_id.as_str().to_owned(),
                        carried: r.specification_hash.clone(),
                        replay: matches!(result, Ok(Submitted::Replayed(_))),
                    },
                    Err(IntakeError::KeyReused { .. }) => Reply::KeyReused,
                    Err(_) => Reply::Failed,
                };
                answers.lock().unwrap_or_else(|p| p.into_inner()).push(Answer {
                    tenant: tenant.to_owned(),
                    key: key.to_owned(),
                    sent,
                    reply,
                });
                result
                    .map(|s| match s {
                        Submitted::New(r) => format!("new {}", short(r.operation_id.as_str())),
                        Submitted::Replayed(r) => format!("replayed {}", short(r.operation_id.as_str())),
                    })
                    .map_err(|e| e.to_string())
            }),
        );
    }

    pub(crate) fn receive(&mut self, queue: Queue) -> bool {
        let Some(m) = self.queue.receive(queue, 1, Duration::seconds(60)).pop() else {
            return false;
        };
        let body = m.body.clone();
        let message = Some((m.id, m.receipt));
        let op = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["operation_id"].as_str().map(|id| short(id).to_owned()))
            .unwrap_or_default();
        let label = format!("{queue:?} {op} msg {} (receive {})", m.id, m.receives);
        // Each function's timeout, as the template sets it.
        let (timeout, fut) = match queue {
            // Dispatch consumes the wake queue beside its own.
            Queue::Dispatch | Queue::Wake => (60, handler(self.app.dispatcher(), body)),
            Queue::Poll => (180, handler(self.app.poller(), body)),
            Queue::Deliver => (900, handler(self.app.deliverer(), body)),
            Queue::Recovery => (30, handler(self.app.recovery(), body)),
        };
        self.spawn(label, timeout, message, fut);
        true
    }

    pub(crate) fn sweep(&mut self) {
        let sweeper = self.app.sweeper();
        self.spawn(
            "sweep".into(),
            55,
            None,
            Box::pin(async move { sweeper.run().await.map(|r| format!("{r:?}")).map_err(|e| e.to_string()) }),
        );
    }

    /// Polls one handler once. `Err` is a violation (a panic: an invariant
    /// assertion or a bug).
    fn poll(&mut self, index: usize) -> Result<bool, String> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| self.actors[index].fut.as_mut().poll(&mut cx)));
        let crashed = self.chaos.take_crashed();
        match polled {
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic".into());
                let actor = self.actors.remove(index);
                Err(format!("#{} {} panicked: {what}", actor.id, actor.label))
            }
            Ok(Poll::Ready(result)) => {
                let actor = self.actors.remove(index);
                let ok = result.is_ok();
                self.log(format!(
                    "end #{} {}",
                    actor.id,
                    match &result {
                        Ok(o) => format!("ok {o}"),
                        Err(e) => format!("err {e}"),
                    }
                ));
                // The event source deletes what succeeded; now and then that delete is lost.
                if let (true, Some((id, receipt))) = (ok, actor.message)
                    && !self.rng.chance(50)
                {
                    self.queue.delete(id, receipt);
                }
                Ok(true)
            }
            Ok(Poll::Pending) if crashed => {
                let actor = self.actors.remove(index);
                self.log(format!("crash #{} {}", actor.id, actor.label));
                Ok(true)
            }
            Ok(Poll::Pending) => Ok(false),
        }
    }

    pub(crate) fn advance(&mut self, seconds: i64) {
        self.clock.advance(Duration::seconds(seconds));
        self.log(format!("clock +{seconds}s"));
        // Lambda ends an invocation at its timeout.
        let now = self.now();
        let mut i = 0;
        while i < self.actors.len() {
            if self.actors[i].deadline <= now {
                let actor = self.actors.remove(i);
                self.log(format!("timeout #{} {}", actor.id, actor.label));
            } else {
                i += 1;
            }
        }
    }

    /// Genace moves one job on.
    pub(crate) fn genace_progress(&mut self) {
        let jobs: Vec<_> = self
            .genace
            .jobs()
            .into_iter()
            .filter(|j| j.state == "queued" || j.state == "running")
            .collect();
        if jobs.is_empty() {
            return;
        }
        let job = self.rng.pick(&jobs).clone();
        let (state, outputs) = match (job.state.as_str(), self.rng.below(10)) {
            ("queued", _) => ("running", None),
            (_, 0) => ("failed", None),
            (_, 1) => ("completed", Some(serde_json::Value::Null)),
            _ => {
                let count = 1 + self.rng.below(2);
                let mut list = Vec::new();
                for i in 0..count {
                    let url = format!("https://cdn.genace.example/{}/{i}.mp4", job.id);
                    let size = 200 + self.rng.below(2500) as usize;
                    let data: Vec<u8> = (0..size).map(|b| (b as u64 ^ self.seed) as u8).collect();
                    if self.rng.chance(150) {
                        self.downloads.answer(
                            &url,
                            genace_stages::memory::ServedFile {
                                status: 503,
                                content_type: None,
                                data: Vec::new(),
                            },
                        );
                    } else {
                        self.downloads.serve(&url, Some("video/mp4"), data);
                    }
                    list.push(serde_json::json!({"url": url, "content_type": "video/mp4"}));
                }
                ("completed", Some(serde_json::Value::Array(list)))
            }
        };
        self.genace.set_job(&job.id, state, outputs);
        self.log(format!("genace {} {} -> {state}", job.id, job.state));
    }

    /// Serves every output of completed jobs whole (the quiet phase).
    pub(crate) fn heal_downloads(&mut self) {
        for job in self.genace.jobs() {
            if let Some(serde_json::Value::Array(list)) = &job.outputs {
                for o in list {
                    if let Some(url) = o["url"].as_str() {
                        self.downloads.serve(url, Some("video/mp4"), url.as_bytes().repeat(40));
                    }
                }
            }
        }
    }

    pub(crate) fn duplicate(&mut self) {
        let messages = self.queue.messages();
        if messages.is_empty() {
            return;
        }
        let m = self.rng.pick(&messages).clone();
        self.queue.send(m.queue, m.body.clone(), self.rng.below(30) as u32);
        self.log(format!("duplicate a {:?} message", m.queue));
    }

    /// A tenant takes back one of its operations, whatever its phase: the
    /// cancel wins only before the dispatch claim, and then no POST may
    /// ever follow ([`World::check_job_counts`]).
    pub(crate) fn cancel(&mut self) {
        let records = self.store.records();
        if records.is_empty() {
            return;
        }
        let rec = self.rng.pick(&records).clone();
        let intake = self.app.intake();
        self.spawn(
            format!("cancel {} ({})", short(rec.operation_id.as_str()), rec.phase.as_str()),
            10,
            None,
            Box::pin(async move {
                match intake.cancel(&rec.tenant_id, &rec.operation_id).await {
                    Ok(r) => Ok(r.phase.as_str().to_owned()),
                    Err(e @ genace_stages::api::intake::IntakeError::TooLateToCancel { .. }) => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }),
        );
    }

    /// A tenant erases one of its operations' outputs, whatever its phase:
    /// refused while a delivery may run, and then no object of it remains,
    /// delivered or left by a failed attempt ([`World::check_record`]).
    pub(crate) fn erase(&mut self) {
        let records = self.store.records();
        if records.is_empty() {
            return;
        }
        let rec = self.rng.pick(&records).clone();
        // The erasure reads the record again when it runs, and may find it
        // erasable then: from here on, its objects may go before the record
        // says so.
        self.erasing.insert(rec.operation_id.as_str().to_owned());
        let intake = self.app.intake();
        self.spawn(
            format!("erase {} ({})", short(rec.operation_id.as_str()), rec.phase.as_str()),
            10,
            None,
            Box::pin(async move {
                match intake.erase_outputs(&rec.tenant_id, &rec.operation_id).await {
                    Ok(r) => Ok(format!(
                        "erased {} objects",
                        r.outputs_erased.map_or(0, |e| e.objects.len())
                    )),
                    Err(e @ genace_stages::api::intake::IntakeError::CannotErase { .. }) => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }),
        );
    }

    /// An operator resolves one open case, truthfully: the jobs Genace holds
    /// decide between attach and confirm_not_created.
    pub(crate) fn operator(&mut self) {
        let cases: Vec<OperationRecord> = self.store.records().into_iter().filter(|r| r.case.is_some()).collect();
        if cases.is_empty() {
            return;
        }
        let rec = self.rng.pick(&cases).clone();
        let id = rec.operation_id.as_str().to_owned();
        let jobs: Vec<String> = self
            .genace
            .jobs()
            .into_iter()
            .filter(|j| j.client_reference.as_deref() == Some(id.as_str()))
            .map(|j| j.id)
            .collect();
        let reason = rec.case.as_ref().map(|c| c.reason);
        // Now and then an operator gives up instead: every abandon path must
        // keep what Genace holds or charged.
        let gives_up = self.rng.chance(200);
        let resolution = match (rec.phase, reason) {
            (Phase::Uncertain | Phase::Prepared | Phase::SubmitFailed, _) if gives_up => Resolution::Abandon,
            (Phase::Uncertain, _) => match jobs.first() {
                Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                None => Resolution::ConfirmNotCreated,
            },
            (Phase::Accepted, Some(CaseReason::RemoteJobMissing)) => {
                match jobs.iter().find(|j| Some(j.as_str()) != rec.remote_job_id.as_deref()) {
                    Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                    None => Resolution::Abandon,
                }
            }
            (Phase::Accepted, _) => return,
            // An abandoned operation whose job is unobserved: re-attach the
            // job Genace holds, or confirm there is none.
            (Phase::Abandoned, Some(CaseReason::SettlementPending)) => Resolution::MarkSettled,
            (Phase::Abandoned, _) => match jobs.iter().find(|j| j.as_str() != "job-foreign") {
                Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                None => Resolution::ConfirmNotCreated,
            },
            (Phase::SubmitFailed, _) if rec.settlement == Some(Settlement::Pending) => Resolution::MarkSettled,
            (Phase::Prepared, _) => Resolution::ReleaseHold,
            (Phase::Rendered, _) if rec.delivery_state == DeliveryState::DeliveryFailed && self.rng.chance(500) => {
                Resolution::RedriveDelivery
            }
            _ => Resolution::Abandon,
        };
        // Only a confirmation on an uncertain operation allows a new POST.
        if resolution == Resolution::ConfirmNotCreated && rec.phase == Phase::Uncertain {
            *self.confirmations.entry(id.clone()).or_default() += 1;
        }
        let intake = self.app.intake();
        let op = Operator {
            actor: "sim-operator".into(),
            tenant: None,
        };
        let name = resolution.name();
        self.spawn(
            format!("operator {name} {}", short(&id)),
            10,
            None,
            Box::pin(async move {
                let id = OperationId::parse(&id).map_err(|e| e.to_string())?;
                intake
                    .admin(&op)
                    .resolve(&id, &resolution, "simulated operator", rec.version)
                    .await
                    .map(|r| r.phase.as_str().to_owned())
                    .map_err(|e| e.to_string())
            }),
        );
    }

    // ---- the run

    pub(crate) fn step(&mut self) -> Result<(), String> {
        let roll = self.rng.below(100);
        match roll {
            0..=9 if self.intents_left > 0 => self.intake(),
            10..=34 => {
                let queue = *self.rng.pick(&[
                    Queue::Dispatch,
                    Queue::Wake,
                    Queue::Poll,
                    Queue::Deliver,
                    Queue::Recovery,
                ]);
                if !self.receive(queue) && !self.actors.is_empty() {
                    let i = self.rng.below(self.actors.len() as u64) as usize;
                    self.poll(i)?;
                }
            }
            35..=74 if !self.actors.is_empty() => {
                let i = self.rng.below(self.actors.len() as u64) as usize;
                self.poll(i)?;
            }
            75..=81 => {
                // Mostly short moves, so handlers finish; now and then a long
                // one, past leases and timeouts.
                let seconds = if self.rng.chance(100) {
                    *self.rng.pick(&[300, 900])
                } else {
                    *self.rng.pick(&[1, 2, 5, 10, 30, 61, 121])
                };
                self.advance(seconds);
            }
            82..=84 => self.sweep(),
            85..=91 => self.genace_progress(),
            92..=95 => self.duplicate(),
            96 if self.rng.chance(500) => self.cancel(),
            96 => self.erase(),
            97..=99 => self.operator(),
            _ => {
                let seconds = 1 + self.rng.below(10) as i64;
                self.advance(seconds);
            }
        }
        Ok(())
    }

    /// Runs every handler to its end.
    pub(crate) fn finish_actors(&mut self) -> Result<(), String> {
        let mut polls = 0;
        while !self.actors.is_empty() {
            polls += 1;
            if polls > 100_000 {
                return Err(format!("a handler never finished: {}", self.actors[0].label));
            }
            self.poll(0)?;
            self.check_step()?;
        }
        Ok(())
    }

    /// No crashes, no new work: let everything settle.
    pub(crate) fn quiesce(&mut self) -> Result<(), String> {
        self.chaos.quiet();
        self.log("quiet phase".into());
        self.heal_downloads();
        for round in 0..12 {
            self.finish_actors()?;
            self.finish_genace_jobs();
            self.heal_downloads();
            self.advance(1200);
            // From the second round, wake-ups lost to faults before the
            // quiet phase are repaired, and none may be lost since.
            if round > 0 {
                self.check_no_idle_slot()?;
            }
            self.sweep();
            self.finish_actors()?;
            self.drain_queues()?;
        }
        // Operations waiting for a slot take one more look each round; with
        // a small account that takes a few more rounds than the rest.
        for _ in 0..60 {
            if !self.store.records().iter().any(|r| r.capacity_hold.is_some()) {
                break;
            }
            self.advance(60);
            self.drain_queues()?;
            self.finish_genace_jobs();
            self.advance(60);
            self.drain_queues()?;
        }
        self.check_step()?;
        self.check_rest()
    }

    /// Moves Genace on until no job is queued or running.
    fn finish_genace_jobs(&mut self) {
        while self.genace.running() > 0 {
            self.genace_progress();
        }
    }

    fn drain_queues(&mut self) -> Result<(), String> {
        for queue in [
            Queue::Wake,
            Queue::Dispatch,
            Queue::Poll,
            Queue::Deliver,
            Queue::Recovery,
        ] {
            for _ in 0..50 {
                if !self.receive(queue) {
                    break;
                }
                self.finish_actors()?;
            }
        }
        Ok(())
    }
}
