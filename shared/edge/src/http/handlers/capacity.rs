//! `/v1/capacity` and a tenant's limit of jobs in flight: operators only.

use genace_core::domain::TenantId;
use genace_core::requests::InFlightLimit;
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::{Body, Request, Response};
use serde_json::json;

use super::ok_json;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{MAX_SMALL_BODY_BYTES, parsed_body};
use crate::http::views::capacity_view;

pub(crate) async fn capacity<P: Ports>(api: &Api<P>, op: &Operator, _req: &Request) -> Result<Response<Body>, Problem> {
    let report = api.operator(op).capacity().await?;
    Ok(ok_json(capacity_view(&report)))
}

/// The body of a PUT of a limit of jobs in flight.
fn in_flight_limit(req: &Request) -> Result<Option<u32>, Problem> {
    Ok(parsed_body(req, "limit", MAX_SMALL_BODY_BYTES, InFlightLimit::parse)?.0)
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
