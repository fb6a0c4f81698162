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
use crate::ports::table::OperationStore;
use genace_core::domain::TenantId;
use genace_core::ledger::{self, TenantLedger};
use genace_core::messages::Queue;
use genace_core::record::OperationRecord;
mod gauges;
mod order;
mod parked;
mod settle;

pub use gauges::{POSITION_COUNTED, oldest_wait, queue_position};
pub use order::{MAX_WAKE, WAKE_CANDIDATES};
pub use parked::wake_after_credit_wait;
pub use settle::{INDEX_SETTLE_SECONDS, look_once_settled};

use gauges::oldest_wait_of;
use order::{Order, Turn, fitting, still_waits, waiting_tenants};
use parked::look_at_parked;

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

/// After a write of `tenant`'s operation that freed a slot or credits
/// the tenant held: as [`wake_if_room`], and `tenant` itself is weighed
/// with the waiting set as its ledger reads now. The write moved it from
/// the parked set back to the waiting set, but the index a wake-up reads
/// is eventually consistent and seldom shows that move yet.
pub async fn wake_if_room_for<S: OperationStore, Q: WorkQueue>(store: &S, queue: &Q, tenant: &TenantId) {
    let woke = async {
        let account = account_raised(store).await?;
        wake_from(store, queue, &account, &mut None, Some(tenant)).await
    };
    if let Err(e) = woke.await {
        warn!(error = %e, tenant = %tenant, "waking waiting operations failed; the sweep will");
    }
}

/// Wakes as many waiting operations as the account has free slots (at most
/// [`MAX_WAKE`]), tenants in turn by fewest jobs in flight. Returns how many.
pub async fn wake<S: OperationStore, Q: WorkQueue>(store: &S, queue: &Q) -> Result<usize, String> {
    let account = account_raised(store).await?;
    let mut tenants = None;
    wake_from(store, queue, &account, &mut tenants, None).await
}

/// The look after `waited` recorded its wait for a slot: a slot freed
/// between its refused claim and that write woke nobody. The waiters are
/// found as any wake-up finds them, oldest first, and then, if room is
/// left, `waited` itself is woken by its id: the indexes a wake-up reads
/// are eventually consistent and usually miss a wait written moments ago,
/// so without this the slot would idle until the next event or the sweep.
/// A wait `newly` begun also gets a look once the indexes show it
/// ([`look_once_settled`]), whatever this look finds. Failures are logged,
/// as for [`wake_if_room`].
pub async fn wake_after_wait<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    waited: &genace_core::domain::OperationId,
    newly: bool,
) {
    let planted = genace_core::planted::on(genace_core::planted::LOOK_AFTER_WAIT_BY_INDEX);
    if newly && !planted {
        look_once_settled(queue, waited).await;
    }
    let looked = async {
        let account = account_raised(store).await?;
        let room = room_of(&account).min(MAX_WAKE);
        if room == 0 {
            return Ok(());
        }
        let woken = wake_from(store, queue, &account, &mut None, None).await?;
        if woken < room && !planted {
            // A second later, not at once: whatever refuses it again (a
            // rival's claim took the slot) never spins.
            queue.enqueue(Queue::Wake, waited, 1).await.map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(())
    };
    if let Err(e) = looked.await {
        warn!(error = %e, operation_id = %waited, "the look after a wait failed; the sweep will");
    }
}

/// The account as a wake-up reads it, its learned limit raised first if
/// earned. A raise not saved (the account item busy) is the sweep's to
/// make; the wake-up goes on under the limit as read.
async fn account_raised<S: OperationStore>(store: &S) -> Result<genace_core::capacity::AccountCapacity, String> {
    let mut account = store.account().await.map_err(|e| e.to_string())?;
    if let Err(e) = raise_if_earned(store, &mut account).await {
        if genace_core::planted::on(genace_core::planted::RAISE_FAILURE_ABORTS_WAKE) {
            return Err(e);
        }
        warn!(error = %e, "the raised account limit was not saved");
    }
    Ok(account)
}

/// After an operator set one of `tenant`'s own limits: the tenant, if
/// parked, goes back to the waiting set (the limit may let it take a slot
/// now; if not, the next wake-up parks it again), and waiting operations
/// are woken if the account has room. Failures are logged: the sweep's
/// look at the parked set repairs a tenant left parked.
pub async fn wake_after_limit<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    tenant: &genace_core::domain::TenantId,
) {
    if let Err(e) = store.unpark(tenant.as_str()).await {
        warn!(error = %e, tenant = %tenant, "a tenant whose limit was set stays parked; the sweep will look");
    }
    wake_if_room_for(store, queue, tenant).await;
}

/// The slots a wake-up may fill under `account`: its free slots, or one
/// (a freed slot) when no limit of ours is known.
fn room_of(account: &genace_core::capacity::AccountCapacity) -> usize {
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
    // The parked set is looked at only while operations wait: a sweep of
    // an idle account reads nothing more.
    let (parked_waiting, moved_back) = if account.waiting > 0 {
        look_at_parked(store).await
    } else {
        (Some(0), None)
    };
    let mut tenants = None;
    match wake_from(store, queue, &account, &mut tenants, moved_back.as_ref()).await {
        Ok(woken) => {
            if let Some(parked) = parked_waiting {
                let stranded = Stranded {
                    account: &account,
                    parked,
                    woken,
                };
                rejoin_stranded(store, queue, &stranded, &mut tenants, metrics).await;
            }
        }
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
    stranded: &Stranded<'_>,
    tenants: &mut Option<Vec<Turn>>,
    metrics: &crate::ports::metrics::Metrics,
) {
    let Stranded { account, parked, woken } = *stranded;
    let Some(turns) = tenants.as_ref() else {
        return;
    };
    let in_set: i64 = turns.iter().map(|t| t.ledger.totals.waiting).sum();
    if turns.len() >= WAKE_CANDIDATES || in_set + parked >= account.waiting {
        return;
    }
    match store.rejoin_waiting_set(REJOIN_PAGES).await {
        Ok(0) => {}
        Ok(joined) => {
            warn!(joined, "tenants waiting outside the waiting set were put back in it");
            metrics.emit("WaitingSetRepaired", joined as f64, "Count", &[]);
            *tenants = None;
            if woken == 0
                && let Err(e) = wake_from(store, queue, account, tenants, None).await
            {
                warn!(error = %e, "waking the repaired waiters failed; the next sweep will");
            }
        }
        Err(e) => warn!(error = %e, "the waiting set could not be repaired; the next sweep tries again"),
    }
}

/// What the sweep read of the sets, for [`rejoin_stranded`].
#[derive(Clone, Copy)]
struct Stranded<'a> {
    account: &'a genace_core::capacity::AccountCapacity,
    /// The operations the parked set holds, read whole.
    parked: i64,
    /// Woken by this run's wake-up.
    woken: usize,
}

/// Enough jobs ended under a limit learned from 429s: one slot more.
/// Whether the limit changed (another writer may have changed it first).
async fn raise_if_earned<S: OperationStore>(
    store: &S,
    account: &mut genace_core::capacity::AccountCapacity,
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
/// read, for the caller to reuse. `hint`, a tenant just moved back to the
/// waiting set, is weighed with them as its ledger reads now (the index may
/// not show it yet).
async fn wake_from<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    account: &genace_core::capacity::AccountCapacity,
    tenants: &mut Option<Vec<Turn>>,
    hint: Option<&TenantId>,
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
    let mut read = waiting_tenants(store).await.map_err(|e| e.to_string())?;
    if let Some(tenant) = hint
        && !read.iter().any(|t| t.ledger.tenant_id == tenant.as_str())
    {
        let ledger = store.ledger(tenant).await.map_err(|e| e.to_string())?;
        if ledger.totals.waiting > 0 {
            read.push(Turn::of(ledger));
        }
    }
    let turns = tenants.insert(read);
    let mut looks = FITTING_LOOKS;
    let mut woken = take_turns(store, queue, turns, want, &mut looks).await?;
    // Tenants that cannot take a slot for their own limits (jobs in flight,
    // credits) are parked, out of every later wake-up's read until a write
    // frees their room; when they filled a whole read and slots are left,
    // the set is read again, so that they never hide the tenants behind
    // them.
    let mut any_aside = set_aside(store, turns).await;
    let mut seen: std::collections::BTreeSet<String> = turns.iter().map(|t| t.ledger.tenant_id.clone()).collect();
    let mut full_read = turns.len() >= WAKE_CANDIDATES;
    for _ in 1..WAKE_PASSES {
        if woken >= want || !full_read || !any_aside {
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
        woken += take_turns(store, queue, &mut more, want - woken, &mut looks).await?;
        any_aside = set_aside(store, &more).await;
    }
    if woken > 0 {
        info!(woken, room, "woke operations waiting for a slot");
    }
    Ok(woken)
}

/// Tenants under a spend limit whose orders one wake-up reads at most
/// (a query and up to [`MAX_WAKE`] records each): what a wake-up costs
/// does not grow with the tenants short of credits. One not read keeps its
/// place for the next.
const FITTING_LOOKS: usize = 8;

/// Parks the tenants of `turns` that took no slot for their own limits
/// ([`Turn::parks`]), and sends to the back those whose order read nothing
/// the ledger counts (the index lags). Whether any was set aside.
/// Best effort: one left in front only costs the next wake-up the same
/// look.
async fn set_aside<S: OperationStore>(store: &S, turns: &[Turn]) -> bool {
    let parks: Vec<TenantLedger> = turns.iter().filter(|t| t.parks()).map(|t| t.ledger.clone()).collect();
    let lagging: Vec<String> = turns
        .iter()
        .filter(|t| t.lags())
        .map(|t| t.ledger.tenant_id.clone())
        .collect();
    if !parks.is_empty() {
        match store.park(&parks).await {
            Ok(parked) => info!(parked, "tenants held back by their own limits parked"),
            Err(e) => {
                warn!(error = %e, "tenants held back by their own limits stay in the waiting set");
                return false;
            }
        }
    }
    if !lagging.is_empty()
        && let Err(e) = store.send_to_back(&lagging).await
    {
        warn!(error = %e, "tenants passed over stay in front of the waiting set");
        return false;
    }
    !parks.is_empty() || !lagging.is_empty()
}

/// Reads of the waiting set one wake-up makes at most, when the tenants
/// read could not take a slot.
const WAKE_PASSES: usize = 4;

/// Wakes up to `want` operations of `turns`, tenant by tenant in turn,
/// reading at most `looks` more orders under a spend limit.
async fn take_turns<S: OperationStore, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    turns: &mut [Turn],
    want: usize,
    looks: &mut usize,
) -> Result<usize, String> {
    let mut woken = 0;
    while woken < want {
        let Some(turn) = next_turn(turns) else { break };
        if !turn.fetched {
            // Each tenant's order is read once per call, so no operation is
            // woken twice by one call (the index may lag the count).
            turn.fetched = true;
            let tenant = TenantId::parse(&turn.ledger.tenant_id).map_err(|e| e.to_string())?;
            let order = match turn.ledger.headroom() {
                None => {
                    // Read without its records, the order may still show
                    // one claimed, cancelled or ended moments ago: each is
                    // read as it comes up, before a slot is spent on it.
                    turn.unread = true;
                    let read = i32::try_from(MAX_WAKE).unwrap_or(i32::MAX);
                    let ids = store.waiting(&tenant, read).await.map_err(|e| e.to_string())?;
                    Order {
                        read: ids.len(),
                        fit: ids,
                    }
                }
                Some(_) if *looks == 0 => {
                    turn.skipped = true;
                    continue;
                }
                Some(credits) => {
                    *looks -= 1;
                    fitting(store, &tenant, credits, want)
                        .await
                        .map_err(|e| e.to_string())?
                }
            };
            turn.read = order.read;
            turn.heads = order.fit;
            turn.heads.reverse();
        }
        let Some(id) = turn.heads.pop() else { continue };
        if turn.unread && !still_waits(store, &id).await {
            continue;
        }
        // The wake queue: never behind the fresh intents of a burst.
        queue.enqueue(Queue::Wake, &id, 0).await.map_err(|e| e.to_string())?;
        turn.taken += 1;
        woken += 1;
    }
    Ok(woken)
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
    account: &mut genace_core::capacity::AccountCapacity,
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
/// seen to take ([`genace_core::capacity::AccountCapacity::lowered_after_429`]).
/// Whether the account now holds the lesson (saved here, taught first by
/// another 429, or none to teach). A failure (the account item held by
/// transactions past every try) is logged and answers false: the account
/// still shows the room Genace refused, so no end of a job may come to
/// wake the refused operation, and the caller must look at it again.
pub async fn learn_from_429<S: OperationStore>(
    store: &S,
    account: &genace_core::capacity::AccountCapacity,
    metrics: &crate::ports::metrics::Metrics,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let Some(lesson) = account.lowered_after_429() else {
        return true;
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
            true
        }
        // Another 429 of the same burst taught it first.
        Ok(false) => true,
        Err(e) => {
            warn!(error = %e, "the lowered account limit was not saved");
            false
        }
    }
}
