//! The work queues and the recovery channel, in memory, with SQS's delay,
//! visibility timeout and redelivery.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use genace_core::messages::{Queue, RecoveryMessage, WorkMessage};

use super::clock::ManualClock;
use genace_stages::ports::queue::QueueError;

/// One message on a [`MemoryQueue`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedMessage {
    pub queue: Queue,
    pub body: String,
    pub visible_at: DateTime<Utc>,
    /// How many times it was received.
    pub receives: u32,
    /// The receipt of its latest receive (a delete needs the latest).
    pub receipt: u64,
}

/// The four work queues, in memory, with SQS's delay, visibility timeout
/// and redelivery: a received message is hidden for the visibility timeout
/// and comes back unless deleted with its latest receipt. Time is the given
/// clock's. Clones share the same queues.
#[derive(Debug, Clone)]
pub struct MemoryQueue<C = ManualClock> {
    clock: C,
    state: Arc<Mutex<QueueState>>,
}

#[derive(Debug, Default)]
struct QueueState {
    next: u64,
    messages: BTreeMap<u64, QueuedMessage>,
    webhook_copies: Vec<String>,
}

/// A received message: its body and the receipt that deletes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub id: u64,
    pub receipt: u64,
    pub body: String,
    pub receives: u32,
}

impl<C: genace_stages::ports::clock::Clock> MemoryQueue<C> {
    pub fn new(clock: C) -> Self {
        Self {
            clock,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a message, visible after `delay_seconds` (at most 900, as SQS).
    pub fn send(&self, queue: Queue, body: String, delay_seconds: u32) -> u64 {
        let visible_at = self.clock.now()
            + chrono::Duration::seconds(delay_seconds.min(genace_stages::ports::queue::MAX_DELAY_SECONDS) as i64);
        let mut state = self.lock();
        state.next += 1;
        let id = state.next;
        state.messages.insert(
            id,
            QueuedMessage {
                queue,
                body,
                visible_at,
                receives: 0,
                receipt: 0,
            },
        );
        id
    }

    /// Receives up to `max` visible messages of `queue`, oldest first, and
    /// hides them for `visibility`.
    pub fn receive(&self, queue: Queue, max: usize, visibility: chrono::Duration) -> Vec<Received> {
        let now = self.clock.now();
        let mut state = self.lock();
        let ids: Vec<u64> = state
            .messages
            .iter()
            .filter(|(_, m)| m.queue == queue && m.visible_at <= now)
            .map(|(id, _)| *id)
            .take(max)
            .collect();
        let mut out = Vec::new();
        for id in ids {
            state.next += 1;
            let receipt = state.next;
            let m = state.messages.get_mut(&id).expect("a listed message");
            m.receives += 1;
            m.receipt = receipt;
            m.visible_at = now + visibility;
            out.push(Received {
                id,
                receipt,
                body: m.body.clone(),
                receives: m.receives,
            });
        }
        out
    }

    /// Deletes a received message; a stale receipt (the message was received
    /// again since) deletes nothing, as SQS.
    pub fn delete(&self, id: u64, receipt: u64) -> bool {
        let mut state = self.lock();
        match state.messages.get(&id) {
            Some(m) if m.receipt == receipt => state.messages.remove(&id).is_some(),
            _ => false,
        }
    }

    /// The webhook copies sent since the last call, in order.
    pub fn webhook_copies(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().webhook_copies)
    }

    /// Every message, visible or not.
    pub fn messages(&self) -> Vec<QueuedMessage> {
        self.lock().messages.values().cloned().collect()
    }

    /// Every message with its id, oldest first.
    pub fn messages_by_id(&self) -> Vec<(u64, QueuedMessage)> {
        self.lock().messages.iter().map(|(id, m)| (*id, m.clone())).collect()
    }
}

impl<C: genace_stages::ports::clock::Clock> genace_stages::ports::queue::WorkQueue for MemoryQueue<C> {
    /// Refuses a delay SQS would refuse (over [`genace_stages::ports::queue::MAX_DELAY_SECONDS`]).
    async fn send_work(&self, queue: Queue, message: &WorkMessage, delay_seconds: u32) -> Result<(), QueueError> {
        if delay_seconds > genace_stages::ports::queue::MAX_DELAY_SECONDS {
            return Err(QueueError {
                queue,
                detail: format!("DelaySeconds {delay_seconds} is over SQS's 900"),
            });
        }
        let body = serde_json::to_string(message).expect("a work message serializes");
        self.send(queue, body, delay_seconds);
        Ok(())
    }

    /// Kept apart from the work queues: [`MemoryQueue::webhook_copies`].
    async fn send_webhook_copies(&self, bodies: Vec<String>) -> Result<(), String> {
        self.lock().webhook_copies.extend(bodies);
        Ok(())
    }
}

impl<C: genace_stages::ports::clock::Clock> genace_stages::ports::queue::RecoveryChannel for MemoryQueue<C> {
    async fn send_recovery(&self, message: &RecoveryMessage) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).expect("a recovery message serializes");
        self.send(Queue::Recovery, body, 0);
        Ok(())
    }
}
