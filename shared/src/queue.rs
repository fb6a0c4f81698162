//! Work queues. A message is only a hint: it carries the operation id and
//! nothing else, and every consumer re-reads the record before acting.

use std::future::Future;

use aws_sdk_sqs::Client;
use serde::{Deserialize, Serialize};

use crate::config::QueueUrls;
use crate::domain::OperationId;

/// Which work queue a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Dispatch,
    Poll,
    Deliver,
    Recovery,
}

#[derive(Debug, thiserror::Error)]
#[error("enqueue to {queue:?} failed: {detail}")]
pub struct QueueError {
    pub queue: Queue,
    pub detail: String,
}

/// The body of every stage message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkMessage {
    pub operation_id: OperationId,
}

impl WorkMessage {
    pub fn parse(body: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(body)
    }
}

/// The restricted channel for remote outcomes that could not be written to
/// the record. Only dispatch sends to it; only the recovery consumer reads it.
pub trait RecoveryChannel: Send + Sync {
    fn send_recovery(
        &self,
        message: &crate::recovery::RecoveryMessage,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

pub trait WorkQueue: Send + Sync {
    /// Sends one work message, visible after `delay_seconds` (at most 900).
    fn enqueue(
        &self,
        queue: Queue,
        id: &OperationId,
        delay_seconds: u32,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

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
        }
    }
}

/// SQS refuses delays above 15 minutes.
pub const MAX_DELAY_SECONDS: u32 = 900;

impl SqsQueue {
    async fn send(&self, queue: Queue, body: String, delay_seconds: u32) -> Result<(), QueueError> {
        self.client
            .send_message()
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
    async fn enqueue(&self, queue: Queue, id: &OperationId, delay_seconds: u32) -> Result<(), QueueError> {
        let body = serde_json::to_string(&WorkMessage {
            operation_id: id.clone(),
        })
        .expect("a work message always serializes");
        self.send(queue, body, delay_seconds).await
    }
}

impl RecoveryChannel for SqsQueue {
    async fn send_recovery(&self, message: &crate::recovery::RecoveryMessage) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).expect("a recovery message always serializes");
        self.send(Queue::Recovery, body, 0).await
    }
}
