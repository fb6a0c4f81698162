//! One live chain of polls per job. Every poll message the stack sends is
//! traced to the chain it continues: a message sent by the handler of a
//! poll message of the same job continues that message's chain; any other
//! (dispatch's first look, the sweep's restart, recovery's, an operator's
//! attach) starts a new one. Starting a chain while another of the job
//! still waits to look (a message never received, not yet visible) is a
//! second live chain: both would poll until the job ends.
//!
//! Chains the queue makes are not the stack's doing, and are let be: a
//! redelivered message (its handler crashed, or the delete was lost) and a
//! copy the simulator duplicated continue their original's chain, and a
//! handler of either may start one again; a copy waiting is no chain of
//! the stack's. So is a message its handler sent
//! more than [`LATE_SECONDS`] after it began: the deadline a look writes
//! covers its next look from the look's start, as a handler that takes
//! seconds needs.

use super::tracking::{Link, Sender};
#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

/// A handler that sends its next look this long after it began may send
/// it past the deadline its look wrote.
const LATE_SECONDS: i64 = 60;

fn operation_of(body: &str) -> String {
    genace_core::messages::WorkMessage::parse(body)
        .map(|w| w.operation_id.as_str().to_owned())
        .unwrap_or_default()
}

impl World {
    /// Marks `copy` as the simulator's duplicate of `original`: a poll
    /// copy continues the original's chain.
    pub(crate) fn note_copy(&mut self, original: u64, copy: u64) {
        self.chains.copies.insert(copy);
        if let Some(link) = self.chains.links.get(&original).cloned() {
            self.chains.forked.insert(link.chain);
            self.log(format!(
                "poll message {copy} copies {original}, in chain {}",
                link.chain
            ));
            self.chains.links.insert(copy, link);
        }
    }

    /// Links each poll message `sender` sent to its chain; `Err` when it
    /// started a second live chain of a job.
    pub(crate) fn link_poll_sends(&mut self, sender: &Sender) -> Result<(), String> {
        let now = self.now();
        let entries = self.queue.messages_by_id();
        let polls = || entries.iter().filter(|(_, m)| m.queue == Queue::Poll);
        let fresh: Vec<(u64, String)> = polls()
            .filter(|(id, _)| !self.chains.links.contains_key(id))
            .map(|(id, m)| (*id, operation_of(&m.body)))
            .collect();
        let queue_made = sender
            .message
            .is_some_and(|id| sender.receives > 1 || self.chains.copies.contains(&id));
        let late = self.local_now(sender.id) - sender.started_at > Duration::seconds(LATE_SECONDS);
        for (id, operation) in fresh {
            let parent = sender
                .message
                .and_then(|m| self.chains.links.get(&m))
                .filter(|l| l.operation == operation)
                .map(|l| l.chain);
            // A second continuation of one message: the queue forked the chain.
            if let Some(chain) = parent
                && polls().any(|(other, _)| {
                    *other != id
                        && Some(*other) != sender.message
                        && self.chains.links.get(other).is_some_and(|l| l.chain == chain)
                })
            {
                self.chains.forked.insert(chain);
            }
            let chain = parent.unwrap_or_else(|| {
                self.chains.next += 1;
                self.chains.next
            });
            if parent.is_none() && !queue_made {
                let waiting = polls().find(|(other, m)| {
                    *other != id
                        && m.receives == 0
                        && m.visible_at > now
                        && !self.chains.copies.contains(other)
                        && self
                            .chains
                            .links
                            .get(other)
                            .is_some_and(|l| l.operation == operation && l.chain != chain && !l.late)
                        && !self
                            .chains
                            .links
                            .get(other)
                            .is_some_and(|l| self.chains.forked.contains(&l.chain))
                });
                if let Some((other, m)) = waiting {
                    return Err(format!(
                        "{}: {} started a second chain of polls (message {id}) while message {other} of another waits to look at t+{}s",
                        short(&operation),
                        sender.label,
                        (m.visible_at - start()).num_seconds()
                    ));
                }
            }
            self.log(format!(
                "poll message {id} of {} in chain {chain}, sent by {}",
                short(&operation),
                sender.label
            ));
            self.chains.links.insert(id, Link { operation, chain, late });
        }
        Ok(())
    }
}
