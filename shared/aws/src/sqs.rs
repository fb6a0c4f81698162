//! The work queues in SQS: one queue per stage, and the restricted
//! recovery queue.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::send_message::builders::SendMessageFluentBuilder;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};
use genace_core::messages::{Queue, RecoveryMessage, WorkMessage};
use genace_stages::config::QueueUrls;
use genace_stages::ports::queue::{
    MAX_DELAY_SECONDS, MAX_VISIBILITY_SECONDS, QueueError, ReceiptDeferral, RecoveryChannel, WorkQueue,
};

#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    urls: QueueUrls,
}

impl SqsQueue {
    pub fn new(client: Client, urls: QueueUrls) -> Self {
        Self { client, urls }
    }

    fn url(&self, queue: Queue) -> &str {
        match queue {
            Queue::Dispatch => &self.urls.dispatch,
            Queue::Poll => &self.urls.poll,
            Queue::Deliver => &self.urls.deliver,
            Queue::Recovery => &self.urls.recovery,
            Queue::Wake => &self.urls.wake,
        }
    }
}

/// The current span's context on a message: the W3C `traceparent` as a
/// message attribute, which the next stage continues, and the same as
/// X-Ray's `AWSTraceHeader` system attribute, which joins the Lambdas in
/// X-Ray. Both say "sampled" only when the process keeps the trace, so
/// X-Ray records the invocations of the kept operations only. Nothing
/// when no span is traced.
fn trace_attributes() -> Option<(MessageAttributeValue, MessageSystemAttributeValue)> {
    let mut parent = genace_trace::current_parent()?;
    parent.sampled = genace_trace::keeps(parent.trace_id.to_bytes());
    let w3c = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(parent.header())
        .build()
        .ok()?;
    let xray = MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(parent.xray_header())
        .build()
        .ok()?;
    Some((w3c, xray))
}

/// The message attribute that carries the sending span.
pub const TRACEPARENT: &str = "traceparent";

fn traced(send: SendMessageFluentBuilder) -> SendMessageFluentBuilder {
    match trace_attributes() {
        Some((w3c, xray)) => send
            .message_attributes(TRACEPARENT, w3c)
            .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, xray),
        None => send,
    }
}

impl SqsQueue {
    async fn send(&self, queue: Queue, body: String, delay_seconds: u32) -> Result<(), QueueError> {
        traced(self.client.send_message())
            .queue_url(self.url(queue))
            .message_body(body)
            .delay_seconds(delay_seconds.min(MAX_DELAY_SECONDS) as i32)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| QueueError {
                queue,
                detail: aws_sdk_sqs::error::DisplayErrorContext(e).to_string(),
            })
    }
}

impl WorkQueue for SqsQueue {
    async fn send_work(&self, queue: Queue, message: &WorkMessage, delay_seconds: u32) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).expect("a work message always serializes");
        self.send(queue, body, delay_seconds).await
    }

    async fn send_webhook_copies(&self, bodies: Vec<String>) -> Result<(), String> {
        if self.urls.webhooks.is_empty() {
            return Err("WEBHOOK_QUEUE_URL is not set".into());
        }
        for batch in batches(&bodies) {
            self.send_batch(batch).await?;
        }
        Ok(())
    }
}

/// The most messages one `SendMessageBatch` takes.
const BATCH_ENTRIES: usize = 10;

/// The most bytes of bodies one batch carries: SQS's limit on a whole
/// batch, the smaller of its two historical sizes, less room for the
/// trace attributes each entry carries.
const BATCH_BYTES: usize = 256 * 1024 - BATCH_ENTRIES * 512;

/// `bodies` in order, cut into batches of at most [`BATCH_ENTRIES`]
/// messages and [`BATCH_BYTES`] bytes (a body larger than that alone).
fn batches(bodies: &[String]) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        if i > start && (i - start == BATCH_ENTRIES || bytes + body.len() > BATCH_BYTES) {
            out.push(&bodies[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(&bodies[start..]);
    }
    out
}

impl SqsQueue {
    /// One `SendMessageBatch` of webhook copies; the entries SQS failed for
    /// its own reasons are sent once more, and any still failed are an error.
    async fn send_batch(&self, bodies: &[String]) -> Result<(), String> {
        let attributes = trace_attributes();
        let mut entries: Vec<SendMessageBatchRequestEntry> = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body);
                let entry = match &attributes {
                    Some((w3c, xray)) => entry
                        .message_attributes(TRACEPARENT, w3c.clone())
                        .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, xray.clone()),
                    None => entry,
                };
                entry.build().map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        for last in [false, true] {
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.urls.webhooks)
                .set_entries(Some(entries.clone()))
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            let failed = out.failed();
            if failed.is_empty() {
                return Ok(());
            }
            // A fault of the request itself would fail again.
            if last || failed.iter().any(|f| f.sender_fault()) {
                let first = &failed[0];
                return Err(format!(
                    "{} of {} copies were not queued ({}: {})",
                    failed.len(),
                    entries.len(),
                    first.code(),
                    first.message().unwrap_or_default()
                ));
            }
            entries.retain(|e| failed.iter().any(|f| f.id() == e.id()));
        }
        Ok(())
    }
}

impl RecoveryChannel for SqsQueue {
    async fn send_recovery(&self, message: &RecoveryMessage) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).expect("a recovery message always serializes");
        self.send(Queue::Recovery, body, 0).await
    }
}

/// Defers when messages received from one queue are received again, by changing
/// their visibility timeout.
#[derive(Debug, Clone)]
pub struct SqsReceiptDeferral {
    client: Client,
    url: String,
}

impl SqsReceiptDeferral {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }
}

impl ReceiptDeferral for SqsReceiptDeferral {
    async fn defer_receipt(&self, receipt_handle: &str, seconds: u32) -> Result<(), String> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(seconds.min(MAX_VISIBILITY_SECONDS)).unwrap_or(i32::MAX))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())
    }
}

/// The webhook queue as the webhook stage writes to it
/// (`genace_stages::ports::webhooks::WebhookQueue`): copies of an event, one per
/// receiver, on the queue itself; events that can never be sent as
/// configured, on its dead-letter queue directly. A dead letter's reason
/// rides as a message attribute; the body is the message, as the queue's
/// redrive would have kept it.
#[derive(Debug, Clone)]
pub struct SqsWebhookQueue {
    client: Client,
    queue_url: String,
    url: String,
}

impl SqsWebhookQueue {
    /// Writes copies to `queue_url` and dead letters to `dead_letter_url`.
    pub fn new(client: Client, queue_url: impl Into<String>, dead_letter_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            url: dead_letter_url.into(),
        }
    }
}

impl genace_stages::ports::webhooks::WebhookQueue for SqsWebhookQueue {
    async fn dead_letter(&self, body: String, reason: String) -> Result<(), String> {
        let reason: String = reason.chars().take(1024).collect();
        let attribute = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("String")
            .string_value(reason)
            .build()
            .map_err(|e| e.to_string())?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .message_attributes("reason", attribute)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())
    }

    /// Ten to a batch; an entry SQS refuses fails the whole call, and the
    /// event's message is tried again (a receiver may then get a copy
    /// twice, with the same `webhook-id`).
    async fn fan_out(&self, bodies: Vec<String>) -> Result<(), String> {
        for batch in bodies.chunks(10) {
            let entries = batch
                .iter()
                .enumerate()
                .map(|(i, body)| {
                    let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body);
                    let entry = match trace_attributes() {
                        Some((w3c, xray)) => entry
                            .message_attributes(TRACEPARENT, w3c)
                            .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, xray),
                        None => entry,
                    };
                    entry.build().map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            if let Some(failed) = out.failed.first() {
                return Err(format!("queueing a webhook copy failed: {}", failed.code));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_go_in_batches_of_ten_and_under_the_batch_size() {
        let small: Vec<String> = (0..25).map(|i| format!("copy {i}")).collect();
        let sizes: Vec<usize> = batches(&small).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [10, 10, 5]);
        assert_eq!(batches(&small).concat(), small, "in order, each once");
        assert!(batches(&[]).is_empty());
        // Large bodies: as many as fit, and one too large for any batch alone.
        let large: Vec<String> = [100_000, 100_000, 100_000, 300_000, 10]
            .iter()
            .map(|n| "x".repeat(*n))
            .collect();
        let sizes: Vec<usize> = batches(&large).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1]);
        for batch in batches(&large).iter().filter(|b| b.len() > 1) {
            assert!(batch.iter().map(String::len).sum::<usize>() <= BATCH_BYTES);
        }
    }
}
