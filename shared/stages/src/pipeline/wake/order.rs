//! A waiting tenant as a wake-up weighs it, and the read of its waiting
//! order: which of its operations fit the credits it has left.

use crate::ports::table::{OperationStore, StoreError};
use genace_core::domain::TenantId;
use genace_core::ledger::{self, TenantLedger};

/// Wake-ups sent per call at most, whatever the free slots: a call is cheap,
/// and the woken claims free or take slots one by one anyway.
pub const MAX_WAKE: usize = 25;

/// Waiting tenants a wake-up weighs against each other at most (those that
/// have waited longest): enough for [`MAX_WAKE`] turns with room to choose
/// the one with the fewest jobs in flight.
pub const WAKE_CANDIDATES: usize = 2 * MAX_WAKE;

/// What a read of a tenant's waiting order found: the operations that may
/// be woken, and how many it read.
pub(super) struct Order {
    pub(super) fit: Vec<genace_core::domain::OperationId>,
    pub(super) read: usize,
}

/// Of a tenant's waiting order under a spend limit, the first `want`
/// operations, in order, whose reservations fit together in `headroom`.
/// One that does not fit is passed over and keeps its place: it is the
/// first looked at by the next wake-up, which the write that frees its
/// credits sends. Reads at most [`MAX_WAKE`] of the order and one record
/// per operation read. A record written before waits recorded their
/// reservation counts as fitting (its claim decides, as it always did).
pub(super) async fn fitting<S: OperationStore>(
    store: &S,
    tenant: &TenantId,
    mut headroom: ledger::Millicredits,
    want: usize,
) -> Result<Order, StoreError> {
    let read = i32::try_from(MAX_WAKE).unwrap_or(i32::MAX);
    let order = store.waiting(tenant, read).await?;
    let mut fit = Vec::new();
    let mut still_waiting = 0;
    for id in &order {
        if fit.len() >= want || headroom <= genace_core::ledger::Millicredits::ZERO {
            break;
        }
        // Expiry does not matter here: a woken record that expired is
        // dropped by its dispatch.
        let Some(rec) = store.get(id, chrono::DateTime::<chrono::Utc>::MIN_UTC).await? else {
            continue;
        };
        // The index may lag: one claimed meanwhile holds its credits already.
        if crate::ports::table::wait_sort_key(&rec).is_none() {
            continue;
        }
        still_waiting += 1;
        let need = genace_core::ledger::reservation(&rec);
        if need <= headroom {
            headroom -= need;
            fit.push(id.clone());
        } else if genace_core::planted::on(genace_core::planted::WAKE_STOPS_AT_SHORT_HEAD) {
            break;
        }
    }
    // Only those that still wait count (the index may show some claimed
    // meanwhile).
    Ok(Order {
        fit,
        read: still_waiting,
    })
}

/// Whether the record of `id`, which a waiting order showed, still waits:
/// the index may lag a claim, a cancel or an end. A record that cannot be
/// read counts as waiting (its claim decides, as it always did).
pub(super) async fn still_waits<S: OperationStore>(store: &S, id: &genace_core::domain::OperationId) -> bool {
    match store.get(id, chrono::DateTime::<chrono::Utc>::MIN_UTC).await {
        Ok(Some(rec)) => crate::ports::table::wait_sort_key(&rec).is_some(),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(operation_id = %id, error = %e, "a waiting record could not be read; woken unread");
            true
        }
    }
}

/// A waiting tenant, and what this call has taken from its order.
pub(super) struct Turn {
    pub(super) ledger: TenantLedger,
    pub(super) heads: Vec<genace_core::domain::OperationId>,
    /// Whether this call came to its order (read, or `skipped`).
    pub(super) fetched: bool,
    /// Its order was not read: the call's looks were used up.
    pub(super) skipped: bool,
    /// How many of its order the read found still waiting.
    pub(super) read: usize,
    /// Whether its heads were read from the index alone (no spend limit):
    /// each record is read as it comes up ([`still_waits`]).
    pub(super) unread: bool,
    pub(super) taken: i64,
}

impl Turn {
    pub(super) fn of(ledger: TenantLedger) -> Self {
        Self {
            ledger,
            heads: Vec::new(),
            fetched: false,
            skipped: false,
            read: 0,
            unread: false,
            taken: 0,
        }
    }

    /// Whether it took no slot for its own limits, and so is parked: at
    /// its limit of jobs in flight, with no credits free, or with its order
    /// read whole (as many as its ledger counts, or a full read) and no
    /// operation in it that fits the credits left.
    pub(super) fn parks(&self) -> bool {
        let waits = self.taken == 0 && self.ledger.totals.waiting > 0;
        // As many still waiting as the ledger counts, or a full read of
        // them: entries the index still shows for operations claimed
        // meanwhile do not count.
        let read_whole = usize::try_from(self.ledger.totals.waiting).is_ok_and(|w| self.read >= w.min(MAX_WAKE));
        let nothing_fits = self.fetched && !self.skipped && self.heads.is_empty() && read_whole;
        waits && (!self.may_take_a_slot() || (nothing_fits && self.ledger.headroom().is_some()))
    }

    /// Whether its order was read and found nothing the ledger counts: the
    /// index lags the count, so it goes to the back rather than parked.
    pub(super) fn lags(&self) -> bool {
        self.taken == 0
            && self.ledger.totals.waiting > 0
            && self.fetched
            && !self.skipped
            && self.heads.is_empty()
            && !self.parks()
    }

    /// Whether the tenant may take one more slot: under its own limit of
    /// jobs in flight (it waits for its own jobs to end otherwise), with
    /// credits free (it waits for them to free otherwise; one with some
    /// room may still be short for its head: that claim waits again, and
    /// wakes nobody).
    pub(super) fn may_take_a_slot(&self) -> bool {
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
pub(super) async fn waiting_tenants<S: OperationStore>(store: &S) -> Result<Vec<Turn>, StoreError> {
    Ok(store
        .waiting_ledgers(WAKE_CANDIDATES)
        .await?
        .into_iter()
        .map(Turn::of)
        .collect())
}
