//! The bodies of webhook requests: an operator's webhook settings
//! ([`WebhookRequest`]) and a tenant's endpoint create or update
//! ([`EndpointChange`]). A URL is checked against the webhook URL policy
//! as far as it can be without DNS, so one that can never be POSTed is
//! refused when it is saved; the full guard applies again to every POST.

use serde_json::Value;

use crate::domain::{InvalidInput, TenantId, members};
use crate::events::Kind;
use crate::urlguard::UrlPolicy;
use crate::webhook::{secret_belongs_to, tenant_secret_prefix};

/// The longest description kept.
pub const MAX_DESCRIPTION: usize = 512;

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
        members(body, "body", &["url", "secret_id", "events"])?;
        let url = parse_url(body, policy)?.ok_or_else(|| InvalidInput::new("url", "is required"))?;
        let secret_id = body
            .get("secret_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .ok_or_else(|| InvalidInput::new("secret_id", "is required"))?;
        if !secret_belongs_to(secret_id, tenant) || secret_id.len() > 2048 {
            return Err(InvalidInput::new(
                "secret_id",
                format!(
                    "must be a Secrets Manager secret named {}<name>",
                    tenant_secret_prefix(tenant)
                ),
            ));
        }
        Ok(Self {
            url,
            events: parse_events(body)?.unwrap_or_default(),
            secret_id: secret_id.to_owned(),
        })
    }
}

/// The `url` member, when present: an https URL (http only where the
/// policy allows it) naming a host without user information, that passes
/// the webhook URL policy as far as it can be checked without DNS (scheme,
/// port, literal addresses). So a URL that can never be POSTed is refused
/// when it is saved, not retried for a day; the full guard applies again
/// to every POST.
fn parse_url(body: &Value, policy: &UrlPolicy) -> Result<Option<String>, InvalidInput> {
    let url = match body.get("url") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(url)) => url.trim(),
        Some(_) => return Err(InvalidInput::new("url", "must be a string")),
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://").filter(|_| policy.allow_http))
        .ok_or_else(|| InvalidInput::new("url", "must be an https URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') || url.len() > 2048 || url.chars().any(char::is_whitespace) {
        return Err(InvalidInput::new("url", "must name a host, without user information"));
    }
    let path = &rest[authority.len()..];
    if !(path.is_empty() || path.starts_with('/')) || !path.chars().all(|c| c.is_ascii_graphic()) {
        return Err(InvalidInput::new(
            "url",
            "must end in a path of visible ASCII characters, if anything, after the host",
        ));
    }
    let host = authority.rsplit_once(':').map_or(authority, |(host, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            host
        } else {
            authority
        }
    });
    // Where private addresses are allowed (a local stack), so are
    // addresses and single-label names such as `localhost`.
    let local = |h: &str| {
        h.parse::<std::net::IpAddr>().is_ok()
            || h.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
            || is_dns_name(&format!("{h}.local"))
    };
    if !(is_dns_name(host) || (policy.allow_private && local(host))) {
        return Err(InvalidInput::new(
            "url",
            "must name its host by a lower-case DNS name (letters, digits, hyphens), not by an address",
        ));
    }
    crate::urlguard::check_url_text(url, policy)
        .map_err(|why| InvalidInput::new("url", format!("can never be delivered to: {why}")))?;
    Ok(Some(url.to_owned()))
}

/// A DNS name as receivers are named: dot-separated labels of lower-case
/// letters, digits and inner hyphens (1 to 63 characters), at least two of
/// them, the last starting with a letter (so no address literal passes).
fn is_dns_name(host: &str) -> bool {
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    host.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|l| l.starts_with(|c: char| c.is_ascii_lowercase()))
}

/// The `events` member, when present: lifecycle event types, each once.
fn parse_events(body: &Value) -> Result<Option<Vec<String>>, InvalidInput> {
    match body.get("events") {
        None => Ok(None),
        Some(Value::Array(items)) => {
            let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
            let events: Vec<String> = items
                .iter()
                .map(|e| match e.as_str() {
                    Some(t) if known.contains(&t) => Ok(t.to_owned()),
                    _ => Err(InvalidInput::new(
                        "events",
                        format!("must be among {}", known.join(", ")),
                    )),
                })
                .collect::<Result<_, _>>()?;
            // Each type once: a list with repeats says nothing more, and
            // is refused as the OpenAPI document's `uniqueItems` says.
            let distinct: std::collections::BTreeSet<&String> = events.iter().collect();
            if distinct.len() != events.len() {
                return Err(InvalidInput::new("events", "must name each event type once"));
            }
            Ok(Some(events))
        }
        Some(_) => Err(InvalidInput::new("events", "must be a list of event types")),
    }
}

/// What a create or an update asks for; absent members stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointChange {
    pub url: Option<String>,
    pub description: Option<String>,
    pub events: Option<Vec<String>>,
    /// `false` disables the endpoint; `true` enables it again.
    pub enabled: Option<bool>,
}

impl EndpointChange {
    /// Parses `{"url", "description", "events", "enabled"}`. A create needs
    /// a URL; an update needs at least one member. Unknown members are
    /// refused, so a misspelt one is not silently ignored.
    pub fn parse(body: &Value, policy: &UrlPolicy, create: bool) -> Result<Self, InvalidInput> {
        let members = members(body, "body", &["url", "description", "events", "enabled"])?;
        // A member is given with a value or left out; null says neither.
        if let Some((name, _)) = members.iter().find(|(_, v)| v.is_null()) {
            return Err(InvalidInput::new(
                name,
                "must not be null; leave it out to keep it as it is",
            ));
        }
        let description = match body.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) if d.chars().count() <= MAX_DESCRIPTION => Some(d.trim().to_owned()),
            Some(_) => {
                return Err(InvalidInput::new(
                    "description",
                    format!("must be a string of at most {MAX_DESCRIPTION} characters"),
                ));
            }
        };
        let enabled = match body.get("enabled") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(InvalidInput::new("enabled", "must be true or false")),
        };
        let change = Self {
            url: parse_url(body, policy)?,
            description,
            events: parse_events(body)?,
            enabled,
        };
        if create && change.url.is_none() {
            return Err(InvalidInput::new("url", "is required"));
        }
        if !create && change == Self::default() {
            return Err(InvalidInput::new("body", "names nothing to change"));
        }
        Ok(change)
    }
}

/// A replay: `{"event_id"}`, the id of one of the tenant's kept events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRequest {
    pub event_id: String,
}

impl ReplayRequest {
    /// The longest event id accepted, in characters.
    pub const MAX_EVENT_ID: usize = 512;

    pub fn parse(body: &Value) -> Result<Self, InvalidInput> {
        let obj = members(body, "body", &["event_id"])?;
        match obj.get("event_id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() && id.chars().count() <= Self::MAX_EVENT_ID => Ok(Self {
                event_id: id.to_owned(),
            }),
            _ => Err(InvalidInput::new("event_id", "is required: the id of one event")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "https://9w30.60.m.i4.9j.v*",
            "https://8.8.8.8/genace",
            "https://Hooks.Acme.example/genace",
            "https://hooks.acme.example?x=1",
            "https://-bad.example/genace",
            "https://localhost/genace",
            "https://hooks.acme.example/caf\u{e9}",
        ] {
            let err = WebhookRequest::parse(&body(refused), &policy, &a).unwrap_err();
            assert_eq!(err.field, "url", "{refused}");
        }
        let ports = UrlPolicy {
            allowed_ports: vec![8443],
            ..UrlPolicy::default()
        };
        assert!(WebhookRequest::parse(&body("https://hooks.acme.example:8443/genace"), &ports, &a).is_ok());
        // Where private addresses are allowed (a local stack), so are
        // addresses and `localhost`, but never a host that is no name.
        let local = UrlPolicy {
            allow_private: true,
            ..UrlPolicy::default()
        };
        for ok in ["https://127.0.0.1/h", "https://localhost/h", "https://[::1]/h"] {
            assert!(WebhookRequest::parse(&body(ok), &local, &a).is_ok(), "{ok}");
        }
        assert!(WebhookRequest::parse(&body("https://0.0.a*"), &local, &a).is_err());
        let stolen =
            serde_json::json!({"url": "https://hooks.acme.example/", "secret_id": "genace/webhooks/tenant-b/s"});
        assert_eq!(
            WebhookRequest::parse(&stolen, &policy, &a).unwrap_err().field,
            "secret_id"
        );
    }

    #[test]
    fn an_event_type_named_twice_is_refused() {
        let a = TenantId::parse("a").unwrap();
        let body = |events: serde_json::Value| {
            serde_json::json!({"url": "https://hooks.acme.example/genace", "secret_id": "genace/webhooks/a/hook",
                               "events": events})
        };
        let policy = UrlPolicy::default();
        let once = serde_json::json!(["operation.held", "operation.cancelled"]);
        assert!(WebhookRequest::parse(&body(once), &policy, &a).is_ok());
        assert_eq!(
            WebhookRequest::parse(&body(serde_json::Value::Null), &policy, &a)
                .unwrap_err()
                .field,
            "events"
        );
        let twice = serde_json::json!(["operation.held", "operation.cancelled", "operation.held"]);
        assert_eq!(
            WebhookRequest::parse(&body(twice), &policy, &a).unwrap_err().field,
            "events"
        );
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
    fn a_replay_names_one_event_and_nothing_else() {
        let event = ReplayRequest::parse(&serde_json::json!({"event_id": "evt-1"})).unwrap();
        assert_eq!(event.event_id, "evt-1");
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"event_id": ""}),
            serde_json::json!({"event_id": 7}),
            serde_json::json!({"event_id": "e".repeat(513)}),
        ] {
            assert_eq!(ReplayRequest::parse(&bad).unwrap_err().field, "event_id", "{bad}");
        }
        let extra = serde_json::json!({"event_id": "evt-1", "endpoint_id": "ep"});
        assert_eq!(ReplayRequest::parse(&extra).unwrap_err().field, "endpoint_id");
    }
}
