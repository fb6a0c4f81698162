//! `whoami`: which kind of operator a token signs in, read from its own
//! claims (the API verified nothing here; it decides the same way on every
//! request): of the tenant its tenant claim names, of every tenant when it
//! carries the global-operator scope, or of none, which the API refuses.

use std::process::ExitCode;

use base64::Engine;
use serde_json::{Value, json};

/// The deployment's claim names.
pub(crate) struct ClaimNames<'a> {
    pub tenant: &'a str,
    pub operator: &'a str,
    pub global: &'a str,
}

/// Prints the kind of operator `token` signs in; exit 2 for a token that
/// cannot be read.
pub(crate) fn whoami(json_out: bool, token: &str, names: &ClaimNames<'_>) -> ExitCode {
    let Some(claims) = claims(token) else {
        eprintln!("genace-ops: the token is not a JWT whose claims can be read");
        return ExitCode::from(2);
    };
    let subject = claims.get("sub").and_then(Value::as_str).unwrap_or("unknown");
    let scopes: Vec<String> = match claims.get(names.operator) {
        Some(Value::String(s)) => s
            .trim_matches(|c| c == '[' || c == ']')
            .split(|c: char| c.is_whitespace() || c == ',')
            .map(str::to_owned)
            .collect(),
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let tenant = claims.get(names.tenant).and_then(Value::as_str);
    let (kind, line) = match tenant {
        Some(t) => ("tenant", format!("{subject}: an operator of tenant {t}")),
        None if scopes.iter().any(|s| s == names.global) => {
            ("global", format!("{subject}: an operator of every tenant"))
        }
        None => (
            "none",
            format!(
                "{subject}: an operator of no tenant: the token has no {:?} claim and no {:?} scope, and the API refuses it",
                names.tenant, names.global
            ),
        ),
    };
    if json_out {
        println!("{}", json!({"subject": subject, "kind": kind, "tenant_id": tenant}));
    } else {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

/// The claims of a JWT, unverified.
fn claims(token: &str) -> Option<serde_json::Map<String, Value>> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}
