//! The HTTP router of intake: API Gateway HTTP API (payload v2) requests
//! in, JSON or `application/problem+json` responses out. Path and query come
//! from lambda_http's request extensions; the caller from [`Principal`].

use genace_core::domain::{Intent, InvalidInput, OperationId, RemoteJobId, TenantId};
use genace_core::machine::Resolution;
use genace_core::record::{CaseReason, DeliveryState, Phase};
use genace_stages::api::intake::{Intake, Submitted};
use genace_stages::api::webhook_admin::WebhookRequest;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::list::ListFilter;
use genace_stages::ports::outputs::ObjectStore;
use genace_stages::ports::queue::WorkQueue;
use genace_stages::ports::table::OperationStore;
use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Value, json};

use super::auth::Principal;
use super::problem::{Problem, method_not_allowed, not_found};
use super::request::{MAX_SMALL_BODY_BYTES, json_body, page_limit, tenant_param};
use super::views::{
    capacity_view, case_view, credits_view, etag, expected_spend_hold, queue_view, view, view_with_links, webhook_view,
};

fn json_response(status: StatusCode) -> lambda_http::http::response::Builder {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
}

enum Route {
    Operations,
    Operation(String),
    Resolution(String),
    Cancel(String),
    Outputs(String),
    Cases,
    CaseCounts,
    MyCredits,
    AllCredits,
    Capacity,
    SpendLimit(String),
    MaxInFlight(String),
    Webhook(String),
    Endpoints(super::webhook_endpoints::EndpointRoute),
}

/// The route of a request, and the operation id in its path. API Gateway
/// names the id in the path parameters; a request made without them (a
/// local server) gives it by position.
fn route(req: &Request) -> Option<Route> {
    let path = req.uri().path();
    let named = req
        .path_parameters_ref()
        .and_then(|p| p.first("operation_id"))
        .map(str::to_owned);
    let segments: Vec<&str> = path
        .trim_end_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(endpoints) = super::webhook_endpoints::EndpointRoute::of(req, &segments) {
        return Some(Route::Endpoints(endpoints));
    }
    match segments.as_slice() {
        [.., "v1", "operations"] => Some(Route::Operations),
        [.., "v1", "operations", id] => Some(Route::Operation(named.unwrap_or_else(|| (*id).to_owned()))),
        [.., "v1", "operations", id, "resolution"] => {
            Some(Route::Resolution(named.unwrap_or_else(|| (*id).to_owned())))
        }
        [.., "v1", "operations", id, "cancel"] => Some(Route::Cancel(named.unwrap_or_else(|| (*id).to_owned()))),
        [.., "v1", "operations", id, "outputs"] => Some(Route::Outputs(named.unwrap_or_else(|| (*id).to_owned()))),
        [.., "v1", "reconciliation-cases"] => Some(Route::Cases),
        [.., "v1", "reconciliation-cases", "counts"] => Some(Route::CaseCounts),
        [.., "v1", "tenants", "me", "credits"] => Some(Route::MyCredits),
        [.., "v1", "credits"] => Some(Route::AllCredits),
        [.., "v1", "capacity"] => Some(Route::Capacity),
        [.., "v1", "tenants", tenant, "webhook"] => {
            let named = req.path_parameters_ref().and_then(|p| p.first("tenant_id"));
            Some(Route::Webhook(named.unwrap_or(tenant).to_owned()))
        }
        [.., "v1", "tenants", tenant, "max-in-flight"] => {
            let named = req.path_parameters_ref().and_then(|p| p.first("tenant_id"));
            Some(Route::MaxInFlight(named.unwrap_or(tenant).to_owned()))
        }
        [.., "v1", "tenants", tenant, "spend-limit"] => {
            let named = req.path_parameters_ref().and_then(|p| p.first("tenant_id"));
            Some(Route::SpendLimit(named.unwrap_or(tenant).to_owned()))
        }
        _ => None,
    }
}

/// Handles one intake request. Never fails: every outcome is a response.
pub async fn handle<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Response<Body> {
    let instance = req.uri().path().to_owned();
    match route_request(intake, req).await {
        Ok(resp) => resp,
        Err(problem) => problem.into_response(&instance),
    }
}

async fn route_request<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Result<Response<Body>, Problem> {
    match (route(&req), req.method()) {
        (Some(Route::Operations), &Method::POST) => create(intake, req).await,
        (Some(Route::Operations), &Method::GET) => list(intake, &req).await,
        (Some(Route::Operations), _) => Err(method_not_allowed("GET, POST")),
        (Some(Route::Operation(id)), &Method::GET) => read(intake, &req, &id).await,
        (Some(Route::Operation(_)), _) => Err(method_not_allowed("GET")),
        (Some(Route::Resolution(id)), &Method::POST) => resolve(intake, req, &id).await,
        (Some(Route::Resolution(_)), _) => Err(method_not_allowed("POST")),
        (Some(Route::Cancel(id)), &Method::POST) => change(intake, &req, &id, Change::Cancel).await,
        (Some(Route::Cancel(_)), _) => Err(method_not_allowed("POST")),
        (Some(Route::Outputs(id)), &Method::DELETE) => change(intake, &req, &id, Change::EraseOutputs).await,
        (Some(Route::Outputs(_)), _) => Err(method_not_allowed("DELETE")),
        (Some(Route::Cases), &Method::GET) => list_cases(intake, &req).await,
        (Some(Route::Cases), _) => Err(method_not_allowed("GET")),
        (Some(Route::CaseCounts), &Method::GET) => case_counts(intake, &req).await,
        (Some(Route::CaseCounts), _) => Err(method_not_allowed("GET")),
        (Some(Route::MyCredits), &Method::GET) => my_credits(intake, &req).await,
        (Some(Route::MyCredits), _) => Err(method_not_allowed("GET")),
        (Some(Route::AllCredits), &Method::GET) => all_credits(intake, &req).await,
        (Some(Route::AllCredits), _) => Err(method_not_allowed("GET")),
        (Some(Route::Capacity), &Method::GET) => capacity(intake, &req).await,
        (Some(Route::Capacity), &Method::PUT) => set_account_limit(intake, req).await,
        (Some(Route::Capacity), _) => Err(method_not_allowed("GET, PUT")),
        (Some(Route::SpendLimit(tenant)), &Method::PUT) => set_spend_limit(intake, req, &tenant).await,
        (Some(Route::SpendLimit(_)), _) => Err(method_not_allowed("PUT")),
        (Some(Route::MaxInFlight(tenant)), &Method::PUT) => set_max_in_flight(intake, req, &tenant).await,
        (Some(Route::MaxInFlight(_)), _) => Err(method_not_allowed("PUT")),
        (Some(Route::Webhook(tenant)), m) if [Method::GET, Method::PUT, Method::DELETE].contains(m) => {
            webhook(intake, req, &tenant).await
        }
        (Some(Route::Webhook(_)), _) => Err(method_not_allowed("GET, PUT, DELETE")),
        (Some(Route::Endpoints(route)), _) => super::webhook_endpoints::handle(intake, req, route).await,
        (None, _) => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "no-route",
            "No such route",
            "See the API description for the routes.",
        )),
    }
}

async fn create<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Result<Response<Body>, Problem> {
    let principal = Principal::read(&req, &intake.config)?;
    let tenant = principal.tenant(&intake.config)?;
    let value = json_body(&req, "intent", intake.config.max_body_bytes)?;
    let header_key = match req.headers().get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Problem::from(InvalidInput::new("Idempotency-Key", "must be visible ASCII")))?,
        ),
    };
    let intent = Intent::parse(&value, header_key)?;
    if intent.fault.is_some() && !intake.config.fault_injection {
        return Err(InvalidInput::new("fault", "fault injection is disabled in this deployment").into());
    }
    let outcome = intake.submit(tenant, &intent, intake.clock.now()).await?;
    let (status, rec, replayed) = match &outcome {
        Submitted::New(rec) => (StatusCode::ACCEPTED, rec, false),
        Submitted::Replayed(rec) => (StatusCode::OK, rec, true),
    };
    let mut body = view(rec);
    if !replayed && intake.expects_spend_hold(rec).await {
        body["hold"] = expected_spend_hold();
    }
    let mut builder = json_response(status).header(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/operations/{}", rec.operation_id)).expect("ids are ASCII"),
    );
    if replayed {
        builder = builder.header("Idempotent-Replayed", "true");
    }
    Ok(builder.body(Body::Text(body.to_string())).expect("valid response"))
}

async fn read<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
    raw_id: &str,
) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let (rec, operator) = match Principal::read(req, &intake.config)? {
        Principal::Operator(op) => (intake.admin(&op).get(&id).await?, true),
        Principal::Tenant(tenant) => (intake.get(&tenant, &id, intake.clock.now()).await?, false),
    };
    let mut body = view_with_links(&rec, &intake.links(&rec).await);
    if operator {
        body["tenant_id"] = serde_json::json!(rec.tenant_id);
        // The decisions this version takes, from the lifecycle's own table.
        body["resolutions"] = serde_json::json!(genace_core::machine::resolutions_allowed(&rec, intake.clock.now()));
    }
    if let Some(at) = rec.outputs_expire_at(intake.config.policy.output_days) {
        body["outputs_expire_at"] = serde_json::json!(at);
    }
    if let Some(position) = genace_stages::pipeline::wake::queue_position(&intake.store, &rec).await {
        body["queue"] = queue_view(&rec, Some(position)).unwrap_or_default();
    }
    Ok(operation_response(&rec, &body))
}

/// 200 with an operation's view, its version as the ETag.
fn operation_response(rec: &genace_core::record::OperationRecord, body: &Value) -> Response<Body> {
    json_response(StatusCode::OK)
        .header(header::ETAG, etag(rec))
        .body(Body::Text(body.to_string()))
        .expect("valid response")
}

/// A change the owning tenant, or an operator in scope, asks of one
/// operation.
#[derive(Clone, Copy)]
enum Change {
    /// `POST /v1/operations/{id}/cancel`: taken back before its dispatch
    /// claim; 409 once a job may exist.
    Cancel,
    /// `DELETE /v1/operations/{id}/outputs`: every object stored for it
    /// deleted; 409 while a delivery may still run.
    EraseOutputs,
}

async fn change<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
    raw_id: &str,
    change: Change,
) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let rec = match (Principal::read(req, &intake.config)?, change) {
        (Principal::Operator(op), Change::Cancel) => intake.admin(&op).cancel(&id).await?,
        (Principal::Operator(op), Change::EraseOutputs) => intake.admin(&op).erase_outputs(&id).await?,
        (Principal::Tenant(tenant), Change::Cancel) => intake.cancel(&tenant, &id).await?,
        (Principal::Tenant(tenant), Change::EraseOutputs) => intake.erase_outputs(&tenant, &id).await?,
    };
    Ok(operation_response(&rec, &view_with_links(&rec, &[])))
}

/// The version named by `If-Match`: 428 when absent; 400 unless it is one
/// entity tag of this API's form (`"<version>"`, optionally weak), as the
/// OpenAPI document's pattern says (`*`, a list, an empty value included);
/// the resolution then answers 412 if that version is not the current one.
fn if_match_version(req: &Request) -> Result<u64, Problem> {
    let raw = req
        .headers()
        .get(header::IF_MATCH)
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

/// 400 unless the body is an object whose members are all in `allowed`:
/// unknown members are refused, as the OpenAPI document says
/// (`additionalProperties: false`), so a misspelt field is never ignored.
fn only_members(body: &Value, allowed: &[&str]) -> Result<(), Problem> {
    let obj = body
        .as_object()
        .ok_or_else(|| Problem::from(InvalidInput::new("body", "must be a JSON object")))?;
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(InvalidInput::new(unknown.clone(), "is not a known member").into()),
        None => Ok(()),
    }
}

/// Longest reason an operator may give for a resolution, in characters.
const MAX_REASON_CHARS: usize = 512;

fn ok_json(body: Value) -> Response<Body> {
    json_response(StatusCode::OK)
        .body(Body::Text(body.to_string()))
        .expect("valid response")
}

async fn my_credits<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let principal = Principal::read(req, &intake.config)?;
    let ledger = intake.credits(principal.tenant(&intake.config)?).await?;
    Ok(ok_json(credits_view(&ledger)))
}

async fn all_credits<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(req, &intake.config)?.operator(&intake.config)?;
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let page = intake
        .admin(&op)
        .all_credits(page_limit(&q)?, q.first("cursor"))
        .await?;
    let tenants: Vec<Value> = page.ledgers.iter().map(credits_view).collect();
    Ok(ok_json(json!({"tenants": tenants, "next_cursor": page.next})))
}

async fn capacity<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(req, &intake.config)?.operator(&intake.config)?;
    let report = intake.admin(&op).capacity().await?;
    Ok(ok_json(capacity_view(&report)))
}

/// Largest spend limit accepted, in credits.
const MAX_SPEND_LIMIT: f64 = 1e12;

async fn set_spend_limit<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(&req, &intake.config)?.operator(&intake.config)?;
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let body = json_body(&req, "spend limit", MAX_SMALL_BODY_BYTES)?;
    only_members(&body, &["spend_limit"])?;
    let limit = match body.get("spend_limit") {
        Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(v) if (0.0..=MAX_SPEND_LIMIT).contains(&v) => Some(genace_core::ledger::millis(v)),
            _ => return Err(InvalidInput::new("spend_limit", "must be between 0 and 1e12 credits").into()),
        },
        _ => return Err(InvalidInput::new("spend_limit", "is required: a number of credits, or null for none").into()),
    };
    let ledger = intake.admin(&op).set_spend_limit(&tenant, limit).await?;
    Ok(ok_json(credits_view(&ledger)))
}

/// The body of a PUT of a limit of jobs in flight: `{"max_in_flight": N}`
/// with N a whole number from 1 to 10000, or null for none.
fn in_flight_limit(req: &Request) -> Result<Option<u32>, Problem> {
    let body = json_body(req, "limit", MAX_SMALL_BODY_BYTES)?;
    only_members(&body, &["max_in_flight"])?;
    let bound = genace_core::ledger::MAX_IN_FLIGHT_LIMIT;
    match body.get("max_in_flight") {
        Some(Value::Null) => Ok(None),
        // A whole number, as JSON Schema counts one: `3` and `3.0` alike.
        Some(Value::Number(n)) => match n
            .as_f64()
            .filter(|v| v.fract() == 0.0 && *v >= 1.0 && *v <= f64::from(bound))
        {
            Some(v) => Ok(Some(v as u32)),
            _ => Err(InvalidInput::new("max_in_flight", "must be a whole number from 1 to 10000").into()),
        },
        _ => Err(InvalidInput::new("max_in_flight", "is required: a number of jobs, or null for none").into()),
    }
}

/// PUT /v1/capacity: the operator's limit of the whole account's jobs in
/// flight (null: the deployment's again).
async fn set_account_limit<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(&req, &intake.config)?.operator(&intake.config)?;
    let limit = in_flight_limit(&req)?;
    let report = intake.admin(&op).set_account_limit(limit).await?;
    Ok(ok_json(capacity_view(&report)))
}

async fn set_max_in_flight<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(&req, &intake.config)?.operator(&intake.config)?;
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let limit = in_flight_limit(&req)?;
    let ledger = intake.admin(&op).set_max_in_flight(&tenant, limit).await?;
    Ok(ok_json(json!({
        "tenant_id": ledger.tenant_id,
        "max_in_flight": ledger.max_in_flight,
        "in_flight": ledger.totals.in_flight,
        "waiting": ledger.totals.waiting,
    })))
}

/// GET, PUT or DELETE a tenant's webhook (operators only).
async fn webhook<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(&req, &intake.config)?.operator(&intake.config)?;
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let config = match *req.method() {
        Method::PUT => {
            let body = json_body(&req, "webhook", MAX_SMALL_BODY_BYTES)?;
            only_members(&body, &["url", "secret_id", "events"])?;
            let request = WebhookRequest::parse(&body, &intake.config.webhook_url_policy(), &tenant)?;
            Some(intake.admin(&op).set_webhook(&tenant, request).await?)
        }
        Method::DELETE => {
            intake.admin(&op).remove_webhook(&tenant).await?;
            None
        }
        _ => intake.admin(&op).webhook(&tenant).await?,
    };
    Ok(ok_json(webhook_view(tenant.as_str(), config.as_ref())))
}

/// The filter of a listing, from its query: each value parsed, or 400
/// naming the parameter.
fn list_filter(q: &lambda_http::aws_lambda_events::query_map::QueryMap) -> Result<ListFilter, Problem> {
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
    Ok(ListFilter {
        phase: one_of(q, "phase", &Phase::ALL, Phase::as_str)?,
        delivery_state: one_of(q, "delivery_state", &DeliveryState::ALL, DeliveryState::as_str)?,
        created_after: time("created_after")?,
        created_before: time("created_before")?,
        key_prefix,
    })
}

/// The query parameter `name` as an RFC 3339 time, if given.
fn time_param(
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

/// GET /v1/operations: a page of the caller's operations, newest first. An
/// operator lists one tenant's (`tenant`) or every tenant's in its scope.
async fn list<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let filter = list_filter(&q)?;
    let limit = page_limit(&q)?;
    let cursor = q.first("cursor");
    let tenant = tenant_param(&q)?;
    let (page, operator) = match Principal::read(req, &intake.config)? {
        Principal::Operator(op) => (intake.admin(&op).list(tenant, &filter, limit, cursor).await?, true),
        Principal::Tenant(own) => {
            if tenant.is_some_and(|t| t != own) {
                return Err(InvalidInput::new("tenant", "an application lists only its own operations").into());
            }
            (intake.list(&own, &filter, limit, cursor).await?, false)
        }
    };
    // An operator's list spans tenants: each view names its own.
    let operations: Vec<Value> = page
        .records
        .iter()
        .map(|rec| {
            let mut v = view(rec);
            if operator {
                v["tenant_id"] = json!(rec.tenant_id);
            }
            v
        })
        .collect();
    Ok(ok_json(
        json!({"operations": operations, "next_cursor": page.next_cursor}),
    ))
}

async fn list_cases<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(req, &intake.config)?.operator(&intake.config)?;
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let tenant = tenant_param(&q)?;
    let reason = q
        .first("reason")
        .map(|r| CaseReason::parse(r).ok_or_else(|| Problem::from(InvalidInput::new("reason", "is not a case reason"))))
        .transpose()?;
    let opened_before = time_param(&q, "opened_before")?;
    let limit = page_limit(&q)?;
    let filter = genace_stages::ports::table::CaseFilter { reason, opened_before };
    let page = intake
        .admin(&op)
        .cases(tenant, filter, limit, q.first("cursor"))
        .await?;
    let cases: Vec<Value> = page.records.iter().map(case_view).collect();
    Ok(ok_json(json!({"cases": cases, "next_cursor": page.next})))
}

/// GET /v1/reconciliation-cases/counts: open cases per reason, with the
/// oldest of each, over the operator's scope (or `tenant`).
async fn case_counts<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(req, &intake.config)?.operator(&intake.config)?;
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let counts = intake.admin(&op).case_counts(tenant_param(&q)?).await?;
    let open: u64 = counts.iter().map(|c| c.open).sum();
    let reasons: Vec<Value> = counts
        .iter()
        .map(|c| json!({"reason": c.reason, "open": c.open, "oldest_opened_at": c.oldest}))
        .collect();
    Ok(ok_json(json!({"open": open, "reasons": reasons})))
}

async fn resolve<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
    raw_id: &str,
) -> Result<Response<Body>, Problem> {
    let op = Principal::read(&req, &intake.config)?.operator(&intake.config)?;
    let body = json_body(&req, "resolution", MAX_SMALL_BODY_BYTES)?;
    only_members(&body, &["action", "reason", "job_id"])?;
    let text = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .filter(|s| !genace_core::domain::is_blank(s))
            .map(str::trim)
    };
    let reason = text("reason").ok_or_else(|| Problem::from(InvalidInput::new("reason", "is required")))?;
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(InvalidInput::new("reason", format!("must be at most {MAX_REASON_CHARS} characters")).into());
    }
    // A job id, whatever the action, is a job id: a number or a blank one
    // is refused, never ignored.
    if let Some(job) = body.get("job_id") {
        let raw = job
            .as_str()
            .ok_or_else(|| Problem::from(InvalidInput::new("job_id", "must be a string")))?;
        RemoteJobId::parse(raw)?;
    }
    let resolution = match text("action") {
        Some("attach_remote_job") => {
            let raw = text("job_id")
                .ok_or_else(|| Problem::from(InvalidInput::new("job_id", "is required to attach a job")))?;
            Resolution::AttachRemoteJob {
                job_id: RemoteJobId::parse(raw)?.into_string(),
            }
        }
        Some("confirm_not_created") => Resolution::ConfirmNotCreated,
        Some("release_hold") => Resolution::ReleaseHold,
        Some("mark_settled") => Resolution::MarkSettled,
        Some("redrive_delivery") => Resolution::RedriveDelivery,
        Some("abandon") => Resolution::Abandon,
        _ => {
            return Err(InvalidInput::new(
                "action",
                "must be attach_remote_job, confirm_not_created, release_hold, mark_settled, redrive_delivery or abandon",
            )
            .into());
        }
    };
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let version = if_match_version(&req)?;
    let rec = intake.admin(&op).resolve(&id, &resolution, reason, version).await?;
    let body = view_with_links(&rec, &intake.links(&rec).await);
    Ok(operation_response(&rec, &body))
}
