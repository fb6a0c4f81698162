//! `GET /v1/operations/{operation_id}/trace`: an operation's trace, for
//! operators.

use genace_core::domain::OperationId;
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::{Body, Response};

use super::ok_json;
use crate::http::problem::{Problem, not_found};
use crate::http::views::trace_view;

pub(crate) async fn trace<P: Ports>(api: &Api<P>, op: &Operator, raw_id: &str) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let (trace_id, found) = api.operator(op).trace(&id).await?;
    Ok(ok_json(trace_view(id.as_str(), &trace_id, &found)))
}
