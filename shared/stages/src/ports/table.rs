//! The operation table port: durable records, every change conditional on
//! the version read, and [`commit`], the one way stages write a decision.

use std::future::Future;

use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::{Millicredits, TenantLedger};
use genace_core::record::{CaseReason, OperationRecord};
use genace_core::webhook::{AttemptStatus, EndpointSet, Receivers, WebhookAttempt};

/// The index sort keys, where the stores have always found them.
pub use super::sort_keys::{
    case_age_key, case_age_key_opened, case_sort_key, case_tenant_prefix, wait_partition, wait_sort_key,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The conditional write lost: the record changed since it was read (or,
    /// for a create, already exists). Carries the item as it now is, when
    /// DynamoDB returned it.
    #[error("the record changed since it was read")]
    Conflict(Option<Box<OperationRecord>>),
    #[error("stored item could not be decoded: {0}")]
    Decode(String),
    #[error("DynamoDB request failed: {0}")]
    Service(String),
    #[error("the page cursor is not valid")]
    Cursor,
    /// A dispatch claim would take its tenant past the spend limit; nothing
    /// was written.
    #[error("the tenant's spend limit leaves no room for this claim")]
    SpendLimit,
    /// A dispatch claim would take the Genace account past its limit of
    /// jobs in flight; nothing was written.
    #[error("every slot of the Genace account is taken")]
    AccountFull,
    /// A dispatch claim would take its tenant past the tenant's own limit
    /// of jobs in flight; nothing was written.
    #[error("every slot of the tenant's share is taken")]
    TenantFull,
    /// The write met another transaction on one of its items
    /// (DynamoDB's `TransactionConflict`) on every try within its budget
    /// ([`CONFLICT_TRIES`]); nothing was written. The table is busy, not
    /// down: the caller tries again.
    #[error("the write met other writes on the same items on every try")]
    Contention,
}

/// Tries of one transaction that DynamoDB cancels for `TransactionConflict`
/// (another transaction touched one of its items at the same moment):
/// retried at once by the store, with jittered backoff, before it answers
/// [`StoreError::Contention`].
pub const CONFLICT_TRIES: u32 = 8;

/// The pause after try `attempt` (from 1) of a transaction that met a
/// conflict: full jitter, uniformly between zero and a ceiling of 20 ms
/// doubled per try, at most 640 ms (about 1.3 s over all tries at worst),
/// so that rivals that met once do not meet again.
pub fn conflict_backoff(attempt: u32) -> std::time::Duration {
    let ceiling_ms = (10u64 << attempt.min(6)).min(640);
    let draw = uuid::Uuid::new_v4().as_u128() as u64;
    std::time::Duration::from_millis(draw % (ceiling_ms + 1))
}

/// Result of creating an intent.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// The record was written.
    New,
    /// A live record with the same id already exists; it is returned as stored.
    Existing(Box<OperationRecord>),
}

/// Result of applying a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Written,
    /// The transition changed nothing, so nothing was written.
    Unchanged,
}

/// Operation records: create, read, write under the version guard, and the
/// sparse indexes over them (due times, remote job ids, open cases).
pub trait OperationRecords: Send + Sync {
    /// Writes a new record unless a live one with the same id exists.
    fn create(
        &self,
        rec: &OperationRecord,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Created, StoreError>> + Send;

    /// Consistent read by id. Expired records are absent.
    fn get(
        &self,
        id: &OperationId,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<OperationRecord>, StoreError>> + Send;

    /// Writes `next` over `prev` if the stored version is still `prev.version`.
    ///
    /// When the write changes the operation's share of its tenant's ledger
    /// ([`genace_core::ledger::delta`]), the tenant's counters move in the
    /// same atomic write. A dispatch claim ([`genace_core::ledger::reserves`])
    /// is refused with [`StoreError::SpendLimit`] when its reservation does
    /// not fit under the tenant's limit, and with [`StoreError::AccountFull`]
    /// when the account's jobs in flight ([`genace_core::ledger::Shares::in_flight`]
    /// summed over every tenant) have reached the store's account limit.
    fn apply(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
    ) -> impl Future<Output = Result<Applied, StoreError>> + Send;

    /// Waits `pause` before a write that failed is tried again: a sleep,
    /// unless the store's time is simulated.
    fn pause_before_retry(&self, pause: std::time::Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(pause)
    }

    /// One page of the sparse due-time index: operations of `shard` whose
    /// `due_at` is at or before `before_ms`, oldest first.
    fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> impl Future<Output = Result<DuePage, StoreError>> + Send;

    /// The due shard the next sweep run takes first, where the last run its
    /// time budget cut short stopped; none when no run left one.
    fn sweep_start(&self) -> impl Future<Output = Result<Option<u32>, StoreError>> + Send;

    /// Records `shard` as the one the next sweep run takes first.
    fn set_sweep_start(&self, shard: u32) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The operations whose saved remote job id is `job_id` (at most a few;
    /// more than one would be a bug or a mistaken attach).
    fn holders_of_remote_job(&self, job_id: &str) -> impl Future<Output = Result<Vec<OperationId>, StoreError>> + Send;

    /// A tenant's operations waiting for a slot of Genace's capacity, oldest
    /// wait first, at most `limit`: the sparse waiting index.
    fn waiting(
        &self,
        tenant: &TenantId,
        limit: i32,
    ) -> impl Future<Output = Result<Vec<OperationId>, StoreError>> + Send;

    /// One page of operations, newest first (by [`crate::ports::list::list_sort_key`]):
    /// of `tenant`, or of every tenant, that `filter` selects and that sort
    /// before `after`. Expired records are absent. Read from the list
    /// indexes, never a scan of the table.
    fn list(
        &self,
        tenant: Option<&TenantId>,
        filter: &crate::ports::list::ListFilter,
        limit: i32,
        after: Option<&crate::ports::list::ListPosition>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<crate::ports::list::ListPage, StoreError>> + Send;

    /// One page of the sparse open-case index, optionally for one tenant:
    /// a tenant's cases oldest first. A page holds `limit` cases that pass
    /// `filter` unless it is the last; a cursor comes with every page that
    /// may not be the last.
    fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> impl Future<Output = Result<CasePage, StoreError>> + Send;

    /// One page of every tenant's open cases, oldest first (the age index),
    /// paged as [`OperationRecords::open_cases`] is.
    fn open_cases_by_age(
        &self,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> impl Future<Output = Result<CasePage, StoreError>> + Send;

    /// How many cases are open per reason, and when the oldest of each
    /// opened, over every tenant or one; reasons with none are left out.
    /// Reads the age index (or the tenant's part of the case index), its
    /// keys and reasons only, never the records.
    fn case_counts(&self, tenant: Option<&TenantId>)
    -> impl Future<Output = Result<Vec<CaseCount>, StoreError>> + Send;
}

/// The most ledgers one read of the waiting set returns.
pub const WAITING_READ_MAX: usize = 100;

/// Which set of waiting tenants a ledger write leaves its tenant in: the
/// waiting set, which wake-ups read, or the parked set of tenants held back
/// by their own limits, which they do not ([`TenantLedgers::park`]). A
/// tenant is in a set when it has both a set (`wait_pk`) and a place in it
/// (`wait_sk`); both stores apply this one rule in the counters' own
/// transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMove {
    /// What becomes of the tenant's set.
    pub set: SetRule,
    /// What becomes of its place.
    pub place: PlaceRule,
}

/// See [`SetMove::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetRule {
    /// Left as it is.
    Keep,
    /// The waiting set, from either.
    Waiting,
    /// The waiting set if it had none.
    WaitingIfNone,
    /// The parked set if it had none.
    ParkedIfNone,
}

/// See [`SetMove::place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceRule {
    /// Left as it is.
    Keep,
    /// Now, if it had none (one that waits keeps its place).
    NowIfNone,
    /// Now: the back of its set.
    Now,
}

impl SetMove {
    /// The move of a write that changes the tenant's counters by `delta`:
    /// - an operation starts waiting for a slot: the waiting set, keeping
    ///   the tenant's place if it has one;
    /// - one starts waiting for credits: the parked set, unless the tenant
    ///   is in a set already (its claim found no room under its limit);
    /// - the write frees credits or a slot the tenant held (a job ended, a
    ///   claim released): back to the waiting set, keeping its place,
    ///   since its own limits may now let it take a slot;
    /// - one stops waiting (claimed, cancelled): the back of its set, so
    ///   tenants take turns.
    pub fn of(delta: &genace_core::ledger::Shares) -> Self {
        let frees = delta.in_flight < 0 || delta.held < Millicredits::ZERO;
        let set = if delta.queued > 0 || frees {
            SetRule::Waiting
        } else if delta.waiting > 0 {
            SetRule::ParkedIfNone
        } else if delta.waiting < 0 || delta.queued < 0 {
            SetRule::WaitingIfNone
        } else {
            SetRule::Keep
        };
        let place = if delta.queued > 0 || delta.waiting > 0 {
            PlaceRule::NowIfNone
        } else if delta.waiting < 0 {
            PlaceRule::Now
        } else {
            PlaceRule::Keep
        };
        Self { set, place }
    }
}

/// Tenants' credit ledgers and spend limits. The counters move with record
/// writes ([`OperationRecords::apply`]); this reads them and sets limits.
pub trait TenantLedgers: Send + Sync {
    /// A tenant's ledger (zeros and no limit for a tenant never seen).
    fn ledger(&self, tenant: &TenantId) -> impl Future<Output = Result<TenantLedger, StoreError>> + Send;

    /// The Genace account's jobs in flight and its limit: its shards
    /// added up ([`genace_core::shard::summed`]).
    fn account(&self) -> impl Future<Output = Result<genace_core::capacity::AccountCapacity, StoreError>> + Send;

    /// Each shard of the account in use, in order: its own counters under
    /// its part of every limit. One read, however many shards.
    fn account_shards(
        &self,
    ) -> impl Future<Output = Result<Vec<genace_core::capacity::AccountCapacity>, StoreError>> + Send;

    /// Sets (or, with `None`, removes) an operator's limit of the account's
    /// jobs in flight, which replaces the deployment's while set, and
    /// forgets any limit learned from 429s. Jobs in flight keep their
    /// slots. Returns the account as it now is.
    fn set_account_limit(
        &self,
        limit: Option<u32>,
    ) -> impl Future<Output = Result<genace_core::capacity::AccountCapacity, StoreError>> + Send;

    /// Replaces the account's learned limit if it is still `seen`, marks
    /// the jobs ended so far as its start (`None` forgets it), sets how
    /// many must end before it is raised
    /// ([`genace_core::capacity::AccountCapacity::raise_every`]) and, for a
    /// lesson or a probe, when it was (`at`; none keeps the time before).
    /// False when another writer changed the limit first: theirs stands.
    fn learn_account_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// One page of every tenant's ledger, for operators' reports.
    fn ledgers(&self, limit: i32, cursor: Option<&str>) -> impl Future<Output = Result<LedgerPage, StoreError>> + Send;

    /// The ledgers of tenants with operations waiting, longest waiting first,
    /// at most `limit` (at most [`WAITING_READ_MAX`]), from the waiting set the
    /// counters' own transactions keep: never every ledger, so its cost grows
    /// with `limit`, not with the tenants. An entry whose tenant no longer
    /// waits is dropped when it is read.
    fn waiting_ledgers(&self, limit: usize) -> impl Future<Output = Result<Vec<TenantLedger>, StoreError>> + Send;

    /// Sends tenants to the back of the set they are in (the waiting set,
    /// or the parked set), so that they do not hide those behind them. A
    /// tenant in neither is left out.
    fn send_to_back(&self, tenants: &[String]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Moves each tenant a wake-up found unable to take a slot for its own
    /// limits (its credits or its jobs in flight), its ledger `as_read`,
    /// from the waiting set to the parked set, which wake-ups do not read;
    /// but only while its ledger is still as read (counters and limits): a
    /// write that made room for it, or a new waiter, keeps it where it is.
    /// The counters' own transactions move a parked tenant back when they
    /// free its room, and a raised limit does too. How many were parked.
    fn park(&self, as_read: &[TenantLedger]) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// The ledgers of parked tenants, parked longest first, at most `limit`
    /// (at most [`WAITING_READ_MAX`]). An entry whose tenant no longer
    /// waits is dropped when it is read.
    fn parked_ledgers(&self, limit: usize) -> impl Future<Output = Result<Vec<TenantLedger>, StoreError>> + Send;

    /// Moves a parked tenant back to the waiting set, keeping its place.
    /// Whether it was parked.
    fn unpark(&self, tenant: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Puts each tenant whose ledger counts waiters but is missing from the
    /// waiting set (it began waiting before the set existed) back in it,
    /// reading at most `pages` pages of the ledger listing. How many joined.
    fn rejoin_waiting_set(&self, pages: usize) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Sets (or, with `None`, removes) the most jobs a tenant may have in
    /// flight at once. Jobs already in flight keep their slots.
    fn set_max_in_flight(
        &self,
        tenant: &TenantId,
        limit: Option<u32>,
    ) -> impl Future<Output = Result<TenantLedger, StoreError>> + Send;

    /// Sets (or, with `None`, removes) a tenant's spend limit. Operations
    /// already holding credits keep them; the limit applies to new claims.
    fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> impl Future<Output = Result<TenantLedger, StoreError>> + Send;
}

/// Tenants' webhook settings.
pub trait WebhookSettings: Send + Sync {
    /// A tenant's webhook, if one is configured.
    fn webhook(
        &self,
        tenant: &TenantId,
    ) -> impl Future<Output = Result<Option<genace_core::webhook::WebhookConfig>, StoreError>> + Send;

    /// Sets (or, with `None`, removes) a tenant's webhook.
    fn set_webhook(
        &self,
        tenant: &TenantId,
        config: Option<&genace_core::webhook::WebhookConfig>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Tenants' webhook endpoints and their attempt logs.
pub trait WebhookEndpoints: Send + Sync {
    /// A tenant's endpoints, read consistently (version 0 and none before
    /// the first write).
    fn endpoints(&self, tenant: &TenantId) -> impl Future<Output = Result<EndpointSet, StoreError>> + Send;

    /// Writes `set` if the stored version is still `set.version - 1`;
    /// [`StoreError::Conflict`] when another write came first.
    fn save_endpoints(
        &self,
        tenant: &TenantId,
        set: &EndpointSet,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The receivers (operator-set webhook and endpoints) of each of
    /// `tenants` that has any, for the events pipe's filter. The read may
    /// be eventually consistent: a receiver saved a moment before an event
    /// was made may not take it.
    fn receivers(
        &self,
        tenants: &[TenantId],
    ) -> impl Future<Output = Result<std::collections::HashMap<TenantId, Receivers>, StoreError>> + Send;

    /// Adds one entry to an endpoint's log, kept until `keep_until`.
    fn record_attempt(
        &self,
        attempt: &WebhookAttempt,
        keep_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Keeps a lifecycle event (its JSON) for replay until `keep_until`.
    fn keep_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        detail: &str,
        keep_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A kept event of the tenant's, while it is kept.
    fn kept_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// A page of an endpoint's log, newest first, after the entry whose
    /// sort key is `after`, only with `status` when given. The page may be
    /// short (the status applies to the entries read); the key of its last
    /// entry read comes back while more may follow.
    fn attempts(
        &self,
        tenant: &TenantId,
        endpoint_id: &str,
        status: Option<AttemptStatus>,
        limit: usize,
        after: Option<&str>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(Vec<WebhookAttempt>, Option<String>), StoreError>> + Send;
}

/// One page of an endpoint's log, as both stores make it: `read` holds, newest
/// first, up to `limit + 1` entries after the cursor (its sort key, whether
/// it is still kept, the entry), as a query with that limit returns them.
/// The page is the first `limit` of them that are still kept and have
/// `status`; the cursor is the last key read while more follow.
pub fn log_page(
    mut read: Vec<(String, bool, WebhookAttempt)>,
    limit: usize,
    status: Option<AttemptStatus>,
) -> (Vec<WebhookAttempt>, Option<String>) {
    let more = read.len() > limit;
    read.truncate(limit);
    let next = if more {
        read.last().map(|(k, _, _)| k.clone())
    } else {
        None
    };
    let page = read
        .into_iter()
        .filter(|(_, kept, a)| *kept && status.is_none_or(|s| a.status == s))
        .map(|(_, _, a)| a)
        .collect();
    (page, next)
}

/// The whole operations table: records, ledgers and webhook settings. A
/// stage that needs only part of it asks for that part.
/// The learned render times ([`genace_core::render`]): one histogram per
/// class of job, read for a job's poll plan and moved by each finished job.
pub trait RenderTimeLog: Send + Sync {
    /// The class's render times so far (none yet: empty).
    fn render_times(
        &self,
        class: &genace_core::render::RenderClass,
    ) -> impl Future<Output = Result<genace_core::render::RenderTimes, StoreError>> + Send;

    /// One more finished job of the class, rendered in `seconds`: an atomic
    /// add, whatever else writes.
    fn add_render_time(
        &self,
        class: &genace_core::render::RenderClass,
        seconds: f64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

pub trait OperationStore:
    OperationRecords + TenantLedgers + WebhookSettings + WebhookEndpoints + RenderTimeLog
{
}

impl<T: OperationRecords + TenantLedgers + WebhookSettings + WebhookEndpoints + RenderTimeLog> OperationStore for T {}

/// The table's traits, for code that calls them on a concrete store.
pub mod prelude {
    pub use crate::ports::table::{
        OperationRecords, OperationStore, RenderTimeLog, TenantLedgers, WebhookEndpoints, WebhookSettings,
    };
}

/// Which open cases a listing shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaseFilter {
    /// Only cases of this reason.
    pub reason: Option<CaseReason>,
    /// Only cases that opened before this time (open at least so long).
    pub opened_before: Option<DateTime<Utc>>,
}

impl CaseFilter {
    /// Whether the case of `rec` (if any) passes.
    pub fn passes(&self, rec: &OperationRecord) -> bool {
        rec.case.as_ref().is_some_and(|c| {
            self.reason.is_none_or(|r| c.reason == r) && self.opened_before.is_none_or(|t| c.opened_at < t)
        })
    }
}

/// The open cases of one reason: how many, and when the oldest opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseCount {
    pub reason: CaseReason,
    pub open: u64,
    pub oldest: DateTime<Utc>,
}

/// Folds `(reason, opened_at)` of open cases into counts per reason, in
/// the order of [`CaseReason::ALL`].
pub fn count_cases(cases: impl IntoIterator<Item = (CaseReason, DateTime<Utc>)>) -> Vec<CaseCount> {
    let mut counts: Vec<CaseCount> = Vec::new();
    for (reason, opened) in cases {
        match counts.iter_mut().find(|c| c.reason == reason) {
            Some(c) => {
                c.open += 1;
                c.oldest = c.oldest.min(opened);
            }
            None => counts.push(CaseCount {
                reason,
                open: 1,
                oldest: opened,
            }),
        }
    }
    counts.sort_by_key(|c| CaseReason::ALL.iter().position(|r| *r == c.reason));
    counts
}

/// A page of operations with an open reconciliation case, oldest first
/// (within a tenant, from the case index; across tenants, from the age
/// index).
#[derive(Debug, Clone, PartialEq)]
pub struct CasePage {
    pub records: Vec<OperationRecord>,
    /// Opaque; pass it back for the next page.
    pub next: Option<String>,
}

/// A page of tenant ledgers.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerPage {
    pub ledgers: Vec<TenantLedger>,
    /// Opaque; pass it back for the next page.
    pub next: Option<String>,
}

/// An entry of the due-time index, as projected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct DueItem {
    pub operation_id: OperationId,
    pub phase: genace_core::record::Phase,
    pub delivery_state: genace_core::record::DeliveryState,
    /// Epoch milliseconds; stored as `due_at`.
    #[serde(rename = "due_at")]
    pub due_at_ms: i64,
}

/// Where the next page starts: opaque, made by the store that returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCursor(pub String);

#[derive(Debug, Clone, PartialEq)]
pub struct DuePage {
    pub items: Vec<DueItem>,
    pub next: Option<DueCursor>,
}
