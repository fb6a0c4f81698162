//! The operator console on the local stack: the same page a deployment
//! serves, with the local-only sign-in. `POST /console/local/sign-in`
//! mints a development operator token (the tenant claim when the form names
//! a tenant), exactly what `genace-local token --operator` prints.

use genace_console::{Console, SignIn};
use genace_edge::http::Problem;
use lambda_http::Body;
use lambda_http::http::{Method, Response, StatusCode, header, request::Parts};
use serde_json::{Value, json};

use crate::devauth;

/// How long a console sign-in lasts.
const SESSION_SECONDS: i64 = 8 * 3600;

/// The console's answer to a request under `/console`. The local sign-in
/// answers only where the console signs in locally.
pub fn answer(console: &Console, parts: &Parts, body: &[u8]) -> Response<Body> {
    let path = parts.uri.path();
    if path == "/console/local/sign-in" && *console.sign_in() == SignIn::Local {
        return match parts.method {
            Method::POST => sign_in(body).unwrap_or_else(|p| p.into_response(path)),
            _ => Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "Use POST", "").into_response(path),
        };
    }
    console.answer(&parts.method, path)
}

fn sign_in(body: &[u8]) -> Result<Response<Body>, Problem> {
    let bad = |detail: &str| Problem::new(StatusCode::BAD_REQUEST, "invalid-sign-in", "Invalid sign-in", detail);
    let form: Value = serde_json::from_slice(body).map_err(|_| bad("send {\"operator\": ..., \"tenant\": ...}"))?;
    let operator = form["operator"]
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("operator is required"))?;
    let tenant = form["tenant"].as_str().map(str::trim).filter(|s| !s.is_empty());
    let claim = std::env::var("TENANT_CLAIM").unwrap_or_else(|_| "tenant_id".into());
    let token = devauth::issue_operator(operator, &claim, tenant, SESSION_SECONDS)
        .map_err(|e| Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "sign-in-failed", "Sign-in failed", e))?;
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::Text(
            json!({"access_token": token, "token_type": "Bearer", "expires_in": SESSION_SECONDS}).to_string(),
        ))
        .expect("valid response"))
}
