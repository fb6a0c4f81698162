//! The account's capacity as operators see it: the limit in force, what
//! is in flight and waiting, each tenant's share, and the operator's
//! limit of the whole account's jobs in flight.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::info;

use crate::api::errors::SettingsError;
use crate::api::operator::OperatorApi;
use crate::pipeline::wake::{oldest_wait, wake_if_room};
use crate::ports::clock::Clock;
use crate::ports::table::StoreError;
use genace_core::ledger::TenantLedger;

/// One tenant's share of the account, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantCapacity {
    pub tenant_id: String,
    /// The tenant's own limit of jobs in flight, if it has one.
    pub max_in_flight: Option<u32>,
    pub in_flight: i64,
    pub waiting: i64,
    /// Since when its oldest waiting operation waits.
    pub oldest_wait_since: Option<chrono::DateTime<chrono::Utc>>,
}

/// The account's capacity: the limit, what is in flight and waiting, and
/// every tenant with a job in flight or an operation waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityReport {
    /// The most jobs admitted at once: the operator's limit, else the
    /// deployment's; none: no limit.
    pub max_in_flight: Option<u32>,
    /// `GENACE_MAX_IN_FLIGHT`, the deployment's limit.
    pub configured_max_in_flight: Option<u32>,
    /// Whether an operator's limit replaces the deployment's.
    pub set_at_run_time: bool,
    /// The limit claims are admitted under now: `max_in_flight`, or lower
    /// when Genace's 429s taught a lower one.
    pub effective_max_in_flight: Option<u32>,
    /// The account's counts over every tenant; none for an operator scoped
    /// to one tenant, who sees that tenant only.
    pub in_flight: Option<i64>,
    pub waiting: Option<i64>,
    pub tenants: Vec<TenantCapacity>,
    /// Whether `tenants` names every tenant with a job in flight, an
    /// operation waiting or a limit of its own. A report reads at most
    /// [`REPORT_PAGES`] pages of ledgers; past that, only the tenants that
    /// wait longest (from the waiting set) are sure to be there, and the
    /// rest are asked for one by one.
    pub tenants_complete: bool,
}

/// Ledger pages a report reads at most (100 tenants each).
pub const REPORT_PAGES: usize = 20;

impl<P: Ports> OperatorApi<'_, P> {
    /// The account's capacity as this operator may see it.
    pub async fn capacity(&self) -> Result<CapacityReport, SettingsError> {
        let account = self.api.store.account().await?;
        let (ledgers, whole, complete) = match &self.op.tenant {
            Some(own) => (vec![self.api.store.ledger(own).await?], false, true),
            None => {
                let (ledgers, complete) = self.every_ledger().await?;
                (ledgers, true, complete)
            }
        };
        let mut tenants = Vec::new();
        let shown = |l: &TenantLedger| l.totals.in_flight != 0 || l.totals.waiting != 0 || l.max_in_flight.is_some();
        for l in ledgers.into_iter().filter(shown) {
            let oldest_wait_since = if l.totals.waiting > 0 {
                self.oldest_wait(&l.tenant_id).await?
            } else {
                None
            };
            tenants.push(TenantCapacity {
                max_in_flight: l.max_in_flight,
                tenant_id: l.tenant_id,
                in_flight: l.totals.in_flight,
                waiting: l.totals.waiting,
                oldest_wait_since,
            });
        }
        Ok(CapacityReport {
            max_in_flight: account.max_in_flight(),
            configured_max_in_flight: account.configured,
            set_at_run_time: account.set_limit.is_some(),
            effective_max_in_flight: account.limit(),
            in_flight: whole.then_some(account.in_flight),
            waiting: whole.then_some(account.waiting),
            tenants,
            tenants_complete: complete,
        })
    }

    /// Sets (or, with `None`, removes) the operator's limit of the whole
    /// account's jobs in flight, which replaces `GENACE_MAX_IN_FLIGHT`
    /// while set and forgets any limit learned from 429s. A raised limit
    /// wakes the operations it makes room for; a lowered one admits nothing
    /// new until the jobs in flight fall under it, and touches nothing
    /// running. Only an operator not scoped to one tenant may.
    pub async fn set_account_limit(&self, limit: Option<u32>) -> Result<CapacityReport, SettingsError> {
        if self.op.tenant.is_some() {
            return Err(SettingsError::AccountWide);
        }
        self.api.store.set_account_limit(limit).await?;
        info!(actor = %self.op.actor, max_in_flight = ?limit, "account's limit of jobs in flight set");
        wake_if_room(&self.api.store, &self.api.queue).await;
        self.capacity().await
    }

    /// The tenants' ledgers a report shows: the ledger listing, up to
    /// [`REPORT_PAGES`] pages, and the tenants that wait longest whether
    /// the listing reached them or not. Whether the listing was read whole.
    async fn every_ledger(&self) -> Result<(Vec<TenantLedger>, bool), StoreError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let mut complete = false;
        for _ in 0..REPORT_PAGES {
            let page = self.api.store.ledgers(100, cursor.as_deref()).await?;
            all.extend(page.ledgers);
            match page.next {
                Some(next) => cursor = Some(next),
                None => {
                    complete = true;
                    break;
                }
            }
        }
        if !complete {
            // Best effort: a report without them is still a report, and
            // says it is partial.
            let waiting = match self
                .api
                .store
                .waiting_ledgers(crate::ports::table::WAITING_READ_MAX)
                .await
            {
                Ok(waiting) => waiting,
                Err(e) => {
                    tracing::warn!(error = %e, "the waiting set could not be read for a partial report");
                    Vec::new()
                }
            };
            for l in waiting {
                if !all.iter().any(|seen| seen.tenant_id == l.tenant_id) {
                    all.push(l);
                }
            }
        }
        Ok((all, complete))
    }

    async fn oldest_wait(&self, tenant: &str) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        oldest_wait(&self.api.store, tenant, self.api.clock.now()).await
    }
}
