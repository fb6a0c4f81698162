//! Spans to an OTLP/HTTP receiver, encoded as OTLP JSON
//! (`POST <endpoint>/v1/traces`): the ADOT collector's extension deployed
//! (which forwards them to X-Ray), or the local stack's receiver.
//!
//! The encoding follows the OTLP JSON mapping: trace and span ids as hex,
//! times as nanoseconds since the epoch in strings, kinds and status codes
//! as their numbers, attributes as `{key, value: {stringValue | boolValue |
//! intValue | doubleValue | arrayValue}}`. Written here rather than taken
//! from `opentelemetry-otlp`, whose JSON mapping brings protobuf code
//! generation, the metrics SDK and a second `reqwest`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::{Value as Json, json};

/// Exports spans as OTLP JSON to one receiver.
#[derive(Debug, Clone)]
pub struct OtlpExporter {
    http: reqwest::Client,
    url: String,
    service: String,
}

impl OtlpExporter {
    /// To `endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`, e.g.
    /// `http://localhost:4318`), naming the resource `service`, with
    /// `headers` on every export (a hosted receiver's key). Redirects are
    /// not followed: a key must not travel to a host nobody named. The
    /// endpoint is `https`, or `http` on a loopback host (the collector's
    /// Lambda extension, the local stack): spans and the key never cross a
    /// network in the clear. No error names the endpoint (a URL may carry
    /// a credential).
    pub fn new(endpoint: &str, service: impl Into<String>, headers: OtlpHeaders) -> Result<Self, String> {
        check_endpoint(endpoint)?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .redirect(reqwest::redirect::Policy::none())
            .default_headers(headers.0)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            http,
            url: format!("{}/v1/traces", endpoint.trim_end_matches('/')),
            service: service.into(),
        })
    }
}

/// Refuses an endpoint that is not an `https` URL, nor `http` on a
/// loopback host (`localhost`, `127.0.0.0/8`, `::1`), without repeating it.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(endpoint).map_err(|_| "OTEL_EXPORTER_OTLP_ENDPOINT is not a URL".to_owned())?;
    let host = url.host_str().unwrap_or_default();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" if !host.is_empty() => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err("OTEL_EXPORTER_OTLP_ENDPOINT must be https, or http on a loopback host".to_owned()),
    }
}

/// The headers every export carries, as `OTEL_EXPORTER_OTLP_HEADERS` (or
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`) lists them: `key=value` pairs
/// separated by commas, trimmed of spaces, each value percent-decoded.
/// Their values are secrets (an API key): they are marked sensitive, so
/// `Debug` hides them, and no error repeats one or a key that did not
/// parse (a value written without its `=` or its comma encoded would
/// otherwise show in the key).
#[derive(Debug, Clone, Default)]
pub struct OtlpHeaders(reqwest::header::HeaderMap);

impl OtlpHeaders {
    /// The headers of `list`, read from the variable `variable`; a key named
    /// twice takes its last value. A pair without `=`, an empty key, or a
    /// key or value that is not a valid header refuses the whole list,
    /// naming the variable and the pair's place (1 for the first, empty
    /// places counted): exporting without the key would only be refused
    /// by the receiver, later and less clearly.
    pub fn parse(variable: &str, list: &str) -> Result<Self, String> {
        use reqwest::header::{HeaderName, HeaderValue};
        let mut map = reqwest::header::HeaderMap::new();
        for (n, pair) in list.split(',').enumerate() {
            let place = n + 1;
            if pair.trim().is_empty() {
                continue;
            }
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("{variable}: pair {place} has no '='"));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(format!("{variable}: pair {place} has no key"));
            }
            let header = HeaderName::from_bytes(key.as_bytes())
                .map_err(|_| format!("{variable}: pair {place}: its key is not a header name"))?;
            let bytes: Vec<u8> = percent_encoding::percent_decode_str(value.trim()).collect();
            let mut value = HeaderValue::from_bytes(&bytes)
                .map_err(|_| format!("{variable}: pair {place}: the value of {header} is not a header value"))?;
            value.set_sensitive(true);
            map.insert(header, value);
        }
        Ok(Self(map))
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl SpanExporter for OtlpExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let body = encode(&self.service, &batch);
        let sent = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| OTelSdkError::InternalFailure(e.without_url().to_string()))?;
        if !sent.status().is_success() {
            return Err(OTelSdkError::InternalFailure(format!(
                "the OTLP receiver answered {}",
                sent.status()
            )));
        }
        Ok(())
    }
}

/// An `ExportTraceServiceRequest` in OTLP JSON: one resource (`service`),
/// one scope per instrumentation scope, the spans in order.
pub fn encode(service: &str, spans: &[SpanData]) -> Json {
    let mut scopes: Vec<(String, Vec<Json>)> = Vec::new();
    for span in spans {
        let scope = span.instrumentation_scope.name().to_owned();
        let encoded = encode_span(span);
        match scopes.iter_mut().find(|(name, _)| *name == scope) {
            Some((_, list)) => list.push(encoded),
            None => scopes.push((scope, vec![encoded])),
        }
    }
    json!({"resourceSpans": [{
        "resource": {"attributes": [attribute(&KeyValue::new("service.name", service.to_owned()))]},
        "scopeSpans": scopes
            .into_iter()
            .map(|(name, spans)| json!({"scope": {"name": name}, "spans": spans}))
            .collect::<Vec<_>>(),
    }]})
}

fn encode_span(span: &SpanData) -> Json {
    let parent = span.parent_span_id;
    let mut encoded = json!({
        "traceId": format!("{:032x}", span.span_context.trace_id()),
        "spanId": format!("{:016x}", span.span_context.span_id()),
        "name": span.name,
        "kind": kind(&span.span_kind),
        "startTimeUnixNano": nanos(span.start_time),
        "endTimeUnixNano": nanos(span.end_time),
        "attributes": span.attributes.iter().map(attribute).collect::<Vec<_>>(),
        "status": status(&span.status),
    });
    if parent != opentelemetry::trace::SpanId::INVALID {
        encoded["parentSpanId"] = json!(format!("{parent:016x}"));
    }
    if !span.links.links.is_empty() {
        encoded["links"] = span
            .links
            .iter()
            .map(|l| {
                json!({
                    "traceId": format!("{:032x}", l.span_context.trace_id()),
                    "spanId": format!("{:016x}", l.span_context.span_id()),
                    "attributes": l.attributes.iter().map(attribute).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>()
            .into();
    }
    encoded
}

fn nanos(at: SystemTime) -> String {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos().to_string()
}

fn kind(kind: &SpanKind) -> u8 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn status(status: &Status) -> Json {
    match status {
        Status::Unset => json!({"code": 0}),
        Status::Ok => json!({"code": 1}),
        Status::Error { description } => json!({"code": 2, "message": description}),
    }
}

fn attribute(kv: &KeyValue) -> Json {
    json!({"key": kv.key.as_str(), "value": any_value(&kv.value)})
}

fn any_value(value: &Value) -> Json {
    match value {
        Value::Bool(b) => json!({"boolValue": b}),
        Value::I64(i) => json!({"intValue": i.to_string()}),
        Value::F64(f) => json!({"doubleValue": f}),
        Value::String(s) => json!({"stringValue": s.as_str()}),
        Value::Array(a) => {
            let values: Vec<Json> = match a {
                Array::Bool(v) => v.iter().map(|b| json!({"boolValue": b})).collect(),
                Array::I64(v) => v.iter().map(|i| json!({"intValue": i.to_string()})).collect(),
                Array::F64(v) => v.iter().map(|f| json!({"doubleValue": f})).collect(),
                Array::String(v) => v.iter().map(|s| json!({"stringValue": s.as_str()})).collect(),
                _ => Vec::new(),
            };
            json!({"arrayValue": {"values": values}})
        }
        _ => json!({"stringValue": value.as_str()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::InstrumentationScope;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    /// Spans and the receiver's key cross no network in the clear: the
    /// endpoint is https, or http on a loopback host; the refusal never
    /// repeats the URL, which may carry a credential.
    #[test]
    fn an_endpoint_is_https_or_http_on_loopback() {
        for ok in [
            "https://collector.example:4318",
            "https://user:pw@otlp.example/",
            "http://localhost:4318",
            "http://LOCALHOST:4318",
            "http://127.0.0.1:4318",
            "http://127.8.9.10",
            "http://[::1]:4318",
        ] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
            assert!(OtlpExporter::new(ok, "svc", OtlpHeaders::default()).is_ok(), "{ok}");
        }
        for refused in [
            "http://collector.example:4318",
            "http://user:s3cret@10.0.0.5:4318",
            "http://[::2]:4318",
            "http://localhost.evil.example",
            "ftp://localhost",
            "s3cret-not-a-url",
            "",
        ] {
            let e = OtlpExporter::new(refused, "svc", OtlpHeaders::default()).unwrap_err();
            assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"), "{refused}: {e}");
            assert!(
                !e.contains("s3cret") && !e.contains("example") && !e.contains("10.0.0.5"),
                "{e}"
            );
        }
    }

    fn span(parent: u64) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(0x0af7651916cd43dd8448eb211c80319c_u128),
                SpanId::from(0xb7ad6b7169203331_u64),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(parent),
            parent_span_is_remote: true,
            span_kind: SpanKind::Client,
            name: "genace.post".into(),
            start_time: UNIX_EPOCH + Duration::from_nanos(1_700_000_000_000_000_001),
            end_time: UNIX_EPOCH + Duration::from_nanos(1_700_000_000_500_000_000),
            attributes: vec![
                KeyValue::new("http.response.status_code", 202_i64),
                KeyValue::new("operation_id", "op_1"),
                KeyValue::new("genace.case", true),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::error("timed out"),
            instrumentation_scope: InstrumentationScope::builder("genace-operations").build(),
        }
    }

    fn headers(list: &str) -> Result<OtlpHeaders, String> {
        OtlpHeaders::parse("OTEL_EXPORTER_OTLP_HEADERS", list)
    }

    #[test]
    fn headers_are_pairs_with_values_percent_decoded_and_trimmed() {
        let h = headers(" x-api-key = k%2C1 ,Authorization=Basic%20dXNlcg%3D%3D,, x-api-key=k2").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h.0["x-api-key"], "k2", "a key named twice takes its last value");
        assert_eq!(h.0["authorization"], "Basic dXNlcg==");
        assert!(h.0["authorization"].is_sensitive(), "kept out of Debug");
        assert!(!format!("{h:?}").contains("dXNlcg"), "{h:?}");
        assert!(headers("").unwrap().is_empty());
        assert!(
            headers("x%41=1").is_ok_and(|h| h.0.contains_key("x%41")),
            "keys are not decoded"
        );
    }

    #[test]
    fn a_malformed_pair_is_refused_without_any_of_its_secret() {
        for (list, said) in [
            ("a=b,,s3cret", "OTEL_EXPORTER_OTLP_HEADERS: pair 3 has no '='"),
            ("=s3cret", "OTEL_EXPORTER_OTLP_HEADERS: pair 1 has no key"),
            // A value written without its '=', or with its comma not
            // encoded: the secret lands in the key.
            (
                "Authorization: Bearer s3cret==",
                "OTEL_EXPORTER_OTLP_HEADERS: pair 1: its key is not a header name",
            ),
            (
                "x-key=ab,s3/cret=gh",
                "OTEL_EXPORTER_OTLP_HEADERS: pair 2: its key is not a header name",
            ),
            (
                "x-key=s3cret%0A",
                "OTEL_EXPORTER_OTLP_HEADERS: pair 1: the value of x-key is not a header value",
            ),
        ] {
            let e = headers(list).unwrap_err();
            assert_eq!(e, said);
            assert!(!e.contains("s3"), "{e}");
        }
    }

    #[tokio::test]
    async fn every_export_carries_the_headers() {
        use wiremock::matchers::{header, method, path};
        let receiver = wiremock::MockServer::start().await;
        wiremock::Mock::given(method("POST"))
            .and(path("/v1/traces"))
            .and(header("x-api-key", "k=1"))
            .respond_with(wiremock::ResponseTemplate::new(200))
            .expect(1)
            .mount(&receiver)
            .await;
        let exporter = OtlpExporter::new(&receiver.uri(), "poll", headers("x-api-key=k%3D1").unwrap()).unwrap();
        exporter.export(vec![span(0)]).await.unwrap();
        let without = OtlpExporter::new(&receiver.uri(), "poll", OtlpHeaders::default()).unwrap();
        let refused = without.export(vec![span(0)]).await.unwrap_err();
        assert!(refused.to_string().contains("404"), "{refused}");
    }

    #[tokio::test]
    async fn the_key_does_not_follow_a_redirect() {
        use wiremock::matchers::method;
        let elsewhere = wiremock::MockServer::start().await;
        wiremock::Mock::given(method("POST"))
            .respond_with(wiremock::ResponseTemplate::new(200))
            .expect(0)
            .mount(&elsewhere)
            .await;
        let receiver = wiremock::MockServer::start().await;
        wiremock::Mock::given(method("POST"))
            .respond_with(
                wiremock::ResponseTemplate::new(307)
                    .insert_header("location", format!("{}/v1/traces", elsewhere.uri())),
            )
            .mount(&receiver)
            .await;
        let exporter = OtlpExporter::new(&receiver.uri(), "poll", headers("x-api-key=k").unwrap()).unwrap();
        let refused = exporter.export(vec![span(0)]).await.unwrap_err();
        assert!(refused.to_string().contains("307"), "{refused}");
    }

    #[test]
    fn spans_are_encoded_in_the_otlp_json_mapping() {
        let body = encode("dispatch", &[span(0x1122334455667788), span(0)]);
        let resource = &body["resourceSpans"][0];
        assert_eq!(
            resource["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "dispatch"}})
        );
        let scope = &resource["scopeSpans"][0];
        assert_eq!(scope["scope"]["name"], "genace-operations");
        let first = &scope["spans"][0];
        assert_eq!(first["traceId"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(first["spanId"], "b7ad6b7169203331");
        assert_eq!(first["parentSpanId"], "1122334455667788");
        assert_eq!(first["kind"], 3);
        assert_eq!(first["startTimeUnixNano"], "1700000000000000001");
        assert_eq!(first["endTimeUnixNano"], "1700000000500000000");
        assert_eq!(first["status"], json!({"code": 2, "message": "timed out"}));
        assert_eq!(
            first["attributes"],
            json!([
                {"key": "http.response.status_code", "value": {"intValue": "202"}},
                {"key": "operation_id", "value": {"stringValue": "op_1"}},
                {"key": "genace.case", "value": {"boolValue": true}},
            ])
        );
        assert!(
            scope["spans"][1].get("parentSpanId").is_none(),
            "a root names no parent"
        );
    }
}
