//! Waking operations that wait for a slot of Genace's capacity or for
//! their tenant's spend limit.
//!
//! An operation whose claim found the account full, or its tenant's credits
//! spoken for, waits in its tenant's order (oldest first;
//! [`crate::ports::table::OperationRecords::waiting`]) and polls nothing. A claim
//! that was woken and admitted wakes the next, so free credits fill one
//! claim after another until one does not fit. The write that frees a slot wakes the next waiting
//! operations, as many as there are free slots: each wake-up is one
//! dispatch message, and the woken operation claims like any other (a
//! claim that loses the race waits again, keeping its place). Tenants take
//! turns: the next slot goes to the waiting tenant with the fewest jobs in
//! flight, so a tenant with a small burst is not queued behind a heavy one.
//! A wake-up lost to a crash is repaired by the sweep, which wakes whenever
//! slots are free and operations wait. A waiting operation has no timer of
//! its own (only its dispatch deadline, if it has one), so what a wait
//! costs does not grow with how long it lasts.

use tracing::{info, warn};

use crate::ports::queue::WorkQueue;
use crate::ports::table::{OperationStore, StoreError};
use genace_core::domain::TenantId;
use genace_core::ledger::{self, TenantLedger};
use genace_core::messages::Queue;
use genace_core::record::OperationRecord;

/// Wake-ups sent per call at most, whatever the free slots: a call is cheap,
/// and the woken claims free or take slots one by one anyway.
pub const MAX_WAKE: usize = 25;

/// Waiting tenants a wake-up weighs against each other at most (those that
/// have waited longest): enough for [`MAX_WAKE`] turns with room to choose
/// the one with the fewest jobs in flight.
pub const WAKE_CANDIDATES: usize = 2 * MAX_WAKE;

/// Whether the write of `next` over `prev` freed a slot of the account.
pub fn frees_a_slot(prev: &OperationRecord, next: &OperationRecord) -> bool {
    ledger::share(next).in_flight < ledger::share(prev).in_flight
}

/// After a write that may have freed a slot: wakes waiting operations if
/// the account has room. Failures are logged, not returned: the write that
/// freed the slot stands, and the sweep repairs a lost wake-up.
pub async fn wake_if_room<S: OperationStore, Q: WorkQueue>(store: &S, queue: &Q) {
    if let Err(e) = wake(store, queue).await {
        warn!(error = %e, "waking waiting operations failed; the sweep will");
    }
}

/// Wakes as many waiting operations as the account has free slots (at most
/// [`MAX_WAKE`]), tenants in turn by fewest jobs in flight. Returns how many.
pub async fn wake<S: OperationStore, Q: WorkQueue>(store: &S, queue: &Q) -> Result<usize, String> {
    let account = account_raised(store).await?;
    let mut tenants = None;
    wake_from(store, queue, &account, &mut tenants).await
}

/// The look after `waited` recorded its wait for a slot: a slot freed
/// between its refused claim and that write woke nobody. The waiters are
/// found as any wake-up finds them, oldest first, and then, if room is
/// left, `waited` itself is woken by its id: the indexes a wake-up reads
/// are eventually consistent and usually miss a wait written moments ago,
/// so without this the slot would idle until the next event or the sweep.
/// Failures are logged, as for [`wake_if_room`].
pub async fn wake_after_wait<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    waited: &genace_core::domain::OperationId,
) {
    let looked = async {
        let account = account_raised(store).await?;
        let room = room_of(&account).min(MAX_WAKE);
        if room == 0 {
            return Ok::<_, String>(());
        }
        let woken = wake_from(store, queue, &account, &mut None).await?;
        if woken < room {
            // A second later, not at once: whatever refuses it again (a
            // rival's claim took the slot) never spins.
            queue.enqueue(Queue::Wake, waited, 1).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    if let Err(e) = looked.await {
        warn!(error = %e, operation_id = %waited, "the look after a wait failed; the sweep will");
    }
}

/// The account as a wake-up reads it, its learned limit raised first if
/// earned. A raise not saved (the account item busy) is the sweep's to
/// make; the wake-up goes on under the limit as read.
async fn account_raised<S: OperationStore>(store: &S) -> Result<genace_core::ledger::AccountCapacity, String> {
    let mut account = store.account().await.map_err(|e| e.to_string())?;
    if let Err(e) = raise_if_earned(store, &mut account).await {
        warn!(error = %e, "the raised account limit was not saved");
    }
    Ok(account)
}

/// The slots a wake-up may fill under `account`: its free slots, or one
/// (a freed slot) when no limit of ours is known.
fn room_of(account: &genace_core::ledger::AccountCapacity) -> usize {
    match account.free_slots() {
        Some(free) => usize::try_from(free).unwrap_or(usize::MAX),
        None => 1,
    }
}

/// The sweep's look at the account, for one read of it a run: the learned
/// limit is raised if earned, else probed one higher; a lost wake-up is
/// repaired (free slots while operations wait); and the gauges are emitted
/// (`InFlight`, `Waiting`, `EffectiveLimit` when there is a limit, and
/// `OldestWaitSeconds`, 0 when nobody waits, which the alarm watches). The
/// waiting set is read once, and only when operations wait: the heads of
/// the tenants that have waited longest give the oldest wait. Failures are
/// logged: the next run looks again.
pub async fn sweep<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    metrics: &crate::ports::metrics::Metrics,
    now: chrono::DateTime<chrono::Utc>,
) {
    let mut account = match store.account().await {
        Ok(account) => account,
        Err(e) => return warn!(error = %e, "account unreadable for the sweep"),
    };
    match raise_if_earned(store, &mut account).await {
        Ok(true) => {}
        Ok(false) => probe(store, &mut account, now).await,
        Err(e) => warn!(error = %e, "the raised account limit was not saved"),
    }
    let mut tenants = None;
    match wake_from(store, queue, &account, &mut tenants).await {
        Ok(woken) => rejoin_stranded(store, queue, &account, &mut tenants, woken, metrics).await,
        Err(e) => warn!(error = %e, "waking waiting operations failed; the next sweep will"),
    }
    metrics.emit("InFlight", account.in_flight as f64, "Count", &[]);
    metrics.emit("Waiting", account.waiting as f64, "Count", &[]);
    if let Some(limit) = account.limit() {
        metrics.emit("EffectiveLimit", f64::from(limit), "Count", &[]);
    }
    let oldest = if account.waiting > 0 {
        oldest_wait_of(store, tenants, now).await
    } else {
        None
    };
    let age = oldest.map_or(0.0, |since| (now - since).num_milliseconds().max(0) as f64 / 1000.0);
    metrics.emit("OldestWaitSeconds", age, "Seconds", &[]);
}

/// Ledger pages one sweep run reads at most to repair the waiting set.
const REJOIN_PAGES: usize = 20;

/// The waiting set read whole (fewer tenants than a wake-up weighs) holds
/// fewer waiting operations than the account counts: some tenants wait
/// outside it, their ledgers having begun waiting before the set existed,
/// and no wake-up would ever reach them. They are put in the set (the
/// ledger listing, [`REJOIN_PAGES`] pages at most, counted in
/// `WaitingSetRepaired`) and, if nothing was woken yet, woken now. A count
/// that moved between the two reads costs one needless look.
async fn rejoin_stranded<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    account: &genace_core::ledger::AccountCapacity,
    tenants: &mut Option<Vec<Turn>>,
    woken: usize,
    metrics: &crate::ports::metrics::Metrics,
) {
    let Some(turns) = tenants.as_ref() else {
        return;
    };
    let in_set: i64 = turns.iter().map(|t| t.ledger.totals.waiting).sum();
    if turns.len() >= WAKE_CANDIDATES || in_set >= account.waiting {
        return;
    }
    match store.rejoin_waiting_set(REJOIN_PAGES).await {
        Ok(0) => {}
        Ok(joined) => {
            warn!(joined, "tenants waiting outside the waiting set were put back in it");
            metrics.emit("WaitingSetRepaired", joined as f64, "Count", &[]);
            *tenants = None;
            if woken == 0
                && let Err(e) = wake_from(store, queue, account, tenants).await
            {
                warn!(error = %e, "waking the repaired waiters failed; the next sweep will");
            }
        }
        Err(e) => warn!(error = %e, "the waiting set could not be repaired; the next sweep tries again"),
    }
}

/// Enough jobs ended under a limit learned from 429s: one slot more.
/// Whether the limit changed (another writer may have changed it first).
async fn raise_if_earned<S: OperationStore>(
    store: &S,
    account: &mut genace_core::ledger::AccountCapacity,
) -> Result<bool, String> {
    let Some(raised) = account.raised() else {
        return Ok(false);
    };
    let changed = store
        .learn_account_limit(account.learned, raised, account.raise_every, None)
        .await
        .map_err(|e| e.to_string())?;
    if changed {
        info!(from = ?account.learned, to = ?raised, "learned account limit raised");
        account.learned = raised;
    }
    Ok(changed)
}

/// Wakes under `account` as read. `tenants` holds the waiting tenants once
/// read, for the caller to reuse.
async fn wake_from<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    account: &genace_core::ledger::AccountCapacity,
    tenants: &mut Option<Vec<Turn>>,
) -> Result<usize, String> {
    if account.waiting <= 0 {
        // The common case, for one read: nobody waits.
        return Ok(0);
    }
    // No limit of ours: a 429 made these wait; one per freed slot.
    let room = room_of(account);
    if room == 0 {
        return Ok(0);
    }
    let want = room.min(MAX_WAKE);
    let turns = tenants.insert(waiting_tenants(store).await.map_err(|e| e.to_string())?);
    let mut woken = take_turns(store, queue, turns, want).await?;
    // Tenants that cannot take a slot (at their own limit, out of credits)
    // keep their places at the front of the waiting set; when they fill a
    // whole read and slots are left, they go to the back and the set is
    // read again, so that they never hide the tenants behind them.
    let mut passed = passed_over(turns);
    let mut seen: std::collections::BTreeSet<String> = turns.iter().map(|t| t.ledger.tenant_id.clone()).collect();
    let mut full_read = turns.len() >= WAKE_CANDIDATES;
    for _ in 1..WAKE_PASSES {
        if woken >= want || !full_read || passed.is_empty() {
            break;
        }
        // Best effort: tenants left in front (a ledger busy) only cost the
        // next wake-up the same look.
        if let Err(e) = store.send_to_back(&passed).await {
            warn!(error = %e, "tenants passed over stay in front of the waiting set");
            break;
        }
        let read = waiting_tenants(store).await.map_err(|e| e.to_string())?;
        full_read = read.len() >= WAKE_CANDIDATES;
        let mut more: Vec<Turn> = read
            .into_iter()
            .filter(|t| seen.insert(t.ledger.tenant_id.clone()))
            .collect();
        if more.is_empty() {
            break;
        }
        woken += take_turns(store, queue, &mut more, want - woken).await?;
        passed = passed_over(&more);
    }
    if woken > 0 {
        info!(woken, room, "woke operations waiting for a slot");
    }
    Ok(woken)
}

/// Reads of the waiting set one wake-up makes at most, when the tenants
/// read could not take a slot.
const WAKE_PASSES: usize = 4;

/// Wakes up to `want` operations of `turns`, tenant by tenant in turn.
async fn take_turns<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    turns: &mut [Turn],
    want: usize,
) -> Result<usize, String> {
    let mut woken = 0;
    while woken < want {
        let Some(turn) = next_turn(turns) else { break };
        if !turn.fetched {
            // Each tenant's order is read once per call, so no operation is
            // woken twice by one call (the index may lag the count).
            let tenant = TenantId::parse(&turn.ledger.tenant_id).map_err(|e| e.to_string())?;
            turn.heads = match turn.ledger.headroom() {
                None => {
                    let read = i32::try_from(want).unwrap_or(1);
                    store.waiting(&tenant, read).await.map_err(|e| e.to_string())?
                }
                Some(credits) => fitting(store, &tenant, credits, want)
                    .await
                    .map_err(|e| e.to_string())?,
            };
            turn.heads.reverse();
            turn.fetched = true;
        }
        let Some(id) = turn.heads.pop() else { continue };
        // The wake queue: never behind the fresh intents of a burst.
        queue.enqueue(Queue::Wake, &id, 0).await.map_err(|e| e.to_string())?;
        turn.taken += 1;
        woken += 1;
    }
    Ok(woken)
}

/// The tenants of `turns` that wait but took no slot: at their own limit
/// of jobs in flight, with no credits left, or read and found with nothing
/// that could be woken (no head fits the credits left).
fn passed_over(turns: &[Turn]) -> Vec<String> {
    turns
        .iter()
        .filter(|t| t.taken == 0 && t.ledger.totals.waiting > 0)
        .filter(|t| !t.may_take_a_slot() || (t.fetched && t.heads.is_empty()))
        .map(|t| t.ledger.tenant_id.clone())
        .collect()
}

/// Of a tenant's waiting order under a spend limit, the first `want`
/// operations, in order, whose reservations fit together in `headroom`.
/// One that does not fit is passed over and keeps its place: it is the
/// first looked at by the next wake-up, which the write that frees its
/// credits sends. Reads at most [`MAX_WAKE`] of the order and one record
/// per operation read. A record written before waits recorded their
/// reservation counts as fitting (its claim decides, as it always did).
async fn fitting<S: OperationStore>(
    store: &S,
    tenant: &TenantId,
    mut headroom: ledger::Millicredits,
    want: usize,
) -> Result<Vec<genace_core::domain::OperationId>, StoreError> {
    let read = i32::try_from(MAX_WAKE).unwrap_or(i32::MAX);
    let mut fit = Vec::new();
    for id in store.waiting(tenant, read).await? {
        if fit.len() >= want || headroom <= genace_core::ledger::Millicredits::ZERO {
            break;
        }
        // Expiry does not matter here: a woken record that expired is
        // dropped by its dispatch.
        let Some(rec) = store.get(&id, chrono::DateTime::<chrono::Utc>::MIN_UTC).await? else {
            continue;
        };
        // The index may lag: one claimed meanwhile holds its credits already.
        if crate::ports::table::wait_sort_key(&rec).is_none() {
            continue;
        }
        let need = rec
            .reserved_credits
            .filter(|r| r.is_finite() && *r >= 0.0)
            .map_or(ledger::Millicredits::ZERO, ledger::millis);
        if need <= headroom {
            headroom -= need;
            fit.push(id);
        } else if genace_core::planted::on(genace_core::planted::WAKE_STOPS_AT_SHORT_HEAD) {
            break;
        }
    }
    Ok(fit)
}

/// The tenant whose turn it is: of those with an operation left to wake,
/// under their own limit and with credits free, those waiting for a slot
/// before those waiting for credits only, then the one with the fewest
/// jobs in flight; on a tie, the one with fewer operations waiting (a
/// small burst finishes first rather than trailing a heavy one), then by
/// name.
fn next_turn(turns: &mut [Turn]) -> Option<&mut Turn> {
    turns
        .iter_mut()
        .filter(|t| !t.heads.is_empty() || (!t.fetched && t.ledger.totals.waiting > 0))
        .filter(|t| t.may_take_a_slot())
        // Tenants with operations waiting for a slot first: a slot is what
        // they lack, and claims that did not wait yield to them. Those
        // waiting only for credits are woken by the writes that free them.
        .min_by_key(|t| {
            (
                t.ledger.totals.queued - t.taken <= 0,
                t.ledger.totals.in_flight + t.taken,
                t.ledger.totals.waiting - t.taken,
                t.ledger.tenant_id.clone(),
            )
        })
}

/// A learned limit rises by one (and is forgotten at the maximum), so that
/// slots held by operations that may never end cannot stop dispatch for
/// good. The next 429 teaches it again. Failures are logged.
async fn probe<S: OperationStore>(
    store: &S,
    account: &mut genace_core::ledger::AccountCapacity,
    now: chrono::DateTime<chrono::Utc>,
) {
    let Some(probed) = account.probed(now.timestamp_millis()) else {
        return;
    };
    match store
        .learn_account_limit(account.learned, probed, account.raise_every, Some(now))
        .await
    {
        Ok(true) => {
            info!(from = ?account.learned, to = ?probed, "learned account limit probed upward");
            account.learned = probed;
        }
        Ok(false) => {}
        Err(e) => warn!(error = %e, "the probed account limit was not saved"),
    }
}

/// After Genace refused a claim with 429 while jobs of ours were in flight
/// (`account` as read then, this claim's slot counted): the real limit is
/// lower than we believed, so the learned limit becomes what Genace was
/// seen to take ([`genace_core::ledger::AccountCapacity::lowered_after_429`]). Failures
/// are logged: the limit stays as it was, and the next 429 teaches again.
pub async fn learn_from_429<S: OperationStore>(
    store: &S,
    account: &genace_core::ledger::AccountCapacity,
    metrics: &crate::ports::metrics::Metrics,
    now: chrono::DateTime<chrono::Utc>,
) {
    let Some(lesson) = account.lowered_after_429() else {
        return;
    };
    match store
        .learn_account_limit(account.learned, Some(lesson.learned), lesson.raise_every, Some(now))
        .await
    {
        Ok(true) => {
            let to = lesson.learned;
            let raise_every = lesson.raise_every;
            info!(from = ?account.limit(), to, ?raise_every, "Genace refused under our limit; learned a lower one");
            metrics.count("CapacityLimitLowered", &[]);
        }
        // Another 429 of the same burst taught it first.
        Ok(false) => {}
        Err(e) => warn!(error = %e, "the lowered account limit was not saved"),
    }
}

/// How far into a tenant's order a position is counted; further back, the
/// view says only that the operation waits.
pub const POSITION_COUNTED: i32 = 1_000;

/// Where a waiting operation stands in its tenant's order (1: the next of
/// its tenant to be woken), counted to [`POSITION_COUNTED`]. None when it
/// does not wait for a slot, stands further back, or the order is
/// unreadable (logged): a view is never refused for it. One keys-only read
/// of the waiting index.
pub async fn queue_position<S: OperationStore>(store: &S, rec: &OperationRecord) -> Option<u32> {
    crate::ports::table::wait_sort_key(rec)?;
    match store.waiting(&rec.tenant_id, POSITION_COUNTED).await {
        Ok(order) => order
            .iter()
            .position(|id| *id == rec.operation_id)
            .and_then(|at| u32::try_from(at + 1).ok()),
        Err(e) => {
            warn!(operation_id = %rec.operation_id, error = %e, "waiting order unreadable for a view");
            None
        }
    }
}

/// Tenants whose heads the oldest-wait gauge reads at most.
const OLDEST_WAIT_HEADS: usize = 8;

/// Since when the longest of the waiting tenants' heads waits, the tenants
/// as `wake` read them, else read now. Failures are logged.
async fn oldest_wait_of<S: OperationStore>(
    store: &S,
    tenants: Option<Vec<Turn>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let tenants = match tenants {
        Some(tenants) => tenants,
        None => match waiting_tenants(store).await {
            Ok(tenants) => tenants,
            Err(e) => {
                warn!(error = %e, "ledgers unreadable for the gauges");
                return None;
            }
        },
    };
    let mut oldest: Option<chrono::DateTime<chrono::Utc>> = None;
    // The set is in the order tenants began to wait: the oldest head is
    // among the first few, and the gauge reads no more than those.
    for turn in tenants.iter().take(OLDEST_WAIT_HEADS) {
        match oldest_wait(store, &turn.ledger.tenant_id, now).await {
            Ok(Some(since)) => oldest = Some(oldest.map_or(since, |o| o.min(since))),
            Ok(None) => {}
            Err(e) => warn!(error = %e, "a waiting order unreadable for the gauges"),
        }
    }
    oldest
}

/// Since when the head of a tenant's waiting order waits.
pub async fn oldest_wait<S: OperationStore>(
    store: &S,
    tenant: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
    let Ok(tenant) = TenantId::parse(tenant) else {
        return Ok(None);
    };
    let Some(head) = store.waiting(&tenant, 1).await?.into_iter().next() else {
        return Ok(None);
    };
    Ok(store.get(&head, now).await?.and_then(|r| r.waits_in_order()))
}

/// A waiting tenant, and what this call has taken from its order.
struct Turn {
    ledger: TenantLedger,
    heads: Vec<genace_core::domain::OperationId>,
    fetched: bool,
    taken: i64,
}

impl Turn {
    /// Whether the tenant may take one more slot: under its own limit of
    /// jobs in flight (it waits for its own jobs to end otherwise), with
    /// credits free (it waits for them to free otherwise; one with some
    /// room may still be short for its head: that claim waits again, and
    /// wakes nobody).
    fn may_take_a_slot(&self) -> bool {
        let under_own_limit = self
            .ledger
            .max_in_flight
            .is_none_or(|max| self.ledger.totals.in_flight + self.taken < i64::from(max));
        let credits_free = self
            .ledger
            .headroom()
            .is_none_or(|room| room > genace_core::ledger::Millicredits::ZERO);
        under_own_limit && credits_free
    }
}

/// The tenants with operations waiting that a wake-up considers: those
/// waiting longest, at most [`WAKE_CANDIDATES`], from the waiting set. Never
/// every ledger: what a wake-up reads does not grow with the tenants.
async fn waiting_tenants<S: OperationStore>(store: &S) -> Result<Vec<Turn>, StoreError> {
    Ok(store
        .waiting_ledgers(WAKE_CANDIDATES)
        .await?
        .into_iter()
        .map(|ledger| Turn {
            ledger,
            heads: Vec::new(),
            fetched: false,
            taken: 0,
        })
        .collect())
}
