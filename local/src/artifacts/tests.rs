//! The overlay, and the payload v2 event and response translations.

use super::*;
use crate::template::HttpRoute;
use serde_json::json;

#[test]
fn the_overlay_is_local_only_and_takes_explicit_overrides() {
    let vars = [
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
        ("GENACE_API_KEY", "k"),
        ("GENACE_TRACES_FILE", "/tmp/spans.jsonl"),
        ("LOCAL_OVERRIDE_DISPATCH_LEASE_SECONDS", "8"),
        ("LOCAL_OVERRIDE_", "ignored"),
        ("HOME", "/root"),
        ("OPERATIONS_TABLE", "not-from-the-shell"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let overlay = local_overlay(vars);
    assert_eq!(overlay["AWS_ENDPOINT_URL"], "http://127.0.0.1:5000");
    assert_eq!(overlay["GENACE_API_KEY"], "k");
    // The functions' trace route reads the receiver's file.
    assert_eq!(overlay["GENACE_TRACES_FILE"], "/tmp/spans.jsonl");
    assert_eq!(overlay["DISPATCH_LEASE_SECONDS"], "8");
    assert_eq!(overlay["AWS_CONFIG_FILE"], "/dev/null");
    assert!(!overlay.contains_key("HOME"));
    assert!(
        !overlay.contains_key("OPERATIONS_TABLE"),
        "the template names the table"
    );
    assert!(!overlay.contains_key(""));
}

fn parts(method: &str, uri: &str) -> lambda_http::http::request::Parts {
    lambda_http::http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .header("cookie", "a=1; b=2")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn a_request_becomes_a_payload_v2_event_that_lambda_http_reads_back() {
    let route = HttpRoute {
        function: "IntakeFunction".into(),
        method: "GET".into(),
        path: "/v1/operations/{operation_id}".into(),
        scopes: vec![],
    };
    let claims = HashMap::from([("tenant_id".to_owned(), "t-1".to_owned())]);
    let event = apigw_event(
        &route,
        HashMap::from([("operation_id".to_owned(), "op_1".to_owned())]),
        &parts("GET", "/v1/operations/op_1?view=full&tag=a%20b&tag=c"),
        Vec::new(),
        claims,
        None,
    );
    assert_eq!(event["version"], "2.0");
    assert_eq!(event["routeKey"], "GET /v1/operations/{operation_id}");
    assert_eq!(
        event["requestContext"]["authorizer"]["jwt"]["claims"]["tenant_id"],
        "t-1"
    );
    assert_eq!(event["cookies"], json!(["a=1", "b=2"]));
    assert_eq!(event["queryStringParameters"]["tag"], "a b,c");
    // What the Lambda's runtime makes of it.
    let request = lambda_http::request::LambdaRequest::ApiGatewayV2(serde_json::from_value(event).unwrap());
    let request: lambda_http::Request = request.into();
    use lambda_http::RequestExt;
    assert_eq!(request.uri().path(), "/v1/operations/op_1");
    assert_eq!(
        request.path_parameters_ref().unwrap().first("operation_id"),
        Some("op_1")
    );
    assert_eq!(
        request.query_string_parameters_ref().unwrap().all("tag"),
        Some(vec!["a b", "c"])
    );
    assert_eq!(request.method(), "GET");

    let binary = apigw_event(
        &route,
        HashMap::new(),
        &parts("POST", "/x"),
        vec![0xff, 0x00],
        HashMap::new(),
        None,
    );
    assert_eq!(binary["isBase64Encoded"], true);
    assert_eq!(binary["body"], "/wA=");
}

#[test]
fn a_payload_v2_result_becomes_the_http_response() {
    let resp = http_response(&json!({
        "statusCode": 201,
        "headers": {"content-type": "application/problem+json", "location": "/v1/operations/op_1"},
        "multiValueHeaders": {"content-type": ["application/problem+json"], "vary": ["a", "b"]},
        "cookies": ["c=1"],
        "body": "eyJrIjoxfQ==",
        "isBase64Encoded": true
    }));
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["location"], "/v1/operations/op_1");
    assert_eq!(resp.headers().get_all("content-type").iter().count(), 1);
    assert_eq!(resp.headers().get_all("vary").iter().count(), 2);
    assert_eq!(resp.headers()["set-cookie"], "c=1");
    let resp = http_response(&json!({"ok": true}));
    assert_eq!(resp.status(), 200);
}
