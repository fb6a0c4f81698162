//! Reading a request: the one body reader (413 over its limit, 415 unless
//! it says JSON, 400 unless it parses), which hands the JSON to a parser of
//! `genace_core`; the page limit, the operator's `tenant` parameter,
//! `If-Match` and time parameters. Every route reads through these, so
//! every route answers the same way.

use genace_core::domain::{InvalidInput, TenantId};
use lambda_http::Request;
use lambda_http::aws_lambda_events::query_map::QueryMap;
use lambda_http::http::header::IF_MATCH;
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

/// The request body, read by `parse`, a parser of `genace_core` (the
/// intent's own or one of `requests`): the one way a handler reads a
/// body, so bodies are parsed in one place. `what` names the body in the
/// answers: 413 over `max_bytes`, 415 unless it says JSON, 400 unless it
/// parses as JSON and then as what `parse` wants.
pub fn parsed_body<T>(
    req: &Request,
    what: &str,
    max_bytes: usize,
    parse: impl FnOnce(&Value) -> Result<T, InvalidInput>,
) -> Result<T, Problem> {
    Ok(parse(&json_body(req, what, max_bytes)?)?)
}

/// The request body as JSON (see [`parsed_body`]).
fn json_body(req: &Request, what: &str, max_bytes: usize) -> Result<Value, Problem> {
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

/// The version named by `If-Match`: 428 when absent; 400 unless it is one
/// entity tag of this API's form (`"<version>"`, optionally weak), as the
/// OpenAPI document's pattern says (`*`, a list, an empty value included);
/// the resolution then answers 412 if that version is not the current one.
pub fn if_match_version(req: &Request) -> Result<u64, Problem> {
    let raw = req
        .headers()
        .get(IF_MATCH)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::PRECONDITION_REQUIRED,
                "if-match-required",
                "Send If-Match with the operation's version",
                "Read the operation first and send its ETag in If-Match, so the decision applies to what was seen.",
            )
        })?
        .to_str()
        .unwrap_or("")
        .trim();
    let digits = raw
        .strip_prefix("W/")
        .unwrap_or(raw)
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|d| (1..=18).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()));
    digits.and_then(|d| d.parse::<u64>().ok()).ok_or_else(|| {
        InvalidInput::new(
            "If-Match",
            "must be the one ETag of the operation as read, for example \"7\"",
        )
        .into()
    })
}

/// The query parameter `name` as an RFC 3339 time, if given.
pub fn time_param(
    q: &lambda_http::aws_lambda_events::query_map::QueryMap,
    name: &str,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, Problem> {
    q.first(name)
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|_| Problem::from(InvalidInput::new(name, "must be an RFC 3339 time")))
        })
        .transpose()
}
