//! How the in-memory store writes as DynamoDB does under concurrency: a
//! plain write refused while an open transaction holds its item, and tried
//! again; a transaction's tries, each of which may be cancelled (a conflict
//! drawn or met, an item past its budget), open for a step when
//! transactions meet; and the items each write touches, as the write meter
//! names them.

use genace_core::ledger;
use genace_core::record::OperationRecord;

use super::contention::{TRANSACTION_UNITS_PER_ITEM, record_item};
use super::store::{MemoryStore, Tables};
use genace_stages::ports::table::{Applied, CONFLICT_TRIES, StoreError};

impl MemoryStore {
    /// A plain write to `items` (`write`, on the tables), refused while an
    /// open transaction holds one of them, as DynamoDB refuses it with
    /// `TransactionConflictException`, and tried again as the DynamoDB
    /// store does: [`CONFLICT_TRIES`] tries, yielding between them, then
    /// [`StoreError::Contention`].
    pub(super) async fn plain_write<T>(
        &self,
        items: &[String],
        mut write: impl FnMut(&mut Tables) -> T,
    ) -> Result<T, StoreError> {
        for attempt in 1..=CONFLICT_TRIES {
            {
                let mut table = self.lock();
                if !table.contention.refuses_plain_write(items) {
                    return Ok(write(&mut table));
                }
            }
            if attempt < CONFLICT_TRIES {
                Step::default().await;
            }
        }
        self.lock().contention.contended += 1;
        Err(StoreError::Contention)
    }

    /// A write of the record alone: refused while a transaction holds the
    /// record, tried again as the store tries a transaction, and charged
    /// one write unit when written.
    pub(super) async fn write_plainly(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
    ) -> Result<Applied, StoreError> {
        let item = [record_item(prev)];
        for attempt in 1..=CONFLICT_TRIES {
            if self.lock().contention.refuses_plain_write(&item) {
                if attempt < CONFLICT_TRIES {
                    Step::default().await;
                }
                continue;
            }
            let applied = self.apply_now(prev, next);
            if matches!(applied, Ok(Applied::Written)) {
                self.lock().contention.written(&item, 1, false);
            }
            return applied;
        }
        self.lock().contention.contended += 1;
        Err(StoreError::Contention)
    }

    /// A transaction's tries: each may be cancelled (a conflict, drawn or
    /// met, or an item past its budget); one that is not stays open for a
    /// step when transactions meet, then is written. Every try cancelled:
    /// [`StoreError::Contention`].
    pub(super) async fn transact(
        &self,
        items: &[String],
        prev: &OperationRecord,
        next: &OperationRecord,
    ) -> Result<Applied, StoreError> {
        for attempt in 1..=CONFLICT_TRIES {
            let begun = self.lock().contention.begin(items);
            let Ok(open) = begun else {
                if attempt < CONFLICT_TRIES {
                    Step::default().await;
                }
                continue;
            };
            let open = Open { store: self, open };
            if self.lock().contention.is_meeting() {
                Step::default().await;
            }
            drop(open);
            let applied = self.apply_now(prev, next);
            let admits = matches!(applied, Ok(Applied::Written))
                && ledger::reserves(prev, next)
                && ledger::share(next).in_flight > ledger::share(prev).in_flight;
            self.lock()
                .contention
                .written(items, TRANSACTION_UNITS_PER_ITEM, admits);
            return applied;
        }
        self.lock().contention.contended += 1;
        Err(StoreError::Contention)
    }
}

/// A transaction open until dropped: a handler stopped while it was open
/// (a crash, a timeout) leaves nothing open behind.
struct Open<'a> {
    store: &'a MemoryStore,
    open: u64,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.store.lock().contention.close(self.open);
    }
}

/// Pending once, and ready when polled again: a point where another
/// handler may run.
#[derive(Default)]
struct Step(bool);

impl std::future::Future for Step {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}
