//! `trace`: an operation's trace as a waterfall in the terminal, from the
//! spans the local stack's OTLP receiver wrote (one JSON line a span).

use std::path::Path;
use std::process::ExitCode;

use genace_core::domain::OperationId;
use genace_core::trace::TraceId;
use genace_trace::lines::{of_trace, waterfall};

pub(crate) fn trace(json: bool, operation_id: &str, file: &Path, width: usize) -> ExitCode {
    let Ok(id) = OperationId::parse(operation_id) else {
        eprintln!("genace-ops: {operation_id:?} is not an operation id (op_ and 32 hex digits)");
        return ExitCode::from(2);
    };
    let trace = TraceId::of(&id).to_hex();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("genace-ops: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    match shown(json, &text, &trace, width) {
        Some(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("genace-ops: no spans of trace {trace} in {}", file.display());
            ExitCode::from(1)
        }
    }
}

/// What `trace` prints for `trace` among the span lines `text`: the
/// waterfall (or the spans as JSON); none when the trace has no span.
fn shown(json: bool, text: &str, trace: &str, width: usize) -> Option<String> {
    let spans = of_trace(text, trace);
    if spans.is_empty() {
        return None;
    }
    Some(if json {
        format!("{}\n", serde_json::to_string_pretty(&spans).unwrap_or_default())
    } else {
        format!("trace {trace} ({} spans)\n{}", spans.len(), waterfall(&spans, width))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waterfall_of_one_trace_and_nothing_of_the_others() {
        let line = |trace: &str, span: &str, parent: Option<&str>, name: &str, start: u64, end: u64| {
            serde_json::json!({"trace_id": trace, "span_id": span, "parent_span_id": parent, "name": name,
                "service": "local", "start_ns": start, "end_ns": end, "attributes": {"outcome": "ok"}})
            .to_string()
        };
        let text = [
            line("aa", "1", None, "operation", 0, 1_000_000_000),
            line("aa", "2", Some("1"), "dispatch", 500_000_000, 1_000_000_000),
            line("bb", "3", None, "poll", 0, 10),
            "not a span".into(),
        ]
        .join("\n");
        let out = shown(false, &text, "aa", 10).unwrap();
        let rows: Vec<&str> = out.lines().collect();
        assert_eq!(rows[0], "trace aa (2 spans)");
        assert!(
            rows[1].ends_with("operation ok") && rows[2].ends_with("  dispatch ok"),
            "{out}"
        );
        assert!(!out.contains("poll"));
        assert_eq!(shown(false, &text, "cc", 10), None);
        let json: serde_json::Value = serde_json::from_str(&shown(true, &text, "aa", 10).unwrap()).unwrap();
        assert_eq!(json.as_array().unwrap().len(), 2);
    }
}
