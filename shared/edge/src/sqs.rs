//! The SQS edge of the Lambdas: one runner for every queue-driven stage.
//! Each message of a batch is parsed into the stage's message type and
//! handled in turn; the failures are reported as batch item failures, so
//! SQS redelivers only those. A stage that wants a failed message back
//! later than the queue's visibility timeout (see
//! [`Stage::retry_after`]) gets it through a [`ReceiptDeferral`]. Each
//! message is handled in its stage's span, continuing the span that sent
//! it (its `traceparent` attribute), and the spans are exported before the
//! invocation ends.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use genace_stages::pipeline::stage::{Stage, StageError, handle_traced};
use genace_stages::ports::queue::{ReceiptDeferral, VisibilityTimeout, visibility_left};
use tracing::{error, warn};

/// Runs the stage on every message of a batch, one after another (in the
/// stage's [`Stage::batch_order`]), and reports the ones that failed so
/// SQS redelivers only those.
pub async fn process_batch<S: Stage>(event: SqsEvent, stage: &S) -> SqsBatchResponse {
    process_batch_with(event, stage, &VisibilityTimeout).await
}

/// [`process_batch`], with each failed message hidden for as long as the
/// stage asks before SQS delivers it again.
pub async fn process_batch_with<S: Stage, R: ReceiptDeferral>(
    event: SqsEvent,
    stage: &S,
    deferral: &R,
) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    // SQS counts a receipt's 12 hours from the receive, which came before this start.
    let started = std::time::Instant::now();
    let mut records = event.records;
    records.sort_by_cached_key(|r| r.body.as_deref().map_or(i64::MIN, S::batch_order));
    for record in records {
        let id = record.message_id.clone().unwrap_or_default();
        let Some(body) = record.body.as_deref() else {
            warn!(message_id = %id, "message without a body");
            response.add_failure(id);
            continue;
        };
        let traceparent = record
            .message_attributes
            .get("traceparent")
            .and_then(|a| a.string_value.as_deref());
        if let Err(e) = handle_traced(stage, body, receives(&record), traceparent).await {
            match e {
                StageError::Crashed(_) => {
                    warn!(message_id = %id, error = %e, "message left to be received again")
                }
                _ => error!(message_id = %id, error = %e, "message left to be received again"),
            }
            let asked = stage.retry_after(&e, receives(&record));
            let seconds = asked.map(|s| visibility_left(s, started.elapsed()));
            defer(&record, seconds, deferral).await;
            response.add_failure(id);
        }
    }
    // The invocation's spans leave before the function is frozen.
    genace_trace::flush().await;
    response
}

/// How many times SQS has delivered the message, this time included.
fn receives(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

async fn defer<R: ReceiptDeferral>(record: &SqsMessage, seconds: Option<u32>, deferral: &R) {
    let (Some(seconds), Some(receipt)) = (seconds, record.receipt_handle.as_deref()) else {
        return;
    };
    if let Err(e) = deferral.defer_receipt(receipt, seconds).await {
        // The message still comes back, after the queue's visibility timeout.
        warn!(message_id = ?record.message_id, seconds, error = %e, "could not defer the receipt");
    }
}

/// Runs an SQS-triggered Lambda: every message goes to the stage, and the
/// failures are reported as batch item failures.
pub async fn serve_sqs<S: Stage>(stage: S) -> Result<(), lambda_runtime::Error> {
    serve_sqs_with(stage, VisibilityTimeout).await
}

/// [`serve_sqs`], with failed messages deferred through `deferral`.
pub async fn serve_sqs_with<S: Stage, R: ReceiptDeferral>(stage: S, deferral: R) -> Result<(), lambda_runtime::Error> {
    let (stage, deferral) = (&stage, &deferral);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| async move {
            // The stages see the invocation's deadline (its timeout).
            let deadline = i64::try_from(event.context.deadline)
                .ok()
                .and_then(chrono::DateTime::from_timestamp_millis);
            let batch = process_batch_with(event.payload, stage, deferral);
            Ok::<SqsBatchResponse, lambda_runtime::Error>(genace_stages::ports::deadline::until(deadline, batch).await)
        },
    ))
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Fails every message remotely and asks for `receives * 10` seconds.
    struct Flaky;

    impl Stage for Flaky {
        type Message = serde_json::Value;
        type Outcome = &'static str;

        async fn handle(&self, message: serde_json::Value) -> Result<&'static str, StageError> {
            match message["ok"].as_bool() {
                Some(true) => Ok("ok"),
                _ => Err(StageError::Remote("down".into())),
            }
        }

        fn retry_after(&self, _error: &StageError, receives: u32) -> Option<u32> {
            Some(receives * 10)
        }
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(String, u32)>>);

    impl ReceiptDeferral for Recorded {
        async fn defer_receipt(&self, receipt_handle: &str, seconds: u32) -> Result<(), String> {
            self.0.lock().unwrap().push((receipt_handle.to_owned(), seconds));
            Ok(())
        }
    }

    fn message(id: &str, body: &str, receives: Option<&str>) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some(id.into());
        m.receipt_handle = Some(format!("rh-{id}"));
        m.body = Some(body.into());
        if let Some(n) = receives {
            m.attributes.insert("ApproximateReceiveCount".into(), n.into());
        }
        m
    }

    #[tokio::test]
    async fn failed_messages_are_deferred_by_their_receive_count_and_reported() {
        let mut event = SqsEvent::default();
        event.records = vec![
            message("a", r#"{"ok": false}"#, Some("3")),
            message("b", r#"{"ok": true}"#, Some("1")),
            message("c", r#"{"ok": false}"#, None),
        ];
        let recorded = Recorded::default();
        let response = process_batch_with(event, &Flaky, &recorded).await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["a", "c"]);
        assert_eq!(
            *recorded.0.lock().unwrap(),
            [("rh-a".to_owned(), 30), ("rh-c".to_owned(), 10)]
        );
    }

    /// Fails every message and asks for SQS's whole 12 hours.
    struct Greedy;

    impl Stage for Greedy {
        type Message = serde_json::Value;
        type Outcome = &'static str;

        async fn handle(&self, _message: serde_json::Value) -> Result<&'static str, StageError> {
            Err(StageError::Remote("down".into()))
        }

        fn retry_after(&self, _error: &StageError, _receives: u32) -> Option<u32> {
            Some(genace_stages::ports::queue::MAX_VISIBILITY_SECONDS)
        }
    }

    #[tokio::test]
    async fn a_deferral_asks_for_no_more_than_the_receipt_has_left() {
        let mut event = SqsEvent::default();
        event.records = vec![message("a", "{}", Some("13"))];
        let recorded = Recorded::default();
        process_batch_with(event, &Greedy, &recorded).await;
        let asked = recorded.0.lock().unwrap()[0].1;
        let most =
            genace_stages::ports::queue::MAX_VISIBILITY_SECONDS - genace_stages::ports::queue::RECEIPT_MARGIN_SECONDS;
        assert!(asked <= most && asked >= most - 5, "asked {asked} s");
    }

    /// Records the order it handled its messages in, ordered by `at`.
    #[derive(Default)]
    struct Timed(Mutex<Vec<String>>);

    impl Stage for Timed {
        type Message = serde_json::Value;
        type Outcome = &'static str;

        async fn handle(&self, message: serde_json::Value) -> Result<&'static str, StageError> {
            self.0
                .lock()
                .unwrap()
                .push(message["id"].as_str().unwrap_or_default().to_owned());
            Ok("ok")
        }

        fn batch_order(body: &str) -> i64 {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["at"].as_i64())
                .unwrap_or(i64::MIN)
        }
    }

    #[tokio::test]
    async fn a_batch_is_handled_in_the_stage_s_order_and_ties_keep_the_queue_s() {
        let mut event = SqsEvent::default();
        event.records = vec![
            message("1", r#"{"id": "late", "at": 900}"#, None),
            message("2", r#"{"id": "soon", "at": 100}"#, None),
            message("3", r#"{"id": "untimed"}"#, None),
            message("4", r#"{"id": "soon-too", "at": 100}"#, None),
        ];
        let stage = Timed::default();
        process_batch(event, &stage).await;
        assert_eq!(*stage.0.lock().unwrap(), ["untimed", "soon", "soon-too", "late"]);
    }
}
