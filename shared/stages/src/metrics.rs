//! CloudWatch metrics in the Embedded Metric Format: one JSON line on stdout
//! per data point, which Lambda's log pipeline turns into a metric.

use serde_json::{Map, Value, json};

/// `METRICS_NAMESPACE`, default `GenaceOperations`.
fn namespace() -> String {
    std::env::var("METRICS_NAMESPACE").unwrap_or_else(|_| "GenaceOperations".into())
}

/// The EMF document for one data point.
pub fn document(name: &str, value: f64, unit: &str, dimensions: &[(&str, &str)]) -> Value {
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": namespace(),
                // With dimensions, also publish the total (the empty set) so alarms need no metric math.
                "Dimensions": if dimensions.is_empty() {
                    json!([[]])
                } else {
                    json!([dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>(), []])
                },
                "Metrics": [{"Name": name, "Unit": unit}],
            }],
        }),
    );
    for (k, v) in dimensions {
        doc.insert((*k).into(), json!(v));
    }
    doc.insert(name.into(), json!(value));
    Value::Object(doc)
}

static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Turns metric lines off for this process (the simulator's runs), unless
/// one was already written.
pub fn turn_off() {
    let _ = ENABLED.set(false);
}

/// `METRICS_DISABLED=true` turns metric lines off (local runs).
fn enabled() -> bool {
    *ENABLED.get_or_init(|| !std::env::var("METRICS_DISABLED").is_ok_and(|v| v == "true" || v == "1"))
}

pub fn emit(name: &str, value: f64, unit: &str, dimensions: &[(&str, &str)]) {
    if enabled() {
        println!("{}", document(name, value, unit, dimensions));
    }
}

/// Adds one to a counter.
pub fn count(name: &str, dimensions: &[(&str, &str)]) {
    emit(name, 1.0, "Count", dimensions);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_the_embedded_metric_format() {
        let d = document("CasesOpened", 1.0, "Count", &[("Reason", "unknown_submit_outcome")]);
        let m = &d["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "GenaceOperations");
        assert_eq!(m["Dimensions"], json!([["Reason"], []]));
        assert_eq!(m["Metrics"][0]["Name"], "CasesOpened");
        assert_eq!(d["CasesOpened"], 1.0);
        assert_eq!(d["Reason"], "unknown_submit_outcome");
        assert!(d["_aws"]["Timestamp"].is_i64());
    }
}
