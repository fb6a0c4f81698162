//! DynamoDB's concurrency as the in-memory store models it, for the
//! simulator and the benchmarks: transactions that meet on an item, a share
//! of tries cancelled by a seeded draw, and each item's write budget.
//!
//! - **Meeting.** A transaction is open from its first step to its next
//!   (the store yields in between, so another handler may run). A
//!   transaction that reaches an item an open one holds is cancelled with
//!   `TransactionConflict`, as DynamoDB cancels the later of two that meet;
//!   a plain write to such an item is refused the same way
//!   (`TransactionConflictException`).
//! - **Draws.** A share of tries is cancelled whatever else runs: the
//!   conflicts of a busy table the run cannot show itself. Plain writes
//!   have a share of their own, refused as if a transaction held their
//!   item.
//! - **Write units.** Each item written by a transaction costs 2 write units
//!   (items up to 1 KB), a plain write 1; a transaction refused by a
//!   condition is charged as if written. An item takes at most
//!   [`ITEM_WRITE_UNITS_PER_SECOND`] in one second of the run's clock; past
//!   that a transaction is cancelled (`ThrottlingError`), which the store
//!   answers as contention. The meter reports the busiest item.

use std::collections::{BTreeMap, BTreeSet};

use super::clock::ManualClock;
use genace_stages::ports::clock::Clock;

/// The most write units DynamoDB lets one item take in a second.
pub const ITEM_WRITE_UNITS_PER_SECOND: u64 = 1_000;

/// Write units of one item (up to 1 KB) in a transaction.
pub const TRANSACTION_UNITS_PER_ITEM: u64 = 2;

/// The account item's name in the meter's reports.
pub const ACCOUNT_ITEM: &str = "account";

/// A shard of the account, as the write meter names its item: shard 0 is
/// the account item every store had before shards.
pub(super) fn shard_item(shard: u16) -> String {
    match shard {
        0 => ACCOUNT_ITEM.to_owned(),
        k => format!("{ACCOUNT_ITEM}/{k}"),
    }
}

/// Whether the meter's `item` is one of the account's shards.
fn is_shard_item(item: &str) -> bool {
    item == ACCOUNT_ITEM
        || item
            .strip_prefix(ACCOUNT_ITEM)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What the write meter saw: the busiest item, and how many jobs were
/// admitted (claims written) while it counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// The item that took the most write units.
    pub busiest_item: String,
    /// Its write units over the run.
    pub busiest_units: u64,
    /// The busiest account shard's write units over the run: the item
    /// every tenant's claims and ends on that shard share (the account
    /// item, with one shard).
    pub account_units: u64,
    /// The most write units the busiest item took in one second of the
    /// run's clock.
    pub peak_units_per_second: u64,
    /// Claims written.
    pub admitted: u64,
    /// Transaction tries cancelled because an item was past its budget.
    pub throttled: u64,
    /// Transaction tries cancelled for meeting an open one.
    pub met_open: u64,
}

impl WriteReport {
    /// The busiest item's write units per admitted job.
    pub fn units_per_admitted_job(&self) -> f64 {
        self.busiest_units as f64 / self.admitted.max(1) as f64
    }

    /// The account item's write units per admitted job.
    pub fn account_units_per_admitted_job(&self) -> f64 {
        self.account_units as f64 / self.admitted.max(1) as f64
    }

    /// Admitted jobs a second the account item's budget allows at its cost
    /// per job: the ceiling of one Genace account, whatever the tenants.
    pub fn ceiling_jobs_per_second(&self) -> f64 {
        ITEM_WRITE_UNITS_PER_SECOND as f64 / self.account_units_per_admitted_job().max(f64::MIN_POSITIVE)
    }
}

/// Why a try of a transaction was cancelled before it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancelled {
    /// It met another transaction: an open one, or a draw.
    Conflict,
    /// An item was past its write budget.
    Throttled,
}

#[derive(Debug, Default)]
pub(super) struct Contention {
    /// Percent of tries cancelled by draw, and the draws' state.
    percent: u32,
    state: u64,
    /// Percent of plain writes refused by draw, as if a transaction held
    /// their item.
    plain_percent: u32,
    /// Tries cancelled for a conflict (drawn or met).
    pub(super) met: u64,
    /// Transactions whose every try was cancelled.
    pub(super) contended: u64,
    /// Whether transactions stay open across a step and meet.
    meeting: bool,
    /// Items of open transactions, by transaction.
    open: BTreeMap<u64, Vec<String>>,
    next_open: u64,
    meter: Option<Meter>,
}

#[derive(Debug)]
struct Meter {
    clock: ManualClock,
    /// Write units per item over the run.
    totals: BTreeMap<String, u64>,
    /// Per item: the second of the run's clock last written in, and the
    /// units it took in that second.
    second: BTreeMap<String, (i64, u64)>,
    /// Per item: the most units it took in one second.
    peaks: BTreeMap<String, u64>,
    budget: Option<u64>,
    admitted: u64,
    throttled: u64,
    met_open: u64,
}

impl Contention {
    pub(super) fn draw_conflicts(&mut self, percent: u32, seed: u64) {
        self.percent = percent.min(100);
        self.state = seed;
    }

    pub(super) fn draw_plain_conflicts(&mut self, percent: u32, seed: u64) {
        self.plain_percent = percent.min(100);
        if self.percent == 0 {
            self.state = seed;
        }
    }

    /// Whether the next draw of `percent` comes up: a 64-bit linear
    /// congruential step (Knuth's MMIX constants).
    fn draw(&mut self, percent: u32) -> bool {
        if percent == 0 {
            return false;
        }
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.state >> 33) % 100 < u64::from(percent)
    }

    pub(super) fn meet(&mut self) {
        self.meeting = true;
    }

    pub(super) fn is_meeting(&self) -> bool {
        self.meeting
    }

    pub(super) fn meter(&mut self, clock: ManualClock, budget: Option<u64>) {
        self.meter = Some(Meter {
            clock,
            totals: BTreeMap::new(),
            second: BTreeMap::new(),
            peaks: BTreeMap::new(),
            budget,
            admitted: 0,
            throttled: 0,
            met_open: 0,
        });
    }

    /// One try of a transaction over `items`: cancelled (counted), or open
    /// under the returned number until [`Self::close`].
    pub(super) fn begin(&mut self, items: &[String]) -> Result<u64, Cancelled> {
        let held: BTreeSet<&String> = self.open.values().flatten().collect();
        if items.iter().any(|i| held.contains(i)) {
            self.met += 1;
            if let Some(m) = &mut self.meter {
                m.met_open += 1;
            }
            return Err(Cancelled::Conflict);
        }
        if self.draw(self.percent) {
            self.met += 1;
            return Err(Cancelled::Conflict);
        }
        if let Some(m) = &mut self.meter
            && let Some(budget) = m.budget
        {
            let now = m.clock.now().timestamp();
            let past = items.iter().any(|i| {
                let used = m.second.get(i).filter(|(s, _)| *s == now).map_or(0, |(_, u)| *u);
                used + TRANSACTION_UNITS_PER_ITEM > budget
            });
            if past {
                m.throttled += 1;
                return Err(Cancelled::Throttled);
            }
        }
        self.next_open += 1;
        if self.meeting {
            self.open.insert(self.next_open, items.to_vec());
        }
        Ok(self.next_open)
    }

    /// Whether an open transaction holds one of `items` (or the draw of
    /// plain writes says one does): a plain write to it is refused
    /// (`TransactionConflictException`), and counted.
    pub(super) fn refuses_plain_write(&mut self, items: &[String]) -> bool {
        let held = self.open.values().flatten().any(|i| items.contains(i));
        if held && let Some(m) = &mut self.meter {
            m.met_open += 1;
        }
        let refused = held || self.draw(self.plain_percent);
        self.met += u64::from(refused);
        refused
    }

    /// The transaction `open` is over (written, refused or abandoned).
    pub(super) fn close(&mut self, open: u64) {
        self.open.remove(&open);
    }

    /// A write reached the table: `units` on each of `items`; `admits`: it
    /// was a claim that took a slot.
    pub(super) fn written(&mut self, items: &[String], units: u64, admits: bool) {
        let Some(m) = &mut self.meter else {
            return;
        };
        let now = m.clock.now().timestamp();
        for item in items {
            *m.totals.entry(item.clone()).or_default() += units;
            let entry = m.second.entry(item.clone()).or_insert((now, 0));
            if entry.0 != now {
                *entry = (now, 0);
            }
            entry.1 += units;
            let peak = m.peaks.entry(item.clone()).or_default();
            *peak = (*peak).max(entry.1);
        }
        m.admitted += u64::from(admits);
    }

    pub(super) fn report(&self) -> Option<WriteReport> {
        let m = self.meter.as_ref()?;
        let (busiest_item, busiest_units) = m
            .totals
            .iter()
            .max_by_key(|(item, units)| (**units, std::cmp::Reverse((*item).clone())))
            .map(|(i, u)| (i.clone(), *u))
            .unwrap_or_default();
        Some(WriteReport {
            account_units: m
                .totals
                .iter()
                .filter(|(item, _)| is_shard_item(item))
                .map(|(_, units)| *units)
                .max()
                .unwrap_or_default(),
            peak_units_per_second: m.peaks.get(&busiest_item).copied().unwrap_or_default(),
            busiest_item,
            busiest_units,
            admitted: m.admitted,
            throttled: m.throttled,
            met_open: m.met_open,
        })
    }
}

/// The record's item, as the write meter names it.
pub(super) fn record_item(rec: &genace_core::record::OperationRecord) -> String {
    format!("record/{}", rec.pk)
}

/// The items a write of `next` over `prev` touches when it is a
/// transaction (it moves the tenant's counters): the record, the tenant's
/// ledger and, when it moves slots or waiters, the account's shards it
/// moves. None for a plain write.
pub(super) fn transaction_items(
    prev: &genace_core::record::OperationRecord,
    next: &genace_core::record::OperationRecord,
) -> Option<Vec<String>> {
    genace_core::shard::moves_counters(prev, next)
        .ok()
        .filter(|moves| *moves)?;
    let mut items = vec![record_item(prev), format!("ledger/{}", prev.tenant_id.as_str())];
    let moves = genace_core::shard::account_moves(prev, next).unwrap_or_default();
    items.extend(moves.iter().map(|m| shard_item(m.shard)));
    Some(items)
}
