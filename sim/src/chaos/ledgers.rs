//! The tenant ledgers and the account through chaos: what each call costs
//! in requests (a wake-up's counted apart), and where it may be cut short.

use genace_core::domain::TenantId;
use genace_core::ledger::{Millicredits, TenantLedger};
use genace_stages::ports::table::{LedgerPage, StoreError, TenantLedgers};

use super::{Chaotic, port};

impl<T: TenantLedgers> TenantLedgers for Chaotic<T> {
    async fn account(&self) -> Result<genace_core::capacity::AccountCapacity, StoreError> {
        self.chaos.lock().account_reads += 1;
        port(&self.chaos, self.inner.account()).await
    }

    async fn account_shards(&self) -> Result<Vec<genace_core::capacity::AccountCapacity>, StoreError> {
        self.chaos.lock().account_reads += 1;
        port(&self.chaos, self.inner.account_shards()).await
    }

    async fn ledger(&self, tenant: &TenantId) -> Result<TenantLedger, StoreError> {
        port(&self.chaos, self.inner.ledger(tenant)).await
    }

    async fn ledgers(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        port(&self.chaos, self.inner.ledgers(limit, cursor)).await
    }

    async fn waiting_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        // DynamoDB reads the waiting set with one query per shard and one
        // BatchGetItem; a wake-up read the account before it.
        let shards = u64::from(genace_core::keys::WAITING_SET_SHARDS);
        self.chaos.request(shards);
        self.chaos.wake_request(shards + 2);
        self.chaos.lock().wake_ups += 1;
        self.chaos.waking();
        port(&self.chaos, self.inner.waiting_ledgers(limit)).await
    }

    async fn send_to_back(&self, tenants: &[String]) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.send_to_back(tenants)).await
    }

    async fn park(&self, as_read: &[TenantLedger]) -> Result<usize, StoreError> {
        // One conditional update per tenant.
        let tenants = u64::try_from(as_read.len()).unwrap_or(u64::MAX);
        self.chaos.request(tenants);
        self.chaos.wake_request(tenants);
        port(&self.chaos, self.inner.park(as_read)).await
    }

    async fn parked_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        // As the waiting set: one query per shard and one BatchGetItem.
        self.chaos.request(u64::from(genace_core::keys::WAITING_SET_SHARDS) + 1);
        port(&self.chaos, self.inner.parked_ledgers(limit)).await
    }

    async fn unpark(&self, tenant: &str) -> Result<bool, StoreError> {
        self.chaos.request(1);
        port(&self.chaos, self.inner.unpark(tenant)).await
    }

    async fn rejoin_waiting_set(&self, pages: usize) -> Result<usize, StoreError> {
        port(&self.chaos, self.inner.rejoin_waiting_set(pages)).await
    }

    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, StoreError> {
        port(&self.chaos, self.inner.set_spend_limit(tenant, limit)).await
    }

    async fn set_account_limit(
        &self,
        limit: Option<u32>,
    ) -> Result<genace_core::capacity::AccountCapacity, StoreError> {
        port(&self.chaos, self.inner.set_account_limit(limit)).await
    }

    async fn learn_account_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, StoreError> {
        port(
            &self.chaos,
            self.inner.learn_account_limit(seen, learned, raise_every, at),
        )
        .await
    }

    async fn set_max_in_flight(&self, tenant: &TenantId, limit: Option<u32>) -> Result<TenantLedger, StoreError> {
        port(&self.chaos, self.inner.set_max_in_flight(tenant, limit)).await
    }
}
