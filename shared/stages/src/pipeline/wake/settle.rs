//! The one look at a wait once the wait indexes show it
//! (docs/decisions/0006).

use genace_core::messages::Queue;
use tracing::warn;

use crate::ports::queue::WorkQueue;

/// Seconds after a wait is written by which the wait indexes (eventually
/// consistent; DynamoDB's usually catch up within a second) show it.
pub const INDEX_SETTLE_SECONDS: u32 = 5;

/// One look once the wait indexes show the wait `waited` just began: a
/// slot or credits freed before then woke whoever the indexes showed,
/// never it, and without this look the slot would idle until the sweep.
/// The look ([`genace_core::messages::WorkMessage::look`]) reads the
/// account, and dispatches the waiter only when a slot is free. One per
/// wait begun. A failure is logged: the sweep repairs the slot.
pub async fn look_once_settled<Q: WorkQueue>(queue: &Q, waited: &genace_core::domain::OperationId) {
    let look = genace_core::messages::WorkMessage::look_at(waited.clone());
    if let Err(e) = queue.send_work(Queue::Dispatch, &look, INDEX_SETTLE_SECONDS).await {
        warn!(error = %e, operation_id = %waited, "the look once the indexes show a wait was not queued; the sweep will");
    }
}
