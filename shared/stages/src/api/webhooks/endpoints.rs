//! Webhook endpoints that tenants manage themselves: create (up to
//! `WEBHOOK_MAX_ENDPOINTS`), list, read, update, delete, rotate the secret,
//! and read the attempt log.
//!
//! The service generates every secret ([`new_secret`]) and keeps it in the
//! secret store under the tenant's own folder
//! ([`endpoint_secret_name`]); the secret is shown once, in the answer that
//! created or rotated it, and appears nowhere else (not in the table, the
//! views, the events or the logs).
//!
//! A tenant's endpoints are one versioned document; every change re-reads
//! it and writes on the condition that nobody wrote in between, so two
//! creates at once cannot pass the limit together.

use crate::ports::Ports;
use serde_json::Value;
use tracing::{info, warn};

use crate::api::context::Api;
use crate::api::errors::EndpointError;
use crate::config::Config;
use crate::ports::clock::Clock;
use crate::ports::queue::WorkQueue;
use crate::ports::table::{StoreError, WebhookEndpoints};
use crate::ports::webhooks::{SecretVault, new_secret};
use genace_core::domain::TenantId;
use genace_core::requests::EndpointChange;
use genace_core::webhook::{AttemptStatus, EndpointSet, WebhookAttempt, WebhookEndpoint, endpoint_secret_name};

/// Tries of a change against concurrent ones before it gives up.
const TRIES: usize = 5;

/// Applies a create's or an update's change to `endpoint`, as `actor` at `now`.
fn apply(change: EndpointChange, endpoint: &mut WebhookEndpoint, now: chrono::DateTime<chrono::Utc>, actor: &str) {
    if let Some(url) = change.url {
        endpoint.url = url;
    }
    if let Some(description) = change.description {
        endpoint.description = description;
    }
    if let Some(events) = change.events {
        endpoint.events = events;
    }
    match change.enabled {
        Some(true) => {
            endpoint.disabled_at = None;
            endpoint.disabled_reason = None;
            endpoint.failing_since = None;
        }
        Some(false) if endpoint.disabled_at.is_none() => {
            endpoint.disabled_at = Some(now);
            endpoint.disabled_reason = Some(format!("disabled by {actor}"));
        }
        _ => {}
    }
    endpoint.updated_at = now;
    endpoint.updated_by = actor.to_owned();
}

/// An endpoint with its secret, in the one answer that shows the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithSecret {
    pub endpoint: WebhookEndpoint,
    pub secret: String,
}

/// A page of an endpoint's attempt log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptPage {
    pub attempts: Vec<WebhookAttempt>,
    /// Where the next page starts, while more may follow.
    pub next: Option<String>,
}

/// What a recovery queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Events sent to the endpoint again.
    pub queued: usize,
    /// Failed events whose body is kept no longer (past `WEBHOOK_LOG_DAYS`).
    pub missing: usize,
    /// Failed events found but not queued: past [`RECOVER_COPIES`]. The
    /// oldest are queued first; a later recovery sends the rest.
    pub left: usize,
}

/// The most log entries one recovery reads.
pub const RECOVER_SCAN: usize = 5_000;

/// The most copies one recovery queues: each is retried for about a day
/// against an endpoint that keeps failing, so what one call can put on the
/// queue every tenant shares is bounded.
pub const RECOVER_COPIES: usize = crate::config::DEFAULT_RECOVER_COPIES;

/// The most replays of one endpoint in a [`RECOVERY_WINDOW`]: each queues
/// a copy retried for about a day, so, with a recovery's
/// [`RECOVER_COPIES`], one endpoint puts at most 200 copies a window on
/// the queue every tenant shares.
pub const REPLAY_COPIES: u32 = 100;

/// How long a recovery holds its endpoint at most: as long as its copies
/// may be retried (13 receives over about 26 hours). Another call within
/// it is refused (409 recovery-running), so copies of one endpoint's
/// events never pile up on the queue while it keeps failing; the hold
/// lasts its whole window, whatever the endpoint answers meanwhile.
pub const RECOVERY_WINDOW: chrono::Duration = chrono::Duration::hours(27);

/// The endpoint `id` of a set being edited.
fn named<'s>(set: &'s mut EndpointSet, id: &str) -> Result<&'s mut WebhookEndpoint, EndpointError> {
    set.endpoints
        .iter_mut()
        .find(|e| e.id == id)
        .ok_or(EndpointError::NoSuchEndpoint)
}

/// One tenant's endpoints, as a caller allowed to manage them sees them.
pub struct Endpoints<'a, P: Ports> {
    pub(crate) store: &'a P::Store,
    pub(crate) queue: &'a P::Queue,
    pub(crate) vault: &'a dyn SecretVault,
    pub(crate) clock: &'a P::Clock,
    pub(crate) config: &'a Config,
    pub(crate) tenant: TenantId,
    pub(crate) actor: String,
}

impl<P: Ports> Endpoints<'_, P> {
    pub async fn list(&self) -> Result<Vec<WebhookEndpoint>, EndpointError> {
        Ok(self.store.endpoints(&self.tenant).await?.endpoints)
    }

    pub async fn get(&self, id: &str) -> Result<WebhookEndpoint, EndpointError> {
        let set = self.store.endpoints(&self.tenant).await?;
        set.get(id).cloned().ok_or(EndpointError::NoSuchEndpoint)
    }

    /// Creates an endpoint with a new secret. The secret is stored first,
    /// so a saved endpoint never names a secret that does not exist; a
    /// create refused for the limit stores nothing.
    pub async fn create(&self, change: EndpointChange) -> Result<WithSecret, EndpointError> {
        let id = format!("ep_{}", uuid::Uuid::new_v4().simple());
        let now = self.clock.now();
        let mut endpoint = WebhookEndpoint {
            id: id.clone(),
            url: String::new(),
            description: String::new(),
            events: Vec::new(),
            secret_id: endpoint_secret_name(&self.tenant, &id),
            secret_version: 0,
            created_at: now,
            updated_at: now,
            updated_by: self.actor.clone(),
            disabled_at: None,
            disabled_reason: None,
            failing_since: None,
            recovering_until: None,
            replays: None,
        };
        apply(change, &mut endpoint, now, &self.actor);
        let limit = self.config.webhook_max_endpoints;
        if self.store.endpoints(&self.tenant).await?.endpoints.len() >= limit {
            return Err(EndpointError::EndpointLimit { limit });
        }
        let secret = new_secret().map_err(EndpointError::Secrets)?;
        self.vault
            .store_secret(&endpoint.secret_id, &secret)
            .await
            .map_err(EndpointError::Secrets)?;
        let saved = self
            .change(|set| {
                if set.endpoints.len() >= limit {
                    return Err(EndpointError::EndpointLimit { limit });
                }
                set.endpoints.push(endpoint.clone());
                Ok(())
            })
            .await;
        if let Err(e) = saved {
            // Lost the race for the last place: the secret goes too.
            self.forget_secret(&endpoint.secret_id).await;
            return Err(e);
        }
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, "webhook endpoint created");
        Ok(WithSecret { endpoint, secret })
    }

    pub async fn update(&self, id: &str, change: EndpointChange) -> Result<WebhookEndpoint, EndpointError> {
        let now = self.clock.now();
        let set = self
            .change(|set| {
                apply(change.clone(), named(set, id)?, now, &self.actor);
                Ok(())
            })
            .await?;
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, "webhook endpoint updated");
        set.get(id).cloned().ok_or(EndpointError::NoSuchEndpoint)
    }

    /// Deletes the endpoint, then its secret. Events already queued for it
    /// are dropped when they find it gone.
    pub async fn delete(&self, id: &str) -> Result<(), EndpointError> {
        let mut secret_id = String::new();
        self.change(|set| {
            let at = set
                .endpoints
                .iter()
                .position(|e| e.id == id)
                .ok_or(EndpointError::NoSuchEndpoint)?;
            secret_id = set.endpoints.remove(at).secret_id;
            Ok(())
        })
        .await?;
        self.forget_secret(&secret_id).await;
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, "webhook endpoint deleted");
        Ok(())
    }

    /// Puts a new secret on the endpoint. The replaced one keeps signing
    /// beside it for `WEBHOOK_SECRET_OVERLAP_HOURS`.
    pub async fn rotate(&self, id: &str) -> Result<WithSecret, EndpointError> {
        let endpoint = self.get(id).await?;
        let secret = new_secret().map_err(EndpointError::Secrets)?;
        self.vault
            .store_secret(&endpoint.secret_id, &secret)
            .await
            .map_err(EndpointError::Secrets)?;
        let now = self.clock.now();
        let set = self
            .change(|set| {
                let endpoint = named(set, id)?;
                endpoint.secret_version += 1;
                endpoint.updated_at = now;
                endpoint.updated_by = self.actor.clone();
                Ok(())
            })
            .await?;
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, "webhook secret rotated");
        let endpoint = set.get(id).cloned().ok_or(EndpointError::NoSuchEndpoint)?;
        Ok(WithSecret { endpoint, secret })
    }

    /// A page of the endpoint's attempt log, newest first.
    pub async fn attempts(
        &self,
        id: &str,
        status: Option<AttemptStatus>,
        limit: usize,
        after: Option<&str>,
    ) -> Result<AttemptPage, EndpointError> {
        self.get(id).await?;
        let (attempts, next) = self
            .store
            .attempts(&self.tenant, id, status, limit, after, self.clock.now())
            .await?;
        Ok(AttemptPage { attempts, next })
    }

    /// Sends one kept event to the endpoint again, with its original id
    /// (`webhook-id`), so a receiver that has it already can drop it. The
    /// copy goes through the webhook queue like any other: signed with the
    /// endpoint's secret, retried, and logged.
    /// A disabled endpoint, or one that does not take the event's type,
    /// is refused with [`EndpointError::NotReplayable`]: the copy would be
    /// dropped unsent.
    pub async fn replay(&self, id: &str, event_id: &str) -> Result<(), EndpointError> {
        let endpoint = self.get(id).await?;
        let detail = self
            .store
            .kept_event(&self.tenant, event_id, self.clock.now())
            .await?
            .ok_or(EndpointError::NoSuchEvent)?;
        refuse_unsendable(&endpoint)?;
        let kind = serde_json::from_str::<Value>(&detail)
            .ok()
            .and_then(|d| d["type"].as_str().map(str::to_owned));
        if let Some(kind) = kind
            && !endpoint.wants(&kind)
        {
            return Err(EndpointError::NotReplayable(format!(
                "the endpoint does not take events of type {kind}"
            )));
        }
        let now = self.clock.now();
        self.change(|set| {
            let held = set
                .endpoints
                .iter_mut()
                .find(|e| e.id == id)
                .ok_or(EndpointError::NoSuchEndpoint)?;
            held.count_replay(now, REPLAY_COPIES, RECOVERY_WINDOW)
                .map_err(|until| EndpointError::ReplayLimit {
                    most: REPLAY_COPIES,
                    until,
                })
        })
        .await?;
        self.send_copies(vec![copy_of(id, &detail)?]).await?;
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, event_id, "webhook event replayed");
        Ok(())
    }

    /// Sends the endpoint again every event whose attempts since `since`
    /// all failed or were skipped while it was disabled (an event that got
    /// through on a retry is not failed), in
    /// the order they were first tried, leaving out the types it takes no
    /// longer. Reads at most [`RECOVER_SCAN`] log
    /// entries, and queues at most `webhook_recover_copies` copies (the
    /// oldest; [`RECOVER_COPIES`] unless the deployment says otherwise).
    pub async fn recover(&self, id: &str, since: chrono::DateTime<chrono::Utc>) -> Result<Recovered, EndpointError> {
        let endpoint = self.get(id).await?;
        refuse_unsendable(&endpoint)?;
        let now = self.clock.now();
        self.change(|set| {
            let held = set
                .endpoints
                .iter_mut()
                .find(|e| e.id == id)
                .ok_or(EndpointError::NoSuchEndpoint)?;
            if let Some(until) = held.recovering_until.filter(|until| *until > now) {
                return Err(EndpointError::RecoveryRunning { until });
            }
            held.recovering_until = Some(now + RECOVERY_WINDOW);
            Ok(())
        })
        .await?;
        let queued = self.queue_failed(&endpoint, since, now).await;
        if queued.is_err() {
            // Nothing (or part) was queued: another recovery may try again.
            let released = self
                .change(|set| {
                    if let Some(held) = set.endpoints.iter_mut().find(|e| e.id == id) {
                        held.recovering_until = None;
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = released {
                warn!(tenant = %self.tenant, endpoint = %id, error = %e, "a failed recovery still holds its endpoint");
            }
        }
        queued
    }

    /// The copies a recovery queues: see [`Self::recover`].
    async fn queue_failed(
        &self,
        endpoint: &WebhookEndpoint,
        since: chrono::DateTime<chrono::Utc>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Recovered, EndpointError> {
        let id = endpoint.id.as_str();
        let (mut failed, mut succeeded) = (Vec::<String>::new(), std::collections::BTreeSet::new());
        let (mut after, mut read) = (None::<String>, 0);
        'pages: loop {
            let (page, next) = self
                .store
                .attempts(&self.tenant, id, None, 100, after.as_deref(), now)
                .await?;
            for a in page {
                read += 1;
                if a.at < since || read > RECOVER_SCAN {
                    break 'pages;
                }
                if !endpoint.filter_takes(&a.event_type) {
                    // Of a type it takes no longer: a copy would be dropped.
                    continue;
                }
                if a.status.succeeded() {
                    succeeded.insert(a.event_id);
                } else if !failed.contains(&a.event_id) {
                    failed.push(a.event_id);
                }
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let mut done = Recovered {
            queued: 0,
            missing: 0,
            left: 0,
        };
        // The log is newest first; send the oldest first, in batches.
        let mut copies = Vec::new();
        for event_id in failed.iter().rev().filter(|e| !succeeded.contains(*e)) {
            if copies.len() >= self.config.webhook_recover_copies {
                done.left += 1;
                continue;
            }
            match self.store.kept_event(&self.tenant, event_id, now).await? {
                Some(detail) => copies.push(copy_of(id, &detail)?),
                None => done.missing += 1,
            }
        }
        done.queued = copies.len();
        self.send_copies(copies).await?;
        info!(actor = %self.actor, tenant = %self.tenant, endpoint = %id, queued = done.queued,
              missing = done.missing, left = done.left, "failed and skipped webhook events recovered");
        Ok(done)
    }

    async fn send_copies(&self, copies: Vec<String>) -> Result<(), EndpointError> {
        if copies.is_empty() {
            return Ok(());
        }
        self.queue
            .send_webhook_copies(copies)
            .await
            .map_err(|e| EndpointError::Store(StoreError::Service(format!("the webhook queue: {e}"))))
    }

    /// Applies `edit` to the stored set and writes it on the version read,
    /// again on a lost race; the set as written.
    async fn change(
        &self,
        mut edit: impl FnMut(&mut EndpointSet) -> Result<(), EndpointError>,
    ) -> Result<EndpointSet, EndpointError> {
        for _ in 0..TRIES {
            let mut set = self.store.endpoints(&self.tenant).await?;
            edit(&mut set)?;
            set.version += 1;
            match self.store.save_endpoints(&self.tenant, &set).await {
                Ok(()) => return Ok(set),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Service("the webhook endpoints kept changing under this change".into()).into())
    }

    async fn forget_secret(&self, name: &str) {
        if let Err(e) = self.vault.delete_secret(name).await {
            // Left behind, it signs nothing: no endpoint names it.
            warn!(tenant = %self.tenant, secret = name, error = %e, "a webhook secret could not be deleted");
        }
    }
}

/// A disabled endpoint is sent nothing, copies included: enable it first.
fn refuse_unsendable(endpoint: &WebhookEndpoint) -> Result<(), EndpointError> {
    match endpoint.disabled_at {
        Some(_) => Err(EndpointError::NotReplayable(
            "the endpoint is disabled; enable it first".into(),
        )),
        None => Ok(()),
    }
}

impl<P: Ports> Api<P> {
    /// `tenant`'s webhook endpoints, managed by `actor`. Who may manage
    /// them is decided by the caller (the edge reads the credentials).
    pub fn endpoints(&self, tenant: TenantId, actor: String) -> Endpoints<'_, P> {
        Endpoints {
            store: &self.store,
            queue: &self.queue,
            vault: self.vault.as_ref(),
            clock: &self.clock,
            config: &self.config,
            tenant,
            actor,
        }
    }
}

/// The webhook queue's message for a copy of kept event `detail` to
/// endpoint `id`.
fn copy_of(id: &str, detail: &str) -> Result<String, EndpointError> {
    let detail: Value = serde_json::from_str(detail).map_err(|e| StoreError::Decode(format!("a kept event: {e}")))?;
    Ok(serde_json::json!({"to": id, "detail": detail}).to_string())
}
