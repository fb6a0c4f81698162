//! The account's limits as operators and lessons write them: whole on one
//! shard item that alone counts jobs, else as parts over every shard in
//! use ([`super::account_parts`]), each write held to what it read.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use genace_core::capacity::AccountCapacity;
use genace_stages::ports::table::StoreError;

use super::DynamoStore;
use super::account_clauses::Clauses;
use super::account_parts::{AccountRead, Parts, SPLIT_TRIES};
use super::item::service_error;
use super::transact::Refusals;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

impl DynamoStore {
    /// Sets (or removes) the operator's limit and drops the learned one:
    /// whole on one shard that alone counts jobs, else as parts over the
    /// jobs each shard counts. Either write holds to the form it read.
    pub(super) async fn write_account_limit(&self, limit: Option<u32>) -> Result<AccountCapacity, StoreError> {
        for _ in 0..SPLIT_TRIES {
            let read = self.read_account_parts(true).await?;
            let whole = read.unchanged.as_ref().is_some_and(|first| first.parts_for.is_none());
            let written = if whole {
                self.write_limit_whole(limit).await?
            } else {
                self.write_limit_parts(limit, read).await?
            };
            if written {
                return self.read_account().await;
            }
        }
        Err(StoreError::Contention)
    }

    /// One shard, the limits whole on it: false when it holds parts now
    /// (shards a larger `S` left count jobs again), and nothing was
    /// written.
    async fn write_limit_whole(&self, limit: Option<u32>) -> Result<bool, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key(0)))
            .condition_expression("attribute_not_exists(parts_for)");
        let update = match limit {
            Some(l) => update
                .update_expression(
                    "SET max_in_flight = :max \
                     REMOVE learned_limit, raise_every, learned_at, max_whole, learned_whole",
                )
                .expression_attribute_values(":max", n(l)),
            None => update.update_expression(
                "REMOVE max_in_flight, learned_limit, raise_every, learned_at, max_whole, learned_whole",
            ),
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

    /// Writes the operator's `limit` (none: removes it) as parts over the
    /// jobs each shard counts now, and drops the learned limit: one
    /// transaction over the shards in use, conditional on each shard
    /// counting no more than its part allows ([`Parts::bound`]). False when
    /// a claim came between the read and the write; nothing was written.
    async fn write_limit_parts(&self, limit: Option<u32>, read: AccountRead) -> Result<bool, StoreError> {
        let whole = AccountCapacity {
            configured: self.account_limit,
            set_limit: limit,
            ..AccountCapacity::default()
        };
        let parts = Parts::over(self.shards, &whole, &read.shards);
        let first = read.unchanged.ok_or(StoreError::Contention)?;
        let items = self
            .shards
            .all()
            .map(|k| {
                let c = Clauses::parts(k, self.shard_update(k), &parts).set_or_remove(
                    "parts_for",
                    ":s",
                    Some(self.shards.get()),
                );
                match k {
                    // Over the split as read: a rival's limit, lesson or
                    // split between the read and this write cancels it.
                    0 => c.held_to(&first).set_or_remove("max_whole", ":whole", limit).remove(&[
                        "learned_whole",
                        "raise_every",
                        "learned_at",
                    ]),
                    _ => c,
                }
                .built()
            })
            .collect::<Result<Vec<_>, _>>()?;
        match self.transact(items, Refusals::PARTS).await {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
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
        if self.shards.get() == 1
            && let Some(saved) = self.write_learned_whole(seen, learned, raise_every, at).await?
        {
            return Ok(saved);
        }
        // A claim between the read and the write: read again.
        for _ in 0..SPLIT_TRIES {
            if let Some(saved) = self.write_lesson_parts(seen, learned, raise_every, at).await? {
                return Ok(saved);
            }
        }
        Err(StoreError::Contention)
    }

    /// The lesson over more than one shard: the whole learned limit on
    /// shard 0, and the limit claims are admitted under split again over
    /// the jobs each shard counts, as for an operator's limit. False when
    /// the learned limit is no longer `seen`; none when a claim came
    /// between the read and the write (nothing was written).
    async fn write_lesson_parts(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<i64>,
    ) -> Result<Option<bool>, StoreError> {
        let AccountRead {
            shards: read,
            whole,
            unchanged,
        } = self.read_account_parts(true).await?;
        let first = unchanged.ok_or(StoreError::Contention)?;
        if whole.learned != seen {
            return Ok(Some(false));
        }
        // Jobs ended on the other shards, as read now; shard 0's are read
        // by the write itself.
        let others: i64 = read.iter().skip(1).map(|s| s.jobs_ended).sum();
        let parts = Parts::over(self.shards, &AccountCapacity { learned, ..whole }, &read);
        let mut items = Vec::new();
        for k in self.shards.all() {
            let mut c = Clauses::parts(k, self.shard_update(k), &parts);
            if k == 0 {
                c = c
                    .value(":zero", 0)
                    .value(":others", others)
                    .set("learned_mark = if_not_exists(jobs_ended, :zero) + :others")
                    .set_or_remove("raise_every", ":every", raise_every)
                    .set_if("learned_at", ":at", at)
                    .set_or_remove("learned_whole", ":whole", learned);
                // Only over the split as read (the read above split the
                // limits again if they were not for this `S`), and so over
                // the value seen.
                c = c.held_to(&first);
            }
            items.push(c.built()?);
        }
        match self.transact(items, Refusals::PARTS).await {
            Ok(()) => Ok(Some(true)),
            // The limit moved on since `seen`, or a claim came between.
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One item: the learned limit whole on it, a plain conditional write.
    /// False when the learned limit is no longer `seen`; none when shard 0
    /// holds parts (shards a larger `S` left count jobs), and the lesson
    /// is written as parts.
    async fn write_learned_whole(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<i64>,
    ) -> Result<Option<bool>, StoreError> {
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
        let update = update.return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        self.plain_write(|| async {
            match update.clone().send().await {
                Ok(_) => Ok(Some(true)),
                Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => {
                    let parted = match ctx.into_err() {
                        UpdateItemError::ConditionalCheckFailedException(e) => {
                            e.item().is_some_and(|item| item.contains_key("parts_for"))
                        }
                        _ => false,
                    };
                    Ok((!parted).then_some(false))
                }
                Err(e) => Err(service_error(e)),
            }
        })
        .await
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
