//! Credits: a tenant's own, every tenant's, and a tenant's spend limit.

use genace_core::domain::TenantId;
use genace_core::requests::SpendLimit;
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Value, json};

use super::ok_json;
use crate::http::auth::Principal;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{MAX_SMALL_BODY_BYTES, page_limit, parsed_body};
use crate::http::views::credits_view;

pub(crate) async fn my_credits<P: Ports>(api: &Api<P>, req: &Request) -> Result<Response<Body>, Problem> {
    let principal = Principal::read(req, &api.config)?;
    let ledger = api.credits(principal.tenant(&api.config)?).await?;
    Ok(ok_json(credits_view(&ledger)))
}

pub(crate) async fn all_credits<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let q = req.query_string_parameters_ref().cloned().unwrap_or_default();
    let page = api.operator(op).all_credits(page_limit(&q)?, q.first("cursor")).await?;
    let tenants: Vec<Value> = page.ledgers.iter().map(credits_view).collect();
    Ok(ok_json(json!({"tenants": tenants, "next_cursor": page.next})))
}

pub(crate) async fn set_spend_limit<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let limit = parsed_body(&req, "spend limit", MAX_SMALL_BODY_BYTES, SpendLimit::parse)?.0;
    let ledger = api.operator(op).set_spend_limit(&tenant, limit).await?;
    Ok(ok_json(credits_view(&ledger)))
}
