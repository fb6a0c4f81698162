//! The HTTP API on loopback: requests are read, checked the way API
//! Gateway's JWT authorizer checks them, and handed to a [`Gateway`]: the
//! intake handler in this process, or the intake artifacts under the
//! emulator (`crate::artifacts`).

use genace_stages::ports::Parts;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use genace_aws::DynamoStore;
use genace_aws::S3Store;
use genace_aws::SqsQueue;
use genace_edge::http as api;
use genace_edge::http::Problem;
use genace_stages::api::context::Api;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequestContext,
};
use lambda_http::http::{Response, StatusCode};
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt};
use tokio::net::TcpListener;

use crate::devauth;

/// Bodies are read up to this size; the handler enforces the real limit.
const READ_LIMIT: usize = 1024 * 1024;

pub type LocalApi = Api<Parts<DynamoStore, SqsQueue, S3Store>>;

/// A gateway's answer to one request, on its way.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send + 'a>>;

/// What answers the API's requests.
pub trait Gateway: Send + Sync + 'static {
    /// Answers one request whose body has been read.
    fn call(&self, parts: lambda_http::http::request::Parts, body: Vec<u8>) -> Answer<'_>;
}

/// The intake handler in this process, behind the development JWT check.
impl Gateway for LocalApi {
    fn call(&self, parts: lambda_http::http::request::Parts, body: Vec<u8>) -> Answer<'_> {
        Box::pin(async move {
            let path = parts.uri.path().to_owned();
            let claims = match authorize(&parts) {
                Ok(c) => c,
                Err(reason) => {
                    return to_hyper(
                        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized", reason)
                            .into_response(&path),
                    );
                }
            };
            let request = apigw_v2(parts, body, claims);
            // The Lambda's own handler time, without the local JWT check.
            let started = std::time::Instant::now();
            let response = api::handle(self, request).await;
            crate::meter::invocation("intake", started.elapsed());
            to_hyper(response)
        })
    }
}

/// The development JWT authorizer: the verified claims of the bearer token.
pub fn authorize(parts: &lambda_http::http::request::Parts) -> Result<HashMap<String, String>, String> {
    let auth = parts.headers.get("authorization").and_then(|v| v.to_str().ok());
    devauth::verify(auth)
}

/// Serves the API through `gateway`, and the operator console (signing in
/// as `console` says) beside it.
pub async fn serve<G: Gateway>(
    listener: TcpListener,
    gateway: Arc<G>,
    console: Arc<genace_console::Console>,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let gateway = gateway.clone();
        let console = console.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let gateway = gateway.clone();
                let console = console.clone();
                async move { Ok::<_, Infallible>(handle(gateway.as_ref(), &console, req).await) }
            });
            if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(error = %e, "connection closed");
            }
        });
    }
}

pub fn to_hyper(resp: Response<Body>) -> Response<Full<Bytes>> {
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Full::new(Bytes::copy_from_slice(body.as_ref())))
}

/// An API Gateway HTTP API (payload v2) request as the deployed JWT
/// authorizer hands it to the Lambda: the verified claims in
/// `requestContext.authorizer.jwt.claims`.
pub fn apigw_v2(
    parts: lambda_http::http::request::Parts,
    body: Vec<u8>,
    claims: HashMap<String, String>,
) -> lambda_http::Request {
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = claims;
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut ctx = ApiGatewayV2httpRequestContext::default();
    ctx.authorizer = Some(authorizer);
    ctx.stage = Some("$default".into());
    ctx.http.method = parts.method.clone();
    ctx.http.path = Some(parts.uri.path().to_owned());
    // API Gateway hands the decoded query parameters apart from the URI.
    let query = query_parameters(&parts.uri);
    let body = if body.is_empty() {
        Body::Empty
    } else {
        Body::Binary(body)
    };
    lambda_http::http::Request::from_parts(parts, body)
        .with_request_context(RequestContext::ApiGatewayV2(ctx))
        .with_query_string_parameters(query)
}

/// The query parameters of `uri`, decoded, each name with all its values,
/// as API Gateway hands them to a function.
pub fn query_parameters(uri: &lambda_http::http::Uri) -> HashMap<String, Vec<String>> {
    let mut params: HashMap<String, Vec<String>> = HashMap::new();
    if let Ok(url) = reqwest::Url::parse(&format!("http://local/?{}", uri.query().unwrap_or_default())) {
        for (k, v) in url.query_pairs() {
            params.entry(k.into_owned()).or_default().push(v.into_owned());
        }
    }
    params
}

/// Reads one HTTP request's body and hands the request to the gateway.
async fn handle<G: Gateway>(
    gateway: &G,
    console: &genace_console::Console,
    req: hyper::Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let (parts, body) = req.into_parts();
    let bytes = match Limited::new(body, READ_LIMIT).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return to_hyper(
                Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body-too-large",
                    "The request body is too large",
                    "",
                )
                .into_response(&path),
            );
        }
    };
    // The console is static and signs in by itself: no bearer token.
    if genace_console::Console::owns(&path) {
        return to_hyper(crate::console::answer(console, &parts, &bytes));
    }
    gateway.call(parts, bytes.to_vec()).await
}
