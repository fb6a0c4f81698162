//! One trace per operation, across every stage: the spans the stages open
//! with `tracing`, made OpenTelemetry spans by `tracing-opentelemetry`, and
//! the context that the queues carry between them.
//!
//! - A stage's span ([`stage_span`]) sits under the operation's root and
//!   links the span that sent its message (the W3C `traceparent` it
//!   carried), so the waterfall stays flat however many looks a render
//!   takes: the trace id is the operation's
//!   ([`genace_core::trace::TraceId::of`]), so a poll the sweep sends, or a
//!   person's decision, joins the same trace without being told.
//! - The root ([`root_span`]) is written once, by the intake that created
//!   the operation, with the id every stage names as the parent of last
//!   resort ([`root_span_id`]).
//! - A wait for a slot or for credits is a span of its own
//!   ([`wait_span`]), from the wait's start to the admission.
//! - [`current_parent`] is what a send puts in the message.
//! - [`Collector`] holds an invocation's finished spans and exports, at
//!   [`flush`], the traces that are sampled or that met a case.
//! - [`lines`]: spans as the local receiver writes them, and a trace's
//!   waterfall.

mod collector;
pub mod lines;

use std::time::SystemTime;

use genace_core::domain::OperationId;
use genace_core::trace::{SpanId, TraceId, TraceParent};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState, Tracer};
use opentelemetry::{Context, KeyValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use collector::{CASE_ATTRIBUTE, Collector, Flush, flush, keeps, mark_kept, sampled, set_flush};

/// The instrumentation scope of every span.
pub const SCOPE: &str = "genace-operations";

/// The root span's id: the last 8 bytes of the operation's trace id (the
/// first 8 when those are all zero).
pub fn root_span_id(id: &OperationId) -> SpanId {
    let bytes = TraceId::of(id).to_bytes();
    let mut last = [0u8; 8];
    last.copy_from_slice(&bytes[8..]);
    SpanId::from_bytes(last)
        .or_else(|| {
            let mut first = [0u8; 8];
            first.copy_from_slice(&bytes[..8]);
            SpanId::from_bytes(first)
        })
        .unwrap_or_else(|| SpanId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1]).expect("not zero"))
}

/// The operation's root as a parent: what a stage continues when no
/// message told it which span sent it.
pub fn root_parent(id: &OperationId) -> TraceParent {
    TraceParent {
        trace_id: TraceId::of(id),
        span_id: root_span_id(id),
        sampled: true,
    }
}

/// The span of one stage invocation for one message: named `stage`, with
/// the operation's id and trace id, under the operation's root, with the
/// span that sent the message (`parent`) as a link. So an operation's
/// waterfall is flat: twenty looks at a render are twenty siblings, not
/// twenty levels. Without an operation, it continues `parent`, or begins
/// a trace of its own. Its `tenant`,
/// `phase_before`, `phase_after` and `outcome` are recorded as the stage
/// learns them ([`record_phases`], [`record_outcome`]).
pub fn stage_span(stage: &'static str, id: Option<&OperationId>, parent: Option<TraceParent>) -> tracing::Span {
    let span = tracing::info_span!(
        "stage",
        otel.name = stage,
        otel.kind = kind_of(stage),
        stage,
        operation_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        tenant = tracing::field::Empty,
        phase_before = tracing::field::Empty,
        phase_after = tracing::field::Empty,
        outcome = tracing::field::Empty,
        genace.case = tracing::field::Empty,
    );
    if let Some(id) = id {
        span.record("operation_id", id.as_str());
    }
    // A message another operation's span sent (a wake-up sent by the
    // stage that freed a slot) is a link, not a parent: the stage stays in
    // its own operation's trace.
    // A sender that kept the trace (it fell under the rate, or met a case
    // in the sender's process) keeps it here too: the decision travels
    // with the messages.
    if let (Some(p), Some(id)) = (&parent, id)
        && p.sampled
        && p.trace_id == TraceId::of(id)
    {
        mark_kept(p.trace_id.to_bytes());
    }
    let (parent, link) = match (parent, id) {
        (Some(p), Some(id)) => (Some(root_parent(id)), Some(p)),
        (p, id) => (p.or_else(|| id.map(root_parent)), None),
    };
    if let Some(parent) = parent {
        span.record("trace_id", parent.trace_id.to_hex());
        let _ = span.set_parent(remote(parent));
    }
    if let Some(sender) = link {
        let by = if id.is_some_and(|id| sender.trace_id == TraceId::of(id)) {
            "sent by the operation's stage before"
        } else {
            "sent by another operation's stage"
        };
        span.add_link_with_attributes(
            remote(sender).span().span_context().clone(),
            vec![KeyValue::new("genace.link", by)],
        );
    }
    span
}

/// The phases a commit moved the operation between, on the stage's span
/// (`span`; fields it does not have are ignored), with its tenant and
/// whether it has a case.
pub fn record_phases(span: &tracing::Span, tenant: &str, before: &str, after: &str, case: bool) {
    span.record("tenant", tenant);
    span.record("phase_before", before);
    span.record("phase_after", after);
    if case {
        span.record(CASE_ATTRIBUTE, true);
        mark_kept(span.context().span().span_context().trace_id().to_bytes());
    }
}

/// The kind of a stage's span, by what began it: a request to the API
/// (server; the intake's request is the operation's root, written as a
/// server span, so the intake's own is internal under it), a message off
/// a queue (consumer), or the sweep's timer (internal). X-Ray makes a
/// segment of server and consumer spans.
fn kind_of(stage: &str) -> &'static str {
    match stage {
        "resolve" | "cancel" | "erase" => "server",
        "intake" | "sweep" => "internal",
        _ => "consumer",
    }
}

/// `work` for operation `id` in a span of its own named `stage`, under
/// the operation's root (an operator's decision, a cancel, an erasure),
/// with how it ended: `ok`, or the error.
pub async fn traced<T, E: std::fmt::Display>(
    stage: &'static str,
    id: &OperationId,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    use tracing::Instrument as _;
    let span = stage_span(stage, Some(id), None);
    let done = work.instrument(span.clone()).await;
    let outcome = match &done {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    record_outcome(&span, &outcome);
    done
}

/// How the stage's invocation ended, on its span.
pub fn record_outcome(span: &tracing::Span, outcome: &str) {
    span.record("outcome", outcome);
}

/// The context the current span gives the messages it sends; none when
/// no span is traced (no exporter installed, or outside any span).
pub fn current_parent() -> Option<TraceParent> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    Some(TraceParent {
        trace_id: TraceId::from_bytes(sc.trace_id().to_bytes())?,
        span_id: SpanId::from_bytes(sc.span_id().to_bytes())?,
        sampled: sc.is_sampled(),
    })
}

/// A span from `since` until now, under the current span: a wait for a
/// slot or for credits, written when the wait ends.
pub fn wait_span(name: &'static str, since: SystemTime, attributes: Vec<KeyValue>) {
    let cx = tracing::Span::current().context();
    let tracer = opentelemetry::global::tracer(SCOPE);
    let mut span = tracer
        .span_builder(name)
        .with_start_time(since)
        .with_attributes(attributes)
        .start_with_context(&tracer, &cx);
    opentelemetry::trace::Span::end(&mut span);
}

/// The operation's root, written once by the intake that created it: from
/// the request's start until now, with the id the stages name as their
/// parent of last resort.
pub fn root_span(id: &OperationId, started: SystemTime, attributes: Vec<KeyValue>) {
    let tracer = opentelemetry::global::tracer(SCOPE);
    let mut span = tracer
        .span_builder("operation")
        .with_kind(opentelemetry::trace::SpanKind::Server)
        .with_trace_id(opentelemetry::trace::TraceId::from_bytes(TraceId::of(id).to_bytes()))
        .with_span_id(opentelemetry::trace::SpanId::from_bytes(root_span_id(id).to_bytes()))
        .with_start_time(started)
        .with_attributes(attributes)
        .start_with_context(&tracer, &Context::new());
    opentelemetry::trace::Span::end(&mut span);
}

/// `parent` as a remote span context to continue.
/// `parent` as the remote parent of a span of ours. Always sampled: every
/// span is recorded, and the collector decides at the end of the
/// invocation what is kept (the flag a sender set says what it kept then,
/// and a case found here may still keep the trace).
fn remote(parent: TraceParent) -> Context {
    let flags = TraceFlags::SAMPLED;
    Context::new().with_remote_span_context(SpanContext::new(
        opentelemetry::trace::TraceId::from_bytes(parent.trace_id.to_bytes()),
        opentelemetry::trace::SpanId::from_bytes(parent.span_id.to_bytes()),
        flags,
        true,
        TraceState::default(),
    ))
}
