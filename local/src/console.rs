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
        if !addressed_to_loopback(parts) {
            return Problem::new(
                StatusCode::FORBIDDEN,
                "host-not-local",
                "The local sign-in answers only on a loopback address",
                "Open the console as http://127.0.0.1:<port>/console or http://localhost:<port>/console.",
            )
            .into_response(path);
        }
        return match parts.method {
            Method::POST => sign_in(body).unwrap_or_else(|p| p.into_response(path)),
            _ => Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "Use POST", "").into_response(path),
        };
    }
    console.answer(&parts.method, path)
}

/// Whether the request names a loopback host (`Host`, and `Origin` when a
/// browser sends one): a page of another site whose name a DNS rebinding
/// points at this machine sends its own name, and is refused an operator
/// token.
fn addressed_to_loopback(parts: &Parts) -> bool {
    let host_of = |authority: &str| -> Option<String> {
        let authority = authority.trim().to_ascii_lowercase();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').map(|(h, _)| h.to_owned())?,
            None => authority.split(':').next().unwrap_or_default().to_owned(),
        };
        Some(host)
    };
    let loopback =
        |host: &str| host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let header = |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let host_ok = header(header::HOST).and_then(host_of).is_some_and(|h| loopback(&h));
    let origin_ok = header(header::ORIGIN).is_none_or(|origin| {
        origin
            .split_once("://")
            .and_then(|(_, rest)| host_of(rest.split('/').next().unwrap_or_default()))
            .is_some_and(|h| loopback(&h))
    });
    host_ok && origin_ok
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sign_in_with(headers: &[(&str, &str)]) -> StatusCode {
        let mut request = lambda_http::http::Request::builder()
            .method(Method::POST)
            .uri("/console/local/sign-in");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (parts, ()) = request.body(()).unwrap().into_parts();
        let body = br#"{"operator": "ops-dev"}"#;
        answer(&Console::new(SignIn::Local), &parts, body).status()
    }

    /// A DNS rebinding points another site's name at this machine: its
    /// page's requests name that site, and get no operator token.
    #[test]
    fn the_local_sign_in_answers_only_requests_addressed_to_loopback() {
        for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "LOCALHOST"] {
            assert_eq!(sign_in_with(&[("host", host)]), StatusCode::OK, "{host}");
        }
        assert_eq!(
            sign_in_with(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]),
            StatusCode::OK
        );
        for headers in [
            &[("host", "rebound.example:8080")][..],
            &[("host", "127.0.0.1.rebound.example")][..],
            &[][..],
            &[("host", "127.0.0.1:8080"), ("origin", "http://rebound.example:8080")][..],
        ] {
            assert_eq!(sign_in_with(headers), StatusCode::FORBIDDEN, "{headers:?}");
        }
    }
}
