//! Deterministic simulation of Genace operations.
//!
//! One seed drives one run of the real stage code (intake, dispatch, poll,
//! deliver, recovery, the sweep and operators' resolutions) on the in-memory
//! adapters and a manual clock:
//!
//! - every port call is an await point where the scheduler may switch to
//!   another handler, and where a handler may crash, before or after the
//!   call's effect (the handler is dropped, as a killed Lambda; its message
//!   comes back after the visibility timeout);
//! - the scheduler picks each step from the seed: a new intent (duplicates
//!   and changed specifications included), a message received from a queue,
//!   one more step of a running handler, the clock moving (handlers past
//!   their function's timeout are killed), the sweep, Genace moving a job
//!   on, a duplicated message, an operator resolving a case;
//! - Genace answers each POST with one of the outcome classes of its
//!   documentation (202 queued or running, 502 with or without a job id,
//!   5xx, a timeout before or after the job is created, a reset, a
//!   malformed 202, 429, 401/403), and status reads with moving states, null
//!   outputs, 404s and answers for another job.
//!
//! After every step the run checks the safety invariants; after a quiet
//! phase (no crashes, everything drained) it checks the ones that hold at
//! rest. The same seed gives the same trace, byte for byte.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use chrono::{DateTime, Duration, TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::ledger::{Millicredits, TenantLedger};
use genace_core::machine::{self, Resolution};
use genace_core::messages::{Queue, RecoveryMessage};
use genace_core::record::{CaseReason, DeliveryState, OperationRecord, Phase, Settlement};
use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status};
use genace_core::webhook::WebhookConfig;
use genace_stages::admin::Operator;
use genace_stages::app::App;
use genace_stages::downloads::{Download, DownloadError, Downloads};
use genace_stages::genace::Genace;
use genace_stages::memory::{
    ManualClock, MemoryBody, MemoryDownloads, MemoryGenace, MemoryObjects, MemoryQueue, MemoryStore, SubmitPlan,
};
use genace_stages::outputs::{ObjectHead, ObjectStore, PartReceipt, StorageError};
use genace_stages::queue::{QueueError, RecoveryChannel, WorkQueue};
use genace_stages::stage::{Stage, handle_body};
use genace_stages::table::{Applied, CasePage, Created, DueCursor, DuePage, LedgerPage, OperationStore, StoreError};

fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest;
    genace_core::domain::hex(&sha2::Sha256::digest(data))
}

/// Where every run's clock starts.
fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

// ------------------------------------------------------------------ the seed

/// SplitMix64: small, fast, and the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

// ------------------------------------------------------------ crashes

/// What happens at one port call.
enum Fate {
    Proceed,
    CrashBefore,
    CrashAfter,
}

#[derive(Debug)]
struct ChaosState {
    rng: Rng,
    /// Crashes per thousand port calls (0 in the quiet phase).
    crash_per_mille: u64,
    /// Set by a port call that crashed the handler being polled.
    crashed: bool,
}

/// The seed's say over every port call, shared by every wrapper.
#[derive(Debug, Clone)]
pub struct Chaos(Arc<Mutex<ChaosState>>);

impl Chaos {
    fn new(seed: u64, crash_per_mille: u64) -> Self {
        Self(Arc::new(Mutex::new(ChaosState {
            rng: Rng::new(seed.wrapping_mul(31).wrapping_add(7)),
            crash_per_mille,
            crashed: false,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ChaosState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fate(&self) -> Fate {
        let mut s = self.lock();
        let per_mille = s.crash_per_mille;
        if !s.rng.chance(per_mille) {
            return Fate::Proceed;
        }
        if s.rng.chance(500) {
            Fate::CrashBefore
        } else {
            Fate::CrashAfter
        }
    }

    fn crash(&self) {
        self.lock().crashed = true;
    }

    fn take_crashed(&self) -> bool {
        std::mem::take(&mut self.lock().crashed)
    }

    fn quiet(&self) {
        self.lock().crash_per_mille = 0;
    }

    fn below(&self, n: u64) -> u64 {
        self.lock().rng.below(n)
    }
}

/// Pending once: the point where the scheduler may run something else.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A slow call (Genace over the network): several switch points, so other
/// handlers run while it waits.
async fn slow(chaos: &Chaos) {
    for _ in 0..chaos.below(6) {
        YieldOnce(false).await;
    }
}

/// One port call: a switch point, then the effect, unless the seed crashes
/// the handler before or after it.
async fn port<T>(chaos: &Chaos, effect: impl Future<Output = T>) -> T {
    YieldOnce(false).await;
    match chaos.fate() {
        Fate::Proceed => effect.await,
        Fate::CrashBefore => {
            chaos.crash();
            std::future::pending().await
        }
        Fate::CrashAfter => {
            let _ = effect.await;
            chaos.crash();
            std::future::pending().await
        }
    }
}

/// An in-memory adapter whose every call goes through [`port`].
#[derive(Debug, Clone)]
pub struct Chaotic<T> {
    inner: T,
    chaos: Chaos,
}

impl<T: OperationStore> OperationStore for Chaotic<T> {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        port(&self.chaos, self.inner.create(rec, now)).await
    }
    async fn get(&self, id: &OperationId, now: DateTime<Utc>) -> Result<Option<OperationRecord>, StoreError> {
        port(&self.chaos, self.inner.get(id, now)).await
    }
    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        port(&self.chaos, self.inner.apply(prev, next)).await
    }
    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> Result<DuePage, StoreError> {
        port(&self.chaos, self.inner.due_page(shard, before_ms, limit, cursor)).await
    }
    async fn holders_of_remote_job(&self, job_id: &str) -> Result<Vec<OperationId>, StoreError> {
        port(&self.chaos, self.inner.holders_of_remote_job(job_id)).await
    }
    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        port(&self.chaos, self.inner.open_cases(tenant, limit, cursor)).await
    }
    async fn ledger(&self, tenant: &TenantId) -> Result<TenantLedger, StoreError> {
        port(&self.chaos, self.inner.ledger(tenant)).await
    }
    async fn ledgers(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        port(&self.chaos, self.inner.ledgers(limit, cursor)).await
    }
    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, StoreError> {
        port(&self.chaos, self.inner.set_spend_limit(tenant, limit)).await
    }
    async fn webhook(&self, tenant: &TenantId) -> Result<Option<WebhookConfig>, StoreError> {
        port(&self.chaos, self.inner.webhook(tenant)).await
    }
    async fn set_webhook(&self, tenant: &TenantId, config: Option<&WebhookConfig>) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.set_webhook(tenant, config)).await
    }
}

impl<T: WorkQueue> WorkQueue for Chaotic<T> {
    async fn enqueue(&self, queue: Queue, id: &OperationId, delay_seconds: u32) -> Result<(), QueueError> {
        port(&self.chaos, self.inner.enqueue(queue, id, delay_seconds)).await
    }
}

impl<T: RecoveryChannel> RecoveryChannel for Chaotic<T> {
    async fn send_recovery(&self, message: &RecoveryMessage) -> Result<(), QueueError> {
        port(&self.chaos, self.inner.send_recovery(message)).await
    }
}

impl<T: ObjectStore> ObjectStore for Chaotic<T> {
    async fn put(&self, key: &str, content_type: &str, data: Vec<u8>, sha256: &str) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.put(key, content_type, data, sha256)).await
    }
    async fn begin(&self, key: &str, content_type: &str) -> Result<String, StorageError> {
        port(&self.chaos, self.inner.begin(key, content_type)).await
    }
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<PartReceipt, StorageError> {
        port(&self.chaos, self.inner.put_part(key, upload_id, number, data)).await
    }
    async fn complete(&self, key: &str, upload_id: &str, parts: &[PartReceipt]) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.complete(key, upload_id, parts)).await
    }
    async fn abort(&self, key: &str, upload_id: &str) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.abort(key, upload_id)).await
    }
    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        port(&self.chaos, self.inner.head(key)).await
    }
    async fn presign_get(&self, key: &str, expiry: std::time::Duration) -> Result<String, StorageError> {
        port(&self.chaos, self.inner.presign_get(key, expiry)).await
    }
}

/// Genace answers each POST with an outcome class drawn from the seed.
impl Genace for Chaotic<MemoryGenace> {
    async fn submit(&self, body: &serde_json::Value) -> SubmitOutcome {
        let reporting = |held: &str| SubmitPlan::AcceptReporting {
            state: "queued".into(),
            held_credits: held.into(),
        };
        let plan = match self.chaos.below(100) {
            0..=34 => SubmitPlan::Accept { state: "queued".into() },
            // Genace's own figure, and figures nobody can mean: the ledger
            // must believe the first and not the others.
            35..=39 => reporting("10"),
            40..=42 => reporting("-50"),
            43 => reporting("1e400"),
            44 => reporting("250000"),
            45..=54 => SubmitPlan::Accept {
                state: "running".into(),
            },
            55..=61 => SubmitPlan::FailWithJob,
            62..=64 => SubmitPlan::BadGateway,
            65..=67 => SubmitPlan::Answer {
                status: 503,
                body: "upstream unavailable".into(),
            },
            68..=74 => SubmitPlan::LostAfterCreate,
            75..=79 => SubmitPlan::Unreachable,
            80..=83 => SubmitPlan::Answer {
                status: 202,
                body: r#"{"accepted":true}"#.into(),
            },
            84..=91 => SubmitPlan::Answer {
                status: 429,
                body: "slow down".into(),
            },
            92..=95 => SubmitPlan::Answer {
                status: 401,
                body: "bad key".into(),
            },
            _ => SubmitPlan::Answer {
                status: 403,
                body: "forbidden".into(),
            },
        };
        self.inner.plan([plan]);
        slow(&self.chaos).await;
        port(&self.chaos, self.inner.submit(body)).await
    }

    async fn status(&self, job_id: &str) -> StatusOutcome {
        slow(&self.chaos).await;
        match self.chaos.below(100) {
            0..=4 => port(&self.chaos, async { classify_status(500, "busy") }).await,
            5..=12 => {
                let other = serde_json::json!({"id": "job-foreign", "state": "running"}).to_string();
                port(&self.chaos, async move { classify_status(200, &other) }).await
            }
            13..=14 => port(&self.chaos, async { classify_status(404, "not found") }).await,
            _ => port(&self.chaos, self.inner.status(job_id)).await,
        }
    }
}

impl Downloads for Chaotic<MemoryDownloads> {
    type Body = MemoryBody;
    async fn open(&self, url: &str) -> Result<Download<MemoryBody>, DownloadError> {
        port(&self.chaos, self.inner.open(url)).await
    }
}

// ------------------------------------------------------------ the world

type SimApp = App<
    Chaotic<MemoryStore>,
    Chaotic<MemoryQueue>,
    Chaotic<MemoryObjects>,
    Chaotic<MemoryGenace>,
    Chaotic<MemoryDownloads>,
    ManualClock,
>;

type Handler = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// One invocation of a queue-driven stage on one message body.
fn handler<S: Stage + 'static>(stage: S, body: String) -> Handler {
    Box::pin(async move {
        handle_body(&stage, &body)
            .await
            .map(|o| format!("{o:?}"))
            .map_err(|e| e.to_string())
    })
}

/// A running handler: a Lambda invocation in flight.
struct Actor {
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
    /// Planted bugs (`machine::planted`), 0 for none.
    pub bugs: u32,
    /// A spend limit on `tenant-a`, in credits: dispatch must wait for room,
    /// and the limit must never be passed.
    pub spend_limit: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            steps: 300,
            intents: 6,
            crash_per_mille: 30,
            bugs: 0,
            spend_limit: None,
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

struct World {
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
    trace: Vec<String>,
    intents_left: usize,
    /// Per operation: highest version seen, first specification hash, confirmations.
    seen: BTreeMap<String, (u64, String)>,
    /// Per operation: its state as last logged.
    shown: BTreeMap<String, String>,
    confirmations: BTreeMap<String, usize>,
    /// What intake answered clients, in the order the answers were given;
    /// drained and checked after every step.
    answers: Arc<Mutex<Vec<Answer>>>,
    /// Per (tenant, key, specification hash): the operation id first answered.
    answered_ids: BTreeMap<(String, String, String), String>,
}

/// One answer intake gave a client.
#[derive(Debug, Clone)]
struct Answer {
    tenant: String,
    key: String,
    /// The hash of the specification the client sent.
    sent: String,
    reply: Reply,
}

#[derive(Debug, Clone)]
enum Reply {
    /// 202 (new) or 200 (replay): the operation id and the specification the answer carries.
    Operation { id: String, carried: String, replay: bool },
    /// 409: the key holds another specification.
    KeyReused,
    /// Anything else (a store failure): says nothing about the key.
    Failed,
}

/// A record's state as the trace shows it.
fn state_line(rec: &OperationRecord) -> String {
    let mut state = format!(
        "v{} {} {:?} job={} case={}",
        rec.version,
        rec.phase.as_str(),
        rec.delivery_state,
        rec.remote_job_id.as_deref().unwrap_or("-"),
        rec.case.as_ref().map_or("-", |c| c.reason.as_str()),
    );
    if rec.spend_hold.is_some() {
        state.push_str(" hold=spend_limit");
    }
    if let Some(p) = rec.ledger_phase {
        state.push_str(&format!(" counts_as={}", p.as_str()));
    }
    state
}

fn short(id: &str) -> &str {
    &id[..id.len().min(11)]
}

const TENANTS: [&str; 2] = ["tenant-a", "tenant-b"];
const KEYS: [&str; 3] = ["k1", "k2", "k3"];
const PROMPTS: [&str; 2] = ["a lighthouse", "a harbour"];

impl World {
    fn new(seed: u64, opts: &Options) -> Self {
        let chaos = Chaos::new(seed, opts.crash_per_mille);
        let mem = genace_stages::memory::memory_app(start());
        let clock = mem.clock.clone();
        let (store, objects, genace, downloads) = (mem.store, mem.objects, mem.genace, mem.downloads);
        let queue = mem.queue.clone();
        let mut config = mem.config;
        config.part_size = 1024;
        if let Some(limit) = opts.spend_limit {
            store.set_spend_limit_now(TENANTS[0], Some(genace_core::ledger::millis(limit)));
        }
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
            confirmations: BTreeMap::new(),
            answers: Arc::new(Mutex::new(Vec::new())),
            answered_ids: BTreeMap::new(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        use genace_stages::clock::Clock;
        self.clock.now()
    }

    fn log(&mut self, line: String) {
        let at = (self.now() - start()).num_seconds();
        self.trace.push(format!("{:>5} t+{at:>6}s {line}", self.trace.len()));
    }

    fn spawn(&mut self, label: String, timeout_seconds: i64, message: Option<(u64, u64)>, fut: Handler) {
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

    fn intake(&mut self) {
        self.intents_left -= 1;
        let tenant = *self.rng.pick(&TENANTS);
        let key = *self.rng.pick(&KEYS);
        let prompt = *self.rng.pick(&PROMPTS);
        let intent = Intent::parse(
            &serde_json::json!({"operation_key": key, "media_type": "video",
                "specification": {"model": "genace-video-2", "prompt": prompt}}),
            None,
        )
        .expect("a valid intent");
        let tenant_id = TenantId::parse(tenant).expect("a valid tenant");
        let intake = self.app.intake();
        let now = self.now();
        let answers = self.answers.clone();
        let sent = intent.canonical.hash().as_str().to_owned();
        self.spawn(
            format!("intake {tenant}/{key} {prompt:?}"),
            10,
            None,
            Box::pin(async move {
                use genace_stages::intake::{IntakeError, Submitted};
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

    fn receive(&mut self, queue: Queue) -> bool {
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
            Queue::Dispatch => (60, handler(self.app.dispatcher(), body)),
            Queue::Poll => (180, handler(self.app.poller(), body)),
            Queue::Deliver => (900, handler(self.app.deliverer(), body)),
            Queue::Recovery => (30, handler(self.app.recovery(), body)),
        };
        self.spawn(label, timeout, message, fut);
        true
    }

    fn sweep(&mut self) {
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

    fn advance(&mut self, seconds: i64) {
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
    fn genace_progress(&mut self) {
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
    fn heal_downloads(&mut self) {
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

    fn duplicate(&mut self) {
        let messages = self.queue.messages();
        if messages.is_empty() {
            return;
        }
        let m = self.rng.pick(&messages).clone();
        self.queue.send(m.queue, m.body.clone(), self.rng.below(30) as u32);
        self.log(format!("duplicate a {:?} message", m.queue));
    }

    /// An operator resolves one open case, truthfully: the jobs Genace holds
    /// decide between attach and confirm_not_created.
    fn operator(&mut self) {
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
                    .resolve(&op, &id, &resolution, "simulated operator", rec.version)
                    .await
                    .map(|r| r.phase.as_str().to_owned())
                    .map_err(|e| e.to_string())
            }),
        );
    }

    // ---- invariants

    /// What holds after every step.
    fn check_step(&mut self) -> Result<(), String> {
        let records = self.store.records();
        self.check_answers(&records)?;
        let mut keys = BTreeMap::new();
        for rec in &records {
            self.check_record(rec, &mut keys)?;
        }
        let ledgers = self.check_counters(&records)?;
        self.check_job_counts()?;
        self.check_books(&records, &ledgers)
    }

    /// One stored record: its invariants, one record per (tenant, key),
    /// versions only growing, the specification never replaced, and
    /// `delivered` meaning every object is stored with its SHA-256. Logs the
    /// record's state when it changed.
    fn check_record(
        &mut self,
        rec: &OperationRecord,
        keys: &mut BTreeMap<(String, String), String>,
    ) -> Result<(), String> {
        let id = rec.operation_id.as_str().to_owned();
        machine::check_invariants(rec).map_err(|e| format!("{}: {e}", short(&id)))?;
        if let Some(other) = keys.insert(
            (rec.tenant_id.as_str().to_owned(), rec.operation_key.clone()),
            id.clone(),
        ) {
            return Err(format!("two records for one (tenant, key): {other} and {id}"));
        }
        match self.seen.get(&id) {
            Some((version, _)) if rec.version < *version => {
                return Err(format!(
                    "{}: version went back from {version} to {}",
                    short(&id),
                    rec.version
                ));
            }
            Some((_, hash)) if *hash != rec.specification_hash => {
                return Err(format!("{}: the stored specification was replaced", short(&id)));
            }
            _ => {}
        }
        self.seen
            .insert(id.clone(), (rec.version, rec.specification_hash.clone()));
        let state = state_line(rec);
        if self.shown.get(&id) != Some(&state) {
            self.log(format!("  {} {state}", short(&id)));
            self.shown.insert(id.clone(), state);
        }
        if rec.delivery_state == DeliveryState::Delivered {
            for object in &rec.delivered_objects {
                match self.objects.get(&object.key) {
                    Some(stored) if hex_sha256(&stored.data) == object.sha256 => {}
                    Some(_) => return Err(format!("{}: {} has another SHA-256", short(&id), object.key)),
                    None => return Err(format!("{}: delivered, but {} is not stored", short(&id), object.key)),
                }
            }
        }
        Ok(())
    }

    /// Each tenant's counters are the sum of its records' shares, and a
    /// spend limit is never passed. Returns the ledgers for the next checks.
    fn check_counters(&self, records: &[OperationRecord]) -> Result<BTreeMap<String, TenantLedger>, String> {
        let mut sums: BTreeMap<String, genace_core::ledger::Shares> = BTreeMap::new();
        for rec in records {
            let sum = sums.entry(rec.tenant_id.as_str().to_owned()).or_default();
            *sum = sum
                .plus(&genace_core::ledger::share(rec))
                .map_err(|e| format!("{}: {e}", rec.tenant_id))?;
        }
        let ledgers = self.store.ledgers_now();
        for tenant in TENANTS {
            let counted = ledgers.get(tenant).map(|l| l.totals).unwrap_or_default();
            let summed = sums.get(tenant).copied().unwrap_or_default();
            if counted != summed {
                return Err(format!(
                    "{tenant}: ledger {counted:?} but the records sum to {summed:?}"
                ));
            }
            if let Some(limit) = ledgers.get(tenant).and_then(|l| l.spend_limit)
                && counted.held > limit
            {
                return Err(format!(
                    "{tenant}: {} millicredits held past the limit of {limit}",
                    counted.held
                ));
            }
        }
        Ok(ledgers)
    }

    /// At most one Genace job per operation, one more per confirm_not_created.
    fn check_job_counts(&self) -> Result<(), String> {
        let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
        for job in self.genace.jobs() {
            *jobs.entry(job.client_reference.unwrap_or_default()).or_default() += 1;
        }
        for (op, count) in jobs {
            let allowed = 1 + self.confirmations.get(&op).copied().unwrap_or(0);
            if count > allowed {
                return Err(format!(
                    "{}: {count} Genace jobs created, {allowed} allowed",
                    short(&op)
                ));
            }
        }
        Ok(())
    }

    /// What every client saw of intake: the same key and specification
    /// always give the same operation id; a changed specification is always
    /// a 409, and a 409 means a changed specification; a new operation or a
    /// replay always carries the specification that was sent.
    fn check_answers(&mut self, records: &[OperationRecord]) -> Result<(), String> {
        let answers = std::mem::take(&mut *self.answers.lock().unwrap_or_else(|p| p.into_inner()));
        for a in answers {
            let who = format!("{}/{}", a.tenant, a.key);
            let stored = records
                .iter()
                .find(|r| r.tenant_id.as_str() == a.tenant && r.operation_key == a.key)
                .map(|r| r.specification_hash.clone());
            match a.reply {
                Reply::Operation { id, carried, replay } => {
                    let answer = if replay { "a replay" } else { "a new operation" };
                    if carried != a.sent {
                        return Err(format!(
                            "{who}: {answer} carried another specification than the one sent"
                        ));
                    }
                    if stored.as_ref().is_some_and(|h| *h != a.sent) {
                        return Err(format!(
                            "{who}: a changed specification was answered as {answer}, not 409"
                        ));
                    }
                    let first = self
                        .answered_ids
                        .entry((a.tenant.clone(), a.key.clone(), a.sent.clone()))
                        .or_insert_with(|| id.clone());
                    if *first != id {
                        return Err(format!(
                            "{who}: the same key and specification were answered with operation {} and then {}",
                            short(first),
                            short(&id)
                        ));
                    }
                }
                Reply::KeyReused if stored.as_ref() == Some(&a.sent) => {
                    return Err(format!("{who}: 409 for the specification the key holds"));
                }
                Reply::KeyReused | Reply::Failed => {}
            }
        }
        Ok(())
    }

    /// The ledger against Genace's own books, per tenant: no counter is
    /// ever negative; `spent` never exceeds what Genace charged for the
    /// jobs it completed; `held` covers every job still running; and every
    /// credit Genace holds or charged is on the ledger, held or spent.
    fn check_books(&self, records: &[OperationRecord], ledgers: &BTreeMap<String, TenantLedger>) -> Result<(), String> {
        let tenant_of: BTreeMap<&str, &str> = records
            .iter()
            .map(|r| (r.operation_id.as_str(), r.tenant_id.as_str()))
            .collect();
        let mut charged: BTreeMap<&str, (Millicredits, Millicredits)> = BTreeMap::new();
        for job in self.genace.jobs() {
            let Some(tenant) = job.client_reference.as_deref().and_then(|op| tenant_of.get(op)) else {
                continue;
            };
            let (completed, running) = charged.entry(tenant).or_default();
            let credits = genace_core::ledger::millis(job.credits);
            match job.state.as_str() {
                "completed" => *completed += credits,
                "queued" | "running" => *running += credits,
                _ => {}
            }
        }
        for tenant in TENANTS {
            let totals = ledgers.get(tenant).map(|l| l.totals).unwrap_or_default();
            let (completed, running) = charged.get(tenant).copied().unwrap_or_default();
            if totals.any_negative() {
                return Err(format!("{tenant}: a ledger counter is negative: {totals:?}"));
            }
            if totals.spent > completed {
                return Err(format!(
                    "{tenant}: {} millicredits spent, but Genace completed jobs worth {completed}",
                    totals.spent
                ));
            }
            if totals.held < running {
                return Err(format!(
                    "{tenant}: {} millicredits held, but Genace runs jobs worth {running}",
                    totals.held
                ));
            }
            if totals.spent + totals.held < completed + running {
                return Err(format!(
                    "{tenant}: Genace holds or charged {} millicredits, the ledger counts {} spent and {} held",
                    completed + running,
                    totals.spent,
                    totals.held
                ));
            }
        }
        Ok(())
    }

    /// What holds at rest: every job Genace created is on its operation's
    /// record, on the recovery channel, or in an open case.
    fn check_rest(&self) -> Result<(), String> {
        let recovery: Vec<String> = self
            .queue
            .messages()
            .into_iter()
            .filter(|m| m.queue == Queue::Recovery)
            .map(|m| m.body)
            .collect();
        for job in self.genace.jobs() {
            let op = job.client_reference.clone().unwrap_or_default();
            let rec = self.store.records().into_iter().find(|r| r.operation_id.as_str() == op);
            let referenced = rec
                .as_ref()
                .is_some_and(|r| r.remote_job_id.as_deref() == Some(job.id.as_str()));
            let recovering = recovery.iter().any(|b| b.contains(&format!("\"{}\"", job.id)));
            let case = rec.as_ref().is_some_and(|r| r.case.is_some());
            if !(referenced || recovering || case) {
                return Err(format!(
                    "{}: Genace job {} is on no record, no recovery message and no case",
                    short(&op),
                    job.id
                ));
            }
        }
        Ok(())
    }

    // ---- the run

    fn step(&mut self) -> Result<(), String> {
        let roll = self.rng.below(100);
        match roll {
            0..=9 if self.intents_left > 0 => self.intake(),
            10..=34 => {
                let queue = *self
                    .rng
                    .pick(&[Queue::Dispatch, Queue::Poll, Queue::Deliver, Queue::Recovery]);
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
            92..=96 => self.duplicate(),
            97..=99 => self.operator(),
            _ => {
                let seconds = 1 + self.rng.below(10) as i64;
                self.advance(seconds);
            }
        }
        Ok(())
    }

    /// Runs every handler to its end.
    fn finish_actors(&mut self) -> Result<(), String> {
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
    fn quiesce(&mut self) -> Result<(), String> {
        self.chaos.quiet();
        self.log("quiet phase".into());
        self.heal_downloads();
        for _ in 0..12 {
            self.finish_actors()?;
            while !self
                .genace
                .jobs()
                .iter()
                .all(|j| j.state != "queued" && j.state != "running")
            {
                self.genace_progress();
            }
            self.heal_downloads();
            self.advance(1200);
            self.sweep();
            self.finish_actors()?;
            for queue in [Queue::Dispatch, Queue::Poll, Queue::Deliver, Queue::Recovery] {
                for _ in 0..50 {
                    if !self.receive(queue) {
                        break;
                    }
                    self.finish_actors()?;
                }
            }
        }
        self.check_step()?;
        self.check_rest()
    }
}

/// One run of `seed`.
pub fn run(seed: u64, opts: &Options) -> Outcome {
    genace_stages::metrics::turn_off();
    machine::planted::set(opts.bugs);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let mut world = World::new(seed, opts);
    let violation = runtime.block_on(async {
        for _ in 0..opts.steps {
            if let Err(v) = world.step().and_then(|_| world.check_step()) {
                return Some(v);
            }
        }
        world.quiesce().err()
    });
    if let Some(v) = &violation {
        world.trace.push(format!("VIOLATION: {v}"));
    }
    Outcome {
        seed,
        violation,
        trace: world.trace,
    }
}

/// Keeps panics inside handlers quiet: they are reported as violations.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}
