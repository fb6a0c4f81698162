//! The HTTP side: a request matched to its route, authorized like the JWT
//! authorizer, sent to its function as a payload v2 event, and its result
//! turned back into the HTTP response.

use std::collections::HashMap;
use std::sync::Arc;

use aws_lambda_events::event::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequest,
    ApiGatewayV2httpRequestContext,
};
use aws_lambda_events::query_map::QueryMap;
use base64::Engine;
use http_body_util::Full;
use hyper::body::Bytes;
use lambda_http::http::{Response, StatusCode};
use serde_json::{Value, json};

use crate::serve::{Answer, Gateway, authorize};
use crate::template::HttpRoute;

use super::function::{Function, Invocation};

/// The API side of artifact mode: the template's routes, its authorizer's
/// checks, and payload v2 events to the route's function.
pub(super) struct ArtifactGateway {
    pub(super) routes: Vec<HttpRoute>,
    pub(super) functions: HashMap<String, Arc<Function>>,
}

pub(super) fn gateway_message(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(json!({ "message": message }).to_string())))
        .expect("a valid response")
}

impl Gateway for ArtifactGateway {
    fn call(&self, parts: lambda_http::http::request::Parts, body: Vec<u8>) -> Answer<'_> {
        Box::pin(async move {
            let method = parts.method.as_str().to_owned();
            let path = parts.uri.path().to_owned();
            // The most specific route wins: the one with the most literal segments.
            let matched = self
                .routes
                .iter()
                .filter_map(|r| r.matches(&method, &path).map(|p| (r, p)))
                .max_by_key(|(r, p)| r.path.len() - p.len());
            let Some((route, params)) = matched else {
                return gateway_message(StatusCode::NOT_FOUND, "Not Found");
            };
            let Ok(claims) = authorize(&parts) else {
                return gateway_message(StatusCode::UNAUTHORIZED, "Unauthorized");
            };
            let granted: Vec<String> = claims
                .get("scope")
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default();
            if !route.scopes.is_empty() && !route.scopes.iter().any(|s| granted.contains(s)) {
                return gateway_message(StatusCode::FORBIDDEN, "Forbidden");
            }
            let Some(function) = self.functions.get(&route.function) else {
                return gateway_message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
            };
            let scopes = (!route.scopes.is_empty()).then_some(granted);
            let event = apigw_event(route, params, &parts, body, claims, scopes);
            match function.invoke(&event).await {
                Invocation::Returned(v) => http_response(&v),
                Invocation::Failed(_) => gateway_message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
            }
        })
    }
}

/// The API Gateway HTTP API (payload format 2.0) event for one request.
pub fn apigw_event(
    route: &HttpRoute,
    path_parameters: HashMap<String, String>,
    parts: &lambda_http::http::request::Parts,
    body: Vec<u8>,
    claims: HashMap<String, String>,
    scopes: Option<Vec<String>>,
) -> Value {
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let params = crate::serve::query_parameters(&parts.uri);
    let now = chrono::Utc::now();
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = claims;
    jwt.scopes = scopes;
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut ctx = ApiGatewayV2httpRequestContext::default();
    ctx.route_key = Some(route.key());
    ctx.account_id = Some(crate::LOCAL_ACCOUNT.into());
    ctx.stage = Some("$default".into());
    ctx.request_id = Some(uuid::Uuid::new_v4().to_string());
    ctx.authorizer = Some(authorizer);
    ctx.apiid = Some("local".into());
    ctx.domain_name = Some("127.0.0.1".into());
    ctx.domain_prefix = Some("127".into());
    ctx.time = Some(now.format("%d/%b/%Y:%H:%M:%S %z").to_string());
    ctx.time_epoch = now.timestamp_millis();
    ctx.http.method = parts.method.clone();
    ctx.http.path = Some(parts.uri.path().to_owned());
    ctx.http.protocol = Some("HTTP/1.1".into());
    ctx.http.source_ip = Some("127.0.0.1".into());
    ctx.http.user_agent = parts
        .headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut event = ApiGatewayV2httpRequest::default();
    event.version = Some("2.0".into());
    event.route_key = Some(route.key());
    event.raw_path = Some(parts.uri.path().to_owned());
    event.raw_query_string = Some(query);
    let mut headers = parts.headers.clone();
    // API Gateway hands cookies apart from the headers.
    let cookies: Vec<String> = headers
        .remove("cookie")
        .and_then(|c| c.to_str().ok().map(|c| c.split("; ").map(str::to_owned).collect()))
        .unwrap_or_default();
    event.cookies = (!cookies.is_empty()).then_some(cookies);
    event.headers = headers;
    event.query_string_parameters = QueryMap::from(params);
    event.path_parameters = path_parameters;
    event.request_context = ctx;
    if !body.is_empty() {
        match String::from_utf8(body) {
            Ok(text) => event.body = Some(text),
            Err(e) => {
                event.body = Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
                event.is_base64_encoded = true;
            }
        }
    }
    serde_json::to_value(&event).expect("an API Gateway event serializes")
}

/// The HTTP response API Gateway makes of a function's payload v2 result.
pub fn http_response(v: &Value) -> Response<Full<Bytes>> {
    let Some(status) = v.get("statusCode").and_then(Value::as_u64) else {
        // A result without a status code is the body of a 200 JSON response.
        return Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(v.to_string())))
            .expect("a valid response");
    };
    let mut builder = Response::builder().status(status as u16);
    for (k, value) in v.get("headers").and_then(Value::as_object).into_iter().flatten() {
        if let Some(s) = value.as_str() {
            builder = builder.header(k.as_str(), s);
        }
    }
    for (k, values) in v
        .get("multiValueHeaders")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if v["headers"].get(k).is_some() {
            continue;
        }
        for s in values.as_array().into_iter().flatten().filter_map(Value::as_str) {
            builder = builder.header(k.as_str(), s);
        }
    }
    for cookie in v.get("cookies").and_then(Value::as_array).into_iter().flatten() {
        if let Some(c) = cookie.as_str() {
            builder = builder.header("set-cookie", c);
        }
    }
    let text = v.get("body").and_then(Value::as_str).unwrap_or_default();
    let body = if v.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| gateway_message(StatusCode::BAD_GATEWAY, "Bad Gateway"))
}
