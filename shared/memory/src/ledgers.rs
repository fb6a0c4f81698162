//! The tenant ledgers and the account item, in memory: the counters the
//! record's writes move (in `store.rs`), the operators' limits, and the
//! waiting set wake-ups read.

use genace_core::domain::TenantId;
use genace_core::ledger::{Millicredits, TenantLedger};

use super::contention::TRANSACTION_UNITS_PER_ITEM;
use super::store::MemoryStore;
use genace_stages::ports::table::{LedgerPage, StoreError, TenantLedgers};

impl TenantLedgers for MemoryStore {
    async fn ledger(&self, tenant: &TenantId) -> Result<TenantLedger, StoreError> {
        Ok(self
            .lock()
            .ledgers
            .get(tenant.as_str())
            .cloned()
            .unwrap_or_else(|| TenantLedger {
                tenant_id: tenant.as_str().to_owned(),
                ..TenantLedger::default()
            }))
    }

    async fn set_max_in_flight(&self, tenant: &TenantId, limit: Option<u32>) -> Result<TenantLedger, StoreError> {
        // A plain write to the ledger, which transactions also write.
        self.plain_write(&[format!("ledger/{}", tenant.as_str())], |_| ())
            .await?;
        Ok(self.with_ledger(tenant, |l| l.max_in_flight = limit))
    }

    async fn account(&self) -> Result<genace_core::capacity::AccountCapacity, StoreError> {
        let mut table = self.lock();
        table.account.read_for(self.shards);
        Ok(table.account.whole())
    }

    async fn account_shards(&self) -> Result<Vec<genace_core::capacity::AccountCapacity>, StoreError> {
        Ok(self.lock().account.read_for(self.shards))
    }

    async fn set_account_limit(
        &self,
        limit: Option<u32>,
    ) -> Result<genace_core::capacity::AccountCapacity, StoreError> {
        // Every shard takes its part: one item a plain write, more a
        // transaction.
        let items = self.lock().account.items();
        self.plain_write(&items, |table| {
            table.contention.written(&items, write_units(&items), false);
            table.account.set_limit(self.shards, limit)
        })
        .await
    }

    async fn learn_account_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, StoreError> {
        let items = self.lock().account.items();
        self.plain_write(&items, |table| {
            // Charged whether or not its condition holds.
            table.contention.written(&items, write_units(&items), false);
            let account = &mut table.account;
            if !account.learn(self.shards, seen, learned) {
                return false;
            }
            account.limits.learned_mark = account.whole().jobs_ended;
            account.limits.raise_every = raise_every;
            if let Some(at) = at {
                account.limits.learned_at_ms = Some(at.timestamp_millis());
            }
            true
        })
        .await
    }

    async fn waiting_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        Ok(self.lock().read_set(false, limit))
    }

    async fn parked_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        Ok(self.lock().read_set(true, limit))
    }

    async fn park(&self, as_read: &[TenantLedger]) -> Result<usize, StoreError> {
        let mut parked = 0;
        for read in as_read {
            let tenant = &read.tenant_id;
            let item = [format!("ledger/{tenant}")];
            let moved = self
                .plain_write(&item, |tables| {
                    // As DynamoDB's condition: the counters and limits a
                    // park depends on, as read.
                    let unchanged = tables.ledgers.get(tenant).is_some_and(|now| {
                        let (a, b) = (&now.totals, &read.totals);
                        (a.held, a.in_flight, a.waiting, a.queued) == (b.held, b.in_flight, b.waiting, b.queued)
                            && (now.spend_limit, now.max_in_flight) == (read.spend_limit, read.max_in_flight)
                    });
                    let waits = tables.set_of.get(tenant) == Some(&false);
                    if unchanged && waits {
                        tables.set_of.insert(tenant.clone(), true);
                        tables.contention.written(&item, 1, false);
                        if let Some(lag) = &mut tables.index_lag {
                            lag.tenant_joined(tenant);
                        }
                    }
                    unchanged && waits
                })
                .await?;
            parked += usize::from(moved);
        }
        Ok(parked)
    }

    async fn unpark(&self, tenant: &str) -> Result<bool, StoreError> {
        let item = [format!("ledger/{tenant}")];
        self.plain_write(&item, |tables| {
            let parked = tables.set_of.get(tenant) == Some(&true);
            if parked {
                tables.set_of.insert(tenant.to_owned(), false);
                tables.contention.written(&item, 1, false);
                if let Some(lag) = &mut tables.index_lag {
                    lag.tenant_joined(tenant);
                }
            }
            parked
        })
        .await
    }

    async fn send_to_back(&self, tenants: &[String]) -> Result<(), StoreError> {
        for tenant in tenants {
            let item = [format!("ledger/{tenant}")];
            self.plain_write(&item, |tables| {
                if tables.waiting_set.contains_key(tenant) {
                    tables.joined += 1;
                    tables.waiting_set.insert(tenant.clone(), tables.joined);
                    tables.contention.written(&item, 1, false);
                }
            })
            .await?;
        }
        Ok(())
    }

    async fn rejoin_waiting_set(&self, pages: usize) -> Result<usize, StoreError> {
        let mut table = self.lock();
        let tables = &mut *table;
        let mut joined = 0;
        let read: Vec<(String, i64)> = tables
            .ledgers
            .values()
            .take(pages.saturating_mul(100))
            .map(|l| (l.tenant_id.clone(), l.totals.waiting))
            .collect();
        for (tenant, waiting) in read {
            if waiting > 0 && !tables.waiting_set.contains_key(&tenant) {
                tables.joined += 1;
                tables.waiting_set.insert(tenant.clone(), tables.joined);
                tables.set_of.entry(tenant).or_insert(false);
                joined += 1;
            }
        }
        Ok(joined)
    }

    async fn ledgers(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        let table = self.lock();
        let limit = limit.max(1) as usize;
        let mut page: Vec<TenantLedger> = table
            .ledgers
            .values()
            .filter(|l| cursor.is_none_or(|c| l.tenant_id.as_str() > c))
            .take(limit + 1)
            .cloned()
            .collect();
        let next = (page.len() > limit).then(|| {
            page.truncate(limit);
            page.last().map(|l| l.tenant_id.clone()).unwrap_or_default()
        });
        Ok(LedgerPage { ledgers: page, next })
    }

    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, StoreError> {
        self.plain_write(&[format!("ledger/{}", tenant.as_str())], |_| ())
            .await?;
        Ok(self.with_ledger(tenant, |l| l.spend_limit = limit))
    }
}

impl MemoryStore {
    /// Takes a tenant out of the waiting set whatever its ledger says: its
    /// ledger as one written before the set existed (tests of the repair).
    pub fn forget_waiting_set_entry_now(&self, tenant: &str) {
        self.lock().waiting_set.remove(tenant);
    }
}

impl super::store::Tables {
    /// Applies the counters' move of a tenant between the sets; `waited`:
    /// it had operations waiting before the move (a place is kept only
    /// while it waits, as DynamoDB's condition keeps it).
    pub(super) fn move_in_sets(&mut self, tenant: &str, to: genace_stages::ports::table::SetMove, waited: bool) {
        use genace_stages::ports::table::{PlaceRule, SetRule};
        match to.set {
            SetRule::Keep => {}
            SetRule::Waiting => {
                // Back from the parked set: the index shows the move late.
                if self.set_of.insert(tenant.to_owned(), false) == Some(true)
                    && let Some(lag) = &mut self.index_lag
                {
                    lag.tenant_joined(tenant);
                }
            }
            SetRule::WaitingIfNone => {
                self.set_of.entry(tenant.to_owned()).or_insert(false);
            }
            SetRule::ParkedIfNone => {
                self.set_of.entry(tenant.to_owned()).or_insert(true);
            }
        }
        let placed = match to.place {
            PlaceRule::Keep => false,
            PlaceRule::NowIfNone => !waited || !self.waiting_set.contains_key(tenant),
            PlaceRule::Now => true,
        };
        if placed {
            self.joined += 1;
            self.waiting_set.insert(tenant.to_owned(), self.joined);
        }
        if let (true, Some(lag)) = (placed && to.place == PlaceRule::NowIfNone, &mut self.index_lag) {
            lag.tenant_joined(tenant);
        }
    }

    /// The first `limit` tenants of the parked set (`parked`) or the
    /// waiting set, by place; a drained one is dropped as it is read,
    /// unless a transaction holds its ledger (the entry stays for the next
    /// read; the read goes on).
    pub(super) fn read_set(&mut self, parked: bool, limit: usize) -> Vec<TenantLedger> {
        let mut order: Vec<(u64, String)> = self
            .waiting_set
            .iter()
            .filter(|(t, _)| self.set_of.get(*t) == Some(&parked))
            .filter(|(t, _)| self.index_lag.as_ref().is_none_or(|lag| lag.in_set(t)))
            .map(|(t, at)| (*at, t.clone()))
            .collect();
        order.sort();
        let limit = limit.clamp(1, genace_stages::ports::table::WAITING_READ_MAX);
        let mut found = Vec::new();
        for (_, tenant) in order {
            if found.len() >= limit {
                break;
            }
            match self.ledgers.get(&tenant) {
                Some(l) if l.totals.waiting > 0 => found.push(l.clone()),
                _ => {
                    if !self.contention.refuses_plain_write(&[format!("ledger/{tenant}")]) {
                        self.waiting_set.remove(&tenant);
                        self.set_of.remove(&tenant);
                    }
                }
            }
        }
        found
    }
}

/// Write units of a write to `items`: a plain write of one, a transaction
/// of more.
fn write_units(items: &[String]) -> u64 {
    if items.len() > 1 { TRANSACTION_UNITS_PER_ITEM } else { 1 }
}
