//! The sweep's spans, in a test binary of its own: it scopes a subscriber
//! to its thread, and `tracing` caches per call site whether anyone
//! listens, which stage tests running beside it with no subscriber would
//! spoil.

use chrono::{Duration, TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::messages::Queue;
use genace_memory::{MemoryApp, memory_app};
use genace_stages::api::intake::Submitted;
use genace_stages::ports::clock::Clock;
use serde_json::json;

fn app() -> MemoryApp {
    let mut app = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    app.config.fault_injection = true;
    app
}

/// Submits a new intent as `tenant-a`, with a fault directive if any.
async fn submit(app: &MemoryApp, key: &str, fault: Option<&str>) -> OperationId {
    let mut body = json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": "a lighthouse"}});
    if let Some(f) = fault {
        body["fault"] = json!(f);
    }
    let intent = Intent::parse(&body, None).unwrap();
    match app
        .api()
        .submit(&TenantId::parse("tenant-a").unwrap(), &intent, app.clock.now())
        .await
        .unwrap()
    {
        Submitted::New(rec) => rec.operation_id,
        other => panic!("expected a new operation, got {other:?}"),
    }
}

/// The sweep's repairs are spans of the repaired operation's trace: a
/// requeue (a lost message sent again) and an interrupted dispatch (a
/// claim whose lease ran out, which opens a case) each leave a `sweep`
/// span naming the operation, in its trace, saying what it did; the case
/// is marked on the span, so the trace is kept whatever the sampling.
/// Keeps every span it is given.
#[derive(Debug, Clone, Default)]
struct Kept(std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Kept {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Kept {
    /// The `sweep` spans: their trace, the operation they name, their
    /// outcome and whether they say the operation has a case.
    fn sweeps(&self) -> Vec<(String, String, String, bool)> {
        let attr = |s: &opentelemetry_sdk::trace::SpanData, key: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.as_str().into_owned())
                .unwrap_or_default()
        };
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == "sweep")
            .map(|s| {
                (
                    s.span_context.trace_id().to_string(),
                    attr(s, "operation_id"),
                    attr(s, "outcome"),
                    attr(s, genace_trace::CASE_ATTRIBUTE) == "true",
                )
            })
            .collect()
    }
}

#[tokio::test]
async fn each_repair_of_the_sweep_is_a_span_of_its_operations_trace() {
    let kept = Kept::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, genace_trace::SCOPE);
    let subscriber = tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        tracing_opentelemetry::layer().with_tracer(tracer),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = app();
    // One announcement lost; one dispatch that crashes after its claim.
    let lost = submit(&app, "lost", None).await;
    let message = app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30));
    assert!(app.queue.delete(message[0].id, message[0].receipt));
    let claimed = submit(&app, "claimed", Some("dispatch.before_post")).await;
    let body = app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30));
    let _ = genace_stages::pipeline::stage::handle_body(&app.dispatcher(), &body[0].body).await;

    let sweeps_before = kept.sweeps().len();
    app.clock
        .advance(app.config.policy.dispatch_lease + app.config.dispatch_grace + Duration::seconds(1));
    app.sweeper().run().await.unwrap();
    let sweeps = kept.sweeps();
    assert_eq!(sweeps_before, 0, "nothing to repair before");
    let of = |id: &OperationId| {
        sweeps
            .iter()
            .find(|s| s.1 == id.as_str())
            .unwrap_or_else(|| panic!("no sweep span for {id}: {sweeps:?}"))
    };
    let requeued = of(&lost);
    assert_eq!(
        requeued.0,
        genace_core::trace::TraceId::of(&lost).to_hex(),
        "in the operation's trace"
    );
    assert_eq!(requeued.2, "sent to dispatch again");
    assert!(!requeued.3);
    let interrupted = of(&claimed);
    assert_eq!(interrupted.0, genace_core::trace::TraceId::of(&claimed).to_hex());
    assert_eq!(interrupted.2, "interrupted dispatch: case opened");
    assert!(interrupted.3, "the case keeps the trace");
    provider.shutdown().unwrap();
}
