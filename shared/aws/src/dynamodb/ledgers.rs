//! Tenant ledgers and the account item: the counters every slot-moving
//! write moves in the same transaction as the record, and the operator's
//! limits.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use genace_core::domain::TenantId;
use genace_core::ledger::{self, AccountCapacity, Millicredits, Shares, TenantLedger};
use genace_core::record::OperationRecord;
use genace_stages::ports::table::{CONFLICT_TRIES, LedgerPage, StoreError, TenantLedgers, conflict_backoff};

use crate::schema::{
    ACCOUNT_ITEM, LEDGER_LIST_SHARDS, WAITING_SET_SHARDS, ledger_list_partition, tenant_shard, waiting_set_key,
};

use super::DynamoStore;
use super::item::{Item, conflict, service_error};
use super::ledger_reads::{ledger_from_item, number};
use super::update::{UpdatePlan, VERSION_GUARD};

impl DynamoStore {
    fn ledger_key(tenant: &str) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(crate::schema::ledger_key(tenant)))])
    }

    /// An update of a tenant's ledger item, with the values every such
    /// update sets: `:tenant`, `:ledger` (its listing partition) and `:zero`.
    fn ledger_item_update(
        &self,
        tenant: &TenantId,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::ledger_key(tenant.as_str())))
            .expression_attribute_values(":tenant", AttributeValue::S(tenant.as_str().to_owned()))
            .expression_attribute_values(":ledger", Self::ledger_partition(tenant.as_str()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
    }

    /// A tenant's partition of the ledger listing.
    fn ledger_partition(tenant: &str) -> AttributeValue {
        AttributeValue::S(ledger_list_partition(tenant_shard(tenant, LEDGER_LIST_SHARDS)))
    }

    fn account_key() -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(ACCOUNT_ITEM.to_owned()))])
    }

    /// The account's jobs in flight and waiting operations move by `delta`
    /// (and its count of ended jobs by one when `ended`); a claim (`admit`)
    /// only while the jobs in flight are under every limit in force: the
    /// operator's (`max_in_flight`, else the deployment's) and the learned
    /// one (`learned_limit`). See [`AccountCapacity`].
    fn account_update(&self, delta: Shares, admit: bool, ended: bool) -> Result<Update, StoreError> {
        let mut update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::account_key()))
            .update_expression(if ended {
                "ADD in_flight :d, waiting :w, queued :q, jobs_ended :one"
            } else {
                "ADD in_flight :d, waiting :w, queued :q"
            })
            .expression_attribute_values(":d", AttributeValue::N(delta.in_flight.to_string()))
            .expression_attribute_values(":w", AttributeValue::N(delta.waiting.to_string()))
            .expression_attribute_values(":q", AttributeValue::N(delta.queued.to_string()));
        if ended {
            update = update.expression_attribute_values(":one", AttributeValue::N("1".into()));
        }
        if admit {
            let maximum = match self.account_limit {
                Some(configured) => {
                    update = update.expression_attribute_values(":limit", AttributeValue::N(configured.to_string()));
                    "(in_flight < max_in_flight OR (attribute_not_exists(max_in_flight) AND in_flight < :limit))"
                }
                None => "(attribute_not_exists(max_in_flight) OR in_flight < max_in_flight)",
            };
            // A claim that did not wait for a slot yields to those that do
            // ([`AccountCapacity::yields`]).
            let yields = if delta.queued < 0 {
                ""
            } else {
                " AND (attribute_not_exists(queued) OR queued <= :none)"
            };
            if !yields.is_empty() {
                update = update.expression_attribute_values(":none", AttributeValue::N("0".into()));
            }
            update = update.condition_expression(format!(
                "(attribute_not_exists(in_flight) OR ({maximum} AND \
                 (attribute_not_exists(learned_limit) OR in_flight < learned_limit))){yields}"
            ));
        }
        update.build().map_err(|e| StoreError::Service(e.to_string()))
    }

    fn account_from(&self, item: Option<&Item>) -> Result<AccountCapacity, StoreError> {
        let Some(item) = item else {
            return Ok(AccountCapacity {
                configured: self.account_limit,
                ..AccountCapacity::default()
            });
        };
        let count = |name| number::<i64>(item, name).map(Option::unwrap_or_default);
        let limit = |name| number::<i64>(item, name).map(|v| v.and_then(|m| u32::try_from(m).ok()));
        Ok(AccountCapacity {
            in_flight: count("in_flight")?,
            waiting: count("waiting")?,
            queued: count("queued")?,
            configured: self.account_limit,
            set_limit: limit("max_in_flight")?,
            learned: limit("learned_limit")?,
            jobs_ended: count("jobs_ended")?,
            learned_mark: count("learned_mark")?,
        })
    }

    /// The record's update and the tenant's counters, in one transaction.
    pub(super) async fn apply_with_ledger(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
        plan: UpdatePlan,
        delta: Shares,
    ) -> Result<(), StoreError> {
        let plan = plan.guarded_by(prev.version);
        let record = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key(&prev.operation_id)))
            .update_expression(plan.expression)
            .set_expression_attribute_names(Some(plan.names))
            .set_expression_attribute_values(Some(plan.values))
            .condition_expression(VERSION_GUARD)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Service(e.to_string()))?;
        let reserves = ledger::reserves(prev, next);
        let counters = self.ledger_update(prev, delta, reserves)?;
        let mut items = vec![
            TransactWriteItem::builder().update(record).build(),
            TransactWriteItem::builder().update(counters).build(),
        ];
        if delta.in_flight != 0 || delta.waiting != 0 || delta.queued != 0 {
            let ended = ledger::ends_a_job(prev, next);
            let account = self.account_update(delta, reserves && delta.in_flight > 0, ended)?;
            items.push(TransactWriteItem::builder().update(account).build());
        }
        self.transact(items, reserves).await
    }

    /// One transaction, tried again while DynamoDB cancels it only for
    /// meeting another transaction on one of its items: contention is
    /// retried here (an item throttled is the same), counted
    /// (`TransactionConflicts`, `TransactionsThrottled`), and answered as
    /// [`StoreError::Contention`] only when every try met one.
    async fn transact(&self, items: Vec<TransactWriteItem>, reserves: bool) -> Result<(), StoreError> {
        for attempt in 1..=CONFLICT_TRIES {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .send()
                .await;
            let mut throttled = false;
            let refused = match sent {
                Ok(_) => return Ok(()),
                Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                    TransactWriteItemsError::TransactionCanceledException(e) => {
                        throttled = e
                            .cancellation_reasons()
                            .iter()
                            .any(|r| r.code() == Some("ThrottlingError"));
                        cancelled(&e, reserves)
                    }
                    other => StoreError::Service(aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string()),
                },
                Err(e) => service_error(e),
            };
            if !matches!(refused, StoreError::Contention) {
                return Err(refused);
            }
            // A hot item past its throughput, apart from two transactions
            // meeting: the first says the account needs sharding.
            let metric = if throttled {
                "TransactionsThrottled"
            } else {
                "TransactionConflicts"
            };
            self.metrics.count(metric, &[]);
            if attempt < CONFLICT_TRIES {
                tokio::time::sleep(conflict_backoff(attempt)).await;
            }
        }
        Err(StoreError::Contention)
    }

    /// The tenant's counters move by `delta`; a claim (`reserves`) only
    /// while the spend limit leaves room for its reservation.
    fn ledger_update(&self, prev: &OperationRecord, delta: Shares, reserves: bool) -> Result<Update, StoreError> {
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mc = |v: Millicredits| n(v.get());
        let mut counters = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::ledger_key(prev.tenant_id.as_str())))
            .update_expression(format!(
                "ADD held_mc :held, spent_mc :spent, pending_refund_mc :pending, settled_mc :settled, \
                 in_flight :in_flight, waiting :waiting, queued :queued, headroom_mc :room SET tenant_id = :tenant, \
                 due_pk = :ledger, due_at = :zero{joins}",
                // An operation starts waiting: the tenant joins the waiting
                // set, keeping its place if it is there already. One stops
                // waiting (claimed, or cancelled): the tenant goes to the
                // back, so tenants take turns, and one that drained is
                // dropped by the next read.
                joins = match delta.waiting.signum() {
                    1 => ", wait_pk = :set, wait_sk = if_not_exists(wait_sk, :joined)",
                    -1 => ", wait_pk = :set, wait_sk = :joined",
                    _ => "",
                },
            ))
            .expression_attribute_values(":held", mc(delta.held))
            .expression_attribute_values(":spent", mc(delta.spent))
            .expression_attribute_values(":pending", mc(delta.pending_refund))
            .expression_attribute_values(":settled", mc(delta.settled))
            .expression_attribute_values(":in_flight", n(delta.in_flight))
            .expression_attribute_values(":waiting", n(delta.waiting))
            .expression_attribute_values(":queued", n(delta.queued))
            .expression_attribute_values(":room", mc(-delta.held))
            .expression_attribute_values(":tenant", AttributeValue::S(prev.tenant_id.as_str().to_owned()))
            .expression_attribute_values(":ledger", Self::ledger_partition(prev.tenant_id.as_str()))
            .expression_attribute_values(":zero", n(0));
        if delta.waiting != 0 {
            let tenant = prev.tenant_id.as_str();
            let joined = format!("{:015}#{tenant}", chrono::Utc::now().timestamp_millis().max(0));
            counters = counters
                .expression_attribute_values(
                    ":set",
                    AttributeValue::S(waiting_set_key(tenant_shard(tenant, WAITING_SET_SHARDS))),
                )
                .expression_attribute_values(":joined", AttributeValue::S(joined));
        }
        if reserves {
            // Room for the reservation under the spend limit, and a slot
            // under the tenant's own limit of jobs in flight.
            counters = counters
                .condition_expression(
                    "(attribute_not_exists(spend_limit_mc) OR headroom_mc >= :need) AND \
                     (attribute_not_exists(max_in_flight) OR attribute_not_exists(in_flight) \
                      OR in_flight < max_in_flight)",
                )
                .expression_attribute_values(":need", mc(delta.held))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        }
        counters.build().map_err(|e| StoreError::Service(e.to_string()))
    }
}

/// Which item of a cancelled ledger transaction refused: the record (a
/// conflict), the tenant's counters (the spend limit) or the account's (no
/// free slot). Only a claim can be refused by the last two.
fn cancelled(e: &aws_sdk_dynamodb::types::error::TransactionCanceledException, reserves: bool) -> StoreError {
    let reasons = e.cancellation_reasons();
    let failed = |i: usize| {
        reasons
            .get(i)
            .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
    };
    if failed(0) {
        conflict(reasons[0].item())
    } else if failed(1) && reserves {
        // Which of the tenant's limits: its counters as they were say.
        let ledger = reasons[1].item().and_then(|item| ledger_from_item("", item).ok());
        match ledger {
            Some(l) if !l.has_a_slot() => StoreError::TenantFull,
            _ => StoreError::SpendLimit,
        }
    } else if failed(2) && reserves {
        StoreError::AccountFull
    } else if reasons
        .iter()
        .any(|r| matches!(r.code(), Some("TransactionConflict" | "ThrottlingError")))
    {
        // Another transaction on one of its items, or an item past its
        // share of throughput (a hot item such as the account's takes
        // about 1,000 write units a second): nothing written, and nothing
        // refused; the table is busy, and the same transaction may be sent
        // again.
        StoreError::Contention
    } else {
        StoreError::Service(format!(
            "transaction cancelled: {:?}",
            reasons.iter().map(|r| r.code()).collect::<Vec<_>>()
        ))
    }
}

impl TenantLedgers for DynamoStore {
    async fn send_to_back(&self, tenants: &[String]) -> Result<(), StoreError> {
        self.send_to_back_of_waiting_set(tenants).await
    }

    async fn rejoin_waiting_set(&self, pages: usize) -> Result<usize, StoreError> {
        self.rejoin_stranded_waiters(pages).await
    }

    async fn account(&self) -> Result<AccountCapacity, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        self.account_from(out.item())
    }

    async fn set_account_limit(&self, limit: Option<u32>) -> Result<AccountCapacity, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
        let update = match limit {
            Some(l) => update
                .update_expression("SET max_in_flight = :max REMOVE learned_limit")
                .expression_attribute_values(":max", AttributeValue::N(l.to_string())),
            None => update.update_expression("REMOVE max_in_flight, learned_limit"),
        };
        let out = update.send().await.map_err(service_error)?;
        self.account_from(out.attributes())
    }

    async fn learn_account_limit(&self, seen: Option<u32>, learned: Option<u32>) -> Result<bool, StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::account_key()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()));
        update = match learned {
            Some(l) => update
                .update_expression("SET learned_limit = :learned, learned_mark = if_not_exists(jobs_ended, :zero)")
                .expression_attribute_values(":learned", AttributeValue::N(l.to_string())),
            None => {
                update.update_expression("SET learned_mark = if_not_exists(jobs_ended, :zero) REMOVE learned_limit")
            }
        };
        update = match seen {
            Some(s) => update
                .condition_expression("learned_limit = :seen")
                .expression_attribute_values(":seen", AttributeValue::N(s.to_string())),
            None => update.condition_expression("attribute_not_exists(learned_limit)"),
        };
        match update.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(service_error(e)),
        }
    }

    async fn ledger(&self, tenant: &TenantId) -> Result<TenantLedger, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::ledger_key(tenant.as_str())))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        match out.item() {
            Some(item) => ledger_from_item(tenant.as_str(), item),
            None => Ok(TenantLedger {
                tenant_id: tenant.as_str().to_owned(),
                ..TenantLedger::default()
            }),
        }
    }

    async fn ledgers(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        self.ledger_page(limit, cursor).await
    }

    async fn waiting_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        self.read_waiting_set(limit).await
    }

    async fn set_max_in_flight(&self, tenant: &TenantId, limit: Option<u32>) -> Result<TenantLedger, StoreError> {
        let update = self
            .ledger_item_update(tenant)
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
        let update = match limit {
            Some(l) => update
                .update_expression("SET tenant_id = :tenant, due_pk = :ledger, due_at = :zero, max_in_flight = :max")
                .expression_attribute_values(":max", AttributeValue::N(l.to_string())),
            None => update
                .update_expression("SET tenant_id = :tenant, due_pk = :ledger, due_at = :zero REMOVE max_in_flight"),
        };
        let out = update.send().await.map_err(service_error)?;
        match out.attributes() {
            Some(item) => ledger_from_item(tenant.as_str(), item),
            None => Err(StoreError::Decode("the ledger update returned nothing".into())),
        }
    }

    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, StoreError> {
        // The headroom a claim checks is the limit less what is held; it is
        // set against the held total read, and retried if that moved.
        for _ in 0..8 {
            let current = self.ledger(tenant).await?;
            let held = current.totals.held;
            let mut update = self
                .ledger_item_update(tenant)
                .expression_attribute_values(":held", AttributeValue::N(held.to_string()))
                .condition_expression("attribute_not_exists(held_mc) AND :held = :zero OR held_mc = :held");
            update = match limit {
                Some(l) => update
                    .update_expression(
                        "SET tenant_id = :tenant, due_pk = :ledger, due_at = :zero, spend_limit_mc = :limit, \
                         headroom_mc = :room",
                    )
                    .expression_attribute_values(":limit", AttributeValue::N(l.to_string()))
                    .expression_attribute_values(":room", AttributeValue::N((l - held).to_string())),
                None => update.update_expression(
                    "SET tenant_id = :tenant, due_pk = :ledger, due_at = :zero REMOVE spend_limit_mc",
                ),
            };
            match update.send().await {
                Ok(_) => {
                    return Ok(TenantLedger {
                        spend_limit: limit,
                        ..current
                    });
                }
                Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => continue,
                Err(e) => return Err(service_error(e)),
            }
        }
        Err(StoreError::Conflict(None))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;

    use super::*;

    fn cancelled_for(codes: &[&str], reserves: bool) -> StoreError {
        let e = TransactionCanceledException::builder()
            .set_cancellation_reasons(Some(
                codes
                    .iter()
                    .map(|c| CancellationReason::builder().code(*c).build())
                    .collect(),
            ))
            .build();
        cancelled(&e, reserves)
    }

    /// A conflict and a throttled item are contention, tried again; a
    /// failed condition is a refusal, and anything else a service failure.
    #[test]
    fn a_busy_table_is_contention_and_a_refusal_is_not() {
        for codes in [
            ["None", "TransactionConflict", "None"],
            ["None", "None", "ThrottlingError"],
        ] {
            assert!(
                matches!(cancelled_for(&codes, true), StoreError::Contention),
                "{codes:?}"
            );
        }
        assert!(matches!(
            cancelled_for(&["None", "None", "ConditionalCheckFailed"], true),
            StoreError::AccountFull
        ));
        assert!(matches!(
            cancelled_for(&["None", "ValidationError", "None"], false),
            StoreError::Service(_)
        ));
    }
}
