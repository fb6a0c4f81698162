//! How the account's limits are split over its shard items: shard 0's
//! record of the split (the whole limits, the `S` they were split for, the
//! shards that may still count jobs), each shard's parts, and a shard
//! item's counters, as read.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use genace_core::capacity::AccountCapacity;
use genace_core::shard;
use genace_stages::ports::table::StoreError;

use super::item::Item;
use super::ledger_reads::number;

/// Shard 0's record of how the limits are split: the whole limits, the `S`
/// they were split for (none: one item, the limits whole on it, as before
/// shards), and the shards that may still count something.
pub(super) struct Split {
    pub(super) set_limit: Option<u32>,
    pub(super) learned: Option<u32>,
    /// The deployment's limit the parts were split from (more than one
    /// shard): a deployment with another splits them again.
    pub(super) deployed: Option<u32>,
    pub(super) parts_for: Option<u16>,
    pub(super) span: u16,
    /// The attributes read, as stored: what a split's condition holds to.
    pub(super) raw: Vec<(&'static str, Option<AttributeValue>)>,
}

/// Reads of the account a split lost to a rival may take.
pub(super) const SPLIT_TRIES: usize = 4;

/// The attributes of shard 0 a split is computed from.
const SPLIT_FROM: [&str; 7] = [
    "parts_for",
    "span",
    "max_in_flight",
    "learned_limit",
    "max_whole",
    "learned_whole",
    "deployed_whole",
];

impl Split {
    pub(super) fn read(item: Option<&Item>) -> Result<Self, StoreError> {
        let raw = SPLIT_FROM
            .iter()
            .map(|name| (*name, item.and_then(|i| i.get(*name)).cloned()))
            .collect();
        let Some(item) = item else {
            return Ok(Self {
                set_limit: None,
                learned: None,
                deployed: None,
                parts_for: None,
                span: 1,
                raw,
            });
        };
        let limit = |name| number::<i64>(item, name).map(|v| v.and_then(|m| u32::try_from(m).ok()));
        let parts_for = number::<u16>(item, "parts_for")?;
        let (set_limit, learned) = match parts_for {
            Some(_) => (limit("max_whole")?, limit("learned_whole")?),
            None => (limit("max_in_flight")?, limit("learned_limit")?),
        };
        let span = number::<u16>(item, "span")?
            .unwrap_or(1)
            .max(parts_for.unwrap_or(1))
            .min(shard::MAX_ACCOUNT_SHARDS);
        Ok(Self {
            set_limit,
            learned,
            deployed: limit("deployed_whole")?,
            parts_for,
            span,
            raw,
        })
    }

    /// A condition that shard 0 still holds what was read, and its values
    /// (`:was0`, `:was1`...).
    pub(super) fn unchanged(&self) -> (String, Vec<(String, AttributeValue)>) {
        let mut clauses = Vec::new();
        let mut values = Vec::new();
        for (i, (name, value)) in self.raw.iter().enumerate() {
            match value {
                Some(v) => {
                    let placeholder = format!(":was{i}");
                    clauses.push(format!("{name} = {placeholder}"));
                    values.push((placeholder, v.clone()));
                }
                None => clauses.push(format!("attribute_not_exists({name})")),
            }
        }
        (clauses.join(" AND "), values)
    }
}

/// Each shard's part of the limits, for an `S` above one (or one while
/// shards a larger `S` left count jobs): of the limit
/// claims are admitted under, the operator's (else the deployment's) or
/// the learned one where lower (`max_in_flight`). Parts stored before
/// splits were over counts may also hold a part of the learned limit
/// (`learned_limit`), which a claim's condition still reads.
pub(super) struct Parts {
    pub(super) shards: shard::AccountShards,
    pub(super) max: Vec<Option<u32>>,
    pub(super) learned: Vec<Option<u32>>,
    /// The most jobs each shard may count when a split writes these parts:
    /// its part, or, when the account is over the limit, the jobs it
    /// counted when read (none: no limit, or parts not from a split).
    pub(super) bounds: Vec<Option<u32>>,
}

impl Parts {
    /// The parts a split writes, over the jobs each shard counts
    /// (`counts`, every shard that may count one;
    /// [`shard::AccountShards::split`]). One shard that alone may count
    /// jobs: the limits whole, as before shards (the operator's, the
    /// deployment's is the claim's).
    pub(super) fn over(shards: shard::AccountShards, whole: &AccountCapacity, counts: &[AccountCapacity]) -> Self {
        if shards.get() == 1 && counts.len() <= 1 {
            return Self {
                shards,
                max: vec![whole.set_limit],
                learned: vec![whole.learned],
                bounds: vec![None],
            };
        }
        let in_flight: Vec<i64> = counts.iter().map(|c| c.in_flight).collect();
        let split = |limit: Option<u32>| match limit {
            Some(l) => shards.split(l, &in_flight).into_iter().map(Some).collect(),
            None => vec![None; usize::from(shards.get())],
        };
        // One part per shard, of the limit claims are admitted under (the
        // lower of the operator's or deployment's and the learned one):
        // parts of two limits split at different times would leave slots
        // that neither admits.
        let max: Vec<Option<u32>> = split(whole.limit());
        let bounds = max
            .iter()
            .zip(&in_flight)
            .map(|(part, jobs)| part.map(|p| p.max(u32::try_from(*jobs).unwrap_or(0))))
            .collect();
        Self {
            shards,
            max,
            learned: vec![None; usize::from(shards.get())],
            bounds,
        }
    }

    /// The parts as the shard items in use hold them.
    pub(super) fn stored(shards: shard::AccountShards, items: &HashMap<u16, Item>) -> Result<Self, StoreError> {
        let part = |k: u16, name| match items.get(&k) {
            Some(item) => number::<i64>(item, name).map(|v| v.and_then(|p| u32::try_from(p).ok())),
            None => Ok(None),
        };
        Ok(Self {
            shards,
            max: shards
                .all()
                .map(|k| part(k, "max_in_flight"))
                .collect::<Result<_, _>>()?,
            learned: shards
                .all()
                .map(|k| part(k, "learned_limit"))
                .collect::<Result<_, _>>()?,
            bounds: Vec::new(),
        })
    }

    pub(super) fn bound(&self, k: u16) -> Option<u32> {
        self.bounds.get(usize::from(k)).copied().flatten()
    }

    /// Shard `k`'s limits: its parts, named as the whole limit in force
    /// is (the operator's, else the deployment's). A shard out of use
    /// admits nothing. A part the split did not write for the
    /// deployment's limit (another deployment's split) is its even part,
    /// as a claim's condition reads it.
    pub(super) fn capacity_of(&self, k: u16, whole: &AccountCapacity) -> AccountCapacity {
        let Some(max) = self.max.get(usize::from(k)) else {
            return AccountCapacity {
                configured: Some(0),
                ..AccountCapacity::default()
            };
        };
        let max = max.or_else(|| whole.configured.map(|c| self.shards.part(c, k)));
        let (set_limit, configured) = match whole.set_limit {
            Some(_) => (max, None),
            None => (None, max),
        };
        AccountCapacity {
            set_limit,
            configured,
            learned: self.learned[usize::from(k)],
            ..AccountCapacity::default()
        }
    }
}

/// A shard item's counters (and shard 0's learned mark and raise window).
pub(super) fn counts_from(item: Option<&Item>) -> Result<AccountCapacity, StoreError> {
    let Some(item) = item else {
        return Ok(AccountCapacity::default());
    };
    let count = |name| number::<i64>(item, name).map(Option::unwrap_or_default);
    Ok(AccountCapacity {
        in_flight: count("in_flight")?,
        waiting: count("waiting")?,
        queued: count("queued")?,
        jobs_ended: count("jobs_ended")?,
        learned_mark: count("learned_mark")?,
        raise_every: number::<u32>(item, "raise_every")?,
        learned_at_ms: number::<i64>(item, "learned_at")?,
        ..AccountCapacity::default()
    })
}

/// One read of the account's shards.
pub(super) struct AccountRead {
    /// Every shard that may count something, under its part of the limits.
    pub(super) shards: Vec<AccountCapacity>,
    /// The whole limits.
    pub(super) whole: AccountCapacity,
    /// Shard 0's record of the split as stored; none when this read split
    /// the limits again (stored now is what it wrote).
    pub(super) unchanged: Option<Split>,
}
