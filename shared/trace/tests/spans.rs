//! The spans of an operation's trace, through `tracing` and the
//! OpenTelemetry SDK, exported by the collector: a stage continues the
//! sending span, else the operation's root; a send carries the current
//! span; a wait is a span from its start; the root has the id every stage
//! names; and a trace under the sampling rate is exported only when it met
//! a case.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use genace_core::domain::OperationId;
use genace_core::trace::{TraceId, TraceParent};
use genace_trace::{Collector, current_parent, record_phases, root_span, root_span_id, stage_span, wait_span};
use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Debug, Clone, Default)]
struct Captured(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Captured {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Captured {
    fn take(&self) -> Vec<SpanData> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn op(hex: &str) -> OperationId {
    OperationId::parse(&format!("op_{hex}")).unwrap()
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one test: the tracer provider is global, and two tests would race for it"
)]
async fn an_operations_spans_join_its_trace_and_only_kept_traces_are_exported() {
    let collector = Collector::new(0.5);
    let provider = SdkTracerProvider::builder()
        .with_span_processor(collector.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    collector.install();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer(genace_trace::SCOPE)));
    let _guard = tracing::subscriber::set_default(subscriber);
    let exported = Captured::default();

    // Under the rate (its first 8 bytes are a small share): kept.
    let kept = op("0000000000000001aaaaaaaaaaaaaaaa");
    let started = SystemTime::now() - Duration::from_secs(2);
    root_span(&kept, started, vec![]);
    let sent = {
        let span = stage_span("dispatch", Some(&kept), None);
        let _entered = span.enter();
        record_phases(&span, "acme", "prepared", "accepted", false);
        wait_span("wait.capacity", started, vec![]);
        current_parent().expect("a traced span gives its context")
    };
    let span = stage_span("poll", Some(&kept), Some(sent));
    drop(span);
    collector.export(&exported).await.unwrap();
    let spans = exported.take();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["operation", "wait.capacity", "dispatch", "poll"], "{spans:#?}");
    let trace = TraceId::of(&kept).to_bytes();
    assert!(spans.iter().all(|s| s.span_context.trace_id().to_bytes() == trace));
    let by_name = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
    let (root, dispatch, wait, poll) = (
        by_name("operation"),
        by_name("dispatch"),
        by_name("wait.capacity"),
        by_name("poll"),
    );
    assert_eq!(root.span_context.span_id().to_bytes(), root_span_id(&kept).to_bytes());
    assert_eq!(root.start_time, started);
    // With no message naming its sender, a stage continues the root.
    assert_eq!(dispatch.parent_span_id, root.span_context.span_id());
    assert_eq!(wait.parent_span_id, dispatch.span_context.span_id());
    assert_eq!(wait.start_time, started, "the wait runs from its start");
    // A stage sits under the root, beside the stage that sent its
    // message, which it links: the waterfall stays flat.
    assert_eq!(sent.span_id.to_bytes(), dispatch.span_context.span_id().to_bytes());
    assert_eq!(poll.parent_span_id, root.span_context.span_id());
    let poll_links: Vec<[u8; 8]> = poll.links.iter().map(|l| l.span_context.span_id().to_bytes()).collect();
    assert_eq!(poll_links, [sent.span_id.to_bytes()]);
    let attribute = |s: &SpanData, k: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute(dispatch, "phase_after").as_deref(), Some("accepted"));
    // A stage begun by a message is a consumer; the root is the server's.
    assert_eq!(dispatch.span_kind, opentelemetry::trace::SpanKind::Consumer);
    assert_eq!(poll.span_kind, opentelemetry::trace::SpanKind::Consumer);
    assert_eq!(root.span_kind, opentelemetry::trace::SpanKind::Server);
    assert_eq!(attribute(dispatch, "operation_id").as_deref(), Some(kept.as_str()));

    // Sent by another operation's span (a wake-up): the stage stays in its
    // own trace, under its root, and links the sender.
    let foreign = TraceParent::parse("00-ffffffffffffffff0000000000000001-1111111111111111-01").unwrap();
    drop(stage_span("dispatch", Some(&kept), Some(foreign)));
    collector.export(&exported).await.unwrap();
    let woken = exported.take().pop().expect("the woken dispatch");
    assert_eq!(woken.span_context.trace_id().to_bytes(), trace);
    assert_eq!(woken.parent_span_id.to_bytes(), root_span_id(&kept).to_bytes());
    let linked: Vec<[u8; 8]> = woken
        .links
        .iter()
        .map(|l| l.span_context.span_id().to_bytes())
        .collect();
    assert_eq!(linked, [foreign.span_id.to_bytes()]);

    // A trace with a span still open (an invocation running beside this
    // one) waits: its finished spans leave with the open one, whole.
    let open = stage_span("deliver", Some(&kept), None);
    {
        let _inside = open.enter();
        let child = tracing::info_span!("child");
        drop(child.enter());
        drop(child);
    }
    collector.export(&exported).await.unwrap();
    assert!(exported.take().is_empty(), "the trace has a span open");
    drop(open);
    collector.export(&exported).await.unwrap();
    assert_eq!(exported.take().len(), 2);

    // Over the rate: dropped, unless the operation met a case. What a
    // send carries says so ("sampled" or not); a stage continues a sender
    // that did not keep the trace all the same, since a case may yet keep it.
    let dropped = op("ffffffffffffffffaaaaaaaaaaaaaaaa");
    assert!(genace_trace::keeps(TraceId::of(&kept).to_bytes()));
    assert!(!genace_trace::keeps(TraceId::of(&dropped).to_bytes()));
    let unsampled = TraceParent {
        sampled: false,
        ..genace_trace::root_parent(&dropped)
    };
    drop(stage_span("poll", Some(&dropped), Some(unsampled)));
    collector.export(&exported).await.unwrap();
    assert!(exported.take().is_empty(), "a trace over the rate is not exported");
    {
        let span = stage_span("poll", Some(&dropped), Some(unsampled));
        record_phases(&span, "acme", "accepted", "accepted", true);
        assert!(
            genace_trace::keeps(TraceId::of(&dropped).to_bytes()),
            "a case keeps the trace at once: the sends after it say sampled"
        );
    }
    drop(stage_span("deliver", Some(&dropped), None));
    collector.export(&exported).await.unwrap();
    assert_eq!(exported.take().len(), 2, "a trace with a case is exported whole");

    // A sender that kept a trace over the rate (a case in its process)
    // keeps it here too.
    let carried = op("fffffffffffffffebbbbbbbbbbbbbbbb");
    let kept_there = TraceParent {
        sampled: true,
        ..genace_trace::root_parent(&carried)
    };
    drop(stage_span("deliver", Some(&carried), Some(kept_there)));
    collector.export(&exported).await.unwrap();
    assert_eq!(exported.take().len(), 1, "kept as its sender said");
    assert!(genace_trace::keeps(TraceId::of(&carried).to_bytes()));

    // The header a message carries round-trips.
    assert_eq!(TraceParent::parse(&sent.header()), Some(sent));
}
