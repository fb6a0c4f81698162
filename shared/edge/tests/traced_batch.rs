//! A message is handled in a span that continues its sender, else its
//! operation's root. A test binary of its own: it scopes a subscriber to
//! its thread, and `tracing` caches per call site whether anyone listens,
//! which tests running beside it with no subscriber would spoil.

use std::sync::Mutex;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use genace_edge::sqs::process_batch;
use genace_stages::pipeline::stage::{Stage, StageError};

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(body.into());
    m
}

/// Remembers the context its handling ran in.
#[derive(Default)]
struct Traced(Mutex<Option<genace_core::trace::TraceParent>>);

impl Stage for Traced {
    type Message = serde_json::Value;
    type Outcome = &'static str;
    const NAME: &'static str = "traced";

    async fn handle(&self, _message: serde_json::Value) -> Result<&'static str, StageError> {
        *self.0.lock().unwrap() = genace_trace::current_parent();
        Ok("ok")
    }
}

#[tokio::test]
async fn a_message_is_handled_in_a_span_that_continues_its_sender() {
    use opentelemetry::trace::TracerProvider;
    use tracing_subscriber::layer::SubscriberExt;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer(genace_trace::SCOPE)));
    let _guard = tracing::subscriber::set_default(subscriber);
    let sender = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let sent = |id: &str, op: &str| {
        let mut m = message(id, &format!(r#"{{"operation_id": "{op}"}}"#));
        let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
        attribute.string_value = Some(sender.into());
        m.message_attributes.insert("traceparent".into(), attribute);
        m
    };
    // Sent from the operation's own trace; from another operation's
    // (a wake-up: linked, not continued); with no sender named.
    let with_parent = sent("a", "op_0af7651916cd43dd8448eb211c80319c");
    let foreign = sent("b", "op_11111111111111111111111111111111");
    let without = message("c", r#"{"operation_id": "op_22222222222222222222222222222222"}"#);
    // A lifecycle event off the bus: the trace in its detail.
    let bus = message(
        "d",
        r#"{"detail": {"operation_id": "op_33333333333333333333333333333333",
                       "trace_id": "33333333333333333333333333333333"}}"#,
    );
    let stage = Traced::default();
    for (record, trace) in [
        (with_parent, "0af7651916cd43dd8448eb211c80319c"),
        (foreign, "11111111111111111111111111111111"),
        (without, "22222222222222222222222222222222"),
        (bus, "33333333333333333333333333333333"),
    ] {
        let mut event = SqsEvent::default();
        event.records = vec![record];
        process_batch(event, &stage).await;
        let seen = stage.0.lock().unwrap().take().expect("handled in a traced span");
        assert_eq!(seen.trace_id.to_hex(), trace, "the operation's trace, whoever sent it");
        assert_ne!(seen.span_id.to_hex(), "b7ad6b7169203331", "a span of its own");
    }
}
