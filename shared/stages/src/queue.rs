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
