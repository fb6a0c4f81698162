//! What a trace receiver kept of the target's spans, for the scenarios
//! that check traces: a JSON-lines file, one span per line (`trace_id`,
//! `span_id`, `parent_span_id`, `name`, `start_ns`, `end_ns`,
//! `attributes`), as the local stack's receiver writes it (`--local`
//! starts one; `--traces FILE` names another's). Without a file, those
//! checks are skipped and the summary says so.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::context::{Outcome, check};

/// One span as the receiver wrote it.
#[derive(Debug, Clone)]
pub struct Span(Value);

impl Span {
    pub fn name(&self) -> &str {
        self.0["name"].as_str().unwrap_or_default()
    }

    pub fn start(&self) -> u64 {
        self.0["start_ns"].as_u64().unwrap_or_default()
    }

    /// An attribute as text (strings bare, others as JSON).
    pub fn attribute(&self, key: &str) -> Option<String> {
        match &self.0["attributes"][key] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

/// Every span in `file` (none while it does not exist).
pub fn read_all(file: &Path) -> Vec<(String, Span)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["trace_id"].as_str()?.to_owned(), Span(v))))
        .collect()
}

/// The stages every delivered operation's trace holds: its root and one
/// span per stage.
pub const STAGES: [&str; 5] = ["operation", "intake", "dispatch", "poll", "deliver"];

/// Whether `spans` hold a span of every stage in [`STAGES`].
pub fn every_stage(spans: &[Span]) -> bool {
    STAGES.iter().all(|name| spans.iter().any(|s| s.name() == *name))
}

/// The spans of each of `traces` once every one of them is `ready`, or
/// after `patience`. Each invocation exports its spans as it ends, and the
/// invocations of one operation end in no set order: a poll's export may
/// land after the deliver it handed over to has exported its own, so no
/// single span says that a trace is complete.
pub async fn wait_for(
    file: &Path,
    traces: &[String],
    ready: impl Fn(&[Span]) -> bool,
    patience: Duration,
) -> Vec<Vec<Span>> {
    let deadline = Instant::now() + patience;
    loop {
        let all = read_all(file);
        let of = |t: &String| -> Vec<Span> { all.iter().filter(|(id, _)| id == t).map(|(_, s)| s.clone()).collect() };
        let spans: Vec<Vec<Span>> = traces.iter().map(of).collect();
        if spans.iter().all(|s| ready(s)) || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// One trace for `operation_id`: every span in `file` that names it is
/// in `trace`.
pub fn one_trace(file: &Path, trace: &str, operation_id: &str) -> Outcome {
    for (id, span) in read_all(file) {
        if span.attribute("operation_id").as_deref() == Some(operation_id) {
            check(
                id == trace,
                format!("{operation_id}: a {} span in trace {id}, not {trace}", span.name()),
            )?;
        }
    }
    Ok(())
}

/// The trace of one delivered operation: its root first, every stage
/// present and begun in causal order (intake, dispatch, poll, deliver),
/// and exactly one Genace POST answered 202.
pub fn one_delivered_operation(operation_id: &str, spans: &[Span]) -> Outcome {
    let first = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name() == name)
            .map(Span::start)
            .min()
            .ok_or(format!("{operation_id}: no {name} span in its trace"))
    };
    let root = spans.iter().min_by_key(|s| s.start()).map(Span::name);
    check(
        root == Some("operation"),
        format!("{operation_id}: the trace begins with {root:?}, not the operation's root"),
    )?;
    let order = [first("intake")?, first("dispatch")?, first("poll")?, first("deliver")?];
    check(
        order.windows(2).all(|w| w[0] <= w[1]),
        format!("{operation_id}: the stages began out of order (intake, dispatch, poll, deliver at {order:?})"),
    )?;
    let accepted = posts(spans).iter().filter(|code| *code == "202").count();
    check(
        accepted == 1,
        format!("{operation_id}: {accepted} Genace POST spans answered 202, expected 1"),
    )
}

/// The statuses of the trace's Genace POST spans, in the order they began.
pub fn posts(spans: &[Span]) -> Vec<String> {
    let mut posts: Vec<&Span> = spans.iter().filter(|s| s.name() == "genace.post").collect();
    posts.sort_by_key(|s| s.start());
    posts
        .into_iter()
        .map(|s| s.attribute("http.response.status_code").unwrap_or_default())
        .collect()
}
