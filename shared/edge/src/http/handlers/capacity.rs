//! `/v1/capacity` and a tenant's limit of jobs in flight: operators only.

use genace_core::domain::{InvalidInput, TenantId};
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::{Body, Request, Response};
use serde_json::{Value, json};

use super::ok_json;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{MAX_SMALL_BODY_BYTES, json_body, only_members};
use crate::http::views::capacity_view;

pub(crate) async fn capacity<P: Ports>(api: &Api<P>, op: &Operator, _req: &Request) -> Result<Response<Body>, Problem> {
    let report = api.operator(op).capacity().await?;
    Ok(ok_json(capacity_view(&report)))
}

/// The body of a PUT of a limit of jobs in flight: `{"max_in_flight": N}`
/// with N a whole number from 1 to 10000, or null for none.
pub(crate) fn in_flight_limit(req: &Request) -> Result<Option<u32>, Problem> {
    let body = json_body(req, "limit", MAX_SMALL_BODY_BYTES)?;
    only_members(&body, &["max_in_flight"])?;
    let bound = genace_core::capacity::MAX_IN_FLIGHT_LIMIT;
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
pub(crate) async fn set_account_limit<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: Request,
) -> Result<Response<Body>, Problem> {
    let limit = in_flight_limit(&req)?;
    let report = api.operator(op).set_account_limit(limit).await?;
    Ok(ok_json(capacity_view(&report)))
}

pub(crate) async fn set_max_in_flight<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let limit = in_flight_limit(&req)?;
    let ledger = api.operator(op).set_max_in_flight(&tenant, limit).await?;
    Ok(ok_json(json!({
        "tenant_id": ledger.tenant_id,
        "max_in_flight": ledger.max_in_flight,
        "in_flight": ledger.totals.in_flight,
        "waiting": ledger.totals.waiting,
    })))
}
