//! The local stand-in for API Gateway's JWT authorizer: tokens signed with a
//! development key (HS256), verified for issuer, audience and expiry, and
//! their claims handed to the handler exactly where API Gateway puts them.

use std::collections::HashMap;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Map, Value, json};

pub const ISSUER: &str = "genace-local";
pub const AUDIENCE: &str = "genace-operations";

/// The development signing key (`DEV_JWT_SECRET`). Never used by a deployment.
pub fn secret() -> Vec<u8> {
    std::env::var("DEV_JWT_SECRET")
        .unwrap_or_else(|_| "genace-local-development-signing-key".into())
        .into_bytes()
}

/// A token for `tenant`, valid for `ttl_seconds`, carrying the tenant under `claim`.
pub fn issue(claim: &str, tenant: &str, ttl_seconds: i64) -> Result<String, String> {
    issue_scoped(claim, tenant, "operations.read operations.write", ttl_seconds)
}

/// [`issue`], also granting `operations.webhooks`: the application may
/// manage its tenant's webhook endpoints.
pub fn issue_with_webhooks(claim: &str, tenant: &str, ttl_seconds: i64) -> Result<String, String> {
    issue_scoped(
        claim,
        tenant,
        "operations.read operations.write operations.webhooks",
        ttl_seconds,
    )
}

fn issue_scoped(claim: &str, tenant: &str, scope: &str, ttl_seconds: i64) -> Result<String, String> {
    let mut claims = Map::new();
    claims.insert("sub".into(), json!(format!("dev-user@{tenant}")));
    claims.insert("scope".into(), json!(scope));
    claims.insert(claim.into(), json!(tenant));
    issue_claims(claims, ttl_seconds)
}

/// An operator's token (`scope` includes `genace:operator`): limited to
/// `tenant` under `claim` when given, else marked an operator of every
/// tenant (`genace:operator:all`).
pub fn issue_operator(subject: &str, claim: &str, tenant: Option<&str>, ttl_seconds: i64) -> Result<String, String> {
    let mut claims = Map::new();
    claims.insert("sub".into(), json!(subject));
    match tenant {
        Some(t) => {
            claims.insert("scope".into(), json!("operations.read genace:operator"));
            claims.insert(claim.into(), json!(t));
        }
        None => {
            claims.insert(
                "scope".into(),
                json!("operations.read genace:operator genace:operator:all"),
            );
        }
    }
    issue_claims(claims, ttl_seconds)
}

/// Signs `claims` plus issuer, audience and validity.
pub fn issue_claims(mut claims: Map<String, Value>, ttl_seconds: i64) -> Result<String, String> {
    let now = chrono::Utc::now().timestamp();
    claims.insert("iss".into(), json!(ISSUER));
    claims.insert("aud".into(), json!(AUDIENCE));
    claims.insert("iat".into(), json!(now));
    claims.insert("exp".into(), json!(now + ttl_seconds));
    let key = EncodingKey::from_secret(&secret()).map_err(|e| e.to_string())?;
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).map_err(|e| e.to_string())
}

/// Verifies a bearer token and returns its claims as API Gateway presents
/// them to a Lambda: every value a string.
pub fn verify(authorization: Option<&str>) -> Result<HashMap<String, String>, String> {
    let token = authorization
        .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
        .ok_or("missing bearer token")?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_issuer(&[ISSUER]);
    validation.set_audience(&[AUDIENCE]);
    let key = DecodingKey::from_secret(&secret()).map_err(|e| e.to_string())?;
    let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| e.to_string())?;
    Ok(data
        .claims
        .into_iter()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s,
                Value::Array(items) => format!(
                    "[{}]",
                    items
                        .iter()
                        .map(|i| i.as_str().map(str::to_owned).unwrap_or(i.to_string()))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                other => other.to_string(),
            };
            (k, s)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_and_carry_the_tenant() {
        let token = issue("tenant_id", "tenant-a", 60).unwrap();
        let claims = verify(Some(&format!("Bearer {token}"))).unwrap();
        assert_eq!(claims["tenant_id"], "tenant-a");
        assert_eq!(claims["iss"], ISSUER);
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert!(verify(None).is_err());
        assert!(verify(Some("Bearer not.a.jwt")).is_err());
        let expired = issue("tenant_id", "t", -3600).unwrap();
        assert!(verify(Some(&format!("Bearer {expired}"))).is_err());
        let token = issue("tenant_id", "t", 60).unwrap();
        let mut tampered = token.clone();
        tampered.push('x');
        assert!(verify(Some(&format!("Bearer {tampered}"))).is_err());
    }
}
