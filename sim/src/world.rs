//! The world of one run: the app on chaotic adapters, the running
//! handlers, the scheduler's steps and the quiet phase. Its promises are
//! checked in [`checks`]; [`trace`] writes what a run did. The actors'
//! moves are in `actors`, the scheduler's in `steps`.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::chaos::{Chaos, Chaotic};
use crate::common::{hex_sha256, start};
use crate::rng::Rng;
use chrono::{DateTime, Duration, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::ledger::{self, Millicredits, TenantLedger};
use genace_core::machine::{self, Resolution};
use genace_core::messages::Queue;
use genace_core::record::{CaseReason, DeliveryState, OperationRecord, Phase, Settlement};
use genace_memory::{ManualClock, MemoryDownloads, MemoryGenace, MemoryObjects, MemoryQueue, MemoryStore};
use genace_stages::api::operator::Operator;
use genace_stages::app::App;
use genace_stages::pipeline::stage::{Stage, handle_body};

mod actors;
pub(crate) mod backlog;
pub(crate) mod burst;
mod chains;
mod checks;
mod kept;
pub(crate) mod latency;
mod reach;
mod reconfig;
mod steps;
mod trace;
mod tracking;

pub(crate) use trace::{short, state_line};

// ------------------------------------------------------------ the world

pub(crate) type SimApp = App<
    Chaotic<MemoryStore>,
    Chaotic<MemoryQueue>,
    Chaotic<MemoryObjects>,
    Chaotic<MemoryGenace>,
    Chaotic<MemoryDownloads>,
    crate::chaos::time::SimClock,
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
    /// A poll that began after its job was seen to end: it must not GET.
    after_end: bool,
    /// When it began, and how many times its message was received.
    started_at: DateTime<Utc>,
    receives: u32,
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
    /// Tenants in the run (at least the two that send intents first): the
    /// rest hold ledgers and send some of the intents, so that the waiting
    /// set and the checks meet many tenants.
    pub tenants: usize,
    /// Percent of transaction tries the store cancels as DynamoDB does when
    /// two transactions meet on one item (`TransactionConflict`).
    pub transaction_conflicts: u32,
    /// Percent of plain-write tries (to a record, a ledger, the account)
    /// the store refuses as if a transaction held the item, as DynamoDB
    /// refuses them with `TransactionConflictException` on a busy table.
    pub plain_write_conflicts: u32,
    /// Whether a transaction stays open for one step, so that another
    /// reaching one of its items then is cancelled (`TransactionConflict`),
    /// as DynamoDB cancels the later of two that meet. Off by default: each
    /// transaction then takes one step more, which changes every schedule
    /// (the first seeds of the planted bugs are recorded without it).
    pub transactions_meet: bool,
    /// The shards the account's counters are split into
    /// (`GENACE_ACCOUNT_SHARDS`).
    pub account_shards: genace_core::shard::AccountShards,
    /// Reconfiguration while work runs: deployments with another shard
    /// count, and operators' limits (`world/reconfig.rs`).
    pub reconfigure: bool,
    /// How late, at most, the waiting order and the waiting set see a
    /// write (milliseconds, drawn per write): eventually consistent
    /// indexes. 0: at once.
    pub index_lag_ms: u32,
    /// Intents sent again under one key differ from the key's first intent
    /// in exactly one member the fingerprint covers (the media type, the
    /// model, the prompt and its revision, the aspect ratio, the duration,
    /// the resolution, a parameter, the dispatch deadline), so a
    /// fingerprint that leaves one out is found.
    pub vary_members: bool,
    /// Every call takes time, with brownouts where AWS calls take up to
    /// 5 s; each handler runs under its function's timeout by its own
    /// time and is killed mid-flight when it passes, and a job id Genace
    /// returned must be kept before that.
    pub calls_take_time: bool,
    /// The sweep reads one item a page, and one or two pages of a shard a
    /// run (drawn per seed), so its due items fill more than a page of
    /// each shard: a sweep that loses its place among the shards is found.
    pub backlog_pages: bool,
    /// Genace's status reads meet storms: a share of them answered 429
    /// with a long `Retry-After`, or 5xx, drawn per seed; renders last
    /// long enough to leave every poll plan (a floor drawn per seed), and
    /// the clock takes long moves more often, so jobs grow old.
    pub status_storms: bool,
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
            transaction_conflicts: 0,
            transactions_meet: false,
            plain_write_conflicts: 0,
            account_shards: genace_core::shard::AccountShards::ONE,
            reconfigure: false,
            tenants: TENANTS.len(),
            index_lag_ms: 0,
            vary_members: false,
            status_storms: false,
            backlog_pages: false,
            calls_take_time: false,
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
    /// The write units the busiest item took, and the jobs admitted.
    pub writes: genace_memory::WriteReport,
    /// The most requests a handler that woke operations made.
    pub wake_max: u64,
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
    /// Every tenant of the run: [`TENANTS`] first, then `tenant-0002` on.
    pub(crate) tenants: Vec<String>,
    /// What intake answered clients, in the order the answers were given;
    /// drained and checked after every step.
    answers: Arc<Mutex<Vec<Answer>>>,
    /// Per (tenant, key, specification hash): the operation id first answered.
    answered_ids: BTreeMap<(String, String, String), String>,
    /// Whether intents under one key differ in one member ([`Options::vary_members`]).
    vary_members: bool,
    /// The chain each poll message belongs to.
    chains: tracking::Chains,
    /// With [`Options::status_storms`]: how long every render lasts at
    /// least, and when each job was first seen.
    render_floor: Option<Duration>,
    born: BTreeMap<String, DateTime<Utc>>,
    /// The sweep's page size and pages per shard, when the model sets them
    /// ([`Options::backlog_pages`]); each sweep in flight, by actor id.
    sweep_pages: Option<(i32, usize)>,
    sweeps: BTreeMap<usize, tracking::SweepStart>,
    /// The most store requests a handler that woke operations made.
    pub(crate) wake_max: u64,
    /// With [`Options::reconfigure`]: the most an operator's limit may be.
    reconfigure: Option<u32>,
    /// The account's jobs in flight, and each shard's, at the last check.
    counted: (i64, Vec<i64>),
}

/// One answer intake gave a client.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    tenant: String,
    key: String,
    /// The hash of the specification the client sent.
    sent: String,
    /// The intent the client sent, as the simulator reads its body: the
    /// media type, the specification and the deadline.
    sent_intent: serde_json::Value,
    reply: Reply,
}

#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 202 (new) or 200 (replay): the operation id and the specification the answer carries.
    Operation {
        id: String,
        carried: String,
        /// The intent the answered record holds, read as `sent_intent` is.
        held: serde_json::Value,
        replay: bool,
    },
    /// 409: the key holds another specification.
    KeyReused,
    /// Anything else (a store failure): says nothing about the key.
    Failed,
}

pub(crate) const TENANTS: [&str; 2] = ["tenant-a", "tenant-b"];

/// The run's table as it starts: the tenants' ledgers and limits, and
/// DynamoDB's concurrency as `opts` asks.
fn prepared_store(store: MemoryStore, clock: &ManualClock, seed: u64, opts: &Options) -> MemoryStore {
    if let Some(limit) = opts.spend_limit {
        store.set_spend_limit_now(TENANTS[0], Some(genace_core::ledger::millis(limit)));
    }
    // The other tenants exist before the run: each has a ledger.
    for tenant in tenant_names(opts.tenants).iter().skip(TENANTS.len()) {
        store.set_spend_limit_now(tenant, None);
    }
    // The meter counts each item's write units.
    let store = store
        .with_account_limit(opts.max_in_flight)
        .with_account_shards(opts.account_shards)
        .with_transaction_conflicts(opts.transaction_conflicts, seed)
        .with_plain_write_conflicts(opts.plain_write_conflicts, seed)
        .with_write_meter(clock.clone(), Some(genace_memory::ITEM_WRITE_UNITS_PER_SECOND));
    let store = if opts.index_lag_ms > 0 {
        store.with_index_lag(
            clock.clone(),
            Duration::milliseconds(i64::from(opts.index_lag_ms)),
            seed,
        )
    } else {
        store
    };
    // Handlers run interleaved, so transactions may meet as on DynamoDB.
    if opts.transactions_meet {
        store.with_meeting_transactions()
    } else {
        store
    }
}

/// Draws the seed's storms on Genace's status reads
/// ([`Options::status_storms`]) and returns the floor of its renders.
fn storms(seed: u64, chaos: &Chaos) -> Duration {
    let mut rng = Rng::new(seed ^ 0x5747_0a75);
    let mut state = chaos.lock();
    state.status_storm = Some((20 * (1 + rng.below(4)), *rng.pick(&[60, 300, 600, 900])));
    state.status_errors = *rng.pick(&[5, 25, 50]);
    Duration::seconds(*rng.pick(&[1200, 2400, 3600]))
}

/// `inner` under the seed's `chaos`.
fn chaotic<T: Clone>(inner: &T, chaos: &Chaos) -> Chaotic<T> {
    Chaotic {
        inner: inner.clone(),
        chaos: chaos.clone(),
    }
}

/// The seed's sweep pages ([`Options::backlog_pages`]): one item a page,
/// and one or two pages of a shard a run.
fn sweep_pages(seed: u64) -> (i32, usize) {
    (1, 1 + Rng::new(seed ^ 0x00ba_6109).below(2) as usize)
}

/// The tenants of a run of `count` (at least [`TENANTS`]).
fn tenant_names(count: usize) -> Vec<String> {
    let mut names: Vec<String> = TENANTS.iter().map(|t| (*t).to_owned()).collect();
    names.extend((names.len()..count).map(|i| format!("tenant-{i:04}")));
    names
}
pub(crate) const KEYS: [&str; 3] = ["k1", "k2", "k3"];
pub(crate) const PROMPTS: [&str; 2] = ["a lighthouse", "a harbour"];

impl World {
    /// Transaction tries the store cancelled for a conflict so far.
    pub(crate) fn transaction_conflicts(&self) -> (u64, u64) {
        (self.store.transaction_conflicts(), self.store.transactions_contended())
    }

    /// What the store's write meter saw.
    pub(crate) fn writes(&self) -> genace_memory::WriteReport {
        self.store.write_report().unwrap_or_default()
    }
}

impl World {
    pub(crate) fn new(seed: u64, opts: &Options) -> Self {
        let chaos = Chaos::new(seed, opts.crash_per_mille);
        // Learning Genace's limit: every 429 is the account's, so none may
        // reach a person.
        chaos.lock().plants_429s = opts.genace_limit.is_none();
        let mem = genace_memory::memory_app(start());
        let clock = mem.clock.clone();
        let (store, objects, genace, downloads) = (mem.store, mem.objects, mem.genace, mem.downloads);
        let queue = mem.queue.clone();
        let mut config = mem.config;
        config.part_size = 1024;
        config.policy.account_shards = opts.account_shards;
        let store = prepared_store(store, &clock, seed, opts);
        let genace = match opts.genace_limit.or(opts.max_in_flight) {
            Some(jobs) => genace.with_concurrency(jobs as usize),
            None => genace,
        };
        let render_floor = opts.status_storms.then(|| storms(seed, &chaos));
        if opts.calls_take_time {
            chaos.take_time(clock.clone(), seed, 10 + Rng::new(seed ^ 0x7173).below(21));
        }
        let app = App {
            store: chaotic(&store, &chaos),
            queue: chaotic(&queue, &chaos),
            objects: chaotic(&objects, &chaos),
            genace: chaotic(&genace, &chaos),
            downloads: chaotic(&downloads, &chaos),
            clock: crate::chaos::time::SimClock {
                run: clock.clone(),
                chaos: chaos.clone(),
            },
            config,
            metrics: genace_stages::ports::metrics::Metrics::off(),
            vault: std::sync::Arc::new(genace_stages::ports::webhooks::NoVault),
            traces: std::sync::Arc::new(genace_stages::ports::traces::NoTraces),
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
            tenants: tenant_names(opts.tenants),
            vary_members: opts.vary_members,
            chains: tracking::Chains::default(),
            render_floor,
            born: BTreeMap::new(),
            sweep_pages: opts.backlog_pages.then(|| sweep_pages(seed)),
            sweeps: BTreeMap::new(),
            wake_max: 0,
            reconfigure: opts.reconfigure.then(|| opts.max_in_flight.unwrap_or(4)),
            counted: (0, Vec::new()),
        }
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        use genace_stages::ports::clock::Clock;
        self.clock.now()
    }

    /// The time as actor `id` sees it: the run's clock and what it has
    /// spent in its calls.
    pub(crate) fn local_now(&self, id: usize) -> DateTime<Utc> {
        self.now() + self.chaos.spent_by(id)
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
        // Its runner tells a handler its deadline, as Lambda's context does.
        let fut: Handler = if self.chaos.takes_time() {
            Box::pin(genace_stages::ports::deadline::until(Some(deadline), fut))
        } else {
            fut
        };
        self.actors.push(Actor {
            id,
            label,
            fut,
            message,
            deadline,
            after_end: false,
            started_at: self.now(),
            receives: 0,
        });
    }

    // ---- steps
}
