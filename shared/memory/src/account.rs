//! The Genace account's shards, in memory: each shard's counters, the
//! account's whole limits, and each shard's part of them as the last split
//! wrote it ([`genace_core::shard`]), as the DynamoDB store keeps them.
//!
//! As there, a deployment's `S` is its own (the store handle's): a claim is
//! admitted on a shard only under parts split for that `S` (with one shard
//! and none split, under the whole limits), and a read of the account by a
//! deployment whose `S` the parts were not split for splits them again,
//! over the jobs each shard counts ([`AccountShards::split`]). So two
//! deployments with different `S` can run at once, as in a rolling change,
//! and the simulator can change `S` while work runs.

use std::collections::BTreeMap;

use genace_core::capacity::AccountCapacity;
use genace_core::shard::{self, AccountMove, AccountShards};

use super::contention::shard_item;
use genace_stages::ports::table::StoreError;

#[derive(Debug, Default)]
pub(super) struct Account {
    /// The whole account's limits and learned mark (its counters unused).
    pub(super) limits: AccountCapacity,
    /// Each shard's counters, by shard.
    counts: BTreeMap<u16, AccountCapacity>,
    /// The parts of the last split for more than one shard; none: the
    /// limits whole on shard 0, as before shards.
    parts: Option<Parts>,
    /// The shards that may still count something, past the `S` split for.
    span: u16,
}

/// Each shard's part of the limit claims are admitted under (the lower of
/// the operator's, else the deployment's, and the learned one), for the
/// `S` it was split for.
#[derive(Debug, Clone)]
struct Parts {
    split_for: AccountShards,
    max: Vec<Option<u32>>,
}

/// Whether a deployment of `S` keeps parts: with more than one shard, and
/// with one while shards a larger `S` left (`span`) count jobs, as in
/// DynamoDB, so that those jobs are charged to the limit until they end.
fn parted(s: AccountShards, span: u16) -> bool {
    s.get() > 1 || (span > s.get() && !genace_core::planted::on(genace_core::planted::ONE_SHARD_WHOLE))
}

impl Account {
    /// Every shard that counts or may count something, each under its
    /// part of the limits as stored, without a split: the simulator's view
    /// of the table, whatever `S` its deployments have.
    pub(super) fn per_shard(&self) -> Vec<AccountCapacity> {
        let counted = self.counts.keys().max().map_or(0, |k| k + 1);
        let span = self
            .span
            .max(self.parts.as_ref().map_or(1, |p| p.split_for.get()))
            .max(counted);
        (0..span).map(|k| self.shard(k)).collect()
    }

    /// Every shard as a deployment of `S` reads them: split again first
    /// when the parts were split for another `S`, or when the shards a
    /// lower `S` left have drained.
    pub(super) fn read_for(&mut self, s: AccountShards) -> Vec<AccountCapacity> {
        let mut span = self.span.max(s.get());
        if span > s.get() && (s.get()..span).all(|k| self.counts_of(k).is_idle()) {
            span = s.get();
        }
        let split_for = self.parts.as_ref().map(|p| p.split_for);
        let wanted = parted(s, span).then_some(s);
        // Parts that hold back what the account may admit are split again
        // too ([`AccountShards::stale`]).
        let in_flight: Vec<i64> = (0..span).map(|k| self.counts_of(k).in_flight).collect();
        let stale = self
            .parts
            .as_ref()
            .is_some_and(|p| split_for == wanted && s.stale(self.limits.limit(), &p.max, &in_flight));
        if split_for != wanted || span != self.span.max(1) || stale {
            self.span = span;
            self.split(s);
        }
        (0..span).map(|k| self.shard(k)).collect()
    }

    /// Writes the parts of the limit claims are admitted under for `S`,
    /// over the counts of every shard that may count a job. One shard that
    /// alone may count jobs: the limits whole, as before shards.
    fn split(&mut self, s: AccountShards) {
        if !parted(s, self.span) {
            self.parts = None;
            return;
        }
        let counts: Vec<i64> = (0..self.span.max(s.get()))
            .map(|k| self.counts_of(k).in_flight)
            .collect();
        let max = match self.limits.limit() {
            Some(l) => s.split(l, &counts).into_iter().map(Some).collect(),
            None => vec![None; usize::from(s.get())],
        };
        self.parts = Some(Parts { split_for: s, max });
    }

    /// Sets (or removes) the operator's limit and drops the learned one,
    /// split over the counts for `S` (a read by `S` first, as in DynamoDB).
    pub(super) fn set_limit(&mut self, s: AccountShards, limit: Option<u32>) -> AccountCapacity {
        self.read_for(s);
        self.limits.set_limit = limit;
        self.limits.learned = None;
        self.limits.raise_every = None;
        self.limits.learned_at_ms = None;
        if self.parts.is_some() {
            self.split(s);
        }
        self.whole()
    }

    /// Replaces the learned limit if it is still `seen`, and splits the
    /// limit claims are admitted under again over the counts: false when
    /// it is not `seen`, or the parts are not split for `S`.
    pub(super) fn learn(&mut self, s: AccountShards, seen: Option<u32>, learned: Option<u32>) -> bool {
        if s.get() > 1 || self.parts.is_some() {
            self.read_for(s);
        }
        if self.limits.learned != seen || !self.split_for(s) {
            return false;
        }
        self.limits.learned = learned;
        if self.parts.is_some() {
            self.split(s);
        }
        true
    }

    /// The limits as stored are for a deployment of `S`: parts split for
    /// it, or, with one shard, the limits whole.
    fn split_for(&self, s: AccountShards) -> bool {
        match &self.parts {
            Some(parts) => parts.split_for == s,
            None => s.get() == 1,
        }
    }

    fn counts_of(&self, k: u16) -> AccountCapacity {
        self.counts.get(&k).copied().unwrap_or_default()
    }

    /// Shard `k` under its part of the limits as stored.
    fn shard(&self, k: u16) -> AccountCapacity {
        let counts = self.counts_of(k);
        let Some(parts) = &self.parts else {
            // Whole on shard 0; a shard out of use admits nothing.
            let whole = AccountCapacity {
                configured: self.limits.configured,
                set_limit: self.limits.set_limit,
                learned: self.limits.learned,
                ..AccountCapacity::default()
            };
            return AccountShards::ONE.capacity_of(k, &whole, &counts);
        };
        let part = |v: &[Option<u32>]| v.get(usize::from(k)).copied().unwrap_or(Some(0));
        // The part of whichever limit is in force, where that limit is
        // named (the operator's, else the deployment's).
        let max = part(&parts.max);
        let (set_limit, configured) = match self.limits.set_limit {
            Some(_) => (max, None),
            None => (None, max),
        };
        AccountCapacity {
            configured,
            set_limit,
            learned: None,
            learned_mark: 0,
            raise_every: None,
            learned_at_ms: None,
            ..counts
        }
    }

    /// The whole account: the shards' counters added up, under the whole
    /// limits.
    pub(super) fn whole(&self) -> AccountCapacity {
        let summed = shard::summed(&self.per_shard());
        AccountCapacity {
            configured: self.limits.configured,
            set_limit: self.limits.set_limit,
            learned: self.limits.learned,
            learned_mark: self.limits.learned_mark,
            raise_every: self.limits.raise_every,
            learned_at_ms: self.limits.learned_at_ms,
            ..summed
        }
    }

    /// Refuses a claim of a deployment of `S` whose shard is not split for
    /// that `S`, has no free slot under its part of the limits, or, for a
    /// claim that did not wait, has operations waiting for a slot
    /// ([`AccountCapacity::yields`]).
    pub(super) fn admits(&self, s: AccountShards, moves: &[AccountMove]) -> Result<(), StoreError> {
        let split_here = self.split_for(s);
        for m in moves.iter().filter(|m| m.admits) {
            let shard = self.shard(m.shard);
            if !split_here || !shard.has_room() || (m.yields && shard.yields()) {
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
            let mut c = self.counts_of(m.shard);
            c.in_flight = c.in_flight.checked_add(m.in_flight).ok_or_else(overflow)?;
            c.waiting = c.waiting.checked_add(m.waiting).ok_or_else(overflow)?;
            c.queued = c.queued.checked_add(m.queued).ok_or_else(overflow)?;
            c.jobs_ended += i64::from(m.ends_a_job);
            moved.push((m.shard, c));
        }
        self.counts.extend(moved);
        Ok(())
    }

    /// Every shard item that may count something, as the meter names them.
    pub(super) fn items(&self) -> Vec<String> {
        (0..self.per_shard().len() as u16).map(shard_item).collect()
    }
}
