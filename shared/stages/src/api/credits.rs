//! The credits ledger as tenants and operators read it, and the spend limit
//! operators set. The counters themselves move only with record writes
//! (see [`crate::ports::table::OperationStore::apply`]).

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::{info, warn};

use crate::api::context::Api;
use crate::api::errors::{ListError, SettingsError};
use crate::api::operator::OperatorApi;
use crate::ports::table::LedgerPage;
use genace_core::domain::TenantId;
use genace_core::ledger::{self, Millicredits, TenantLedger};
use genace_core::record::OperationRecord;

impl<P: Ports> Api<P> {
    /// A tenant's totals and limit.
    pub async fn credits(&self, tenant: &TenantId) -> Result<TenantLedger, SettingsError> {
        Ok(self.store.ledger(tenant).await?)
    }

    /// True when the tenant's spend limit leaves less room than a claim of
    /// `rec` would reserve: dispatch will wait. Intake says so in the view
    /// of a new intent (and records it all the same). A ledger that cannot
    /// be read says nothing; the operation's own view tells the truth later.
    pub async fn expects_spend_hold(&self, rec: &OperationRecord) -> bool {
        let need = ledger::millis(self.config.policy.credit_estimate.for_media(rec.media_type));
        match self.store.ledger(&rec.tenant_id).await {
            Ok(l) => l.headroom().is_some_and(|room| room < need),
            Err(e) => {
                warn!(operation_id = %rec.operation_id, error = %e, "ledger unreadable; no spend outlook");
                false
            }
        }
    }
}

impl<P: Ports> OperatorApi<'_, P> {
    /// Every tenant's ledger, a page at a time; an operator limited to one
    /// tenant sees that tenant's only.
    pub async fn all_credits(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, ListError> {
        if let Some(own) = &self.op.tenant {
            return Ok(LedgerPage {
                ledgers: vec![self.api.store.ledger(own).await?],
                next: None,
            });
        }
        // The store's position, sealed like every list's cursor.
        let binding = crate::ports::cursor::binding("credits", &[]);
        let position = cursor.map(|c| crate::ports::cursor::open(c, &binding)).transpose()?;
        let mut page = self.api.store.ledgers(limit, position.as_deref()).await?;
        page.next = page.next.map(|p| crate::ports::cursor::seal(&p, &binding));
        Ok(page)
    }

    /// Sets or removes a tenant's spend limit (operators of every tenant
    /// only: [`op_may_set_limits`]), and wakes the waiting
    /// operations a raised limit may make room for.
    pub async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, SettingsError> {
        let op = self.op;
        op_may_set_limits(op)?;
        let ledger = self.api.store.set_spend_limit(tenant, limit).await?;
        info!(actor = %op.actor, tenant = %tenant, spend_limit_millicredits = ?limit, "spend limit set");
        // A raised (or removed) limit may make room for waiting operations.
        crate::pipeline::wake::wake_after_limit(&self.api.store, &self.api.queue, tenant).await;
        Ok(ledger)
    }

    /// Sets or removes a tenant's own limit of jobs in flight (operators of
    /// every tenant only: [`op_may_set_limits`]). A raised
    /// limit wakes the operations it makes room for; a lowered one admits
    /// nothing new until the tenant's jobs in flight fall under it, and
    /// touches nothing running.
    pub async fn set_max_in_flight(
        &self,
        tenant: &TenantId,
        limit: Option<u32>,
    ) -> Result<TenantLedger, SettingsError> {
        let op = self.op;
        op_may_set_limits(op)?;
        let ledger = self.api.store.set_max_in_flight(tenant, limit).await?;
        info!(actor = %op.actor, tenant = %tenant, max_in_flight = ?limit, "tenant's limit of jobs in flight set");
        crate::pipeline::wake::wake_after_limit(&self.api.store, &self.api.queue, tenant).await;
        Ok(ledger)
    }
}

/// A tenant's limits are the platform's, not the tenant's: they bound what
/// the platform spends on the tenant's behalf and the share of the one
/// Genace account it takes from the others. So an operator scoped to one
/// tenant, its own included, may read them but not set them; the refusal
/// does not depend on the tenant named, so it tells nothing of it.
fn op_may_set_limits(op: &crate::api::operator::Operator) -> Result<(), SettingsError> {
    match op.tenant {
        Some(_) => Err(SettingsError::PlatformLimit),
        None => Ok(()),
    }
}
