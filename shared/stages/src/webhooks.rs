//! Per-tenant webhooks: each lifecycle event on the bus, for a tenant that
//! configured a webhook, is POSTed to the tenant's URL, signed with an HMAC
//! secret the operator keeps in Secrets Manager.
//!
//! The bus's rule puts every event on the webhook queue; this stage consumes
//! it. A receiver that fails (no answer, or anything but 2xx) fails the
//! message, which is hidden for a growing time ([`RetrySchedule`]) and then
//! delivered again, until the queue's receive limit sends it to the
//! dead-letter queue. Receivers verify the signature and deduplicate on
//! `Genace-Event-Id`.
//!
//! Signature: `Genace-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` over
//! `<t>.<body>`, with the secret's UTF-8 bytes as the key.

use std::future::Future;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;
use tracing::{info, warn};

use crate::admin::Operator;
use crate::clock::{Clock, SystemClock};
use crate::config::UrlPolicy;
use crate::intake::{Intake, IntakeError};
use crate::outputs::ObjectStore;
use crate::queue::WorkQueue;
use crate::stage::{Stage, StageError};
use crate::table::OperationStore;
use genace_core::domain::{InvalidInput, TenantId};
use genace_core::events::Kind;

/// Secrets Manager names a webhook secret may have; the functions may read
/// nothing else. A tenant's secrets live under its own folder,
/// [`tenant_secret_prefix`].
pub const SECRET_PREFIX: &str = "genace/webhooks/";

/// `genace/webhooks/<tenant>/`: the only place a tenant's webhook secret
/// may live, so no tenant's webhook can sign with another tenant's secret.
pub fn tenant_secret_prefix(tenant: &TenantId) -> String {
    format!("{SECRET_PREFIX}{}/", tenant.as_str())
}

/// Whether `secret_id` (a name, or an ARN whose name part follows
/// `:secret:`) lies under the tenant's own prefix.
pub fn secret_belongs_to(secret_id: &str, tenant: &TenantId) -> bool {
    let name = match secret_id.strip_prefix("arn:") {
        Some(_) => secret_id.split_once(":secret:").map_or("", |(_, n)| n),
        None => secret_id,
    };
    let prefix = tenant_secret_prefix(tenant);
    name.len() > prefix.len() && name.starts_with(&prefix) && !name.contains("..")
}

/// A tenant's webhook, as an operator configured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    pub tenant_id: String,
    /// Where events are POSTed (https, a public host).
    pub url: String,
    /// The event types sent; empty for every type.
    #[serde(default)]
    pub events: Vec<String>,
    /// The Secrets Manager secret (name or ARN, under [`SECRET_PREFIX`])
    /// whose value signs each POST.
    pub secret_id: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl WebhookConfig {
    pub fn wants(&self, kind: &str) -> bool {
        self.events.is_empty() || self.events.iter().any(|e| e == kind)
    }
}

/// What an operator asks for: a URL, the secret that signs, and the types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRequest {
    pub url: String,
    pub events: Vec<String>,
    pub secret_id: String,
}

impl WebhookRequest {
    /// Parses `{"url": ..., "secret_id": ..., "events": [...]}` for
    /// `tenant`. The URL must pass the webhook URL policy as far as it can
    /// be checked without DNS (scheme, port, literal addresses), so a URL
    /// that can never be POSTed is refused now, not retried for a day; the
    /// full guard applies again to every POST. The secret must live under
    /// the tenant's own prefix ([`tenant_secret_prefix`]). Events, when
    /// given, must be lifecycle event types.
    pub fn parse(body: &Value, policy: &UrlPolicy, tenant: &TenantId) -> Result<Self, InvalidInput> {
        let text = |name: &str| body.get(name).and_then(Value::as_str).map(str::trim);
        let url = text("url").ok_or_else(|| InvalidInput::new("url", "is required"))?;
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://").filter(|_| policy.allow_http))
            .ok_or_else(|| InvalidInput::new("url", "must be an https URL"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.is_empty() || authority.contains('@') || url.len() > 2048 || url.chars().any(char::is_whitespace) {
            return Err(InvalidInput::new("url", "must name a host, without user information"));
        }
        crate::urlguard::check_url_text(url, policy)
            .map_err(|why| InvalidInput::new("url", format!("can never be delivered to: {why}")))?;
        let secret_id = text("secret_id").ok_or_else(|| InvalidInput::new("secret_id", "is required"))?;
        if !secret_belongs_to(secret_id, tenant) || secret_id.len() > 2048 {
            return Err(InvalidInput::new(
                "secret_id",
                format!(
                    "must be a Secrets Manager secret named {}<name>",
                    tenant_secret_prefix(tenant)
                ),
            ));
        }
        let events = match body.get("events") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                items
                    .iter()
                    .map(|e| match e.as_str() {
                        Some(t) if known.contains(&t) => Ok(t.to_owned()),
                        _ => Err(InvalidInput::new(
                            "events",
                            format!("must be among {}", known.join(", ")),
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            Some(_) => return Err(InvalidInput::new("events", "must be a list of event types")),
        };
        Ok(Self {
            url: url.to_owned(),
            events,
            secret_id: secret_id.to_owned(),
        })
    }
}

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock> Intake<S, Q, O, C> {
    /// A tenant's webhook, for an operator who may see the tenant.
    pub async fn webhook(&self, op: &Operator, tenant: &TenantId) -> Result<Option<WebhookConfig>, IntakeError> {
        if !op.may_see(tenant) {
            return Err(IntakeError::NotFound);
        }
        Ok(self.store.webhook(tenant).await?)
    }

    /// Sets a tenant's webhook; from now on its events are POSTed there.
    pub async fn set_webhook(
        &self,
        op: &Operator,
        tenant: &TenantId,
        request: WebhookRequest,
    ) -> Result<WebhookConfig, IntakeError> {
        if !op.may_see(tenant) {
            return Err(IntakeError::NotFound);
        }
        let config = WebhookConfig {
            tenant_id: tenant.as_str().to_owned(),
            url: request.url,
            events: request.events,
            secret_id: request.secret_id,
            updated_at: self.clock.now(),
            updated_by: op.actor.clone(),
        };
        self.store.set_webhook(tenant, Some(&config)).await?;
        info!(actor = %op.actor, tenant = %tenant, "webhook set");
        Ok(config)
    }

    /// Removes a tenant's webhook; events already queued are dropped.
    pub async fn remove_webhook(&self, op: &Operator, tenant: &TenantId) -> Result<(), IntakeError> {
        if !op.may_see(tenant) {
            return Err(IntakeError::NotFound);
        }
        self.store.set_webhook(tenant, None).await?;
        info!(actor = %op.actor, tenant = %tenant, "webhook removed");
        Ok(())
    }
}

/// Reads secrets.
pub trait SecretStore: Send + Sync {
    /// The secret's current value; `None` when there is no such secret.
    fn secret(&self, id: &str) -> impl Future<Output = Result<Option<String>, String>> + Send;
}

/// Why a webhook POST got no status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The URL guard refused the URL or every address it resolves to: no
    /// retry can change that.
    #[error("refused by the webhook URL policy: {0}")]
    Refused(String),
    /// No answer (connection, timeout): worth another try.
    #[error("{0}")]
    Failed(String),
}

/// POSTs one webhook body. The adapter applies the URL guard.
pub trait WebhookSender: Send + Sync {
    /// The receiver's status code, or why there was none.
    fn post(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> impl Future<Output = Result<u16, PostError>> + Send;
}

/// Where an event goes that can never be delivered: the webhook queue's
/// dead-letter queue, at once rather than after a day of retries.
pub trait DeadLetters: Send + Sync {
    fn dead_letter(&self, body: String, reason: String) -> impl Future<Output = Result<(), String>> + Send;
}

/// `t=<timestamp>,v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={timestamp},v1={hex}")
}

/// What became of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Webhooked {
    /// The receiver answered 2xx.
    Delivered(u16),
    /// The tenant has no webhook.
    NoWebhook,
    /// The tenant's webhook does not take this type.
    NotSubscribed,
    /// The event can never be delivered as configured (a URL the policy
    /// refuses, a secret outside the tenant's prefix): it went to the
    /// dead-letter queue at once.
    DeadLettered(String),
}

/// When an event whose POST failed is tried again: `first_seconds` after
/// the first failure, twice as long after each further one, never more
/// than `max_seconds` (nor what SQS grants a received message) between two tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub first_seconds: u32,
    pub max_seconds: u32,
}

impl Default for RetrySchedule {
    /// 30 s, doubling up to 6 h.
    fn default() -> Self {
        Self {
            first_seconds: 30,
            max_seconds: 6 * 3600,
        }
    }
}

impl RetrySchedule {
    /// The wait after the `receives`-th delivery failed (counting from 1).
    pub fn after(&self, receives: u32) -> u32 {
        let doubled = u64::from(self.first_seconds) << receives.saturating_sub(1).min(32);
        let most = crate::queue::visibility_left(self.max_seconds, std::time::Duration::ZERO);
        doubled.min(u64::from(most)) as u32
    }

    /// How long an event is retried in all when the queue dead-letters it
    /// on delivery number `max_receives + 1`: the waits after each of its
    /// `max_receives` failed deliveries.
    pub fn span(&self, max_receives: u32) -> u64 {
        (1..=max_receives).map(|n| u64::from(self.after(n))).sum()
    }
}

pub struct WebhookDeliverer<S, K, W, D, C = SystemClock> {
    pub store: S,
    pub secrets: K,
    pub sender: W,
    pub dead_letters: D,
    pub clock: C,
    /// When a failed POST is tried again.
    pub retry: RetrySchedule,
}

impl<S, K, W, D, C> Stage for WebhookDeliverer<S, K, W, D, C>
where
    S: OperationStore,
    K: SecretStore,
    W: WebhookSender,
    D: DeadLetters,
    C: Clock,
{
    /// A bus event as the rule puts it on the queue; its `detail` is the
    /// lifecycle event.
    type Message = Value;
    type Outcome = Webhooked;

    async fn handle(&self, message: Value) -> Result<Webhooked, StageError> {
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
        let Some(config) = self.store.webhook(&tenant_id).await? else {
            return Ok(Webhooked::NoWebhook);
        };
        if !config.wants(kind) {
            return Ok(Webhooked::NotSubscribed);
        }
        // Saved before the prefix rule, or written around the API: never
        // sign with a secret outside the tenant's own folder.
        if !secret_belongs_to(&config.secret_id, &tenant_id) {
            let why = format!(
                "the webhook secret {} is not under {}",
                config.secret_id,
                tenant_secret_prefix(&tenant_id)
            );
            return self.give_up(&message, tenant, id, "secret", why).await;
        }
        // Sign only what the table committed: the bus's policy admits only
        // the pipe, and this check holds even if that policy is changed.
        if let Err(why) = self.committed(detail, &tenant_id).await? {
            return self.give_up(&message, tenant, id, "unverified", why).await;
        }
        let secret = self
            .secrets
            .secret(&config.secret_id)
            .await
            .map_err(StageError::Remote)?
            .ok_or_else(|| StageError::Remote(format!("the webhook secret {} does not exist", config.secret_id)))?;
        let body = detail.to_string();
        let headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("genace-event-id".to_owned(), id.to_owned()),
            ("genace-event-type".to_owned(), kind.to_owned()),
            (
                "genace-signature".to_owned(),
                signature(&secret, self.clock.now().timestamp(), &body),
            ),
        ];
        match self.sender.post(&config.url, headers, body).await {
            Ok(status) if (200..300).contains(&status) => {
                info!(tenant, event_id = id, status, "webhook delivered");
                Ok(Webhooked::Delivered(status))
            }
            Ok(status) => {
                warn!(tenant, event_id = id, status, "webhook refused; the event is retried");
                Err(StageError::Remote(format!("the receiver answered {status}")))
            }
            Err(PostError::Refused(why)) => self.give_up(&message, tenant, id, "url", why).await,
            Err(PostError::Failed(e)) => {
                warn!(tenant, event_id = id, error = %e, "webhook not delivered; the event is retried");
                Err(StageError::Remote(e))
            }
        }
    }

    /// A receiver or secret that failed is given time: the event waits
    /// longer after each failure. Anything else keeps the queue's timeout.
    fn retry_after(&self, error: &StageError, receives: u32) -> Option<u32> {
        matches!(error, StageError::Remote(_)).then(|| self.retry.after(receives))
    }
}

impl<S: OperationStore, K, W, D, C: Clock> WebhookDeliverer<S, K, W, D, C> {
    /// Whether the event describes a change the table committed: its
    /// operation is live, belongs to the event's tenant, is the same
    /// incarnation (the id's creation time) and has reached the event's
    /// version. `Ok(Err(why))` when it does not; a store failure is retried.
    async fn committed(&self, detail: &Value, tenant: &TenantId) -> Result<Result<(), String>, StageError> {
        let op = detail["operation_id"].as_str().unwrap_or_default();
        let Ok(op_id) = genace_core::domain::OperationId::parse(op) else {
            return Ok(Err(format!("{op:?} is not an operation id")));
        };
        let version = detail["version"].as_u64().unwrap_or(u64::MAX);
        let incarnation = detail["id"].as_str().and_then(|id| id.split(':').nth(1));
        let Some(rec) = self.store.get(&op_id, self.clock.now()).await? else {
            return Ok(Err(format!("operation {op} is not in the table")));
        };
        if rec.tenant_id != *tenant {
            return Ok(Err(format!("operation {op} belongs to another tenant")));
        }
        if incarnation != Some(rec.created_at.timestamp_millis().to_string().as_str()) {
            return Ok(Err(format!("the event names another incarnation of operation {op}")));
        }
        if rec.version < version {
            return Ok(Err(format!(
                "operation {op} is at version {}, the event claims {version}",
                rec.version
            )));
        }
        Ok(Ok(()))
    }
}

impl<S, K, W, D: DeadLetters, C> WebhookDeliverer<S, K, W, D, C> {
    /// An event that can never be delivered as configured: straight to the
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
        self.dead_letters
            .dead_letter(message.to_string(), why.clone())
            .await
            .map_err(StageError::Remote)?;
        warn!(tenant, event_id, cause, reason = %why, "webhook event can never be delivered; dead-lettered");
        crate::metrics::count("WebhookRefused", &[("Cause", cause)]);
        Ok(Webhooked::DeadLettered(why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_belongs_to_one_tenant_only() {
        let a = TenantId::parse("tenant-a").unwrap();
        assert!(secret_belongs_to("genace/webhooks/tenant-a/hook", &a));
        assert!(secret_belongs_to(
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:genace/webhooks/tenant-a/hook-AbCdEf",
            &a
        ));
        for other in [
            "genace/webhooks/tenant-b",
            "genace/webhooks/tenant-b/hook",
            "genace/webhooks/tenant-a",
            "genace/webhooks/tenant-a/",
            "genace/webhooks/tenant-ab/hook",
            "genace/webhooks/tenant-a/../tenant-b/hook",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:genace/webhooks/tenant-b/hook-AbCdEf",
            "genace/other/tenant-a/hook",
        ] {
            assert!(!secret_belongs_to(other, &a), "{other}");
        }
    }

    #[test]
    fn a_webhook_url_that_can_never_be_posted_is_refused_when_saved() {
        let a = TenantId::parse("tenant-a").unwrap();
        let body = |url: &str| serde_json::json!({"url": url, "secret_id": "genace/webhooks/tenant-a/s"});
        let policy = UrlPolicy::default();
        assert!(WebhookRequest::parse(&body("https://hooks.acme.example/genace"), &policy, &a).is_ok());
        for refused in [
            "https://hooks.acme.example:8443/genace",
            "https://10.0.0.7/genace",
            "https://169.254.169.254/latest",
            "https://[::1]/genace",
            "http://hooks.acme.example/genace",
        ] {
            let err = WebhookRequest::parse(&body(refused), &policy, &a).unwrap_err();
            assert_eq!(err.field, "url", "{refused}");
        }
        let ports = UrlPolicy {
            allowed_ports: vec![8443],
            ..UrlPolicy::default()
        };
        assert!(WebhookRequest::parse(&body("https://hooks.acme.example:8443/genace"), &ports, &a).is_ok());
        let stolen =
            serde_json::json!({"url": "https://hooks.acme.example/", "secret_id": "genace/webhooks/tenant-b/s"});
        assert_eq!(
            WebhookRequest::parse(&stolen, &policy, &a).unwrap_err().field,
            "secret_id"
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        // RFC 4231 test case 2 ("Jefe"), with the message split as "<t>.<body>".
        let sig = signature("Jefe", 0, "what do ya want for nothing?");
        // HMAC-SHA256("Jefe", "0.what do ya want for nothing?")
        assert!(sig.starts_with("t=0,v1="));
        assert_eq!(sig.len(), "t=0,v1=".len() + 64);
        assert_ne!(sig, signature("Jefe", 1, "what do ya want for nothing?"));
        assert_ne!(sig, signature("jefe", 0, "what do ya want for nothing?"));
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"0.what do ya want for nothing?");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sig, format!("t=0,v1={hex}"));
    }

    #[test]
    fn the_hmac_is_the_standard_one() {
        // RFC 4231, test case 2.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn a_request_parses_or_names_its_bad_field() {
        let tenant = || TenantId::parse("a").unwrap();
        let policy = |allow_http: bool| UrlPolicy {
            allow_http,
            ..UrlPolicy::default()
        };
        let ok = serde_json::json!({"url": "https://hooks.acme.example/genace", "secret_id": "genace/webhooks/a/hook",
                                    "events": ["operation.delivered"]});
        let r = WebhookRequest::parse(&ok, &policy(false), &tenant()).unwrap();
        assert_eq!(r.events, ["operation.delivered"]);
        let field = |body: serde_json::Value, allow_http: bool| {
            WebhookRequest::parse(&body, &policy(allow_http), &tenant())
                .unwrap_err()
                .field
        };
        assert_eq!(
            field(serde_json::json!({"secret_id": "genace/webhooks/a/hook"}), false),
            "url"
        );
        assert_eq!(
            field(
                serde_json::json!({"url": "http://hooks.example/x", "secret_id": "genace/webhooks/a/hook"}),
                false
            ),
            "url"
        );
        assert!(
            WebhookRequest::parse(
                &serde_json::json!({"url": "http://hooks.example/x", "secret_id": "genace/webhooks/a/hook"}),
                &policy(true),
                &tenant()
            )
            .is_ok()
        );
        assert_eq!(
            field(
                serde_json::json!({"url": "https://user:pw@hooks.example/x", "secret_id": "genace/webhooks/a/hook"}),
                false
            ),
            "url"
        );
        assert_eq!(
            field(
                serde_json::json!({"url": "https:///x", "secret_id": "genace/webhooks/a/hook"}),
                false
            ),
            "url"
        );
        assert_eq!(
            field(
                serde_json::json!({"url": "https://hooks.example", "secret_id": "prod/db-password"}),
                false
            ),
            "secret_id"
        );
        assert!(WebhookRequest::parse(
            &serde_json::json!({"url": "https://hooks.example", "secret_id": "arn:aws:secretsmanager:us-east-1:1:secret:genace/webhooks/a/hook-AbCd"}), &policy(false), &tenant())
        .is_ok());
        assert_eq!(
            field(
                serde_json::json!({"url": "https://hooks.example", "secret_id": "genace/webhooks/a/hook", "events": ["operation.exploded"]}),
                false
            ),
            "events"
        );
    }

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_the_cap() {
        let r = RetrySchedule::default();
        let waits: Vec<u32> = (1..=12).map(|n| r.after(n)).collect();
        assert_eq!(
            waits,
            [30, 60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600]
        );
        assert_eq!(r.after(0), 30, "a missing receive count counts as the first");
        assert_eq!(r.after(u32::MAX), 21600, "no overflow");
        let capped = RetrySchedule {
            first_seconds: 3600,
            max_seconds: u32::MAX,
        };
        assert_eq!(
            capped.after(10),
            crate::queue::MAX_VISIBILITY_SECONDS - crate::queue::RECEIPT_MARGIN_SECONDS,
            "SQS refuses the whole 12 h once a message is received"
        );
        assert_eq!(r.span(3), 30 + 60 + 120);
    }

    #[test]
    fn an_empty_event_list_takes_every_type() {
        let mut c = WebhookConfig {
            tenant_id: "t".into(),
            url: "https://hooks.example/genace".into(),
            events: vec![],
            secret_id: "genace/webhooks/t".into(),
            updated_at: Utc::now(),
            updated_by: "ops".into(),
        };
        assert!(c.wants("operation.delivered"));
        c.events = vec!["operation.delivered".into()];
        assert!(c.wants("operation.delivered"));
        assert!(!c.wants("operation.accepted"));
    }
}
