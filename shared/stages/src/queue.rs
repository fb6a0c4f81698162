//! The work queue ports. A work message is only a hint: it carries the
//! operation id and nothing else, and every consumer re-reads the record
//! before acting.

use std::future::Future;

use genace_core::domain::OperationId;
use genace_core::messages::{Queue, RecoveryMessage};

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
    fn enqueue(
        &self,
        queue: Queue,
        id: &OperationId,
        delay_seconds: u32,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// SQS keeps a received message hidden for at most 12 hours.
pub const MAX_VISIBILITY_SECONDS: u32 = 12 * 3600;

/// Hides a received message for longer (or shorter) than its queue's
/// visibility timeout before it is delivered again: how a stage backs off
/// from a failing remote party without a queue of its own.
pub trait Redelivery: Send + Sync {
    /// The message with `receipt_handle` becomes visible again after
    /// `seconds` (at most [`MAX_VISIBILITY_SECONDS`]).
    fn redeliver_after(&self, receipt_handle: &str, seconds: u32) -> impl Future<Output = Result<(), String>> + Send;
}

/// No redelivery control: failed messages reappear after the queue's
/// visibility timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct VisibilityTimeout;

impl Redelivery for VisibilityTimeout {
    async fn redeliver_after(&self, _receipt_handle: &str, _seconds: u32) -> Result<(), String> {
        Ok(())
    }
}
