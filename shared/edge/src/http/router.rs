//! The HTTP router of the API: API Gateway HTTP API (payload v2) requests
//! in, JSON or `application/problem+json` responses out. The route comes
//! from the one table in [`super::routes`]; an operator route reads its
//! operator before the handler runs; path parameters come from API
//! Gateway's names, or by position from a request made without them (a
//! local server).

use genace_stages::api::context::Api;
use genace_stages::ports::Ports;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, RequestExt, Response};

use super::auth::Principal;
use super::handlers::operations::Change;
use super::handlers::webhooks::{endpoints as webhook_endpoints, settings as webhook};
use super::handlers::{capacity, cases, credits, operations, trace};
use super::problem::{Problem, method_not_allowed};
use super::routes::{CallerHandler, Handler, Miss, OperatorHandler, find};

/// Handles one request to the API. Never fails: every outcome is a response.
pub async fn handle<P: Ports>(api: &Api<P>, req: Request) -> Response<Body> {
    let instance = req.uri().path().to_owned();
    let response = match route_request(api, req).await {
        Ok(resp) => resp,
        Err(problem) => problem.into_response(&instance),
    };
    // The request's spans leave before the function is frozen, within a
    // bound: a slow or unreachable receiver delays no answer by more, and
    // what it has not taken by then is dropped.
    if tokio::time::timeout(SPAN_EXPORT_BOUND, genace_trace::flush())
        .await
        .is_err()
    {
        tracing::warn!(
            bound_ms = SPAN_EXPORT_BOUND.as_millis() as u64,
            "the trace receiver took longer than the bound; the request's spans were dropped"
        );
    }
    response
}

/// The longest an API response waits for its spans to leave.
pub const SPAN_EXPORT_BOUND: std::time::Duration = std::time::Duration::from_millis(250);

async fn route_request<P: Ports>(api: &Api<P>, req: Request) -> Result<Response<Body>, Problem> {
    let found = find(req.method(), req.uri().path()).map_err(|miss| match miss {
        Miss::Method(allow) => method_not_allowed(allow),
        Miss::NoRoute => Problem::new(
            StatusCode::NOT_FOUND,
            "no-route",
            "No such route",
            "See the API description for the routes.",
        ),
    })?;
    let param = |name: &str| {
        req.path_parameters_ref()
            .and_then(|p| p.first(name))
            .unwrap_or_else(|| found.param(name))
            .to_owned()
    };
    match found.route.handler {
        Handler::Caller(handler) => {
            let id = param("operation_id");
            caller_route(api, req, handler, &id).await
        }
        Handler::Operator(handler) => {
            let (id, tenant) = (param("operation_id"), param("tenant_id"));
            let op = Principal::read(&req, &api.config)?.operator(&api.config)?;
            operator_route(api, req, &op, handler, &id, &tenant).await
        }
        Handler::Endpoints(handler) => {
            let id = param("endpoint_id");
            webhook_endpoints::handle(api, req, handler, &id).await
        }
    }
}

/// A route of the owning tenant or an operator in scope: the handler reads which.
async fn caller_route<P: Ports>(
    api: &Api<P>,
    req: Request,
    handler: CallerHandler,
    id: &str,
) -> Result<Response<Body>, Problem> {
    match handler {
        CallerHandler::CreateOperation => operations::create(api, req).await,
        CallerHandler::ListOperations => operations::list(api, &req).await,
        CallerHandler::ReadOperation => operations::read(api, &req, id).await,
        CallerHandler::CancelOperation => operations::change(api, &req, id, Change::Cancel).await,
        CallerHandler::EraseOutputs => operations::change(api, &req, id, Change::EraseOutputs).await,
        CallerHandler::MyCredits => credits::my_credits(api, &req).await,
    }
}

/// An operator's route, with the operator already read.
async fn operator_route<P: Ports>(
    api: &Api<P>,
    req: Request,
    op: &genace_stages::api::operator::Operator,
    handler: OperatorHandler,
    id: &str,
    tenant: &str,
) -> Result<Response<Body>, Problem> {
    match handler {
        OperatorHandler::Resolve => cases::resolve(api, op, req, id).await,
        OperatorHandler::ReadTrace => trace::trace(api, op, id).await,
        OperatorHandler::ListCases => cases::list_cases(api, op, &req).await,
        OperatorHandler::CountCases => cases::case_counts(api, op, &req).await,
        OperatorHandler::AllCredits => credits::all_credits(api, op, &req).await,
        OperatorHandler::SetSpendLimit => credits::set_spend_limit(api, op, req, tenant).await,
        OperatorHandler::ReadCapacity => capacity::capacity(api, op, &req).await,
        OperatorHandler::SetAccountLimit => capacity::set_account_limit(api, op, req).await,
        OperatorHandler::SetMaxInFlight => capacity::set_max_in_flight(api, op, req, tenant).await,
        OperatorHandler::ReadWebhook | OperatorHandler::SetWebhook | OperatorHandler::RemoveWebhook => {
            webhook::webhook(api, op, req, tenant).await
        }
    }
}
