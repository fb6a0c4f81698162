//! The handlers, one file per resource. Each reads its request through
//! `request`, calls the stages and answers with a view; [`super::router`]
//! picks one from the route table.

pub mod capacity;
pub mod cases;
pub mod credits;
pub mod operations;
pub mod trace;
pub mod webhooks;

use lambda_http::http::{StatusCode, header};
use lambda_http::{Body, Response};
use serde_json::Value;

pub(crate) fn json_response(status: StatusCode) -> lambda_http::http::response::Builder {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
}

pub(crate) fn ok_json(body: Value) -> Response<Body> {
    json_response(StatusCode::OK)
        .body(Body::Text(body.to_string()))
        .expect("valid response")
}
