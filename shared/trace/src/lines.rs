//! Spans as JSON lines, one per span, as the local receiver writes them
//! from OTLP JSON; and an operation's waterfall drawn from them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One finished span, flat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanLine {
    pub trace_id: String,
    pub span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    pub name: String,
    /// The resource's `service.name` (the function, or the local stack).
    pub service: String,
    pub start_ns: u128,
    pub end_ns: u128,
    /// The span's attributes, their values as JSON.
    #[serde(default)]
    pub attributes: BTreeMap<String, Value>,
}

impl SpanLine {
    /// An attribute as text (strings bare, others as JSON).
    pub fn attribute(&self, key: &str) -> Option<String> {
        self.attributes.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// The spans of an OTLP JSON `ExportTraceServiceRequest`, flat; parts
/// that are not spans are skipped.
pub fn from_otlp_json(request: &Value) -> Vec<SpanLine> {
    let mut lines = Vec::new();
    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
        let service = resource["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|kv| kv["key"] == "service.name")
            .and_then(|kv| any_value(&kv["value"]).as_str().map(str::to_owned))
            .unwrap_or_default();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                if let Some(line) = span_line(span, &service) {
                    lines.push(line);
                }
            }
        }
    }
    lines
}

fn span_line(span: &Value, service: &str) -> Option<SpanLine> {
    let text = |k: &str| span[k].as_str().map(str::to_owned);
    let nanos = |k: &str| match &span[k] {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().map(u128::from),
        _ => None,
    };
    let attributes = span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv["key"].as_str()?.to_owned(), any_value(&kv["value"]))))
        .collect();
    Some(SpanLine {
        trace_id: text("traceId")?,
        span_id: text("spanId")?,
        parent_span_id: text("parentSpanId").filter(|p| !p.is_empty()),
        name: text("name")?,
        service: service.to_owned(),
        start_ns: nanos("startTimeUnixNano")?,
        end_ns: nanos("endTimeUnixNano")?,
        attributes,
    })
}

/// An OTLP `AnyValue` as plain JSON.
fn any_value(value: &Value) -> Value {
    if let Some(s) = value.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = value.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = value.get("intValue") {
        return match i {
            Value::String(s) => s.parse::<i64>().map_or_else(|_| i.clone(), Value::from),
            other => other.clone(),
        };
    }
    if let Some(d) = value.get("doubleValue") {
        return d.clone();
    }
    if let Some(values) = value["arrayValue"]["values"].as_array() {
        return Value::Array(values.iter().map(any_value).collect());
    }
    Value::Null
}

/// The spans of `trace_id` among JSON lines as the receiver writes them
/// (lines that are not spans are skipped).
pub fn of_trace(json_lines: &str, trace_id: &str) -> Vec<SpanLine> {
    json_lines
        .lines()
        .filter_map(|l| serde_json::from_str::<SpanLine>(l).ok())
        .filter(|s| s.trace_id == trace_id)
        .collect()
}

/// The spans of one trace in causal order: each after its parent, siblings
/// by their start; spans whose parent is not among them first, by start.
pub fn in_order(spans: &[SpanLine]) -> Vec<(usize, &SpanLine)> {
    let ids: std::collections::BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&SpanLine>> = BTreeMap::new();
    let mut roots = Vec::new();
    for s in spans {
        match s.parent_span_id.as_deref().filter(|p| ids.contains(p)) {
            Some(p) => children.entry(p).or_default().push(s),
            None => roots.push(s),
        }
    }
    roots.sort_by_key(|s| s.start_ns);
    children.values_mut().for_each(|c| c.sort_by_key(|s| s.start_ns));
    let mut out = Vec::new();
    let mut stack: Vec<(usize, &SpanLine)> = roots.into_iter().rev().map(|s| (0, s)).collect();
    while let Some((depth, span)) = stack.pop() {
        out.push((depth, span));
        if let Some(kids) = children.get(span.span_id.as_str()) {
            stack.extend(kids.iter().rev().map(|k| (depth + 1, *k)));
        }
    }
    out
}

/// The waterfall of one trace: a line per span in causal order, with its
/// offset from the first start, a bar of `width` columns for its time, its
/// name (indented under its parent) and its outcome or status code.
pub fn waterfall(spans: &[SpanLine], width: usize) -> String {
    let Some(first) = spans.iter().map(|s| s.start_ns).min() else {
        return "no spans\n".into();
    };
    let last = spans.iter().map(|s| s.end_ns).max().unwrap_or(first).max(first + 1);
    let scale = |ns: u128| ((ns - first) * width as u128 / (last - first)) as usize;
    let mut out = String::new();
    for (depth, s) in in_order(spans) {
        let (from, to) = (
            scale(s.start_ns),
            scale(s.end_ns.max(s.start_ns)).max(scale(s.start_ns) + 1),
        );
        let bar: String = (0..width.max(1))
            .map(|i| if i >= from && i < to { '█' } else { '·' })
            .collect();
        let said = s
            .attribute("outcome")
            .or_else(|| s.attribute("http.response.status_code"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>9.3} s {:>9.3} s {bar} {}{} {said}",
            (s.start_ns - first) as f64 / 1e9,
            s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9,
            "  ".repeat(depth),
            s.name
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn otlp_json_becomes_lines_and_a_waterfall_in_causal_order() {
        let request = json!({"resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "local"}}]},
            "scopeSpans": [{"scope": {"name": "genace-operations"}, "spans": [
                {"traceId": "t", "spanId": "b", "parentSpanId": "a", "name": "dispatch", "kind": 1,
                 "startTimeUnixNano": "2000000000", "endTimeUnixNano": "3000000000",
                 "attributes": [{"key": "outcome", "value": {"stringValue": "posted once: accepted"}}]},
                {"traceId": "t", "spanId": "c", "parentSpanId": "b", "name": "genace.post", "kind": 3,
                 "startTimeUnixNano": "2100000000", "endTimeUnixNano": "2200000000",
                 "attributes": [{"key": "http.response.status_code", "value": {"intValue": "202"}}]},
                {"traceId": "t", "spanId": "a", "name": "operation", "kind": 1,
                 "startTimeUnixNano": "1000000000", "endTimeUnixNano": "1500000000", "attributes": []},
                {"traceId": "t", "spanId": "d", "parentSpanId": "b", "name": "poll", "kind": 1,
                 "startTimeUnixNano": "5000000000", "endTimeUnixNano": "5100000000", "attributes": []},
                {"notASpan": true},
            ]}],
        }]});
        let lines = from_otlp_json(&request);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1].attributes["http.response.status_code"], json!(202));
        assert_eq!(lines[0].service, "local");
        let order: Vec<&str> = in_order(&lines).iter().map(|(_, s)| s.name.as_str()).collect();
        assert_eq!(order, ["operation", "dispatch", "genace.post", "poll"]);
        let drawn = waterfall(&lines, 8);
        let rows: Vec<&str> = drawn.lines().collect();
        assert_eq!(rows.len(), 4);
        assert!(rows[0].starts_with("    0.000 s     0.500 s █·······"), "{drawn}");
        assert!(rows[2].contains("    genace.post 202"), "{drawn}");
        assert!(rows[1].ends_with("  dispatch posted once: accepted"), "{drawn}");
    }
}
