//! Per-tenant webhooks: each lifecycle event on the bus, for a tenant that
//! configured a webhook, is POSTed to the tenant's URL, signed with an HMAC
//! secret the operator keeps in Secrets Manager.
//!
//! The bus's rule puts every event on the webhook queue; this stage consumes
//! it. A receiver that fails (no answer, or anything but 2xx) fails the
//! message, which is hidden for a growing time ([`RetrySchedule`](crate::config::RetrySchedule)) and then
//! received again, until the queue's receive limit sends it to the
//! dead-letter queue.
//!
//! Signing follows the Standard Webhooks specification, so receivers verify
//! with its libraries: `webhook-id` (the event id, the same on every retry;
//! receivers deduplicate on it), `webhook-timestamp` (unix seconds) and
//! `webhook-signature`: `v1,<base64 HMAC-SHA256>` over
//! `<id>.<timestamp>.<body>`, once per live key, separated by spaces. A
//! `whsec_` secret's key is the base64 after the prefix. During a rotation's
//! overlap the secret store gives the old key too, so receivers that still
//! hold it keep verifying.

use serde_json::Value;
use tracing::{info, warn};

use crate::config::RetrySchedule;
use crate::pipeline::stage::{Stage, StageError};
use crate::pipeline::webhooks::signature::signature;
use crate::ports::clock::{Clock, SystemClock};
use crate::ports::metrics::Metrics;
use crate::ports::table::{OperationRecords, WebhookEndpoints, WebhookSettings};
use crate::ports::webhooks::{PostError, SecretStore, WebhookQueue, WebhookSender};
use genace_core::domain::TenantId;
use genace_core::webhook::{
    AttemptStatus, ENDPOINT_DISABLED, WebhookAttempt, WebhookConfig, WebhookEndpoint, secret_belongs_to,
    tenant_secret_prefix,
};

/// What became of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Webhooked {
    /// The receiver answered 2xx.
    Sent(u16),
    /// The tenant has no webhook and no endpoint (or the endpoint a copy
    /// was for is gone or disabled).
    NoWebhook,
    /// None of the tenant's receivers takes this type.
    NotSubscribed,
    /// More than one receiver takes it: one copy each was queued.
    FannedOut(usize),
    /// The event can never be sent as configured (a URL the policy
    /// refuses, a secret outside the tenant's prefix): it went to the
    /// dead-letter queue at once.
    DeadLettered(String),
}

/// `to` of a copy for the tenant's operator-set webhook.
pub const TENANT_WEBHOOK: &str = "webhook";

/// One receiver of a tenant's events.
#[derive(Debug, Clone)]
enum Receiver {
    /// The webhook an operator set for the tenant.
    Tenant(WebhookConfig),
    /// One of the endpoints the tenant manages.
    Endpoint(WebhookEndpoint),
}

impl Receiver {
    fn url(&self) -> &str {
        match self {
            Receiver::Tenant(c) => &c.url,
            Receiver::Endpoint(e) => &e.url,
        }
    }

    /// The version of the secret the receiver names: an endpoint's moves
    /// with each rotation; a tenant's webhook secret is the operator's.
    fn secret_version(&self) -> u32 {
        match self {
            Receiver::Tenant(_) => 0,
            Receiver::Endpoint(e) => e.secret_version,
        }
    }

    fn secret_id(&self) -> &str {
        match self {
            Receiver::Tenant(c) => &c.secret_id,
            Receiver::Endpoint(e) => &e.secret_id,
        }
    }

    /// What a copy's `to` says.
    fn to(&self) -> &str {
        match self {
            Receiver::Tenant(_) => TENANT_WEBHOOK,
            Receiver::Endpoint(e) => &e.id,
        }
    }
}

pub struct WebhookStage<S, K, W, D, C = SystemClock> {
    pub store: S,
    pub secrets: K,
    pub sender: W,
    pub queue: D,
    pub clock: C,
    /// When a failed POST is tried again.
    pub retry: RetrySchedule,
    /// How long each entry of an endpoint's attempt log is kept.
    pub log_for: chrono::Duration,
    /// How long an endpoint may fail without a success before it is disabled.
    pub disable_after: chrono::Duration,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
    /// The events pipe's seal: with one, an operation's event is signed,
    /// kept or copied only when it holds it ([`EventSeal`]).
    pub seal: Option<crate::pipeline::webhooks::seal::EventSeal>,
}

impl<S, K, W, D, C> Stage for WebhookStage<S, K, W, D, C>
where
    S: OperationRecords + WebhookSettings + WebhookEndpoints,
    K: SecretStore,
    W: WebhookSender,
    D: WebhookQueue,
    C: Clock,
{
    /// A bus event as the rule puts it on the queue (its `detail` is the
    /// lifecycle event), or a copy of one for one receiver: `{"to":
    /// <endpoint id or "webhook">, "detail": ...}`.
    type Message = Value;
    type Outcome = Webhooked;
    const NAME: &'static str = "webhook";

    async fn handle(&self, message: Value) -> Result<Webhooked, StageError> {
        self.handle_receipt(message, 1).await
    }

    async fn handle_receipt(&self, mut message: Value, receives: u32) -> Result<Webhooked, StageError> {
        // The pipe's mark for the bus's rule and the trace id are not part
        // of the event.
        if let Some(d) = message.get_mut("detail").and_then(Value::as_object_mut) {
            for member in genace_core::events::BUS_MEMBERS {
                d.remove(member);
            }
        }
        let detail = &message["detail"];
        let (Some(tenant), Some(kind), Some(id)) = (
            detail["tenant_id"].as_str(),
            detail["type"].as_str(),
            detail["id"].as_str(),
        ) else {
            return Err(StageError::Malformed(
                "a bus event without a lifecycle event in its detail".into(),
            ));
        };
        let tenant_id = TenantId::parse(tenant)
            .map_err(|_| StageError::Malformed(format!("tenant {tenant:?} is not a tenant id")))?;
        let config = self.store.webhook(&tenant_id).await?;
        let endpoints = self.store.endpoints(&tenant_id).await?.endpoints;
        let configured = config.is_some() || !endpoints.is_empty();
        let to = message.get("to").and_then(Value::as_str);
        // The webhook function announces a disabled endpoint only as
        // copies for the others: one off the bus is forged.
        if kind == ENDPOINT_DISABLED && to.is_none() {
            let why = "an endpoint.disabled event comes only as a copy for one endpoint".to_owned();
            return self.give_up(&message, tenant, id, "unverified", why).await;
        }
        // An event off the bus, for a tenant with endpoints, is kept for
        // replay, and only once the table is seen to have committed it: a
        // forged one is dead-lettered with nothing kept.
        let keeps = !endpoints.is_empty() && to.is_none();
        if keeps {
            if let Err(why) = self.verified(kind, detail, &tenant_id, &endpoints).await? {
                return self.give_up(&message, tenant, id, "unverified", why).await;
            }
            self.keep(&tenant_id, id, detail).await;
        }
        self.log_skipped(&endpoints, to, &tenant_id, kind, detail).await?;
        let mut receivers = receivers_of(config, &endpoints, kind);
        if let Some(to) = message.get("to").and_then(Value::as_str) {
            receivers.retain(|r| r.to() == to);
            if receivers.is_empty() {
                // Deleted or disabled since the copy was queued.
                return Ok(Webhooked::NoWebhook);
            }
        }
        match receivers.as_slice() {
            [] if configured => Ok(Webhooked::NotSubscribed),
            [] => Ok(Webhooked::NoWebhook),
            [receiver] => {
                // Sign only what the table committed: the bus's policy admits only
                // the pipe, and this check holds even if that policy is changed.
                // (An event kept above was checked there.)
                if !keeps && let Err(why) = self.verified(kind, detail, &tenant_id, &endpoints).await? {
                    return self.give_up(&message, tenant, id, "unverified", why).await;
                }
                self.send(&message, &tenant_id, receiver, receives).await
            }
            many => {
                let bodies: Vec<String> = many
                    .iter()
                    .map(|r| serde_json::json!({"to": r.to(), "detail": detail}).to_string())
                    .collect();
                self.queue.fan_out(bodies).await.map_err(StageError::Remote)?;
                Ok(Webhooked::FannedOut(many.len()))
            }
        }
    }

    /// A receiver or secret that failed is given time: the event waits
    /// longer after each failure. Anything else keeps the queue's timeout.
    fn retry_after(&self, error: &StageError, receives: u32) -> Option<u32> {
        matches!(error, StageError::Remote(_)).then(|| self.retry.after(receives))
    }
}

impl<S, K, W, D, C> WebhookStage<S, K, W, D, C>
where
    S: OperationRecords + WebhookEndpoints,
    K: SecretStore,
    W: WebhookSender,
    D: WebhookQueue,
    C: Clock,
{
    /// POSTs the event to one receiver, signed with its live secrets, and
    /// logs the attempt for an endpoint.
    async fn send(
        &self,
        message: &Value,
        tenant_id: &TenantId,
        receiver: &Receiver,
        receives: u32,
    ) -> Result<Webhooked, StageError> {
        let detail = &message["detail"];
        let (tenant, kind, id) = (
            tenant_id.as_str(),
            detail["type"].as_str().unwrap_or_default(),
            detail["id"].as_str().unwrap_or_default(),
        );
        // Saved before the prefix rule, or written around the API: never
        // sign with a secret outside the tenant's own folder.
        if !secret_belongs_to(receiver.secret_id(), tenant_id) {
            let why = format!(
                "the webhook secret {} is not under {}",
                receiver.secret_id(),
                tenant_secret_prefix(tenant_id)
            );
            return self.give_up(message, tenant, id, "secret", why).await;
        }
        let secrets = self
            .secrets
            .signing_secrets(receiver.secret_id(), receiver.secret_version())
            .await
            .map_err(StageError::Remote)?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| StageError::Remote(format!("the webhook secret {} does not exist", receiver.secret_id())))?;
        // The seal is the bus's, not the event's.
        let mut shown = detail.clone();
        if let Some(members) = shown.as_object_mut() {
            members.remove(genace_core::events::SEAL_MEMBER);
        }
        let body = shown.to_string();
        let now = self.clock.now();
        let timestamp = now.timestamp();
        let headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("webhook-id".to_owned(), id.to_owned()),
            ("webhook-timestamp".to_owned(), timestamp.to_string()),
            (
                "webhook-signature".to_owned(),
                signature(&secrets, id, timestamp, &body),
            ),
            ("genace-event-type".to_owned(), kind.to_owned()),
        ];
        let started = std::time::Instant::now();
        let posted = self.sender.post(receiver.url(), headers, body).await;
        if let Receiver::Endpoint(endpoint) = receiver {
            let latency = started.elapsed();
            self.log_attempt(endpoint, detail, &posted, now, receives, latency)
                .await;
            let ok = matches!(posted, Ok(code) if (200..300).contains(&code));
            self.track(tenant_id, endpoint, ok, now).await?;
        }
        match posted {
            Ok(status) if (200..300).contains(&status) => {
                info!(tenant, event_id = id, to = receiver.to(), status, "webhook sent");
                Ok(Webhooked::Sent(status))
            }
            Ok(status) => {
                warn!(
                    tenant,
                    event_id = id,
                    to = receiver.to(),
                    status,
                    "webhook refused; the event is retried"
                );
                Err(StageError::Remote(format!("the receiver answered {status}")))
            }
            Err(PostError::Refused(why)) => self.give_up(message, tenant, id, "url", why).await,
            Err(PostError::Failed(e)) => {
                warn!(tenant, event_id = id, to = receiver.to(), error = %e, "webhook not taken by its receiver; the event is retried");
                Err(StageError::Remote(e))
            }
        }
    }
}

impl<S: WebhookEndpoints, K, W, D: WebhookQueue, C: Clock> WebhookStage<S, K, W, D, C> {
    /// Follows an endpoint's health, writing only when it changes: the
    /// first failure after a success starts `failing_since`, a success
    /// clears it, and a failure `disable_after` past it disables the
    /// endpoint and tells the tenant's other enabled endpoints. A
    /// recovery's hold is not the health's to end: a receiver answers
    /// success to what it likes, and a hold it could end would let one
    /// tenant queue copy after copy of the events it fails.
    async fn track(
        &self,
        tenant: &TenantId,
        seen: &WebhookEndpoint,
        ok: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StageError> {
        let wanted = |e: &WebhookEndpoint| match (ok, e.failing_since) {
            (true, Some(_)) | (false, None) => true,
            (false, Some(since)) => e.disabled_at.is_none() && now - since >= self.disable_after,
            (true, None) => false,
        };
        if !wanted(seen) {
            return Ok(());
        }
        for _ in 0..5 {
            let mut set = self.store.endpoints(tenant).await?;
            let Some(e) = set.endpoints.iter_mut().find(|e| e.id == seen.id) else {
                return Ok(());
            };
            if !wanted(e) {
                return Ok(());
            }
            let disabling = match (ok, e.failing_since) {
                (true, _) => {
                    e.failing_since = None;
                    false
                }
                (false, None) => {
                    e.failing_since = Some(now);
                    false
                }
                (false, Some(since)) => {
                    e.disabled_at = Some(now);
                    e.disabled_reason = Some(format!(
                        "every POST failed from {} for more than {} hours",
                        since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        self.disable_after.num_hours()
                    ));
                    true
                }
            };
            let endpoint = e.clone();
            set.version += 1;
            match self.store.save_endpoints(tenant, &set).await {
                Ok(()) if disabling => return self.announce_disabled(tenant, &endpoint, &set.endpoints).await,
                Ok(()) => return Ok(()),
                Err(crate::ports::table::StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// `endpoint.disabled`, to each other enabled endpoint of the tenant.
    async fn announce_disabled(
        &self,
        tenant: &TenantId,
        endpoint: &WebhookEndpoint,
        all: &[WebhookEndpoint],
    ) -> Result<(), StageError> {
        warn!(tenant = %tenant, endpoint = %endpoint.id, "webhook endpoint disabled for failing");
        self.metrics.count("WebhookEndpointDisabled", &[]);
        let at = endpoint.disabled_at.unwrap_or_default();
        let detail = serde_json::json!({
            "id": format!("{}:{}:{ENDPOINT_DISABLED}", endpoint.id, at.timestamp_millis()),
            "type": ENDPOINT_DISABLED,
            "time": at,
            "tenant_id": tenant.as_str(),
            "data": {
                "endpoint_id": endpoint.id,
                "url": endpoint.url,
                "failing_since": endpoint.failing_since,
                "disabled_at": at,
            },
        });
        let copies: Vec<String> = all
            .iter()
            .filter(|e| e.id != endpoint.id && e.disabled_at.is_none())
            .map(|e| serde_json::json!({"to": e.id, "detail": detail}).to_string())
            .collect();
        if copies.is_empty() {
            return Ok(());
        }
        // Told once, after the write: a failure here is counted, and the
        // endpoint stays disabled.
        if let Err(e) = self.queue.fan_out(copies).await {
            warn!(tenant = %tenant, error = %e, "endpoint.disabled not queued");
            self.metrics.count("WebhookAnnounceFailed", &[]);
        }
        Ok(())
    }
}

impl<S: WebhookEndpoints, K, W, D, C: Clock> WebhookStage<S, K, W, D, C> {
    /// Keeps the event of a tenant with endpoints for `log_for`, so that
    /// an endpoint can be sent it again. Counted, not fatal, when it fails:
    /// the send comes first.
    async fn keep(&self, tenant: &TenantId, id: &str, detail: &Value) {
        let until = self.clock.now() + self.log_for;
        if let Err(e) = self.store.keep_event(tenant, id, &detail.to_string(), until).await {
            warn!(tenant = %tenant, event_id = id, error = %e, "event not kept for replay");
            self.metrics.count("WebhookKeepFailed", &[]);
        }
    }
}

impl<S: WebhookEndpoints, K, W, D, C> WebhookStage<S, K, W, D, C> {
    /// Adds the attempt to the endpoint's log. The POST is done: a log
    /// that fails is counted, and must not make it happen twice.
    async fn log_attempt(
        &self,
        endpoint: &WebhookEndpoint,
        detail: &Value,
        posted: &Result<u16, PostError>,
        at: chrono::DateTime<chrono::Utc>,
        receives: u32,
        latency: std::time::Duration,
    ) {
        let (status, http_status, error) = match posted {
            Ok(code) if (200..300).contains(code) => (AttemptStatus::Succeeded, Some(*code), None),
            Ok(code) => (AttemptStatus::Failed, Some(*code), Some("http_status")),
            Err(PostError::Refused(_)) => (AttemptStatus::Failed, None, Some("refused_by_policy")),
            Err(PostError::Failed(e)) if e.contains("timed out") || e.contains("timeout") => {
                (AttemptStatus::Failed, None, Some("timeout"))
            }
            Err(PostError::Failed(_)) => (AttemptStatus::Failed, None, Some("connection")),
        };
        let mut entry = attempt_entry(endpoint, detail, at, receives.max(1), status, http_status, error);
        entry.latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.write_attempt(&entry, endpoint, at).await;
    }

    async fn write_attempt(
        &self,
        entry: &WebhookAttempt,
        endpoint: &WebhookEndpoint,
        at: chrono::DateTime<chrono::Utc>,
    ) {
        if let Err(e) = self.store.record_attempt(entry, at + self.log_for).await {
            warn!(event_id = %entry.event_id, endpoint = %endpoint.id, error = %e, "webhook attempt not logged");
            self.metrics.count("WebhookLogFailed", &[]);
        }
    }
}

/// The log entry of one attempt (or skip) of `detail` to `endpoint`.
fn attempt_entry(
    endpoint: &WebhookEndpoint,
    detail: &Value,
    at: chrono::DateTime<chrono::Utc>,
    attempt: u32,
    status: AttemptStatus,
    http_status: Option<u16>,
    error: Option<&str>,
) -> WebhookAttempt {
    let text = |name: &str| detail[name].as_str().unwrap_or_default().to_owned();
    WebhookAttempt {
        tenant_id: text("tenant_id"),
        endpoint_id: endpoint.id.clone(),
        event_id: text("id"),
        event_type: text("type"),
        at,
        attempt,
        status,
        http_status,
        error: error.map(str::to_owned),
        latency_ms: 0,
    }
}

impl<S: OperationRecords + WebhookEndpoints, K, W, D, C: Clock> WebhookStage<S, K, W, D, C> {
    /// Logs the event as skipped for each disabled endpoint whose filter
    /// takes it (for a copy, the one endpoint it is for), so that the
    /// endpoint, enabled again, is sent it by `recover`. Only an event the
    /// table committed is logged, so recovery never queues one that would
    /// be refused. The entry's time is the event's, so a message received
    /// again writes the same entry over itself. An `endpoint.disabled` is
    /// news only for the enabled endpoints.
    async fn log_skipped(
        &self,
        endpoints: &[WebhookEndpoint],
        to: Option<&str>,
        tenant: &TenantId,
        kind: &str,
        detail: &Value,
    ) -> Result<(), StageError> {
        let missed: Vec<&WebhookEndpoint> = endpoints
            .iter()
            .filter(|e| e.disabled_at.is_some() && e.filter_takes(kind) && to.is_none_or(|to| e.id == to))
            .collect();
        if kind == ENDPOINT_DISABLED || missed.is_empty() || self.committed(detail, tenant).await?.is_err() {
            return Ok(());
        }
        let at = detail["time"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or_else(|| self.clock.now(), |t| t.with_timezone(&chrono::Utc));
        for endpoint in missed {
            let entry = attempt_entry(
                endpoint,
                detail,
                at,
                0,
                AttemptStatus::Skipped,
                None,
                Some("endpoint_disabled"),
            );
            self.write_attempt(&entry, endpoint, at).await;
        }
        Ok(())
    }
}

impl<S, K, W, D: WebhookQueue, C> WebhookStage<S, K, W, D, C> {
    /// An event that can never be sent as configured: straight to the
    /// dead-letter queue with the reason, counted, and not retried. If the
    /// dead-letter queue cannot take it, the message fails and comes back.
    async fn give_up(
        &self,
        message: &Value,
        tenant: &str,
        event_id: &str,
        cause: &str,
        why: String,
    ) -> Result<Webhooked, StageError> {
        self.queue
            .dead_letter(message.to_string(), why.clone())
            .await
            .map_err(StageError::Remote)?;
        warn!(tenant, event_id, cause, reason = %why, "webhook event can never be sent; dead-lettered");
        self.metrics.count("WebhookRefused", &[("Cause", cause)]);
        Ok(Webhooked::DeadLettered(why))
    }
}

/// Who takes an event of `kind`: the tenant's webhook if it wants it, and
/// each endpoint that does. An endpoint disabled for failing is news for
/// every other enabled endpoint, whatever types it takes.
fn receivers_of(config: Option<WebhookConfig>, endpoints: &[WebhookEndpoint], kind: &str) -> Vec<Receiver> {
    config
        .filter(|c| c.wants(kind))
        .map(Receiver::Tenant)
        .into_iter()
        .chain(
            endpoints
                .iter()
                .filter(|e| match kind {
                    ENDPOINT_DISABLED => e.disabled_at.is_none(),
                    _ => e.wants(kind),
                })
                .cloned()
                .map(Receiver::Endpoint),
        )
        .collect()
}
