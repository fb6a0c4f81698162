//! `/v1/reconciliation-cases` and an operation's resolution: operators only.

use genace_core::domain::{InvalidInput, OperationId};
use genace_core::record::CaseReason;
use genace_core::requests::ResolutionRequest;
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Value, json};

use super::ok_json;
use super::operations::operation_response;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{MAX_SMALL_BODY_BYTES, if_match_version, page_limit, parsed_body, tenant_param, time_param};
use crate::http::views::{case_view, view_with_links};

pub(crate) async fn list_cases<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let tenant = tenant_param(&q)?;
    let reason = q
        .first("reason")
        .map(|r| CaseReason::parse(r).ok_or_else(|| Problem::from(InvalidInput::new("reason", "is not a case reason"))))
        .transpose()?;
    let opened_before = time_param(&q, "opened_before")?;
    let limit = page_limit(&q)?;
    let filter = genace_stages::ports::table::CaseFilter { reason, opened_before };
    let page = api.operator(op).cases(tenant, filter, limit, q.first("cursor")).await?;
    let cases: Vec<Value> = page.records.iter().map(case_view).collect();
    Ok(ok_json(json!({"cases": cases, "next_cursor": page.next})))
}

/// GET /v1/reconciliation-cases/counts: open cases per reason, with the
/// oldest of each, over the operator's scope (or `tenant`).
pub(crate) async fn case_counts<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let counts = api.operator(op).case_counts(tenant_param(&q)?).await?;
    let open: u64 = counts.iter().map(|c| c.open).sum();
    let reasons: Vec<Value> = counts
        .iter()
        .map(|c| json!({"reason": c.reason, "open": c.open, "oldest_opened_at": c.oldest}))
        .collect();
    Ok(ok_json(json!({"open": open, "reasons": reasons})))
}

pub(crate) async fn resolve<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: Request,
    raw_id: &str,
) -> Result<Response<Body>, Problem> {
    let request = parsed_body(&req, "resolution", MAX_SMALL_BODY_BYTES, ResolutionRequest::parse)?;
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let version = if_match_version(&req)?;
    let rec = api
        .operator(op)
        .resolve(&id, &request.resolution, &request.reason, version)
        .await?;
    let body = view_with_links(&rec, &api.links(&rec).await);
    Ok(operation_response(&rec, &body))
}
