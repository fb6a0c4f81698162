//! The metrics port. A stage counts what happened through the [`Metrics`]
//! it was built with; it never writes a metric line itself, reads the
//! environment, or reads the system clock for one.
//!
//! Deployed, the composition root installs [`EmfLines`]: CloudWatch's
//! Embedded Metric Format, one JSON line on stdout per data point, which
//! Lambda's log pipeline turns into a metric, stamped by the same [`Clock`]
//! the stages use. Tests and the simulator leave metrics off (the default),
//! or install [`Recorded`] to read the points back.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::ports::clock::Clock;

/// One data point: a named value with a CloudWatch unit and dimensions.
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    pub name: &'a str,
    pub value: f64,
    pub unit: &'a str,
    pub dimensions: &'a [(&'a str, &'a str)],
}

/// Where data points go.
pub trait MetricSink: Send + Sync {
    fn record(&self, point: Point<'_>);
}

/// The handle a stage holds: a sink, or nothing (the default).
/// Cloning shares the sink.
#[derive(Clone, Default)]
pub struct Metrics(Option<Arc<dyn MetricSink>>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Metrics(on)"
        } else {
            "Metrics(off)"
        })
    }
}

impl Metrics {
    /// No data point goes anywhere.
    pub fn off() -> Self {
        Self(None)
    }

    /// Every data point goes to `sink`.
    pub fn to(sink: impl MetricSink + 'static) -> Self {
        Self(Some(Arc::new(sink)))
    }

    pub fn emit(&self, name: &str, value: f64, unit: &str, dimensions: &[(&str, &str)]) {
        if let Some(sink) = &self.0 {
            sink.record(Point {
                name,
                value,
                unit,
                dimensions,
            });
        }
    }

    /// Adds one to a counter.
    pub fn count(&self, name: &str, dimensions: &[(&str, &str)]) {
        self.emit(name, 1.0, "Count", dimensions);
    }
}

/// The EMF document for one data point at `timestamp_ms` (epoch milliseconds).
pub fn document(namespace: &str, timestamp_ms: i64, point: Point<'_>) -> Value {
    let dimensions = point.dimensions;
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                // With dimensions, also publish the total (the empty set) so alarms need no metric math.
                "Dimensions": if dimensions.is_empty() {
                    json!([[]])
                } else {
                    json!([dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>(), []])
                },
                "Metrics": [{"Name": point.name, "Unit": point.unit}],
            }],
        }),
    );
    for (k, v) in dimensions {
        doc.insert((*k).into(), json!(v));
    }
    doc.insert(point.name.into(), json!(point.value));
    Value::Object(doc)
}

/// EMF lines on stdout, in `namespace`, stamped by `clock`.
pub struct EmfLines<C> {
    pub namespace: String,
    pub clock: C,
}

impl<C: Clock> MetricSink for EmfLines<C> {
    fn record(&self, point: Point<'_>) {
        let at_ms = self.clock.now().timestamp_millis();
        println!("{}", document(&self.namespace, at_ms, point));
    }
}

/// One recorded data point.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub name: String,
    pub value: f64,
    pub dimensions: Vec<(String, String)>,
    pub at_ms: i64,
}

/// Keeps every data point in memory, stamped by `clock`: for tests.
#[derive(Clone)]
pub struct Recorder<C> {
    pub clock: C,
    pub points: Arc<Mutex<Vec<Recorded>>>,
}

impl<C> Recorder<C> {
    pub fn new(clock: C) -> Self {
        Self {
            clock,
            points: Arc::default(),
        }
    }

    /// The points recorded so far.
    pub fn points(&self) -> Vec<Recorded> {
        self.points.lock().expect("metric points").clone()
    }
}

impl<C: Clock> MetricSink for Recorder<C> {
    fn record(&self, point: Point<'_>) {
        let recorded = Recorded {
            name: point.name.to_owned(),
            value: point.value,
            dimensions: point
                .dimensions
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            at_ms: self.clock.now().timestamp_millis(),
        };
        self.points.lock().expect("metric points").push(recorded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_the_embedded_metric_format() {
        let point = Point {
            name: "CasesOpened",
            value: 1.0,
            unit: "Count",
            dimensions: &[("Reason", "unknown_submit_outcome")],
        };
        let d = document("GenaceOperations", 1_796_000_000_123, point);
        let m = &d["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "GenaceOperations");
        assert_eq!(m["Dimensions"], json!([["Reason"], []]));
        assert_eq!(m["Metrics"][0]["Name"], "CasesOpened");
        assert_eq!(d["CasesOpened"], 1.0);
        assert_eq!(d["Reason"], "unknown_submit_outcome");
        assert_eq!(d["_aws"]["Timestamp"], 1_796_000_000_123_i64);
    }

    #[test]
    fn points_are_stamped_by_the_clock_they_were_given_and_off_records_nothing() {
        /// A clock that reads whatever the test set.
        #[derive(Clone)]
        struct Set(Arc<Mutex<i64>>);
        impl Clock for Set {
            fn now(&self) -> chrono::DateTime<chrono::Utc> {
                chrono::DateTime::from_timestamp_millis(*self.0.lock().unwrap()).unwrap()
            }
        }
        let clock = Set(Arc::new(Mutex::new(1_700_000_000_000)));
        let recorder = Recorder::new(clock.clone());
        let metrics = Metrics::to(recorder.clone());
        metrics.count("IntentsCreated", &[]);
        *clock.0.lock().unwrap() += 5_000;
        metrics.emit("DeliveredBytes", 42.0, "Bytes", &[("Stage", "deliver")]);
        Metrics::off().count("Ignored", &[]);
        let points = recorder.points();
        assert_eq!(points.len(), 2);
        assert_eq!(
            (points[0].name.as_str(), points[0].at_ms),
            ("IntentsCreated", 1_700_000_000_000)
        );
        assert_eq!(points[1].at_ms, 1_700_000_005_000);
        assert_eq!(points[1].dimensions, vec![("Stage".to_owned(), "deliver".to_owned())]);
    }
}
