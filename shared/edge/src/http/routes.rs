//! The API's one route table: each row a method, a path, who may call it
//! and the handler, read top to bottom. [`find`] matches a request against
//! it: the first row whose path fits names the resource, its rows' methods
//! are the ones allowed (405 otherwise, before anyone is asked who they
//! are), and the path's `{parameters}` come back by name. A path may sit
//! under a prefix (an API Gateway stage): rows match its last segments.
//!
//! `shared/app/tests/openapi.rs` holds the table to the OpenAPI document,
//! row for row.

use lambda_http::http::Method;

/// Who may call a route, and so which handlers it has: the scope is the
/// handler's enum, so a row cannot name a handler of another scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// An application for its own tenant, or an operator in scope; the
    /// handler reads which.
    Caller(CallerHandler),
    /// Operators only: an application's token is answered 403.
    Operator(OperatorHandler),
    /// An application whose token has the endpoints scope, or an operator
    /// naming the tenant.
    Endpoints(EndpointHandler),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerHandler {
    CreateOperation,
    ListOperations,
    ReadOperation,
    CancelOperation,
    EraseOutputs,
    MyCredits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorHandler {
    Resolve,
    ReadTrace,
    ListCases,
    CountCases,
    AllCredits,
    ReadCapacity,
    SetAccountLimit,
    SetSpendLimit,
    SetMaxInFlight,
    ReadWebhook,
    SetWebhook,
    RemoveWebhook,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointHandler {
    List,
    Create,
    Read,
    Update,
    Delete,
    Rotate,
    Attempts,
    Replay,
    Recover,
}

/// One row of the table.
#[derive(Debug)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub handler: Handler,
}

const fn row(method: Method, path: &'static str, handler: Handler) -> Route {
    Route { method, path, handler }
}

use CallerHandler as C;
use EndpointHandler as E;
use Handler::{Caller, Endpoints, Operator};
use OperatorHandler as O;

/// Every route of the API. Rows of one path are listed together, in the
/// order their methods are named in a 405's `Allow`.
pub static ROUTES: [Route; 27] = [
    row(Method::GET, "/v1/webhooks/endpoints", Endpoints(E::List)),
    row(Method::POST, "/v1/webhooks/endpoints", Endpoints(E::Create)),
    row(Method::GET, "/v1/webhooks/endpoints/{endpoint_id}", Endpoints(E::Read)),
    row(
        Method::PATCH,
        "/v1/webhooks/endpoints/{endpoint_id}",
        Endpoints(E::Update),
    ),
    row(
        Method::DELETE,
        "/v1/webhooks/endpoints/{endpoint_id}",
        Endpoints(E::Delete),
    ),
    row(
        Method::POST,
        "/v1/webhooks/endpoints/{endpoint_id}/rotate",
        Endpoints(E::Rotate),
    ),
    row(
        Method::GET,
        "/v1/webhooks/endpoints/{endpoint_id}/attempts",
        Endpoints(E::Attempts),
    ),
    row(
        Method::POST,
        "/v1/webhooks/endpoints/{endpoint_id}/replay",
        Endpoints(E::Replay),
    ),
    row(
        Method::POST,
        "/v1/webhooks/endpoints/{endpoint_id}/recover",
        Endpoints(E::Recover),
    ),
    row(Method::GET, "/v1/operations", Caller(C::ListOperations)),
    row(Method::POST, "/v1/operations", Caller(C::CreateOperation)),
    row(Method::GET, "/v1/operations/{operation_id}", Caller(C::ReadOperation)),
    row(
        Method::POST,
        "/v1/operations/{operation_id}/resolution",
        Operator(O::Resolve),
    ),
    row(
        Method::GET,
        "/v1/operations/{operation_id}/trace",
        Operator(O::ReadTrace),
    ),
    row(
        Method::POST,
        "/v1/operations/{operation_id}/cancel",
        Caller(C::CancelOperation),
    ),
    row(
        Method::DELETE,
        "/v1/operations/{operation_id}/outputs",
        Caller(C::EraseOutputs),
    ),
    row(Method::GET, "/v1/reconciliation-cases", Operator(O::ListCases)),
    row(Method::GET, "/v1/reconciliation-cases/counts", Operator(O::CountCases)),
    row(Method::GET, "/v1/tenants/me/credits", Caller(C::MyCredits)),
    row(Method::GET, "/v1/credits", Operator(O::AllCredits)),
    row(Method::GET, "/v1/capacity", Operator(O::ReadCapacity)),
    row(Method::PUT, "/v1/capacity", Operator(O::SetAccountLimit)),
    row(Method::GET, "/v1/tenants/{tenant_id}/webhook", Operator(O::ReadWebhook)),
    row(Method::PUT, "/v1/tenants/{tenant_id}/webhook", Operator(O::SetWebhook)),
    row(
        Method::DELETE,
        "/v1/tenants/{tenant_id}/webhook",
        Operator(O::RemoveWebhook),
    ),
    row(
        Method::PUT,
        "/v1/tenants/{tenant_id}/max-in-flight",
        Operator(O::SetMaxInFlight),
    ),
    row(
        Method::PUT,
        "/v1/tenants/{tenant_id}/spend-limit",
        Operator(O::SetSpendLimit),
    ),
];

/// The row a request matched, and its path's parameters by name.
#[derive(Debug)]
pub struct Found {
    pub route: &'static Route,
    params: Vec<(&'static str, String)>,
}

impl Found {
    /// The path parameter `name` as the request gave it ("" if the row has none).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// Why a request matched no row.
#[derive(Debug, PartialEq, Eq)]
pub enum Miss {
    /// No row has its path: 404.
    NoRoute,
    /// Rows have its path, not its method: 405 with these in `Allow`.
    Method(String),
}

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// The parameters of `path` if `pattern` fits its last segments.
fn fit(pattern: &'static str, path: &[&str]) -> Option<Vec<(&'static str, String)>> {
    let wanted: Vec<&'static str> = segments(pattern).collect();
    let tail = path.get(path.len().checked_sub(wanted.len())?..)?;
    let mut params = Vec::new();
    for (want, got) in wanted.iter().zip(tail) {
        match want.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
            Some(name) => params.push((name, (*got).to_owned())),
            None if want == got => {}
            None => return None,
        }
    }
    Some(params)
}

/// The row for `method` on `path`, or why there is none.
pub fn find(method: &Method, path: &str) -> Result<Found, Miss> {
    let given: Vec<&str> = segments(path).collect();
    let (pattern, params) = ROUTES
        .iter()
        .find_map(|r| fit(r.path, &given).map(|p| (r.path, p)))
        .ok_or(Miss::NoRoute)?;
    let mut rows = ROUTES.iter().filter(|r| r.path == pattern);
    match rows.clone().find(|r| r.method == *method) {
        Some(route) => Ok(Found { route, params }),
        None => Err(Miss::Method(
            rows.by_ref().map(|r| r.method.as_str()).collect::<Vec<_>>().join(", "),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_finds_its_row_and_parameters_under_any_prefix() {
        let found = find(&Method::POST, "/prod/v1/operations/op_1/cancel").unwrap();
        assert_eq!(found.route.handler, Caller(C::CancelOperation));
        assert_eq!(found.param("operation_id"), "op_1");
        let found = find(&Method::PUT, "/v1/tenants/acme/spend-limit/").unwrap();
        assert_eq!(found.route.handler, Operator(O::SetSpendLimit));
        assert_eq!(found.param("tenant_id"), "acme");
        assert_eq!(found.param("operation_id"), "");
    }

    #[test]
    fn a_known_path_with_another_method_names_the_allowed_ones() {
        assert_eq!(
            find(&Method::PUT, "/v1/operations").unwrap_err(),
            Miss::Method("GET, POST".into())
        );
        assert_eq!(
            find(&Method::POST, "/v1/webhooks/endpoints/e1").unwrap_err(),
            Miss::Method("GET, PATCH, DELETE".into())
        );
        assert_eq!(
            find(&Method::POST, "/v1/tenants/t/webhook").unwrap_err(),
            Miss::Method("GET, PUT, DELETE".into())
        );
        assert_eq!(find(&Method::GET, "/v1/nothing").unwrap_err(), Miss::NoRoute);
        assert_eq!(find(&Method::GET, "/").unwrap_err(), Miss::NoRoute);
    }

    #[test]
    fn every_row_is_its_own_method_and_path() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    a.method != b.method || a.path != b.path,
                    "{} {} is listed twice",
                    a.method,
                    a.path
                );
            }
            let found = find(&a.method, a.path).expect("every row is found by its own path");
            assert_eq!(found.route.handler, a.handler, "{} {}", a.method, a.path);
        }
    }
}
