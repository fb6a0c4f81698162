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
