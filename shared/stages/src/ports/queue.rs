//! The work queue ports. A work message is only a hint: it carries the
//! operation id and nothing else, and every consumer re-reads the record
//! before acting.

use std::future::Future;

use genace_core::domain::OperationId;
use genace_core::messages::{Queue, RecoveryMessage, WorkMessage};

#[derive(Debug, thiserror::Error)]
#[error("enqueue to {queue:?} failed: {detail}")]
pub struct QueueError {
    pub queue: Queue,
    pub detail: String,
}

/// SQS refuses delays above 15 minutes; every queue here keeps that bound.
pub const MAX_DELAY_SECONDS: u32 = 900;

/// The restricted channel for remote outcomes that could not be written to
/// the record. Only dispatch sends to it; only the recovery consumer reads it.
pub trait RecoveryChannel: Send + Sync {
    fn send_recovery(&self, message: &RecoveryMessage) -> impl Future<Output = Result<(), QueueError>> + Send;
}

pub trait WorkQueue: Send + Sync {
    /// Sends one work message, visible after `delay_seconds` (at most [`MAX_DELAY_SECONDS`]).
    fn send_work(
        &self,
        queue: Queue,
        message: &WorkMessage,
        delay_seconds: u32,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// Sends a work message that names the operation and nothing else.
    fn enqueue(
        &self,
        queue: Queue,
        id: &OperationId,
        delay_seconds: u32,
    ) -> impl Future<Output = Result<(), QueueError>> + Send {
        let message = WorkMessage::for_operation(id.clone());
        async move { self.send_work(queue, &message, delay_seconds).await }
    }

    /// Puts copies of lifecycle events for webhook receivers on the
    /// webhook queue (each `{"to": ..., "detail": ...}`): one for a
    /// replay, up to a hundred for a recovery, in as few requests as the
    /// queue takes. An error when any copy was not queued.
    fn send_webhook_copies(&self, bodies: Vec<String>) -> impl Future<Output = Result<(), String>> + Send;
}

/// SQS keeps a received message hidden for at most 12 hours, counted from
/// its receipt: a `ChangeMessageVisibility` asking for more than the time
/// left is refused, and the message comes back at its old timeout.
pub const MAX_VISIBILITY_SECONDS: u32 = 12 * 3600;

/// Time a received message may have spent before its handler started: the
/// event source holds a batch for up to its batching window, and the clock
/// of the function and of SQS differ a little.
pub const RECEIPT_MARGIN_SECONDS: u32 = 300;

/// The longest hiding SQS still grants a message received `elapsed` ago
/// (by this invocation's start), with [`RECEIPT_MARGIN_SECONDS`] to spare.
pub fn visibility_left(asked_seconds: u32, elapsed: std::time::Duration) -> u32 {
    let elapsed = u32::try_from(elapsed.as_secs()).unwrap_or(u32::MAX);
    asked_seconds.min(
        MAX_VISIBILITY_SECONDS
            .saturating_sub(RECEIPT_MARGIN_SECONDS)
            .saturating_sub(elapsed),
    )
}

/// Hides a received message for longer (or shorter) than its queue's
/// visibility timeout before it is delivered again: how a stage backs off
/// from a failing remote party without a queue of its own.
pub trait ReceiptDeferral: Send + Sync {
    /// The message with `receipt_handle` becomes visible again after
    /// `seconds`, which the caller keeps within the time SQS has left for
    /// the receipt ([`visibility_left`]).
    fn defer_receipt(&self, receipt_handle: &str, seconds: u32) -> impl Future<Output = Result<(), String>> + Send;
}

/// No redelivery control: failed messages reappear after the queue's
/// visibility timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct VisibilityTimeout;

impl ReceiptDeferral for VisibilityTimeout {
    async fn defer_receipt(&self, _receipt_handle: &str, _seconds: u32) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Found by review: 43,200 s asked right after receipt is refused by
    /// SQS, and the message came back minutes later instead of hours.
    #[test]
    fn a_deferral_never_asks_sqs_for_more_than_the_receipt_has_left() {
        let cap = MAX_VISIBILITY_SECONDS - RECEIPT_MARGIN_SECONDS;
        assert_eq!(visibility_left(MAX_VISIBILITY_SECONDS, Duration::ZERO), cap);
        assert_eq!(visibility_left(30, Duration::from_secs(100)), 30);
        assert_eq!(visibility_left(u32::MAX, Duration::from_secs(600)), cap - 600);
        assert_eq!(visibility_left(u32::MAX, Duration::from_secs(86_400)), 0);
        assert!(visibility_left(MAX_VISIBILITY_SECONDS, Duration::from_secs(1)) < MAX_VISIBILITY_SECONDS);
    }
}
