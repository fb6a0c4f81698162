//! A tenant's webhook as data: where its events go, which types, and the
//! secret that signs them, with the rule that keeps each tenant's secrets
//! in its own folder. Stored by the table, set by operators, read by the
//! webhook stage; no I/O here.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::TenantId;

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
/// `:secret:`) is `genace/webhooks/<tenant>/<name>` for this tenant, with no
/// `/` in `<name>`. Tenant ids may hold a `/`, so without that rule tenant
/// `a` could name `genace/webhooks/a/x/hook`, which is tenant `a/x`'s; with
/// it, every secret name belongs to exactly one tenant (everything between
/// the prefix and the last `/`).
pub fn secret_belongs_to(secret_id: &str, tenant: &TenantId) -> bool {
    let name = match secret_id.strip_prefix("arn:") {
        Some(_) => secret_id.split_once(":secret:").map_or("", |(_, n)| n),
        None => secret_id,
    };
    name.strip_prefix(&tenant_secret_prefix(tenant))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/') && rest != "." && rest != "..")
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

/// The scope an application's token needs to manage its own webhook
/// endpoints.
pub const ENDPOINTS_SCOPE: &str = "operations.webhooks";

/// One of a tenant's webhook endpoints. The service generated its secret
/// and keeps it in Secrets Manager at [`endpoint_secret_name`]; the secret
/// itself is never part of this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    /// `ep_` and 32 lower-case hex digits.
    pub id: String,
    pub url: String,
    #[serde(default)]
    pub description: String,
    /// The event types sent; empty for every type.
    #[serde(default)]
    pub events: Vec<String>,
    pub secret_id: String,
    /// Moves by one with every rotation of the secret, so that what a
    /// sender keeps of the secret is never used past a rotation.
    #[serde(default)]
    pub secret_version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    /// When the endpoint was disabled; nothing is sent while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Since when every POST to it failed; none while the last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<DateTime<Utc>>,
    /// Until when the last recovery holds the endpoint: one recovery per
    /// endpoint in a window, so repeated calls cannot pile copies up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovering_until: Option<DateTime<Utc>>,
    /// The replays of the endpoint in the current window: a bounded
    /// number per window, so repeated calls cannot pile copies up either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<ReplayWindow>,
}

/// Replays of one endpoint since a window began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayWindow {
    pub since: DateTime<Utc>,
    pub count: u32,
}

impl WebhookEndpoint {
    /// Counts one more replay at `now`, at most `most` in a `window` that
    /// begins with the first replay after the last window ended; the end
    /// of the current window when it has had them all (nothing counted).
    pub fn count_replay(
        &mut self,
        now: DateTime<Utc>,
        most: u32,
        window: chrono::Duration,
    ) -> Result<(), DateTime<Utc>> {
        let current = self.replays.filter(|w| now < w.since + window);
        let mut w = current.unwrap_or(ReplayWindow { since: now, count: 0 });
        if w.count >= most {
            return Err(w.since + window);
        }
        w.count += 1;
        self.replays = Some(w);
        Ok(())
    }

    /// Whether an event of `kind` is sent to this endpoint now.
    pub fn wants(&self, kind: &str) -> bool {
        self.disabled_at.is_none() && self.filter_takes(kind)
    }

    /// Whether its event filter takes `kind`, enabled or not: what a
    /// disabled endpoint missed is what it would have been sent.
    pub fn filter_takes(&self, kind: &str) -> bool {
        self.events.is_empty() || self.events.iter().any(|e| e == kind)
    }
}

/// A tenant's endpoints as one versioned document. Every change is written
/// on the condition that the stored version is still the one read, so the
/// limit on endpoints holds under concurrent creates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointSet {
    /// 0 before the first write.
    pub version: u64,
    pub endpoints: Vec<WebhookEndpoint>,
}

impl EndpointSet {
    pub fn get(&self, id: &str) -> Option<&WebhookEndpoint> {
        self.endpoints.iter().find(|e| e.id == id)
    }
}

/// What a tenant has to receive events with, as the events pipe reads it
/// to decide which events the webhook rule takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receivers {
    /// The webhook an operator set.
    pub webhook: Option<WebhookConfig>,
    /// The tenant's own endpoints.
    pub endpoints: Vec<WebhookEndpoint>,
}

impl Receivers {
    /// Whether some receiver takes an event of `kind` now: the operator's
    /// webhook or an enabled endpoint whose filter names it.
    pub fn take(&self, kind: &str) -> bool {
        self.webhook.as_ref().is_some_and(|c| c.wants(kind)) || self.endpoints.iter().any(|e| e.wants(kind))
    }

    /// Whether the webhook function must see an event of `kind`: some
    /// receiver takes it now, or the tenant has an endpoint at all, enabled
    /// or not, whose attempt log keeps every event for `WEBHOOK_LOG_DAYS`
    /// (so a disabled endpoint, enabled again, can be sent what it missed).
    pub fn must_see(&self, kind: &str) -> bool {
        !self.endpoints.is_empty() || self.take(kind)
    }
}

/// The type of the event sent to a tenant's other endpoints when one is
/// disabled for failing.
pub const ENDPOINT_DISABLED: &str = "endpoint.disabled";

/// Where an endpoint's secret lives: `genace/webhooks/<tenant>/<endpoint id>`,
/// inside the tenant's own folder.
pub fn endpoint_secret_name(tenant: &TenantId, endpoint_id: &str) -> String {
    format!("{}{endpoint_id}", tenant_secret_prefix(tenant))
}

/// How one POST to an endpoint ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The receiver answered 2xx.
    Succeeded,
    /// Anything else: another status, no answer, or a URL the policy refused.
    Failed,
    /// Not sent: the endpoint, whose filter takes the event, was disabled.
    /// Its `attempt` is 0. Once the endpoint is enabled again, `recover`
    /// sends it like a failed one.
    Skipped,
}

impl AttemptStatus {
    pub const ALL: [AttemptStatus; 3] = [AttemptStatus::Succeeded, AttemptStatus::Failed, AttemptStatus::Skipped];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Succeeded => "succeeded",
            AttemptStatus::Failed => "failed",
            AttemptStatus::Skipped => "skipped",
        }
    }

    /// Whether the event got through with this attempt.
    pub fn succeeded(self) -> bool {
        self == AttemptStatus::Succeeded
    }
}

/// One entry of an endpoint's attempt log. No body is kept: the log says
/// what was sent when, and the event id finds the event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAttempt {
    pub tenant_id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub event_type: String,
    pub at: DateTime<Utc>,
    /// 1 for the first POST of this event to this endpoint; 0 for an event
    /// skipped while the endpoint was disabled.
    pub attempt: u32,
    pub status: AttemptStatus,
    /// The receiver's status code, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Why it failed without a status: `timeout`, `connection`,
    /// `refused_by_policy`; `http_status` when the status was not 2xx;
    /// `endpoint_disabled` for a skipped event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub latency_ms: u64,
}

impl WebhookAttempt {
    /// The log's order within an endpoint, newest last when sorted:
    /// `<ms, 13 digits>#<event id>#<attempt, 4 digits>`.
    pub fn sort_key(&self) -> String {
        format!(
            "{:013}#{}#{:04}",
            self.at.timestamp_millis().max(0),
            self.event_id,
            self.attempt.min(9999)
        )
    }

    /// Whether `key` has the shape of a [`Self::sort_key`] and fits a
    /// DynamoDB sort key (1,024 bytes): a log position a client sends
    /// back is checked with it before any query uses it.
    pub fn is_sort_key(key: &str) -> bool {
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        key.len() <= 1024
            && key.split_once('#').is_some_and(|(ms, rest)| {
                digits(ms, 13)
                    && rest
                        .rsplit_once('#')
                        .is_some_and(|(event, n)| !event.is_empty() && digits(n, 4))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_position_has_the_sort_keys_shape_and_size() {
        let attempt = WebhookAttempt {
            tenant_id: "t".into(),
            endpoint_id: "e".into(),
            event_id: "op_1:1:2:operation.accepted".into(),
            event_type: "operation.accepted".into(),
            at: DateTime::from_timestamp_millis(1_796_126_400_000).unwrap(),
            attempt: 3,
            status: AttemptStatus::Failed,
            http_status: None,
            error: None,
            latency_ms: 1,
        };
        assert!(WebhookAttempt::is_sort_key(&attempt.sort_key()));
        let long = format!("1796126400000#{}#0001", "e".repeat(1006));
        for key in [
            "",
            "x",
            "1796126400000",
            "1796126400000##0001",
            "179612640000#e#0001",
            "1796126400000#e#1",
            &long,
        ] {
            assert!(!WebhookAttempt::is_sort_key(key), "{key:?}");
        }
    }

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
            "genace/webhooks/tenant-a/sub/hook",
        ] {
            assert!(!secret_belongs_to(other, &a), "{other}");
        }
        // Tenant ids may hold a `/`: each secret still has one owner.
        let nested = TenantId::parse("tenant-a/x").unwrap();
        assert!(secret_belongs_to("genace/webhooks/tenant-a/x/hook", &nested));
        assert!(!secret_belongs_to("genace/webhooks/tenant-a/x/hook", &a));
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

/// The values that sign an endpoint's webhooks, as the endpoint's secret
/// holds them: the current value first, then each value a rotation
/// replaced, with the end of its overlap. Two rotations inside one overlap
/// keep both replaced values, each until its own overlap ends, so no value
/// that a receiver may still hold stops signing early.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKeys {
    pub keys: Vec<SigningKey>,
}

/// One value of a [`SigningKeys`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKey {
    pub value: String,
    /// When this value stops signing; none for the current value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl SigningKeys {
    /// A new secret's one value.
    pub fn new(value: &str) -> Self {
        Self {
            keys: vec![SigningKey {
                value: value.to_owned(),
                until: None,
            }],
        }
    }

    /// The keys in a stored secret string; `None` for a plain value (a
    /// secret an operator keeps, whose previous value the secret store
    /// labels itself).
    pub fn parse(stored: &str) -> Option<Self> {
        serde_json::from_str::<Self>(stored)
            .ok()
            .filter(|k| k.keys.first().is_some_and(|first| first.until.is_none()))
    }

    /// The keys after putting `value` on the secret at `now`: it signs
    /// first; the value it replaces signs for `overlap` more; every older
    /// one until its own overlap ends, and no longer.
    pub fn rotate(stored: Option<&str>, value: &str, now: DateTime<Utc>, overlap: chrono::Duration) -> Self {
        let before = match stored {
            Some(s) => Self::parse(s).unwrap_or_else(|| Self::new(s)),
            None => Self { keys: Vec::new() },
        };
        before.rotated(value, now, overlap)
    }

    /// These keys after putting `value` on the secret at `now`, as
    /// [`Self::rotate`] says.
    pub fn rotated(self, value: &str, now: DateTime<Utc>, overlap: chrono::Duration) -> Self {
        let mut next = Self::new(value);
        let ends = now + overlap;
        next.keys.extend(
            self.keys
                .into_iter()
                .filter(|k| k.value != value)
                .map(|k| SigningKey {
                    until: Some(k.until.map_or(ends, |u| u.min(ends))),
                    value: k.value,
                })
                .filter(|k| k.until.is_some_and(|u| u > now)),
        );
        next
    }

    /// The values that sign at `now`, the current one first.
    pub fn live(&self, now: DateTime<Utc>) -> Vec<String> {
        self.keys
            .iter()
            .filter(|k| k.until.is_none_or(|u| u > now))
            .map(|k| k.value.clone())
            .collect()
    }

    /// The string the secret store keeps.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).expect("keys always serialize")
    }
}

#[cfg(test)]
mod signing_keys_tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + chrono::Duration::minutes(minutes)
    }

    /// Two rotations inside one overlap: all three values sign, each
    /// replaced one until its own overlap ends; then only the newest.
    #[test]
    fn every_value_whose_overlap_has_not_ended_signs() {
        let overlap = chrono::Duration::minutes(60);
        let first = SigningKeys::new("v0").to_stored();
        let once = SigningKeys::rotate(Some(&first), "v1", at(0), overlap).to_stored();
        let twice = SigningKeys::rotate(Some(&once), "v2", at(30), overlap);
        assert_eq!(twice.live(at(31)), ["v2", "v1", "v0"]);
        assert_eq!(twice.live(at(61)), ["v2", "v1"]);
        assert_eq!(twice.live(at(91)), ["v2"]);
        // A third rotation later drops what has ended and keeps what has not.
        let thrice = SigningKeys::rotate(Some(&twice.to_stored()), "v3", at(70), overlap);
        assert_eq!(thrice.live(at(70)), ["v3", "v2", "v1"]);
        assert_eq!(thrice.keys.len(), 3, "v0 ended and is gone");
    }

    /// A plain stored value (a secret written before keys were kept, or an
    /// operator's) is the replaced value of the first rotation; a plain
    /// value is never read as keys.
    #[test]
    fn a_plain_value_is_rotated_like_a_current_one() {
        let overlap = chrono::Duration::minutes(60);
        let keys = SigningKeys::rotate(Some("whsec_old"), "whsec_new", at(0), overlap);
        assert_eq!(keys.live(at(1)), ["whsec_new", "whsec_old"]);
        assert_eq!(SigningKeys::parse("whsec_old"), None);
        assert_eq!(SigningKeys::parse(r#"{"keys": []}"#), None);
        assert_eq!(SigningKeys::parse(&keys.to_stored()), Some(keys));
        let fresh = SigningKeys::rotate(None, "whsec_first", at(0), overlap);
        assert_eq!(fresh.live(at(0)), ["whsec_first"]);
    }
}
