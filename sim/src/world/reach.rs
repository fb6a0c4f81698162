//! Every shard's due items reached: a sweep that ends within its time
//! budget has read a page of every shard of the due index that held due
//! items when it began, whatever the backlog in the shards before it; and
//! a run its budget cut short leaves the rest to the next, which starts at
//! a shard it did not read.

use super::tracking::SweepStart;
#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

impl World {
    /// The shards of the due index with an item due now, for a sweep with
    /// this time `budget`.
    pub(crate) fn sweep_start(&self, budget: std::time::Duration) -> SweepStart {
        let now = self.now();
        let due_shards = self
            .store
            .records()
            .iter()
            .filter(|r| r.due_at_ms.is_some_and(|d| d <= now.timestamp_millis()))
            .filter_map(|r| {
                (0..genace_core::record::DUE_SHARDS).find(|k| genace_core::keys::due_partition(*k) == r.due_pk)
            })
            .collect();
        SweepStart {
            at: now,
            budget: Duration::from_std(budget).unwrap_or(Duration::MAX),
            due_shards,
        }
    }

    /// A sweep handler (actor `id`) ended: `Err` when it ended well
    /// within its budget and never read a shard that held due items, or
    /// when its budget cut it short before a shard that held due items and
    /// the next run does not start at one it left unread.
    pub(crate) fn check_sweep_reach(&mut self, id: usize, ok: bool) -> Result<(), String> {
        let read = self.chaos.lock().due_reads.remove(&id).unwrap_or_default();
        let Some(start) = self.sweeps.remove(&id) else {
            return Ok(());
        };
        if !ok {
            return Ok(());
        }
        let unread = start.due_shards.iter().find(|k| !read.contains(k));
        if self.local_now(id) - start.at >= start.budget {
            // Cut short in its first turn of the shards (a later turn
            // follows a read of every shard): the next run starts where
            // this one stopped, at a shard it did not read.
            let next = self.store.sweep_start_now();
            return match (unread, next) {
                (Some(shard), next) if next.is_none_or(|n| read.contains(&n)) => Err(format!(
                    "sweep #{id}, cut short, left shard {shard} unread, and the next run starts at {next:?}, not at a shard it left (it read {read:?})"
                )),
                _ => Ok(()),
            };
        }
        match unread {
            Some(shard) => Err(format!(
                "sweep #{id} ended within its budget without reaching shard {shard}, which held due items (it read shards {read:?})"
            )),
            None => Ok(()),
        }
    }
}
