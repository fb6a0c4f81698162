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

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use genace_core::ledger::AccountCapacity;
use genace_core::shard::{self, AccountMove};
use genace_stages::ports::table::StoreError;

use crate::schema::account_shard_key;

use super::DynamoStore;
use super::item::{Item, service_error};
use super::ledger_reads::number;
use super::transact::Refusals;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn built(update: aws_sdk_dynamodb::types::builders::UpdateBuilder) -> Result<TransactWriteItem, StoreError> {
    let update = update.build().map_err(|e| StoreError::Service(e.to_string()))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

impl DynamoStore {
    fn account_key(shard: u16) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(account_shard_key(shard)))])
    }

    fn shard_update(&self, shard: u16) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
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
            let split = if self.shards.get() > 1 {
                update = update.expression_attribute_values(":parts", n(self.shards.get()));
                "parts_for = :parts"
            } else {
                "attribute_not_exists(parts_for)"
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

    /// The whole account: its shards added up.
    pub(super) async fn read_account(&self) -> Result<AccountCapacity, StoreError> {
        Ok(shard::summed(&self.read_account_shards().await?))
    }

    /// Every shard that may count something, in order: those in use, then
    /// those a lower `S` left (`span`), which admit nothing and are read
    /// until their counts are gone. Each under its part of the limits
    /// split from the whole ones shard 0 keeps. When the limits on disk
    /// were split for another `S`, they are split again first.
    pub(super) async fn read_account_shards(&self) -> Result<Vec<AccountCapacity>, StoreError> {
        // A split lost to a rival's write of the limits is read again.
        for _ in 0..SPLIT_TRIES {
            if let Some(shards) = self.read_account_shards_once().await? {
                return Ok(shards);
            }
        }
        Err(StoreError::Contention)
    }

    /// [`Self::read_account_shards`], once: none when the limits had to be
    /// split again and a rival's write came between the read and the split.
    async fn read_account_shards_once(&self) -> Result<Option<Vec<AccountCapacity>>, StoreError> {
        let mut items = self.shard_items(self.shards.all()).await?;
        let first = Split::read(items.get(&0))?;
        let mut span = first.span.max(self.shards.get());
        if span > self.shards.get() {
            let retired = self.shard_items(self.shards.get()..span).await?;
            if retired
                .values()
                .all(|item| counts_from(Some(item)).is_ok_and(|c| c.is_idle()))
            {
                // What a lower `S` left has drained: read no further.
                span = self.shards.get();
            }
            items.extend(retired);
        }
        if (first.parts_for != Some(self.shards.get()).filter(|s| *s > 1) || span != first.span.max(1))
            && !self.split_again(&first, span).await?
        {
            return Ok(None);
        }
        let whole = AccountCapacity {
            configured: self.account_limit,
            set_limit: first.set_limit,
            learned: first.learned,
            ..AccountCapacity::default()
        };
        (0..span)
            .map(|k| {
                let counts = counts_from(items.get(&k))?;
                Ok(AccountCapacity {
                    learned_mark: if k == 0 { counts.learned_mark } else { 0 },
                    raise_every: if k == 0 { counts.raise_every } else { None },
                    learned_at_ms: if k == 0 { counts.learned_at_ms } else { None },
                    ..self.shards.capacity_of(k, &whole, &counts)
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Writes the limits' parts for this `S` (one shard: the limits whole,
    /// as before shards), and `span`, the shards that may still count
    /// something. Conditional on everything the split was computed from
    /// (the whole limits, the `S` they were split for, the span): false
    /// when a rival wrote any of them between the read and this write (an
    /// operator's limit, a lesson, another `S`'s split), and nothing was
    /// written; the caller reads again.
    async fn split_again(&self, read: &Split, span: u16) -> Result<bool, StoreError> {
        let mut items = Vec::new();
        for k in self.shards.all() {
            let mut set = Vec::new();
            let mut remove = Vec::new();
            let mut update = self.shard_update(k);
            for (name, whole, part) in [
                ("max_in_flight", read.set_limit, ":max"),
                ("learned_limit", read.learned, ":learned"),
            ] {
                match whole {
                    Some(l) => {
                        set.push(format!("{name} = {part}"));
                        update = update.expression_attribute_values(part, n(self.shards.part(l, k)));
                    }
                    None => remove.push(name.to_owned()),
                }
            }
            if k > 0 {
                // Every shard says which `S` its parts are for: a claim
                // on it holds to that (see `account_update`).
                update = update.expression_attribute_values(":s", n(self.shards.get()));
                set.push("parts_for = :s".into());
            }
            if k == 0 {
                update = update.expression_attribute_values(":span", n(span));
                set.push("span = :span".into());
                if self.shards.get() > 1 {
                    update = update.expression_attribute_values(":s", n(self.shards.get()));
                    set.push("parts_for = :s".into());
                    for (name, whole, value) in [
                        ("max_whole", read.set_limit, ":wmax"),
                        ("learned_whole", read.learned, ":wlearned"),
                    ] {
                        match whole {
                            Some(l) => {
                                set.push(format!("{name} = {value}"));
                                update = update.expression_attribute_values(value, n(l));
                            }
                            None => remove.push(name.to_owned()),
                        }
                    }
                } else {
                    remove.extend(["parts_for", "max_whole", "learned_whole"].map(str::to_owned));
                }
                let (condition, values) = read.unchanged();
                update = values
                    .into_iter()
                    .fold(update.condition_expression(condition), |u, (name, value)| {
                        u.expression_attribute_values(name, value)
                    });
            }
            let expression = [("SET", set), ("REMOVE", remove)]
                .into_iter()
                .filter(|(_, names)| !names.is_empty())
                .map(|(action, names)| format!("{action} {}", names.join(", ")))
                .collect::<Vec<_>>()
                .join(" ");
            items.push(built(update.update_expression(expression))?);
        }
        items.extend(self.unsplit_retired(read)?);
        match self.transact(items, Refusals::default()).await {
            Ok(()) => Ok(true),
            // A rival wrote the limits (or split them) first.
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The shards past this `S` that a larger one split parts onto lose
    /// them (their counts stay, read while they count a job): a later raise
    /// must find them unsplit, not admitting under old parts.
    fn unsplit_retired(&self, read: &Split) -> Result<Vec<TransactWriteItem>, StoreError> {
        let split_before = read.span.max(read.parts_for.unwrap_or(1));
        (self.shards.get()..split_before)
            .map(|k| {
                built(
                    self.shard_update(k)
                        .update_expression("REMOVE parts_for, max_in_flight, learned_limit"),
                )
            })
            .collect()
    }

    /// Sets (or removes) the operator's limit and drops the learned one.
    pub(super) async fn write_account_limit(&self, limit: Option<u32>) -> Result<AccountCapacity, StoreError> {
        // The limits split for this `S` first, so the shards a lower `S`
        // left are remembered.
        self.read_account_shards().await?;
        if self.shards.get() == 1 {
            let update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(Self::account_key(0)));
            let update = match limit {
                Some(l) => update
                    .update_expression(
                        "SET max_in_flight = :max \
                         REMOVE learned_limit, raise_every, learned_at, parts_for, max_whole, learned_whole",
                    )
                    .expression_attribute_values(":max", n(l)),
                None => update.update_expression(
                    "REMOVE max_in_flight, learned_limit, raise_every, learned_at, parts_for, max_whole, learned_whole",
                ),
            };
            self.plain_write(|| async { update.clone().send().await.map_err(service_error) })
                .await?;
            return self.read_account().await;
        }
        let parts_for = n(self.shards.get());
        let items = self
            .shards
            .all()
            .map(|k| {
                let update = self.shard_update(k);
                let update = match (limit, k) {
                    (Some(l), 0) => update
                        .update_expression(
                            "SET max_in_flight = :max, max_whole = :whole, parts_for = :s \
                             REMOVE learned_limit, learned_whole, raise_every, learned_at",
                        )
                        .expression_attribute_values(":whole", n(l))
                        .expression_attribute_values(":s", parts_for.clone()),
                    (Some(_), _) => update
                        .update_expression("SET max_in_flight = :max, parts_for = :s REMOVE learned_limit")
                        .expression_attribute_values(":s", parts_for.clone()),
                    (None, 0) => update
                        .update_expression(
                            "SET parts_for = :s \
                             REMOVE max_in_flight, learned_limit, max_whole, learned_whole, raise_every, learned_at",
                        )
                        .expression_attribute_values(":s", parts_for.clone()),
                    (None, _) => update
                        .update_expression("SET parts_for = :s REMOVE max_in_flight, learned_limit")
                        .expression_attribute_values(":s", parts_for.clone()),
                };
                built(match limit {
                    Some(l) => update.expression_attribute_values(":max", n(self.shards.part(l, k))),
                    None => update,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.transact(items, Refusals::default()).await?;
        self.read_account().await
    }

    /// Replaces the learned limit if it is still `seen`; false when it is
    /// not. The mark (jobs ended when it changed) is the account's.
    pub(super) async fn write_learned_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, StoreError> {
        let at = at.map(|t| t.timestamp_millis());
        if self.shards.get() == 1 {
            return self.write_learned_whole(seen, learned, raise_every, at).await;
        }
        // Jobs ended on the other shards, as read now; shard 0's are read
        // by the write itself.
        let others: i64 = self
            .read_account_shards()
            .await?
            .iter()
            .skip(1)
            .map(|s| s.jobs_ended)
            .sum();
        let first = self
            .shard_update(0)
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":others", n(others))
            .expression_attribute_values(":s", n(self.shards.get()));
        let (every_set, every_remove) = lesson_clauses(raise_every, at);
        let first = match raise_every {
            Some(w) => first.expression_attribute_values(":every", n(w)),
            None => first,
        };
        let first = match at {
            Some(t) => first.expression_attribute_values(":at", n(t)),
            None => first,
        };
        let first = match learned {
            Some(l) => first
                .update_expression(format!(
                    "SET learned_whole = :whole, learned_limit = :part, \
                     learned_mark = if_not_exists(jobs_ended, :zero) + :others{every_set}{every_remove}"
                ))
                .expression_attribute_values(":whole", n(l))
                .expression_attribute_values(":part", n(self.shards.part(l, 0))),
            None => first.update_expression(format!(
                "SET learned_mark = if_not_exists(jobs_ended, :zero) + :others{every_set} \
                 REMOVE learned_whole, learned_limit{}",
                every_remove.replace(" REMOVE", ",")
            )),
        };
        // Only over the limits as split for this `S` (the read above split
        // them again if they were not), and over the value seen.
        let first = match seen {
            Some(s) => first
                .condition_expression("parts_for = :s AND learned_whole = :seen")
                .expression_attribute_values(":seen", n(s)),
            None => first.condition_expression("parts_for = :s AND attribute_not_exists(learned_whole)"),
        };
        let mut items = vec![built(first)?];
        for k in self.shards.all().skip(1) {
            let update = self.shard_update(k);
            items.push(built(match learned {
                Some(l) => update
                    .update_expression("SET learned_limit = :part")
                    .expression_attribute_values(":part", n(self.shards.part(l, k))),
                None => update.update_expression("REMOVE learned_limit"),
            })?);
        }
        match self.transact(items, Refusals::default()).await {
            Ok(()) => Ok(true),
            // Shard 0's condition: the limit moved on since `seen`.
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One item: the learned limit whole on it, a plain conditional write.
    async fn write_learned_whole(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key(0)))
            .expression_attribute_values(":zero", n(0));
        let (every_set, every_remove) = lesson_clauses(raise_every, at);
        if let Some(w) = raise_every {
            update = update.expression_attribute_values(":every", n(w));
        }
        if let Some(t) = at {
            update = update.expression_attribute_values(":at", n(t));
        }
        update = match learned {
            Some(l) => update
                .update_expression(format!(
                    "SET learned_limit = :learned, learned_mark = if_not_exists(jobs_ended, :zero){every_set}{every_remove}"
                ))
                .expression_attribute_values(":learned", n(l)),
            None => update.update_expression(format!(
                "SET learned_mark = if_not_exists(jobs_ended, :zero){every_set} REMOVE learned_limit{}",
                every_remove.replace(" REMOVE", ",")
            )),
        };
        update = match seen {
            Some(s) => update
                .condition_expression("attribute_not_exists(parts_for) AND learned_limit = :seen")
                .expression_attribute_values(":seen", n(s)),
            None => {
                update.condition_expression("attribute_not_exists(parts_for) AND attribute_not_exists(learned_limit)")
            }
        };
        self.plain_write(|| async {
            match update.clone().send().await {
                Ok(_) => Ok(true),
                Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => Ok(false),
                Err(e) => Err(service_error(e)),
            }
        })
        .await
    }
}

/// Shard 0's record of how the limits are split: the whole limits, the `S`
/// they were split for (none: one item, the limits whole on it, as before
/// shards), and the shards that may still count something.
struct Split {
    set_limit: Option<u32>,
    learned: Option<u32>,
    parts_for: Option<u16>,
    span: u16,
    /// The attributes read, as stored: what a split's condition holds to.
    raw: Vec<(&'static str, Option<AttributeValue>)>,
}

/// Reads of the account a split lost to a rival may take.
const SPLIT_TRIES: usize = 4;

/// The attributes of shard 0 a split is computed from.
const SPLIT_FROM: [&str; 6] = [
    "parts_for",
    "span",
    "max_in_flight",
    "learned_limit",
    "max_whole",
    "learned_whole",
];

impl Split {
    fn read(item: Option<&Item>) -> Result<Self, StoreError> {
        let raw = SPLIT_FROM
            .iter()
            .map(|name| (*name, item.and_then(|i| i.get(*name)).cloned()))
            .collect();
        let Some(item) = item else {
            return Ok(Self {
                set_limit: None,
                learned: None,
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
            parts_for,
            span,
            raw,
        })
    }

    /// A condition that shard 0 still holds what was read, and its values
    /// (`:was0`, `:was1`...).
    fn unchanged(&self) -> (String, Vec<(String, AttributeValue)>) {
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

/// The clauses a lesson adds: set `raise_every` to `:every` and
/// `learned_at` to `:at` (after a `SET` list), or remove `raise_every`
/// (` REMOVE raise_every`; after another `REMOVE` list, with its keyword
/// replaced by a comma).
fn lesson_clauses(raise_every: Option<u32>, at: Option<i64>) -> (String, &'static str) {
    let at = if at.is_some() { ", learned_at = :at" } else { "" };
    match raise_every {
        Some(_) => (format!(", raise_every = :every{at}"), ""),
        None => (at.to_owned(), " REMOVE raise_every"),
    }
}

/// A shard item's counters (and shard 0's learned mark and raise window).
fn counts_from(item: Option<&Item>) -> Result<AccountCapacity, StoreError> {
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
