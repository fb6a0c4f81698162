//! Intake over HTTP on loopback, through the same handler the Lambda runs.

use std::convert::Infallible;
use std::sync::Arc;

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
use shared::api::{self, Problem};
use shared::intake::Intake;
use shared::queue::SqsQueue;
use shared::storage::S3Store;
use shared::store::DynamoStore;
use tokio::net::TcpListener;

use crate::devauth;

/// Bodies are read up to this size; the handler enforces the real limit.
const READ_LIMIT: usize = 1024 * 1024;

pub type LocalIntake = Intake<DynamoStore, SqsQueue, S3Store>;

pub async fn serve(listener: TcpListener, intake: Arc<LocalIntake>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let intake = intake.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let intake = intake.clone();
                async move { Ok::<_, Infallible>(handle(&intake, req).await) }
            });
            if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(error = %e, "connection closed");
            }
        });
    }
}

fn to_hyper(resp: Response<Body>) -> Response<Full<Bytes>> {
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Full::new(Bytes::copy_from_slice(body.as_ref())))
}

/// An API Gateway HTTP API (payload v2) request as the deployed JWT
/// authorizer hands it to the Lambda: the verified claims in
/// `requestContext.authorizer.jwt.claims`.
pub fn apigw_v2(
    parts: lambda_http::http::request::Parts,
    body: Vec<u8>,
    claims: std::collections::HashMap<String, String>,
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
    let body = if body.is_empty() {
        Body::Empty
    } else {
        Body::Binary(body)
    };
    lambda_http::http::Request::from_parts(parts, body).with_request_context(RequestContext::ApiGatewayV2(ctx))
}

/// Turns one HTTP request into an API Gateway v2 request, the way the
/// deployed HTTP API with its JWT authorizer would, and runs the handler.
async fn handle(intake: &LocalIntake, req: hyper::Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let claims = match devauth::verify(auth.as_deref()) {
        Ok(c) => c,
        Err(reason) => {
            return to_hyper(
                Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized", reason).into_response(&path),
            );
        }
    };
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
    let request = apigw_v2(parts, bytes.to_vec(), claims);
    // The Lambda's own handler time, without the local JWT check.
    let started = std::time::Instant::now();
    let response = api::handle(intake, request).await;
    crate::meter::invocation("intake", started.elapsed());
    to_hyper(response)
}
