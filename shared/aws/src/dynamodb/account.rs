//! The Genace account's shard items ([`genace_core::shard`]): the counters a
//! slot-moving write moves, each shard's part of every limit, and the
//! operator's and learned limits written to every shard.
//!
//! Shard 0 is the account item every table had before shards. With one
//! shard, nothing changes: one item, the limits whole on it, plain writes.
//! With more, each shard item holds its part of the operator's limit
//! (`max_in_flight`) and of the learned one (`learned_limit`); a change of
//! either is one transaction over every shard, and shard 0 also keeps the
//! learned limit whole (`learned_whole`), which a lesson's condition reads.
//! One shard holds parts too while shards a larger `S` left count jobs, so
//! that those jobs are charged to the limit until they end.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use genace_core::capacity::AccountCapacity;
use genace_core::shard::{self, AccountMove};
use genace_stages::ports::table::StoreError;

use crate::schema::account_shard_key;

use super::DynamoStore;
use super::account_clauses::Clauses;
use super::account_parts::{AccountRead, Parts, SPLIT_TRIES, Split, counts_from};
use super::item::{Item, service_error};
use super::transact::Refusals;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// How a read splits the limits again: the shards that may still count
/// something (`span`), the jobs each counts, whether this `S` keeps parts
/// (`many`), and the retired shards the read dropped from the span, with
/// the jobs each has ended.
#[derive(Clone, Copy)]
struct Resplit<'a> {
    span: u16,
    in_flight: &'a [i64],
    many: bool,
    dropped: &'a [(u16, i64)],
}

impl DynamoStore {
    pub(super) fn account_key(shard: u16) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(account_shard_key(shard)))])
    }

    pub(super) fn shard_update(&self, shard: u16) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::account_key(shard)))
    }

    /// A shard's counters move by `m`; a claim (`m.admits`) only while the
    /// shard's jobs in flight are under its part of every limit in force:
    /// the operator's (`max_in_flight`, else the deployment's) and the
    /// learned one (`learned_limit`), and, for a claim that did not wait,
    /// while nothing waits on the shard for a slot. See [`AccountCapacity`].
    pub(super) fn account_update(&self, m: &AccountMove) -> Result<Update, StoreError> {
        let mut update = self
            .shard_update(m.shard)
            .update_expression(if m.ends_a_job {
                "ADD in_flight :d, waiting :w, queued :q, jobs_ended :one"
            } else {
                "ADD in_flight :d, waiting :w, queued :q"
            })
            .expression_attribute_values(":d", n(m.in_flight))
            .expression_attribute_values(":w", n(m.waiting))
            .expression_attribute_values(":q", n(m.queued));
        if m.ends_a_job {
            update = update.expression_attribute_values(":one", n(1));
        }
        if m.admits {
            // A part of 0 admits nothing; a missing count is 0 jobs.
            let under = |limit: &str| format!("(attribute_not_exists(in_flight) OR in_flight < {limit})");
            let operators = format!("(max_in_flight > :zero AND {})", under("max_in_flight"));
            let maximum = match self.account_limit.map(|c| self.shards.part(c, m.shard)) {
                Some(part) => {
                    update = update.expression_attribute_values(":limit", n(part));
                    let deployments = if part > 0 {
                        under(":limit")
                    } else {
                        "in_flight < :limit".into()
                    };
                    format!(
                        "((attribute_exists(max_in_flight) AND {operators}) OR \
                         (attribute_not_exists(max_in_flight) AND {deployments}))"
                    )
                }
                None => format!("(attribute_not_exists(max_in_flight) OR {operators})"),
            };
            let learned = format!(
                "(attribute_not_exists(learned_limit) OR (learned_limit > :zero AND {}))",
                under("learned_limit")
            );
            // A claim that did not wait for a slot yields to those that do
            // ([`AccountCapacity::yields`]).
            let yields = if m.yields {
                " AND (attribute_not_exists(queued) OR queued <= :zero)"
            } else {
                ""
            };
            // Only under limits split for this `S`: a shard the split has
            // not reached yet (the count just raised, or lowered) holds
            // another `S`'s parts, or none, and admits nothing until an
            // account read splits them again.
            // One shard holds the limits whole (no `parts_for`), or, while
            // shards a larger `S` left still count jobs, its part of them
            // split for one.
            update = update.expression_attribute_values(":parts", n(self.shards.get()));
            let split = if self.shards.get() > 1 {
                "parts_for = :parts"
            } else {
                "(attribute_not_exists(parts_for) OR parts_for = :parts)"
            };
            update = update
                .expression_attribute_values(":zero", n(0))
                .condition_expression(format!("{maximum} AND {learned}{yields} AND {split}"));
        }
        update.build().map_err(|e| StoreError::Service(e.to_string()))
    }

    /// Every shard item in `range` that exists, by shard: one `GetItem`
    /// for shard 0 alone, else one `BatchGetItem`. Strongly consistent.
    async fn shard_items(&self, range: std::ops::Range<u16>) -> Result<HashMap<u16, Item>, StoreError> {
        if range.is_empty() {
            return Ok(HashMap::new());
        }
        if range == (0..1) {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(Self::account_key(0)))
                .consistent_read(true)
                .send()
                .await
                .map_err(service_error)?;
            return Ok(out.item.map(|item| (0, item)).into_iter().collect());
        }
        let keys: HashMap<String, u16> = range.clone().map(|k| (account_shard_key(k), k)).collect();
        Ok(self
            .batch_get(range.map(Self::account_key).collect(), true)
            .await?
            .into_iter()
            .filter_map(|item| match item.get("pk") {
                Some(AttributeValue::S(pk)) => keys.get(pk).map(|k| (*k, item)),
                _ => None,
            })
            .collect())
    }

    /// The whole account: its shards' counters added up, under the whole
    /// limits (the parts of a split over counts add up to less while
    /// shards a lower `S` left count jobs).
    pub(super) async fn read_account(&self) -> Result<AccountCapacity, StoreError> {
        let (shards, whole) = self.read_account_split().await?;
        Ok(AccountCapacity {
            configured: whole.configured,
            set_limit: whole.set_limit,
            learned: whole.learned,
            ..shard::summed(&shards)
        })
    }

    /// Every shard that may count something, in order: those in use, then
    /// those a lower `S` left (`span`), which admit nothing and are read
    /// until their counts are gone. Each under its part of the limits as
    /// split for this `S` (one shard: the limits whole on shard 0). When
    /// the limits on disk were split for another `S` (or another
    /// deployment's limit), they are split again first, over the jobs
    /// each shard counts.
    pub(super) async fn read_account_shards(&self) -> Result<Vec<AccountCapacity>, StoreError> {
        Ok(self.read_account_split().await?.0)
    }

    /// [`Self::read_account_shards`], and the whole limits.
    async fn read_account_split(&self) -> Result<(Vec<AccountCapacity>, AccountCapacity), StoreError> {
        let read = self.read_account_parts(false).await?;
        Ok((read.shards, read.whole))
    }

    /// The account as read, split again first if it had to be; with
    /// `settled`, read again after a split, so that shard 0 is known as
    /// stored (what a write of the parts holds to).
    pub(super) async fn read_account_parts(&self, settled: bool) -> Result<AccountRead, StoreError> {
        // A split lost to a rival's write is read again.
        for _ in 0..SPLIT_TRIES {
            match self.read_account_shards_once().await? {
                Some(read) if !settled || read.unchanged.is_some() => return Ok(read),
                _ => {}
            }
        }
        Err(StoreError::Contention)
    }

    /// [`Self::read_account_split`], once: none when the limits had to be
    /// split again and a rival's write came between the read and the split.
    async fn read_account_shards_once(&self) -> Result<Option<AccountRead>, StoreError> {
        let mut items = self.shard_items(self.shards.all()).await?;
        let first = Split::read(items.get(&0))?;
        let (span, dropped) = self.read_retired(&first, &mut items).await?;
        let counts = (0..span)
            .map(|k| counts_from(items.get(&k)))
            .collect::<Result<Vec<_>, _>>()?;
        let whole = AccountCapacity {
            configured: self.account_limit,
            set_limit: first.set_limit,
            learned: first.learned,
            ..AccountCapacity::default()
        };
        // Parts for one shard too while the shards a larger `S` left count
        // jobs: shard 0 admits the limit less those jobs until they end.
        let split_for = Some(self.shards.get()).filter(|s| *s > 1 || span > *s);
        let deployed = if split_for.is_some() { self.account_limit } else { None };
        // Another deployment's limit matters only while no operator's
        // limit replaces it (two deployments in a rolling change would
        // otherwise split again at each other's every read).
        let redeployed = first.set_limit.is_none() && first.deployed != deployed;
        let moved = first.parts_for != split_for || span != first.span.max(1) || redeployed;
        let stored = match split_for {
            Some(_) if !moved => Some(Parts::stored(self.shards, &items)?),
            _ => None,
        };
        // Parts that hold back what the account may admit (the jobs they
        // were split over have ended) are split again too.
        let in_flight: Vec<i64> = counts.iter().map(|c| c.in_flight).collect();
        let stale = stored
            .as_ref()
            .is_some_and(|p| self.shards.stale(whole.limit(), &p.max, &in_flight));
        let (stored, unchanged) = if moved || stale {
            let parts = Parts::over(self.shards, &whole, &counts);
            // A stale re-split that fails (contention past every try, a
            // service error) fails no read: the parts as stored stand.
            let how = Resplit {
                span,
                in_flight: &in_flight,
                many: split_for.is_some(),
                dropped: &dropped,
            };
            let written = match self.split_again(&first, &parts, &how).await {
                Err(e) if !moved => {
                    tracing::warn!(error = %e, "stale account parts not split again; they stand until the next read");
                    false
                }
                written => written?,
            };
            if written {
                (split_for.map(|_| parts), None)
            } else if moved {
                return Ok(None);
            } else {
                // Best effort: the parts as stored stand, and the next read
                // tries again (a writer that needs shard 0 as stored reads
                // again now).
                (stored, None)
            }
        } else {
            (stored, Some(first))
        };
        let shards = self.shard_views(counts, stored.as_ref(), &whole);
        Ok(Some(AccountRead {
            shards,
            whole,
            unchanged,
        }))
    }

    /// The shards that may still count something, reading those a larger
    /// `S` left into `items`: all of them while any is busy, else only
    /// those in use, with the jobs each one dropped has ended.
    async fn read_retired(
        &self,
        first: &Split,
        items: &mut HashMap<u16, Item>,
    ) -> Result<(u16, Vec<(u16, i64)>), StoreError> {
        let span = first.span.max(self.shards.get());
        if span == self.shards.get() {
            return Ok((span, Vec::new()));
        }
        let retired = self.shard_items(self.shards.get()..span).await?;
        let idle = retired
            .values()
            .all(|item| counts_from(Some(item)).is_ok_and(|c| c.is_idle()));
        let mut dropped = Vec::new();
        if idle {
            // What a lower `S` left has drained: read no further.
            for (k, item) in &retired {
                dropped.push((*k, counts_from(Some(item))?.jobs_ended));
            }
        }
        items.extend(retired);
        Ok((if idle { self.shards.get() } else { span }, dropped))
    }

    /// Each shard's counts under its limits: the parts as stored (or
    /// written), or, with one shard and no parts, the whole limits on
    /// shard 0.
    fn shard_views(
        &self,
        counts: Vec<AccountCapacity>,
        stored: Option<&Parts>,
        whole: &AccountCapacity,
    ) -> Vec<AccountCapacity> {
        counts
            .into_iter()
            .enumerate()
            .map(|(k, counts)| {
                let k = k as u16;
                let limits = match stored {
                    Some(parts) => parts.capacity_of(k, whole),
                    None => self.shards.capacity_of(k, whole, &AccountCapacity::default()),
                };
                AccountCapacity {
                    in_flight: counts.in_flight,
                    waiting: counts.waiting,
                    queued: counts.queued,
                    jobs_ended: counts.jobs_ended,
                    learned_mark: if k == 0 { counts.learned_mark } else { 0 },
                    raise_every: if k == 0 { counts.raise_every } else { None },
                    learned_at_ms: if k == 0 { counts.learned_at_ms } else { None },
                    ..limits
                }
            })
            .collect()
    }

    /// Writes the limits' `parts` for this `S` (one shard: the limits
    /// whole, as before shards), and `span`, the shards that may still
    /// count something. Conditional on everything the split was computed
    /// from (the whole limits, the `S` they were split for, the span, the
    /// deployment's limit) and on no shard in use counting more jobs than
    /// its part allows ([`Parts::bound`]): false when a rival wrote any of
    /// them between the read and this write (an operator's limit, a
    /// lesson, another `S`'s split, a claim under the old parts), and
    /// nothing was written; the caller reads again.
    async fn split_again(&self, read: &Split, parts: &Parts, how: &Resplit<'_>) -> Result<bool, StoreError> {
        let Resplit { span, many, .. } = *how;
        // The jobs ended on shards dropped from the span move to shard 0,
        // so that the account's sum (what a lesson's mark is set against)
        // does not fall.
        let moved: i64 = how.dropped.iter().map(|(_, ended)| ended).sum();
        let mut items = Vec::new();
        for k in self.shards.all() {
            let mut c = Clauses::parts(k, self.shard_update(k), parts);
            if k > 0 || many {
                // Every shard says which `S` its parts are for: a claim
                // on it holds to that (see `account_update`).
                c = c.set_or_remove("parts_for", ":s", Some(self.shards.get()));
            }
            if k == 0 {
                c = c.set_or_remove("span", ":span", Some(span));
                c = if many {
                    c.set_or_remove("max_whole", ":wmax", read.set_limit)
                        .set_or_remove("learned_whole", ":wlearned", read.learned)
                        .set_or_remove("deployed_whole", ":wdeployed", self.account_limit)
                } else {
                    c.remove(&["parts_for", "max_whole", "learned_whole", "deployed_whole"])
                };
                c = c.held_to(read);
                if moved > 0 {
                    c = c
                        .value(":ended_in", moved)
                        .value(":ended_none", 0)
                        .set("jobs_ended = if_not_exists(jobs_ended, :ended_none) + :ended_in");
                }
            }
            items.push(c.built()?);
        }
        items.extend(self.unsplit_retired(read, how)?);
        match self.transact(items, Refusals::PARTS).await {
            Ok(()) => Ok(true),
            // A rival wrote the limits (or split them, or claimed) first.
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The shards past this `S`: those a larger one split parts onto lose
    /// them (their counts stay, read while they count a job), so a later
    /// raise finds them unsplit, not admitting under old parts; and those
    /// that count jobs (`in_flight`, as read) hold no more when the split
    /// lands, so none admitted under old parts goes uncharged. Those read
    /// idle and left out of the span (`in_flight` stops before them) are
    /// still idle when it lands: a claim of a deployment of the old `S`
    /// between the read and the split cancels it, since no later read
    /// would count that job.
    /// The jobs those ended move to shard 0 ([`Resplit::dropped`]).
    fn unsplit_retired(&self, read: &Split, how: &Resplit<'_>) -> Result<Vec<TransactWriteItem>, StoreError> {
        let split_before = read.span.max(read.parts_for.unwrap_or(1));
        let counted = u16::try_from(how.in_flight.len()).unwrap_or(u16::MAX);
        (self.shards.get()..split_before.max(counted))
            .map(|k| {
                let jobs = how.in_flight.get(usize::from(k)).copied().unwrap_or(0);
                let c = Clauses::new(self.shard_update(k))
                    .remove(&["parts_for", "max_in_flight", "learned_limit"])
                    .value(":was", jobs.max(0))
                    .condition("(attribute_not_exists(in_flight) OR in_flight <= :was)");
                match how.dropped.iter().find(|(d, _)| *d == k) {
                    Some((_, ended)) if *ended > 0 => c
                        .value(":ended", *ended)
                        .value(":ended_none", 0)
                        .set("jobs_ended = :ended_none")
                        .condition("jobs_ended = :ended"),
                    _ => c,
                }
                .built()
            })
            .collect()
    }
}
