//! Reading a request: the one JSON body reader (413 over its limit, 415
//! unless it says JSON, 400 unless it parses), the page limit, and the
//! operator's `tenant` parameter. Every route reads through these, so every
//! route answers the same way.

use genace_core::domain::{InvalidInput, TenantId};
use lambda_http::Request;
use lambda_http::aws_lambda_events::query_map::QueryMap;
use lambda_http::http::{StatusCode, header};
use serde_json::Value;

use super::problem::Problem;

/// Largest body of a request other than an intent (a resolution, a limit,
/// a webhook endpoint, a replay): 8 KiB. Intents have their own,
/// configured limit.
pub const MAX_SMALL_BODY_BYTES: usize = 8 * 1024;

/// Page sizes a list takes, and the one it gives unasked.
const PAGE_LIMITS: std::ops::RangeInclusive<i32> = 1..=100;
const DEFAULT_PAGE_LIMIT: i32 = 25;

/// The request body as JSON, `what` naming it in the answers: 413 over
/// `max_bytes`, 415 unless it says JSON, 400 unless it parses.
pub fn json_body(req: &Request, what: &str, max_bytes: usize) -> Result<Value, Problem> {
    if req.body().as_ref().len() > max_bytes {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The request body is too large",
            format!("The {what} may be at most {max_bytes} bytes."),
        ));
    }
    if !is_json(req) {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "The request body must be JSON",
            "Send Content-Type: application/json.",
        ));
    }
    serde_json::from_slice(req.body().as_ref()).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "The body is not valid JSON",
            e.to_string(),
        )
    })
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .is_some_and(|m| m == "application/json" || (m.starts_with("application/") && m.ends_with("+json")))
}

/// The `limit` query parameter of a list: 1 to 100, 25 when absent.
pub fn page_limit(q: &QueryMap) -> Result<i32, Problem> {
    match q.first("limit") {
        None => Ok(DEFAULT_PAGE_LIMIT),
        Some(l) => l
            .parse::<i32>()
            .ok()
            .filter(|n| PAGE_LIMITS.contains(n))
            .ok_or_else(|| Problem::from(InvalidInput::new("limit", "must be 1-100"))),
    }
}

/// The optional `tenant` query parameter of an operator's request.
pub fn tenant_param(q: &QueryMap) -> Result<Option<TenantId>, Problem> {
    q.first("tenant")
        .map(|t| TenantId::parse(t).map_err(|_| Problem::from(InvalidInput::new("tenant", "is not a tenant id"))))
        .transpose()
}
