//! The trace context on SQS (moto over HTTP, through the real SDK): a
//! message sent inside a traced span carries that span as its
//! `traceparent` attribute and as X-Ray's `AWSTraceHeader`; one sent with
//! no traced span carries neither.

use genace_aws::{SqsQueue, clients};
use genace_core::domain::OperationId;
use genace_core::messages::{Queue, WorkMessage};
use genace_core::trace::{TraceId, TraceParent};
use genace_localaws::LocalAws;
use genace_stages::ports::queue::WorkQueue;
use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

async fn received(sqs: &aws_sdk_sqs::Client, url: &str) -> aws_sdk_sqs::types::Message {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .wait_time_seconds(1)
        .message_attribute_names("All")
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    out.messages.unwrap_or_default().into_iter().next().expect("a message")
}

#[tokio::test]
async fn a_message_sent_in_a_traced_span_carries_it() {
    let env = LocalAws::fresh().await;
    let sqs = clients::sqs(&env.sdk);
    let queue = SqsQueue::new(sqs.clone(), env.queues.clone());
    let id = OperationId::parse("op_0af7651916cd43dd8448eb211c80319c").unwrap();
    let message = WorkMessage::for_operation(id.clone());

    // No traced span: nothing added.
    queue.send_work(Queue::Poll, &message, 0).await.unwrap();
    let plain = received(&sqs, &env.queues.poll).await;
    assert!(plain.message_attributes.unwrap_or_default().is_empty());

    let provider = SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer(genace_trace::SCOPE)));
    let _guard = tracing::subscriber::set_default(subscriber);
    let span = genace_trace::stage_span("dispatch", Some(&id), None);
    let sent_by = span.clone();
    queue
        .send_work(Queue::Poll, &message, 0)
        .instrument(span)
        .await
        .unwrap();
    let traced = received(&sqs, &env.queues.poll).await;
    let header = traced.message_attributes.unwrap_or_default()["traceparent"]
        .string_value
        .clone()
        .unwrap();
    let parent = TraceParent::parse(&header).expect("a W3C traceparent");
    assert_eq!(parent.trace_id, TraceId::of(&id), "the operation's trace");
    let sender = {
        let _entered = sent_by.enter();
        genace_trace::current_parent().unwrap()
    };
    assert_eq!(parent, sender, "the span that sent it");
    let system = traced.attributes.unwrap_or_default();
    assert_eq!(
        system.get(&aws_sdk_sqs::types::MessageSystemAttributeName::AwsTraceHeader),
        Some(&parent.xray_header()),
        "X-Ray's header, as a system attribute"
    );
}
