//! What views and gauges read of the waiting: an operation's place in
//! its tenant's order, and since when the longest waiting has waited.

use tracing::warn;

use super::order::{Turn, waiting_tenants};
use crate::ports::table::{OperationStore, StoreError};
use genace_core::domain::TenantId;
use genace_core::record::OperationRecord;

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
pub(super) const OLDEST_WAIT_HEADS: usize = 8;

/// Since when the longest of the waiting tenants' heads waits, the tenants
/// as `wake` read them, else read now. Failures are logged.
pub(super) async fn oldest_wait_of<S: OperationStore>(
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
