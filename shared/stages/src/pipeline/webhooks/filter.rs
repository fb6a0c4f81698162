//! The events pipe's filter for webhooks: the bus carries every lifecycle
//! event, and its webhook rule queues only the ones marked here: those a
//! receiver of the tenant takes, and every event of a tenant with a webhook
//! endpoint, enabled or not, whose log keeps them. A tenant with no receiver
//! costs the webhook leg (the queue, the function and its reads) nothing.

use std::collections::BTreeSet;

use genace_core::domain::TenantId;
use genace_core::events::LifecycleEvent;
use tracing::warn;

use crate::ports::metrics::Metrics;
use crate::ports::table::WebhookEndpoints;

/// Marks each event that the webhook function must see
/// ([`genace_core::webhook::Receivers::must_see`]; one read of
/// the tenants' receivers for the whole batch). When the receivers cannot
/// be read, every event is marked, as before the filter: the webhook
/// function reads them again, so nothing is lost, it only costs.
pub async fn mark_for_webhooks<S: WebhookEndpoints>(store: &S, metrics: &Metrics, events: &mut [LifecycleEvent]) {
    let tenants: Vec<TenantId> = events
        .iter()
        .map(|e| e.tenant_id.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|t| TenantId::parse(t).ok())
        .collect();
    if tenants.is_empty() {
        return;
    }
    match store.receivers(&tenants).await {
        Ok(receivers) => {
            for event in events.iter_mut() {
                event.webhooks = TenantId::parse(&event.tenant_id)
                    .ok()
                    .and_then(|t| receivers.get(&t))
                    .is_some_and(|r| r.must_see(event.kind.as_str()));
            }
        }
        Err(e) => {
            warn!(error = %e, "receivers unread; every event of the batch goes to the webhook queue");
            metrics.count("WebhookFilterUnread", &[]);
            for event in events.iter_mut() {
                event.webhooks = true;
            }
        }
    }
}
