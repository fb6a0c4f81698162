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
            update = update
                .expression_attribute_values(":zero", n(0))
                .condition_expression(format!("{maximum} AND {learned}{yields}"));
        }
        update.build().map_err(|e| StoreError::Service(e.to_string()))
    }

    /// Shard `shard`'s capacity as its item holds it: its counters, its
    /// parts of the limits, and (shard 0) the learned limit's mark.
    fn shard_from(&self, shard: u16, item: Option<&Item>) -> Result<AccountCapacity, StoreError> {
        let configured = self.account_limit.map(|c| self.shards.part(c, shard));
        let Some(item) = item else {
            return Ok(AccountCapacity {
                configured,
                ..AccountCapacity::default()
            });
        };
        let count = |name| number::<i64>(item, name).map(Option::unwrap_or_default);
        let limit = |name| number::<i64>(item, name).map(|v| v.and_then(|m| u32::try_from(m).ok()));
        Ok(AccountCapacity {
            in_flight: count("in_flight")?,
            waiting: count("waiting")?,
            queued: count("queued")?,
            configured,
            set_limit: limit("max_in_flight")?,
            learned: limit("learned_limit")?,
            jobs_ended: count("jobs_ended")?,
            learned_mark: count("learned_mark")?,
        })
    }

    /// The whole account: its shards added up.
    pub(super) async fn read_account(&self) -> Result<AccountCapacity, StoreError> {
        Ok(shard::summed(&self.read_account_shards().await?))
    }

    /// Every shard in use, in order, read strongly consistent: one
    /// `GetItem` with one shard, one `BatchGetItem` (and its unprocessed
    /// keys) with more.
    pub(super) async fn read_account_shards(&self) -> Result<Vec<AccountCapacity>, StoreError> {
        if self.shards.get() == 1 {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(Self::account_key(0)))
                .consistent_read(true)
                .send()
                .await
                .map_err(service_error)?;
            return Ok(vec![self.shard_from(0, out.item())?]);
        }
        let keys = self.shards.all().map(Self::account_key).collect();
        let found: HashMap<String, Item> = self
            .batch_get(keys, true)
            .await?
            .into_iter()
            .filter_map(|item| match item.get("pk") {
                Some(AttributeValue::S(pk)) => Some((pk.clone(), item)),
                _ => None,
            })
            .collect();
        self.shards
            .all()
            .map(|k| self.shard_from(k, found.get(&account_shard_key(k))))
            .collect()
    }

    /// Sets (or removes) the operator's limit and drops the learned one.
    pub(super) async fn write_account_limit(&self, limit: Option<u32>) -> Result<AccountCapacity, StoreError> {
        if self.shards.get() == 1 {
            let update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(Self::account_key(0)))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
            let update = match limit {
                Some(l) => update
                    .update_expression("SET max_in_flight = :max REMOVE learned_limit")
                    .expression_attribute_values(":max", n(l)),
                None => update.update_expression("REMOVE max_in_flight, learned_limit"),
            };
            let out = update.send().await.map_err(service_error)?;
            return self.shard_from(0, out.attributes());
        }
        let items = self
            .shards
            .all()
            .map(|k| {
                let update = self.shard_update(k);
                built(match limit {
                    Some(l) => update
                        .update_expression("SET max_in_flight = :max REMOVE learned_limit, learned_whole")
                        .expression_attribute_values(":max", n(self.shards.part(l, k))),
                    None => update.update_expression("REMOVE max_in_flight, learned_limit, learned_whole"),
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
    ) -> Result<bool, StoreError> {
        if self.shards.get() == 1 {
            return self.write_learned_whole(seen, learned).await;
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
            .expression_attribute_values(":others", n(others));
        let first = match learned {
            Some(l) => first
                .update_expression(
                    "SET learned_whole = :whole, learned_limit = :part, \
                     learned_mark = if_not_exists(jobs_ended, :zero) + :others",
                )
                .expression_attribute_values(":whole", n(l))
                .expression_attribute_values(":part", n(self.shards.part(l, 0))),
            None => first.update_expression(
                "SET learned_mark = if_not_exists(jobs_ended, :zero) + :others REMOVE learned_whole, learned_limit",
            ),
        };
        let first = match seen {
            Some(s) => first
                .condition_expression(
                    "learned_whole = :seen OR (attribute_not_exists(learned_whole) AND learned_limit = :seen)",
                )
                .expression_attribute_values(":seen", n(s)),
            None => first
                .condition_expression("attribute_not_exists(learned_whole) AND attribute_not_exists(learned_limit)"),
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
    async fn write_learned_whole(&self, seen: Option<u32>, learned: Option<u32>) -> Result<bool, StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key(0)))
            .expression_attribute_values(":zero", n(0));
        update = match learned {
            Some(l) => update
                .update_expression("SET learned_limit = :learned, learned_mark = if_not_exists(jobs_ended, :zero)")
                .expression_attribute_values(":learned", n(l)),
            None => {
                update.update_expression("SET learned_mark = if_not_exists(jobs_ended, :zero) REMOVE learned_limit")
            }
        };
        update = match seen {
            Some(s) => update
                .condition_expression("learned_limit = :seen")
                .expression_attribute_values(":seen", n(s)),
            None => update.condition_expression("attribute_not_exists(learned_limit)"),
        };
        match update.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(service_error(e)),
        }
    }
}
