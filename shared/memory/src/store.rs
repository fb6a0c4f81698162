//! The operation table, in memory, with DynamoDB's semantics as the stages rely on them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::{self, Millicredits, TenantLedger};
use genace_core::record::OperationRecord;

use super::clock::ManualClock;
use super::contention::{Contention, TRANSACTION_UNITS_PER_ITEM, WriteReport, transaction_items};
use genace_stages::ports::table::{
    Applied, CaseCount, CaseFilter, CasePage, Created, DueCursor, DueItem, DuePage, OperationRecords, StoreError,
    case_age_key, case_sort_key, case_tenant_prefix, count_cases,
};

/// The operation table, in memory. Clones share the same table.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    table: Arc<Mutex<Tables>>,
    before_apply: Rival,
    /// A brownout: every write takes this long on the clock, then fails as
    /// a timed-out request does.
    brownout: Arc<Mutex<Option<(ManualClock, chrono::Duration)>>>,
    /// The account's shard count of this handle's deployment (the
    /// deployed store's `GENACE_ACCOUNT_SHARDS`): its own, not the
    /// table's, so two deployments may share a table.
    pub(super) shards: genace_core::shard::AccountShards,
}

/// A write to make just before the next [`OperationRecords::apply`]: a
/// rival's write landing between a reader's read and its own write.
#[derive(Clone, Default)]
struct Rival(Arc<Mutex<Option<RivalWrite>>>);

type RivalWrite = Box<dyn FnOnce(&MemoryStore) + Send>;

impl std::fmt::Debug for Rival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rival")
    }
}

#[derive(Debug, Default)]
pub(super) struct Tables {
    pub(super) records: BTreeMap<String, OperationRecord>,
    pub(super) ledgers: BTreeMap<String, TenantLedger>,
    pub(super) webhooks: BTreeMap<String, genace_core::webhook::WebhookConfig>,
    pub(super) endpoints: BTreeMap<String, genace_core::webhook::EndpointSet>,
    /// Attempt logs by `<tenant>\u{0}<endpoint>`, by sort key, with when each entry expires.
    pub(super) attempts: BTreeMap<String, BTreeMap<String, (DateTime<Utc>, genace_core::webhook::WebhookAttempt)>>,
    pub(super) account: super::account::Account,
    /// The waiting set: each tenant that had an operation start waiting, by
    /// the order it joined (DynamoDB's sparse index of the same; see
    /// `TenantLedgers::waiting_ledgers`), until a read finds it drained.
    pub(super) waiting_set: BTreeMap<String, u64>,
    /// Each tenant's set (DynamoDB's `wait_pk`): true for the parked set,
    /// false for the waiting set. A tenant is read in a set only with a
    /// place in `waiting_set` too, as the sparse index holds an item only
    /// with both of its keys.
    pub(super) set_of: BTreeMap<String, bool>,
    /// How transactions meet, are drawn to conflict, and are metered.
    pub(super) contention: Contention,
    /// How late the indexes see writes (none: at once).
    pub(super) index_lag: Option<super::index_lag::IndexLag>,
    /// The order the next tenant joins the waiting set with.
    pub(super) joined: u64,
    /// Learned render times, by class of job.
    pub(super) render_times: BTreeMap<genace_core::render::RenderClass, genace_core::render::RenderTimes>,
    /// Kept events by `<tenant>\u{0}<event id>`, with when each expires.
    pub(super) kept: BTreeMap<String, (DateTime<Utc>, String)>,
    /// The due shard the next sweep run takes first.
    pub(super) sweep_start: Option<u32>,
}

impl std::ops::Deref for Tables {
    type Target = BTreeMap<String, OperationRecord>;
    fn deref(&self) -> &Self::Target {
        &self.records
    }
}

impl std::ops::DerefMut for Tables {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.records
    }
}

impl MemoryStore {
    /// Runs `rival` once, just before the next write of a record, for
    /// tests of races: it may write with [`Self::apply_now`].
    pub fn before_next_apply(&self, rival: impl FnOnce(&MemoryStore) + Send + 'static) {
        *self.before_apply.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(rival));
    }

    /// From now on (none: no longer), every write of a record takes `each`
    /// on `clock` and then fails as a request that timed out does (a
    /// DynamoDB brownout): the table neither answers nor conflicts.
    pub fn brown_out(&self, brownout: Option<(ManualClock, chrono::Duration)>) {
        *self.brownout.lock().unwrap_or_else(|p| p.into_inner()) = brownout;
    }

    /// Every stored record (expired ones included), by key.
    pub fn records(&self) -> Vec<OperationRecord> {
        self.lock().values().cloned().collect()
    }

    /// The account's jobs in flight and limit, now.
    pub fn account_now(&self) -> genace_core::capacity::AccountCapacity {
        self.lock().account.whole()
    }

    /// The due shard the next sweep run takes first, now.
    pub fn sweep_start_now(&self) -> Option<u32> {
        self.lock().sweep_start
    }

    /// Each shard of the account in use, now.
    pub fn account_shards_now(&self) -> Vec<genace_core::capacity::AccountCapacity> {
        self.lock().account.per_shard()
    }

    /// Every tenant ledger, by tenant.
    pub fn ledgers_now(&self) -> BTreeMap<String, TenantLedger> {
        self.lock().ledgers.clone()
    }

    /// The same table, admitting claims under `max_in_flight` jobs of the
    /// Genace account (the deployed store's `GENACE_MAX_IN_FLIGHT`).
    #[must_use]
    pub fn with_account_limit(self, max_in_flight: Option<u32>) -> Self {
        self.lock().account.limits.configured = max_in_flight;
        self
    }

    /// The same table, seen by a deployment whose account counters are
    /// split into `shards` (the deployed store's `GENACE_ACCOUNT_SHARDS`).
    /// Handles with other counts may share the table, as deployments in a
    /// rolling change do.
    #[must_use]
    pub fn with_account_shards(mut self, shards: genace_core::shard::AccountShards) -> Self {
        self.shards = shards;
        self
    }

    /// The same store, where `percent` of the tries of each transaction (a
    /// write that moves a tenant's counters) meet another transaction and
    /// are cancelled, as DynamoDB cancels them with `TransactionConflict`.
    /// The store tries again, [`CONFLICT_TRIES`] times in all, as the
    /// DynamoDB store does (yielding between tries instead of pausing: time
    /// here is the caller's), and answers [`StoreError::Contention`] when
    /// every try met one. Draws are deterministic, for simulation.
    #[must_use]
    pub fn with_transaction_conflicts(self, percent: u32, seed: u64) -> Self {
        self.lock().contention.draw_conflicts(percent, seed);
        self
    }

    /// The same store, where `percent` of plain-write tries to any item are
    /// refused as if a transaction held it (`TransactionConflictException`),
    /// as on a table whose items transactions keep busy.
    pub fn with_plain_write_conflicts(self, percent: u32, seed: u64) -> Self {
        self.lock().contention.draw_plain_conflicts(percent, seed);
        self
    }

    /// The same store, where a transaction stays open across one step (it
    /// yields between its start and its write) and a transaction that
    /// reaches an item an open one holds is cancelled, as DynamoDB cancels
    /// the later of two transactions that meet. For simulation, where
    /// handlers run interleaved.
    #[must_use]
    pub fn with_meeting_transactions(self) -> Self {
        self.lock().contention.meet();
        self
    }

    /// The same store, whose waiting order and waiting set (DynamoDB's
    /// global secondary indexes) see each write up to `most` late on
    /// `clock`, the delay drawn per write from `seed`.
    #[must_use]
    pub fn with_index_lag(self, clock: ManualClock, most: chrono::Duration, seed: u64) -> Self {
        self.lock().index_lag = Some(super::index_lag::IndexLag::new(clock, most, seed));
        self
    }

    /// The same store, counting write units per item on `clock` (see
    /// [`WriteReport`]); with `budget`, an item past that many units in one
    /// second cancels transactions as DynamoDB throttles them.
    #[must_use]
    pub fn with_write_meter(self, clock: ManualClock, budget: Option<u64>) -> Self {
        self.lock().contention.meter(clock, budget);
        self
    }

    /// What the write meter saw; none without one.
    pub fn write_report(&self) -> Option<WriteReport> {
        self.lock().contention.report()
    }

    /// How many tries of transactions met a conflict so far.
    pub fn transaction_conflicts(&self) -> u64 {
        self.lock().contention.met
    }

    /// How many transactions met a conflict on every try so far.
    pub fn transactions_contended(&self) -> u64 {
        self.lock().contention.contended
    }

    /// Sets a tenant's spend limit (a simulation's starting state).
    pub fn set_spend_limit_now(&self, tenant: &str, limit: Option<Millicredits>) {
        if let Ok(tenant) = TenantId::parse(tenant) {
            self.with_ledger(&tenant, |l| l.spend_limit = limit);
        }
    }

    /// Changes a tenant's ledger (made on first use); returns it as changed.
    pub(super) fn with_ledger(&self, tenant: &TenantId, change: impl FnOnce(&mut TenantLedger)) -> TenantLedger {
        let mut table = self.lock();
        let entry = table
            .ledgers
            .entry(tenant.as_str().to_owned())
            .or_insert_with(|| TenantLedger {
                tenant_id: tenant.as_str().to_owned(),
                ..TenantLedger::default()
            });
        change(entry);
        entry.clone()
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        // A test that panicked while holding the lock leaves a usable table.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn case_key(rec: &OperationRecord) -> Option<String> {
    rec.case
        .as_ref()
        .map(|c| case_sort_key(rec.tenant_id.as_str(), c.opened_at, &rec.operation_id))
}

/// The memory store's page cursors: `<sort key>\u{1f}<pk>` of the last item.
const CURSOR_SEPARATOR: char = '\u{1f}';

fn make_cursor(sort: &str, pk: &str) -> String {
    format!("{sort}{CURSOR_SEPARATOR}{pk}")
}

fn parse_cursor(c: &str) -> Result<(String, String), StoreError> {
    c.split_once(CURSOR_SEPARATOR)
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .ok_or(StoreError::Cursor)
}

impl OperationRecords for MemoryStore {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        let mut table = self.lock();
        match table.get(&rec.pk) {
            Some(existing) if !existing.is_expired(now) => {
                if existing == rec {
                    Ok(Created::New)
                } else {
                    Ok(Created::Existing(Box::new(existing.clone())))
                }
            }
            _ => {
                table.insert(rec.pk.clone(), rec.clone());
                if let Some(lag) = &mut table.index_lag {
                    lag.record_written(&rec.pk, genace_stages::ports::table::wait_sort_key(rec));
                }
                Ok(Created::New)
            }
        }
    }

    async fn get(&self, id: &OperationId, now: DateTime<Utc>) -> Result<Option<OperationRecord>, StoreError> {
        let found = self
            .lock()
            .get(&OperationRecord::pk_for(id))
            .filter(|r| !r.is_expired(now))
            .cloned();
        found.iter().for_each(genace_core::machine::debug_check);
        Ok(found)
    }

    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        let brownout = self.brownout.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((clock, each)) = brownout {
            clock.advance(each);
            return Err(StoreError::Service("the request timed out (a brownout)".into()));
        }
        let rival = self.before_apply.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rival) = rival {
            rival(self);
        }
        // A write whose record moved on fails its condition, as in
        // DynamoDB, where that reason wins over a conflict.
        let current = self.lock().records.get(&prev.pk).map(|r| r.version);
        match transaction_items(prev, next) {
            Some(items) if current == Some(prev.version) => self.transact(&items, prev, next).await,
            Some(items) => {
                // Sent, and refused by the record's condition: charged.
                let refused = self.apply_now(prev, next);
                self.lock()
                    .contention
                    .written(&items, TRANSACTION_UNITS_PER_ITEM, false);
                refused
            }
            None => self.write_plainly(prev, next).await,
        }
    }

    async fn sweep_start(&self) -> Result<Option<u32>, StoreError> {
        Ok(self.lock().sweep_start)
    }

    async fn set_sweep_start(&self, shard: u32) -> Result<(), StoreError> {
        self.lock().sweep_start = Some(shard);
        Ok(())
    }

    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> Result<DuePage, StoreError> {
        let shard_key = genace_core::keys::due_partition(shard);
        let after = match &cursor {
            Some(c) => {
                let (due_at_ms, pk) = parse_cursor(&c.0)?;
                Some((due_at_ms.parse::<i64>().map_err(|_| StoreError::Cursor)?, pk))
            }
            None => None,
        };
        let table = self.lock();
        let mut entries: Vec<(i64, &OperationRecord)> = table
            .values()
            .filter(|r| r.due_pk == shard_key)
            .filter_map(|r| r.due_at_ms.filter(|d| *d <= before_ms).map(|d| (d, r)))
            .filter(|(d, r)| after.as_ref().is_none_or(|(ad, apk)| (*d, &r.pk) > (*ad, apk)))
            .collect();
        entries.sort_by(|a, b| (a.0, &a.1.pk).cmp(&(b.0, &b.1.pk)));
        let limit = limit.max(1) as usize;
        let full = entries.len() >= limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((d, r)) if full => Some(DueCursor(make_cursor(&d.to_string(), &r.pk))),
            _ => None,
        };
        let items = entries
            .into_iter()
            .map(|(d, r)| DueItem {
                operation_id: r.operation_id.clone(),
                phase: r.phase,
                delivery_state: r.delivery_state,
                due_at_ms: d,
            })
            .collect();
        Ok(DuePage { items, next })
    }

    async fn holders_of_remote_job(&self, job_id: &str) -> Result<Vec<OperationId>, StoreError> {
        Ok(self
            .lock()
            .values()
            .filter(|r| r.remote_job_id.as_deref() == Some(job_id))
            .take(10)
            .map(|r| r.operation_id.clone())
            .collect())
    }

    async fn waiting(&self, tenant: &TenantId, limit: i32) -> Result<Vec<OperationId>, StoreError> {
        let table = self.lock();
        let indexed = |r: &OperationRecord| {
            let key = genace_stages::ports::table::wait_sort_key(r);
            match &table.index_lag {
                Some(lag) => lag.order_key(&r.pk, key),
                None => key,
            }
        };
        let mut waiting: Vec<(String, OperationId)> = table
            .values()
            .filter(|r| r.tenant_id == *tenant)
            .filter_map(|r| indexed(r).map(|k| (k, r.operation_id.clone())))
            .collect();
        drop(table);
        waiting.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(waiting
            .into_iter()
            .take(usize::try_from(limit).unwrap_or(0))
            .map(|(_, id)| id)
            .collect())
    }

    async fn list(
        &self,
        tenant: Option<&TenantId>,
        filter: &genace_stages::ports::list::ListFilter,
        limit: i32,
        after: Option<&genace_stages::ports::list::ListPosition>,
        now: DateTime<Utc>,
    ) -> Result<genace_stages::ports::list::ListPage, StoreError> {
        use genace_stages::ports::list::{ListPage, ListPosition, list_sort_key};
        // As DynamoDB's store: a position below the filter's range was
        // never one of its pages.
        if after.is_some_and(|a| a.0 < filter.key_range().0) {
            return Err(StoreError::Cursor);
        }
        let table = self.lock();
        let mut entries: Vec<(String, &OperationRecord)> = table
            .values()
            .filter(|r| tenant.is_none_or(|t| r.tenant_id == *t) && !r.is_expired(now) && filter.matches(r))
            .map(|r| (list_sort_key(r), r))
            .filter(|(k, _)| after.is_none_or(|a| *k < a.0))
            .collect();
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        let limit = usize::try_from(limit.max(1)).unwrap_or(1);
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((k, _)) if more => Some(ListPosition(k.clone())),
            _ => None,
        };
        Ok(ListPage {
            records: entries.into_iter().map(|(_, r)| r.clone()).collect(),
            next,
        })
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        let prefix = tenant.map(|t| case_tenant_prefix(t.as_str()));
        self.case_page(filter, limit, cursor, |r| {
            case_key(r).filter(|k| prefix.as_ref().is_none_or(|p| k.starts_with(p.as_str())))
        })
    }

    async fn open_cases_by_age(
        &self,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        self.case_page(filter, limit, cursor, |r| {
            r.case.as_ref().map(|c| case_age_key(c.opened_at, &r.operation_id))
        })
    }

    async fn case_counts(&self, tenant: Option<&TenantId>) -> Result<Vec<CaseCount>, StoreError> {
        let table = self.lock();
        Ok(count_cases(table.values().filter_map(|r| {
            let case = r.case.as_ref()?;
            tenant
                .is_none_or(|t| r.tenant_id == *t)
                .then_some((case.reason, case.opened_at))
        })))
    }
}

impl MemoryStore {
    /// One page of the cases that pass `filter`, in the order of the index
    /// key `key` gives them (None: not in that index), paged as the
    /// DynamoDB indexes are: a cursor with every full page.
    fn case_page(
        &self,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
        key: impl Fn(&OperationRecord) -> Option<String>,
    ) -> Result<CasePage, StoreError> {
        let after = cursor.map(parse_cursor).transpose()?;
        let table = self.lock();
        let mut entries: Vec<(String, &OperationRecord)> = table
            .values()
            .filter(|r| filter.passes(r))
            .filter_map(|r| key(r).map(|k| (k, r)))
            .filter(|(k, r)| after.as_ref().is_none_or(|(ak, apk)| (k, &r.pk) > (ak, apk)))
            .collect();
        entries.sort_by(|a, b| (&a.0, &a.1.pk).cmp(&(&b.0, &b.1.pk)));
        let limit = limit.max(1) as usize;
        let full = entries.len() >= limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((k, r)) if full => Some(make_cursor(k, &r.pk)),
            _ => None,
        };
        Ok(CasePage {
            records: entries.into_iter().map(|(_, r)| r.clone()).collect(),
            next,
        })
    }
}

impl MemoryStore {
    /// [`OperationRecords::apply`] now, without waiting for a rival.
    pub fn apply_now(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        if prev == next {
            return Ok(Applied::Unchanged);
        }
        let mut table = self.lock();

        let tables = &mut *table;
        match tables.records.get(&prev.pk) {
            Some(current) if current.version == prev.version => {
                debug_assert!(
                    genace_core::events::derive(Some(prev), next, &genace_core::events::Context::default()).len()
                        <= genace_core::events::MAX_EVENTS_PER_CHANGE,
                    "one change announces more than {} events",
                    genace_core::events::MAX_EVENTS_PER_CHANGE
                );
                let delta = ledger::delta(prev, next).map_err(|e| StoreError::Decode(e.to_string()))?;
                let moves =
                    genace_core::shard::account_moves(prev, next).map_err(|e| StoreError::Decode(e.to_string()))?;
                if !delta.is_zero() || !moves.is_empty() {
                    let tenant = prev.tenant_id.as_str();
                    let entry = tables.ledgers.entry(tenant.to_owned()).or_insert_with(|| TenantLedger {
                        tenant_id: tenant.to_owned(),
                        ..TenantLedger::default()
                    });
                    let claim = ledger::reserves(prev, next);
                    if claim && entry.headroom().is_some_and(|room| room < delta.held) {
                        return Err(StoreError::SpendLimit);
                    }
                    if claim && delta.in_flight > 0 && !entry.has_a_slot() {
                        return Err(StoreError::TenantFull);
                    }
                    tables.account.admits(self.shards, &moves)?;
                    let totals = entry
                        .totals
                        .plus(&delta)
                        .map_err(|e| StoreError::Decode(e.to_string()))?;
                    tables.account.apply(&moves)?;
                    let waited = entry.totals.waiting > 0;
                    entry.totals = totals;
                    tables.move_in_sets(tenant, genace_stages::ports::table::SetMove::of(&delta), waited);
                }
                if let Some(current) = tables.records.get_mut(&prev.pk) {
                    *current = next.clone();
                }
                if let Some(lag) = &mut tables.index_lag {
                    lag.record_written(&next.pk, genace_stages::ports::table::wait_sort_key(next));
                }
                Ok(Applied::Written)
            }
            Some(current) => Err(StoreError::Conflict(Some(Box::new(current.clone())))),
            None => Err(StoreError::Conflict(None)),
        }
    }
}
