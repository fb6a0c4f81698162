//! The parked set: tenants whose waiting operations cannot take a slot
//! for their own limits (credits, jobs in flight). Wake-ups do not read
//! them; the counters' own transactions move a tenant back when a write
//! frees its room, and the sweep looks at the longest parked in turn.

use tracing::{info, warn};

use super::order::{Turn, WAKE_CANDIDATES, fitting};
use crate::ports::table::{OperationStore, StoreError};
use genace_core::domain::TenantId;
use genace_core::ledger::TenantLedger;

/// Parked tenants one sweep run looks at: the longest parked.
pub(super) const PARKED_LOOKS: usize = 4;

/// The sweep's look at the parked set, for what a write that frees a
/// tenant's room cannot have moved back (a wait recorded just after the
/// write, an order read while its index lagged): of the [`PARKED_LOOKS`]
/// parked longest, each one whose own limits now let an operation of its
/// order take a slot goes back to the waiting set (the wake-up after it
/// reads it), and the others to the back of the parked set, so that every
/// parked tenant is looked at in turn. Costs at most a read of the set and,
/// per tenant looked at, a query, `MAX_WAKE` records and one write.
/// Returns the operations the parked set holds when it was read whole
/// (fewer tenants than a read returns), else None; and the first tenant
/// moved back, for the wake-up after it to weigh (the index it reads may
/// not show the move yet). Failures are logged.
pub(super) async fn look_at_parked<S: OperationStore>(store: &S) -> (Option<i64>, Option<TenantId>) {
    let parked = match store.parked_ledgers(WAKE_CANDIDATES).await {
        Ok(parked) => parked,
        Err(e) => {
            warn!(error = %e, "the parked set is unreadable; the next sweep looks again");
            return (None, None);
        }
    };
    let mut rotated = Vec::new();
    let mut moved_back = None;
    for ledger in parked.iter().take(PARKED_LOOKS) {
        match may_take_a_slot_now(store, ledger).await {
            Ok(true) => match store.unpark(&ledger.tenant_id).await {
                Ok(_) => {
                    info!(tenant = %ledger.tenant_id, "a parked tenant may take a slot again");
                    moved_back = moved_back.or_else(|| TenantId::parse(&ledger.tenant_id).ok());
                }
                Err(e) => warn!(tenant = %ledger.tenant_id, error = %e, "a parked tenant stays parked"),
            },
            Ok(false) => rotated.push(ledger.tenant_id.clone()),
            Err(e) => warn!(tenant = %ledger.tenant_id, error = %e, "a parked tenant's order is unreadable"),
        }
    }
    if let Err(e) = store.send_to_back(&rotated).await {
        warn!(error = %e, "parked tenants stay at the front of the parked set");
    }
    let whole = (parked.len() < WAKE_CANDIDATES).then(|| parked.iter().map(|l| l.totals.waiting).sum());
    (whole, moved_back)
}

/// Whether an operation of a parked tenant's order, `ledger` as read, fits
/// its own limits now.
pub(super) async fn may_take_a_slot_now<S: OperationStore>(
    store: &S,
    ledger: &TenantLedger,
) -> Result<bool, StoreError> {
    let turn = Turn::of(ledger.clone());
    if !turn.may_take_a_slot() {
        return Ok(false);
    }
    let Some(credits) = ledger.headroom() else {
        return Ok(true);
    };
    let Ok(tenant) = TenantId::parse(&ledger.tenant_id) else {
        return Ok(false);
    };
    Ok(!fitting(store, &tenant, credits, 1).await?.fit.is_empty())
}

/// The look after `waited` recorded its wait for credits: a write that
/// freed them between its refused claim and that write woke nobody (its
/// wake-up read the order before the wait was on it, and a tenant with
/// nothing waiting may have been dropped from the waiting set meanwhile,
/// so the wait parked it). One read of the tenant's ledger; when the
/// credits now fit the reservation, the tenant goes back to the waiting
/// set and `waited` is woken by its id, a second later (a claim that takes
/// the credits first only sends it back to waiting). Failures are logged:
/// the sweep's look at the parked set repairs what this misses.
pub async fn wake_after_credit_wait<S: OperationStore, Q: crate::ports::queue::WorkQueue>(
    store: &S,
    queue: &Q,
    waited: &genace_core::record::OperationRecord,
    newly: bool,
) {
    let looked = async {
        let ledger = store.ledger(&waited.tenant_id).await.map_err(|e| e.to_string())?;
        let need = genace_core::ledger::reservation(waited);
        let fits = ledger.headroom().is_none_or(|room| need <= room);
        if !fits || !Turn::of(ledger.clone()).may_take_a_slot() {
            // The end of one of its tenant's jobs frees credits: if it
            // comes before the indexes show this wait, its wake-up misses
            // it, so a wait begun while they run gets one look once they
            // do. A tenant with none running waits for an operator or a
            // top-up, and costs no look.
            if newly
                && ledger.totals.in_flight > 0
                && !genace_core::planted::on(genace_core::planted::CREDIT_WAIT_UNSETTLED)
            {
                super::settle::look_once_settled(queue, &waited.operation_id).await;
            }
            return Ok::<_, String>(());
        }
        store
            .unpark(waited.tenant_id.as_str())
            .await
            .map_err(|e| e.to_string())?;
        let id = &waited.operation_id;
        queue
            .enqueue(genace_core::messages::Queue::Wake, id, 1)
            .await
            .map_err(|e| e.to_string())
    };
    if let Err(e) = looked.await {
        warn!(error = %e, operation_id = %waited.operation_id, "the look after a wait for credits failed; the sweep will");
    }
}
