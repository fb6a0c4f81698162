//! `/v1/operations`: create and list, read one, cancel it, erase its
//! outputs. The owning tenant, or an operator in scope.

use genace_core::domain::{Intent, InvalidInput, OperationId};
use genace_core::record::{DeliveryState, Phase};
use genace_stages::api::context::Api;
use genace_stages::api::intake::Submitted;
use genace_stages::ports::Ports;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::list::ListFilter;
use lambda_http::http::{HeaderValue, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use opentelemetry::KeyValue;
use serde_json::{Value, json};
use tracing::Instrument;

use super::{json_response, ok_json};
use crate::http::auth::Principal;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{page_limit, parsed_body, tenant_param, time_param};
use crate::http::views::{etag, expected_spend_hold, progress_view, queue_view, seconds_until, view, view_with_links};

pub(crate) async fn create<P: Ports>(api: &Api<P>, req: Request) -> Result<Response<Body>, Problem> {
    let principal = Principal::read(&req, &api.config)?;
    let tenant = principal.tenant(&api.config)?;
    let header_key = match req.headers().get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Problem::from(InvalidInput::new("Idempotency-Key", "must be visible ASCII")))?,
        ),
    };
    let intent = parsed_body(&req, "intent", api.config.max_body_bytes, |body| {
        Intent::parse(body, header_key)
    })?;
    if intent.fault.is_some() && !api.config.fault_injection {
        return Err(InvalidInput::new("fault", "fault injection is disabled in this deployment").into());
    }
    // The intake's span continues the operation's root, which the intake
    // that created the operation writes once it has (from the request's
    // start): a replay is a span of the same trace, never a second root.
    let started = std::time::SystemTime::now();
    let id = OperationId::derive(tenant, &intent.operation_key);
    // The caller's span (`traceparent`), when it sends one, is linked
    // from the intake's span: the operation's trace keeps its own id, and
    // the application's trace points into it.
    let caller = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(genace_core::trace::TraceParent::parse);
    let span = genace_trace::stage_span("intake", Some(&id), caller);
    let submitted = api
        .submit(tenant, &intent, api.clock.now())
        .instrument(span.clone())
        .await;
    let outcome = match submitted {
        Ok(outcome) => outcome,
        Err(e) => {
            genace_trace::record_outcome(&span, &format!("error: {e}"));
            return Err(e.into());
        }
    };
    let (status, rec, replayed) = match &outcome {
        Submitted::New(rec) => {
            genace_trace::record_outcome(&span, "new");
            genace_trace::root_span(&id, started, vec![KeyValue::new("tenant", tenant.as_str().to_owned())]);
            (StatusCode::ACCEPTED, rec, false)
        }
        Submitted::Replayed(rec) => {
            genace_trace::record_outcome(&span, "replayed");
            (StatusCode::OK, rec, true)
        }
    };
    let mut body = view(&rec.for_tenant());
    if !replayed && api.expects_spend_hold(rec).await {
        body["hold"] = expected_spend_hold();
    }
    let mut builder = json_response(status).header(header::ETAG, etag(rec)).header(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/operations/{}", rec.operation_id)).expect("ids are ASCII"),
    );
    if replayed {
        builder = builder.header("Idempotent-Replayed", "true");
    }
    Ok(builder.body(Body::Text(body.to_string())).expect("valid response"))
}

pub(crate) async fn read<P: Ports>(api: &Api<P>, req: &Request, raw_id: &str) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let (rec, operator) = match Principal::read(req, &api.config)? {
        Principal::Operator(op) => (api.operator(&op).get(&id).await?, true),
        Principal::Tenant(tenant) => (api.get(&tenant, &id, api.clock.now()).await?, false),
    };
    let shown = if operator { rec.clone() } else { rec.for_tenant() };
    let mut body = view_with_links(&shown, &api.links(&rec).await);
    if operator {
        body["tenant_id"] = serde_json::json!(rec.tenant_id);
        // The decisions this version takes, from the lifecycle's own table.
        body["resolutions"] = serde_json::json!(genace_core::machine::resolutions_allowed(&rec, api.clock.now()));
    }
    if let Some(at) = rec.outputs_expire_at(api.config.policy.output_days) {
        body["outputs_expire_at"] = serde_json::json!(at);
    }
    let progress = api.progress(&rec).await;
    if let Some(queue) = queue_view(&rec, progress.queue.and_then(|q| q.place)) {
        body["queue"] = queue;
    }
    if let Some(view) = progress_view(&progress, operator) {
        body["progress"] = view;
    }
    let mut resp = operation_response(&rec, &body);
    if let Some(at) = progress.next_look_at {
        let seconds = seconds_until(at, api.clock.now());
        resp.headers_mut().insert(NEXT_LOOK_HEADER, HeaderValue::from(seconds));
    }
    Ok(resp)
}

/// The header of a `GET` of an unfinished operation that says, in whole
/// seconds, when to look again (the view's `progress.next_look_at`).
pub(crate) const NEXT_LOOK_HEADER: &str = "next-look-in";

/// 200 with an operation's view, its version as the ETag.
pub(crate) fn operation_response(rec: &genace_core::record::OperationRecord, body: &Value) -> Response<Body> {
    json_response(StatusCode::OK)
        .header(header::ETAG, etag(rec))
        .body(Body::Text(body.to_string()))
        .expect("valid response")
}

/// A change the owning tenant, or an operator in scope, asks of one
/// operation.
#[derive(Clone, Copy)]
pub(crate) enum Change {
    /// `POST /v1/operations/{id}/cancel`: taken back before its dispatch
    /// claim; 409 once a job may exist.
    Cancel,
    /// `DELETE /v1/operations/{id}/outputs`: every object stored for it
    /// deleted; 409 while a delivery may still run.
    EraseOutputs,
}

pub(crate) async fn change<P: Ports>(
    api: &Api<P>,
    req: &Request,
    raw_id: &str,
    change: Change,
) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let (rec, shown) = match (Principal::read(req, &api.config)?, change) {
        (Principal::Operator(op), Change::Cancel) => api.operator(&op).cancel(&id).await.map(|r| (r.clone(), r))?,
        (Principal::Operator(op), Change::EraseOutputs) => {
            api.operator(&op).erase_outputs(&id).await.map(|r| (r.clone(), r))?
        }
        (Principal::Tenant(tenant), Change::Cancel) => api.cancel(&tenant, &id).await.map(|r| {
            let shown = r.for_tenant();
            (r, shown)
        })?,
        (Principal::Tenant(tenant), Change::EraseOutputs) => api.erase_outputs(&tenant, &id).await.map(|r| {
            let shown = r.for_tenant();
            (r, shown)
        })?,
    };
    Ok(operation_response(&rec, &view_with_links(&shown, &[])))
}

/// The filter of a listing, from its query: each value parsed, or 400
/// naming the parameter.
pub(crate) fn list_filter(q: &lambda_http::aws_lambda_events::query_map::QueryMap) -> Result<ListFilter, Problem> {
    fn one_of<T: Copy>(
        q: &lambda_http::aws_lambda_events::query_map::QueryMap,
        name: &str,
        all: &[T],
        as_str: fn(T) -> &'static str,
    ) -> Result<Option<T>, Problem> {
        let Some(given) = q.first(name) else {
            return Ok(None);
        };
        all.iter()
            .copied()
            .find(|v| as_str(*v) == given)
            .map(Some)
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|v| as_str(*v)).collect();
                Problem::from(InvalidInput::new(name, format!("must be one of {}", names.join(", "))))
            })
    }
    let time = |name: &str| time_param(q, name);
    let key_prefix = q
        .first("key_prefix")
        .map(|p| {
            genace_core::domain::OperationKey::parse(p)
                .map(|k| k.as_str().to_owned())
                .map_err(|_| {
                    Problem::from(InvalidInput::new(
                        "key_prefix",
                        "must be 1-255 visible ASCII characters",
                    ))
                })
        })
        .transpose()?;
    let (created_after, created_before) = (time("created_after")?, time("created_before")?);
    // An empty range is a mistake, not an empty page: the store's key range
    // would be inverted.
    if let (Some(after), Some(before)) = (created_after, created_before)
        && after > before
    {
        return Err(InvalidInput::new("created_after", "must not be later than created_before").into());
    }
    Ok(ListFilter {
        phase: one_of(q, "phase", &Phase::ALL, Phase::as_str)?,
        delivery_state: one_of(q, "delivery_state", &DeliveryState::ALL, DeliveryState::as_str)?,
        created_after,
        created_before,
        key_prefix,
    })
}

/// GET /v1/operations: a page of the caller's operations, newest first. An
/// operator lists one tenant's (`tenant`) or every tenant's in its scope.
pub(crate) async fn list<P: Ports>(api: &Api<P>, req: &Request) -> Result<Response<Body>, Problem> {
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let filter = list_filter(&q)?;
    let limit = page_limit(&q)?;
    let cursor = q.first("cursor");
    let tenant = tenant_param(&q)?;
    let (page, operator) = match Principal::read(req, &api.config)? {
        Principal::Operator(op) => (api.operator(&op).list(tenant, &filter, limit, cursor).await?, true),
        Principal::Tenant(own) => {
            if tenant.is_some_and(|t| t != own) {
                return Err(InvalidInput::new("tenant", "an application lists only its own operations").into());
            }
            (api.list(&own, &filter, limit, cursor).await?, false)
        }
    };
    // An operator's list spans tenants: each view names its own.
    let progress = api.progress_of(&page.records).await;
    let operations: Vec<Value> = page
        .records
        .iter()
        .zip(&progress)
        .map(|(rec, progress)| {
            let mut v = if operator {
                let mut v = view(rec);
                v["tenant_id"] = json!(rec.tenant_id);
                v
            } else {
                view(&rec.for_tenant())
            };
            if let Some(p) = progress_view(progress, operator) {
                v["progress"] = p;
            }
            v
        })
        .collect();
    Ok(ok_json(
        json!({"operations": operations, "next_cursor": page.next_cursor}),
    ))
}
