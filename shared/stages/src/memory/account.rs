//! The Genace account's shards, in memory: each shard's counters, the
//! account's limits, and the admission a claim's shard decides
//! ([`genace_core::shard`]). The DynamoDB store keeps one item per shard,
//! each with its part of every limit; here the parts are worked out from the
//! whole limits when a claim is judged, which admits the same claims.

use std::collections::BTreeMap;

use genace_core::ledger::AccountCapacity;
use genace_core::shard::{self, AccountMove, AccountShards};

use super::contention::shard_item;
use crate::ports::table::StoreError;

#[derive(Debug, Default)]
pub(super) struct Account {
    /// The whole account's limits and learned mark (its counters unused).
    pub(super) limits: AccountCapacity,
    pub(super) shards: AccountShards,
    /// Each shard's counters, by shard.
    counts: BTreeMap<u16, AccountCapacity>,
}

impl Account {
    /// Each shard in use: its counters under its part of every limit.
    pub(super) fn per_shard(&self) -> Vec<AccountCapacity> {
        self.shards.all().map(|k| self.shard(k)).collect()
    }

    fn shard(&self, k: u16) -> AccountCapacity {
        let counts = self.counts.get(&k).copied().unwrap_or_default();
        self.shards.capacity_of(k, &self.limits, &counts)
    }

    /// The whole account: the shards added up.
    pub(super) fn whole(&self) -> AccountCapacity {
        AccountCapacity {
            learned_mark: self.limits.learned_mark,
            raise_every: self.limits.raise_every,
            learned_at_ms: self.limits.learned_at_ms,
            ..shard::summed(&self.per_shard())
        }
    }

    /// Refuses a claim whose shard has no free slot under its part of the
    /// limits, or, for a claim that did not wait, has operations waiting
    /// for a slot ([`AccountCapacity::yields`]).
    pub(super) fn admits(&self, moves: &[AccountMove]) -> Result<(), StoreError> {
        for m in moves.iter().filter(|m| m.admits) {
            let shard = self.shard(m.shard);
            if !shard.has_room() || (m.yields && shard.yields()) {
                return Err(StoreError::AccountFull);
            }
        }
        Ok(())
    }

    /// Moves the shards' counters, all or none.
    pub(super) fn apply(&mut self, moves: &[AccountMove]) -> Result<(), StoreError> {
        let overflow = || StoreError::Decode("account counts overflowed".into());
        let mut moved = Vec::with_capacity(moves.len());
        for m in moves {
            let mut c = self.counts.get(&m.shard).copied().unwrap_or_default();
            c.in_flight = c.in_flight.checked_add(m.in_flight).ok_or_else(overflow)?;
            c.waiting = c.waiting.checked_add(m.waiting).ok_or_else(overflow)?;
            c.queued = c.queued.checked_add(m.queued).ok_or_else(overflow)?;
            c.jobs_ended += i64::from(m.ends_a_job);
            moved.push((m.shard, c));
        }
        self.counts.extend(moved);
        Ok(())
    }

    /// Every shard item in use, as the meter names them.
    pub(super) fn items(&self) -> Vec<String> {
        self.shards.all().map(shard_item).collect()
    }
}
