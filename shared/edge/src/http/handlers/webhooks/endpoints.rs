//! The routes of webhook endpoints (`/v1/webhooks/endpoints...`): an
//! application manages its own tenant's with the `operations.webhooks`
//! scope; an operator manages any tenant's in its scope, naming it with
//! `?tenant=` (an operator limited to one tenant needs not).

use genace_core::domain::{InvalidInput, TenantId};
use genace_core::requests::{EndpointChange, ReplayRequest};
use genace_core::webhook::{AttemptStatus, ENDPOINTS_SCOPE, WebhookAttempt, WebhookEndpoint};
use genace_stages::api::context::Api;
use genace_stages::api::errors::EndpointError;
use genace_stages::api::webhooks::endpoints::{Endpoints, WithSecret};
use genace_stages::ports::Ports;
use genace_stages::ports::cursor;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Value, json};

use crate::http::auth::Principal;
use crate::http::problem::Problem;
use crate::http::request::{MAX_SMALL_BODY_BYTES, page_limit, parsed_body, tenant_param};
use crate::http::routes::EndpointHandler;

/// The tenant whose endpoints the caller manages, who it is, and whether
/// an operator.
fn caller<P: Ports>(api: &Api<P>, req: &Request) -> Result<(TenantId, String, bool), Problem> {
    let asked = tenant_param(&req.query_string_parameters_ref().cloned().unwrap_or_default())?;
    match Principal::read(req, &api.config)? {
        Principal::Tenant(own) => {
            if !Principal::has_scope(req, ENDPOINTS_SCOPE) {
                return Err(Problem::new(
                    StatusCode::FORBIDDEN,
                    "insufficient-scope",
                    "The token may not manage webhook endpoints",
                    format!("Webhook endpoints need the {ENDPOINTS_SCOPE:?} scope."),
                )
                .with("scope", ENDPOINTS_SCOPE));
            }
            if asked.as_ref().is_some_and(|t| *t != own) {
                return Err(InvalidInput::new("tenant", "an application manages only its own endpoints").into());
            }
            let actor = Principal::subject(req).unwrap_or_else(|| own.as_str().to_owned());
            Ok((own, actor, false))
        }
        Principal::Operator(op) => {
            let tenant = asked.or_else(|| op.tenant.clone()).ok_or_else(|| {
                Problem::from(InvalidInput::new(
                    "tenant",
                    "names the tenant whose endpoints these are",
                ))
            })?;
            if !op.may_see(&tenant) {
                return Err(EndpointError::NoSuchEndpoint.into());
            }
            // Marked as an operator's, so that its tenant's views name
            // no operator ([`endpoint_view`]).
            Ok((tenant, format!("{OPERATOR_MARK}{}", op.actor), true))
        }
    }
}

/// What an operator's subject is stored behind on an endpoint.
const OPERATOR_MARK: &str = "operator:";

/// An endpoint as the API shows it: never its secret, and, to its tenant
/// (`operator` false), no operator's subject: "an operator" instead.
pub fn endpoint_view(e: &WebhookEndpoint, operator: bool) -> Value {
    let shown = |text: &str| match text.find(OPERATOR_MARK) {
        Some(at) if !operator => format!("{}an operator", &text[..at]),
        _ => text.to_owned(),
    };
    json!({
        "id": e.id,
        "url": e.url,
        "description": e.description,
        "events": e.events,
        "enabled": e.disabled_at.is_none(),
        "disabled_at": e.disabled_at,
        "disabled_reason": e.disabled_reason.as_deref().map(shown),
        "failing_since": e.failing_since,
        "created_at": e.created_at,
        "updated_at": e.updated_at,
        "updated_by": shown(&e.updated_by),
    })
}

/// The one answer that shows the secret.
fn with_secret(created: &WithSecret, operator: bool) -> Value {
    let mut view = endpoint_view(&created.endpoint, operator);
    view["secret"] = json!(created.secret);
    view
}

fn attempt_view(a: &WebhookAttempt) -> Value {
    json!({
        "event_id": a.event_id,
        "event_type": a.event_type,
        "at": a.at,
        "attempt": a.attempt,
        "status": a.status.as_str(),
        "http_status": a.http_status,
        "error": a.error,
        "latency_ms": a.latency_ms,
    })
}

fn answer(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        // The secret is in some of these answers: no cache may keep them.
        .header("cache-control", "no-store")
        .body(Body::Text(body.to_string()))
        .expect("valid response")
}

/// A log cursor: the last entry's sort key, sealed to its endpoint like
/// every list's cursor.
fn cursor_for(endpoint: &str, key: &str) -> String {
    cursor::seal(key, &cursor::binding("webhook attempts", &[endpoint]))
}

fn cursor_key(endpoint: &str, sealed: &str) -> Result<String, Problem> {
    cursor::open(sealed, &cursor::binding("webhook attempts", &[endpoint])).map_err(|_| {
        Problem::from(InvalidInput::new(
            "cursor",
            "is not a cursor this API returned for this endpoint",
        ))
    })
}

/// A log page's `status`, `limit` and `cursor`.
#[allow(clippy::type_complexity, reason = "three query parameters, read together")]
fn log_query(
    q: &lambda_http::aws_lambda_events::query_map::QueryMap,
    endpoint: &str,
) -> Result<(Option<AttemptStatus>, usize, Option<String>), Problem> {
    let status = q
        .first("status")
        .map(|s| {
            AttemptStatus::ALL
                .into_iter()
                .find(|a| a.as_str() == s)
                .ok_or_else(|| Problem::from(InvalidInput::new("status", "must be succeeded, failed or skipped")))
        })
        .transpose()?;
    let limit = usize::try_from(page_limit(q)?).unwrap_or(25);
    let after = q.first("cursor").map(|c| cursor_key(endpoint, c)).transpose()?;
    Ok((status, limit, after))
}

/// `POST …/replay {"event_id"}`: 202 once the copy is queued.
async fn replay<P: Ports>(endpoints: &Endpoints<'_, P>, id: &str, req: &Request) -> Result<Response<Body>, Problem> {
    let request = parsed_body(req, "replay", MAX_SMALL_BODY_BYTES, ReplayRequest::parse)?;
    let event_id = request.event_id.as_str();
    endpoints.replay(id, event_id).await?;
    Ok(answer(
        StatusCode::ACCEPTED,
        &json!({"endpoint_id": id, "event_id": event_id, "queued": 1}),
    ))
}

/// `POST …/recover?since=`: 202 with what was queued and what is kept no longer.
async fn recover<P: Ports>(
    endpoints: &Endpoints<'_, P>,
    id: &str,
    q: &lambda_http::aws_lambda_events::query_map::QueryMap,
) -> Result<Response<Body>, Problem> {
    let since = q
        .first("since")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok_or_else(|| Problem::from(InvalidInput::new("since", "is required: an RFC 3339 time")))?;
    let done = endpoints.recover(id, since).await?;
    Ok(answer(
        StatusCode::ACCEPTED,
        &json!({"endpoint_id": id, "since": since, "queued": done.queued, "missing": done.missing, "left": done.left}),
    ))
}

/// Answers one request on a webhook endpoint route: `id` is the path's
/// endpoint, "" for the collection.
pub async fn handle<P: Ports>(
    api: &Api<P>,
    req: Request,
    handler: EndpointHandler,
    id: &str,
) -> Result<Response<Body>, Problem> {
    let (tenant, actor, operator) = caller(api, &req)?;
    let endpoints = api.endpoints(tenant, actor);
    let policy = api.config.webhook_url_policy();
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    match handler {
        EndpointHandler::List => {
            let all: Vec<Value> = endpoints
                .list()
                .await?
                .iter()
                .map(|e| endpoint_view(e, operator))
                .collect();
            Ok(answer(StatusCode::OK, &json!({"endpoints": all})))
        }
        EndpointHandler::Create => {
            let change = parsed_body(&req, "webhook endpoint", MAX_SMALL_BODY_BYTES, |body| {
                EndpointChange::parse(body, &policy, true)
            })?;
            Ok(answer(
                StatusCode::CREATED,
                &with_secret(&endpoints.create(change).await?, operator),
            ))
        }
        EndpointHandler::Read => Ok(answer(
            StatusCode::OK,
            &endpoint_view(&endpoints.get(id).await?, operator),
        )),
        EndpointHandler::Update => {
            let change = parsed_body(&req, "webhook endpoint", MAX_SMALL_BODY_BYTES, |body| {
                EndpointChange::parse(body, &policy, false)
            })?;
            Ok(answer(
                StatusCode::OK,
                &endpoint_view(&endpoints.update(id, change).await?, operator),
            ))
        }
        EndpointHandler::Delete => {
            endpoints.delete(id).await?;
            Ok(Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Body::Empty)
                .expect("valid response"))
        }
        EndpointHandler::Rotate => Ok(answer(
            StatusCode::OK,
            &with_secret(&endpoints.rotate(id).await?, operator),
        )),
        EndpointHandler::Attempts => {
            let (status, limit, after) = log_query(&q, id)?;
            let page = endpoints.attempts(id, status, limit, after.as_deref()).await?;
            let attempts: Vec<Value> = page.attempts.iter().map(attempt_view).collect();
            let next = page.next.map(|k| cursor_for(id, &k));
            Ok(answer(
                StatusCode::OK,
                &json!({"attempts": attempts, "next_cursor": next}),
            ))
        }
        EndpointHandler::Replay => replay(&endpoints, id, &req).await,
        EndpointHandler::Recover => recover(&endpoints, id, &q).await,
    }
}
