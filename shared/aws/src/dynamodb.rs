//! The operation table in DynamoDB: the [`OperationStore`] port as
//! conditional writes. A create is a put conditional on absence (or an
//! expired record); a change is an `UpdateItem` of the attributes that
//! changed, conditional on the version read, returning the current item when
//! the condition fails.
//!
//! A change that moves the operation's share of its tenant's credits is one
//! `TransactWriteItems` of the record's update and the tenant ledger item's
//! `ADD`s, so the counters cannot drift from the records. Ledger items
//! (`TENANT#<tenant>`) sit in the due-time index under the `LEDGER`
//! partition, which the sweep never reads, so operators can list them
//! without a scan; their counter updates touch no projected attribute and
//! cost the index nothing.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::{self, AccountCapacity, Millicredits, Shares, TenantLedger};
use genace_core::record::{CaseReason, OperationRecord};
use genace_core::webhook::WebhookConfig;
use genace_stages::ports::metrics::Metrics;
use genace_stages::ports::table::{
    Applied, CaseCount, CaseFilter, CasePage, Created, DueCursor, DueItem, DuePage, LedgerPage, OperationRecords,
    StoreError, TenantLedgers, WebhookSettings, case_age_key, case_age_key_opened, case_sort_key, case_tenant_prefix,
    count_cases, wait_partition, wait_sort_key,
};

mod endpoints;
mod listing;
mod position;

use position::{decode_cursor, encode_cursor};

type Item = HashMap<String, AttributeValue>;

#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Where phase changes are counted (off unless given one).
    metrics: Metrics,
    /// `GENACE_MAX_IN_FLIGHT`: a claim is admitted while the account's jobs
    /// in flight are fewer. None: no limit.
    account_limit: Option<u32>,
}

fn service_error<E, R>(e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    StoreError::Service(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
}

/// Partition of the sparse open-case index; cases are rare, so one suffices.
pub const CASE_PK: &str = "CASE";

fn to_item(rec: &OperationRecord) -> Result<Item, StoreError> {
    let mut item: Item = serde_dynamo::to_item(rec).map_err(|e| StoreError::Decode(e.to_string()))?;
    // Waiting for a slot puts the operation in its tenant's waiting order.
    if let Some(sort) = wait_sort_key(rec) {
        item.insert(
            "wait_pk".into(),
            AttributeValue::S(wait_partition(rec.tenant_id.as_str())),
        );
        item.insert("wait_sk".into(), AttributeValue::S(sort));
    }
    // Every record is in its tenant's list order and in the one across tenants.
    for (name, value) in listing::list_attributes(rec) {
        item.insert(name.into(), AttributeValue::S(value));
    }
    // An open case puts the operation in the case index, sorted by tenant and age.
    if let Some(case) = &rec.case {
        item.insert("case_pk".into(), AttributeValue::S(CASE_PK.into()));
        item.insert(
            "case_sk".into(),
            AttributeValue::S(case_sort_key(rec.tenant_id.as_str(), case.opened_at, &rec.operation_id)),
        );
        // And in the age index, every tenant's in the order they opened.
        item.insert(
            "case_age_sk".into(),
            AttributeValue::S(case_age_key(case.opened_at, &rec.operation_id)),
        );
        item.insert("case_reason".into(), AttributeValue::S(case.reason.as_str().into()));
    }
    Ok(item)
}

/// Attributes the store adds to an operation's item for its indexes; never
/// part of the record.
pub(crate) const COMPUTED_ATTRIBUTES: [&str; 9] = [
    "case_pk",
    "case_sk",
    "case_age_sk",
    "case_reason",
    "wait_pk",
    "wait_sk",
    "list_pk",
    "list_all_pk",
    "list_sk",
];

fn from_item(mut item: Item) -> Result<OperationRecord, StoreError> {
    for computed in COMPUTED_ATTRIBUTES {
        item.remove(computed);
    }
    serde_dynamo::from_item(item).map_err(|e| StoreError::Decode(e.to_string()))
}

/// The operations of a keys-only index page.
fn operation_ids(items: Vec<Item>) -> Result<Vec<OperationId>, StoreError> {
    items
        .iter()
        .filter_map(|item| item.get("pk")?.as_s().ok()?.strip_prefix("OP#").map(str::to_owned))
        .map(|id| OperationId::parse(&id).map_err(|e| StoreError::Decode(e.to_string())))
        .collect()
}

fn conflict(item: Option<&Item>) -> StoreError {
    match item.cloned().map(from_item) {
        Some(Ok(rec)) => StoreError::Conflict(Some(Box::new(rec))),
        Some(Err(e)) => e,
        None => StoreError::Conflict(None),
    }
}

/// An `UpdateItem` that turns `prev` into `next`: SET what changed or
/// appeared, REMOVE what disappeared. Attribute names go through
/// placeholders, so reserved words need no special care.
#[derive(Debug, Default, PartialEq)]
pub struct UpdatePlan {
    pub expression: String,
    pub names: HashMap<String, String>,
    pub values: Item,
}

/// The condition every record write carries: the version it was decided on.
const VERSION_GUARD: &str = "#guard_version = :guard_version";

impl UpdatePlan {
    /// The plan with the names and values of [`VERSION_GUARD`] for `version`
    /// added: what both the plain update and the transaction's update send.
    fn guarded_by(mut self, version: u64) -> Self {
        self.names.insert("#guard_version".to_owned(), "version".to_owned());
        self.values
            .insert(":guard_version".to_owned(), AttributeValue::N(version.to_string()));
        self
    }
}

pub fn plan_update(prev: &Item, next: &Item) -> Option<UpdatePlan> {
    let mut plan = UpdatePlan::default();
    let mut sets = Vec::new();
    let mut removes = Vec::new();
    let mut keys: Vec<&String> = next.keys().chain(prev.keys()).collect();
    keys.sort();
    keys.dedup();
    for (i, key) in keys.into_iter().enumerate() {
        if key == "pk" {
            continue;
        }
        let name = format!("#a{i}");
        match (prev.get(key), next.get(key)) {
            (old, Some(new)) if old != Some(new) => {
                let value = format!(":a{i}");
                sets.push(format!("{name} = {value}"));
                plan.values.insert(value, new.clone());
            }
            (Some(_), None) => removes.push(name.clone()),
            _ => continue,
        }
        plan.names.insert(name, key.clone());
    }
    if sets.is_empty() && removes.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !sets.is_empty() {
        parts.push(format!("SET {}", sets.join(", ")));
    }
    if !removes.is_empty() {
        parts.push(format!("REMOVE {}", removes.join(", ")));
    }
    plan.expression = parts.join(" ");
    Some(plan)
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            metrics: Metrics::off(),
            account_limit: None,
        }
    }

    /// The same store, admitting dispatch claims while the Genace account
    /// has fewer than `max_in_flight` jobs of ours in flight.
    #[must_use]
    pub fn with_account_limit(self, max_in_flight: Option<u32>) -> Self {
        Self {
            account_limit: max_in_flight,
            ..self
        }
    }

    /// The same store, counting phase changes into `metrics`.
    #[must_use]
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        Self { metrics, ..self }
    }

    fn key(id: &OperationId) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(OperationRecord::pk_for(id)))])
    }

    /// Every item of `keys` that exists, in any order, by `BatchGetItem`
    /// (100 keys a request); unprocessed keys are asked again a few times,
    /// then it is a failure.
    pub(crate) async fn batch_get(&self, keys: Vec<Item>, consistent: bool) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(100) {
            let mut wanted = chunk.to_vec();
            for _ in 0..5 {
                if wanted.is_empty() {
                    break;
                }
                let batch = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut wanted)))
                    .consistent_read(consistent)
                    .build()
                    .map_err(|e| StoreError::Service(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, batch)
                    .send()
                    .await
                    .map_err(service_error)?;
                found.extend(
                    out.responses
                        .unwrap_or_default()
                        .remove(&self.table)
                        .unwrap_or_default(),
                );
                wanted = out
                    .unprocessed_keys
                    .unwrap_or_default()
                    .remove(&self.table)
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
            if !wanted.is_empty() {
                return Err(StoreError::Service("batch read left keys unprocessed".into()));
            }
        }
        Ok(found)
    }

    pub(crate) fn webhook_key(tenant: &str) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(format!("{WEBHOOK_PREFIX}{tenant}")))])
    }

    fn ledger_key(tenant: &str) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(format!("{LEDGER_PREFIX}{tenant}")))])
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
            .expression_attribute_values(":ledger", AttributeValue::S(LEDGER_PARTITION.to_owned()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
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
        let count = |name| number(item, name).map(Option::unwrap_or_default);
        let limit = |name| number(item, name).map(|v| v.and_then(|m| u32::try_from(m).ok()));
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
    async fn apply_with_ledger(
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
        let mut transaction = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(record).build())
            .transact_items(TransactWriteItem::builder().update(counters).build());
        if delta.in_flight != 0 || delta.waiting != 0 || delta.queued != 0 {
            let ended = ledger::ends_a_job(prev, next);
            let account = self.account_update(delta, reserves && delta.in_flight > 0, ended)?;
            transaction = transaction.transact_items(TransactWriteItem::builder().update(account).build());
        }
        match transaction.send().await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                TransactWriteItemsError::TransactionCanceledException(e) => Err(cancelled(&e, reserves)),
                other => Err(StoreError::Service(
                    aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
                )),
            },
            Err(e) => Err(service_error(e)),
        }
    }

    /// The tenant's counters move by `delta`; a claim (`reserves`) only
    /// while the spend limit leaves room for its reservation.
    fn ledger_update(&self, prev: &OperationRecord, delta: Shares, reserves: bool) -> Result<Update, StoreError> {
        let n = |v: Millicredits| AttributeValue::N(v.to_string());
        let mut counters = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::ledger_key(prev.tenant_id.as_str())))
            .update_expression(
                "ADD held_mc :held, spent_mc :spent, pending_refund_mc :pending, settled_mc :settled, \
                 in_flight :in_flight, waiting :waiting, queued :queued, headroom_mc :room SET tenant_id = :tenant, due_pk = :ledger, due_at = :zero",
            )
            .expression_attribute_values(":held", n(delta.held))
            .expression_attribute_values(":spent", n(delta.spent))
            .expression_attribute_values(":pending", n(delta.pending_refund))
            .expression_attribute_values(":settled", n(delta.settled))
            .expression_attribute_values(":in_flight", n(delta.in_flight))
            .expression_attribute_values(":waiting", n(delta.waiting))
            .expression_attribute_values(":queued", n(delta.queued))
            .expression_attribute_values(":room", n(-delta.held))
            .expression_attribute_values(":tenant", AttributeValue::S(prev.tenant_id.as_str().to_owned()))
            .expression_attribute_values(":ledger", AttributeValue::S(LEDGER_PARTITION.to_owned()))
            .expression_attribute_values(":zero", n(0));
        if reserves {
            // Room for the reservation under the spend limit, and a slot
            // under the tenant's own limit of jobs in flight.
            counters = counters
                .condition_expression(
                    "(attribute_not_exists(spend_limit_mc) OR headroom_mc >= :need) AND \
                     (attribute_not_exists(max_in_flight) OR attribute_not_exists(in_flight) \
                      OR in_flight < max_in_flight)",
                )
                .expression_attribute_values(":need", n(delta.held))
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
    } else {
        StoreError::Service(format!(
            "transaction cancelled: {:?}",
            reasons.iter().map(|r| r.code()).collect::<Vec<_>>()
        ))
    }
}

/// Key prefix of the tenant ledger items.
pub const LEDGER_PREFIX: &str = "TENANT#";
/// Key prefix of the tenant webhook items.
pub const WEBHOOK_PREFIX: &str = "WEBHOOK#";
/// The key of the item that counts the Genace account's jobs in flight.
pub const ACCOUNT_ITEM: &str = "ACCOUNT#genace";
/// The due-index partition that lists ledger items.
pub const LEDGER_PARTITION: &str = "LEDGER";

fn number(item: &Item, name: &str) -> Result<Option<Millicredits>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse::<Millicredits>()
            .map(Some)
            .map_err(|_| StoreError::Decode(format!("{name} is not an integer: {v}"))),
        Some(other) => Err(StoreError::Decode(format!("{name} is not a number: {other:?}"))),
    }
}

fn ledger_from_item(tenant: &str, item: &Item) -> Result<TenantLedger, StoreError> {
    let get = |name| number(item, name).map(Option::unwrap_or_default);
    Ok(TenantLedger {
        tenant_id: tenant.to_owned(),
        totals: Shares {
            held: get("held_mc")?,
            spent: get("spent_mc")?,
            pending_refund: get("pending_refund_mc")?,
            settled: get("settled_mc")?,
            in_flight: get("in_flight")?,
            waiting: get("waiting")?,
            queued: get("queued")?,
        },
        spend_limit: number(item, "spend_limit_mc")?,
        max_in_flight: number(item, "max_in_flight")?.and_then(|m| u32::try_from(m).ok()),
    })
}

impl OperationRecords for DynamoStore {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(rec)?))
            // An item whose TTL has passed counts as absent, even before DynamoDB deletes it.
            .condition_expression("attribute_not_exists(pk) OR expires_at <= :now")
            .expression_attribute_values(":now", AttributeValue::N(now.timestamp().to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => {
                self.metrics.count("PhaseEntered", &[("Phase", rec.phase.as_str())]);
                Ok(Created::New)
            }
            Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                PutItemError::ConditionalCheckFailedException(e) => match conflict(e.item()) {
                    // A retried put whose first attempt landed finds exactly
                    // our record (its creation time is ours): it is new.
                    StoreError::Conflict(Some(existing)) if *existing == *rec => Ok(Created::New),
                    StoreError::Conflict(Some(existing)) => Ok(Created::Existing(existing)),
                    other => Err(other),
                },
                other => Err(StoreError::Service(
                    aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
                )),
            },
            Err(e) => Err(service_error(e)),
        }
    }

    async fn get(&self, id: &OperationId, now: DateTime<Utc>) -> Result<Option<OperationRecord>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        match out.item {
            None => Ok(None),
            Some(item) => {
                let rec = from_item(item)?;
                if rec.is_expired(now) {
                    return Ok(None);
                }
                genace_core::machine::debug_check(&rec);
                Ok(Some(rec))
            }
        }
    }

    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        let Some(plan) = plan_update(&to_item(prev)?, &to_item(next)?) else {
            return Ok(Applied::Unchanged);
        };
        let delta = ledger::delta(prev, next).map_err(|e| StoreError::Decode(e.to_string()))?;
        if !delta.is_zero() {
            self.apply_with_ledger(prev, next, plan, delta).await?;
            phase_metrics(&self.metrics, prev, next);
            return Ok(Applied::Written);
        }
        let plan = plan.guarded_by(prev.version);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&prev.operation_id)))
            .update_expression(plan.expression)
            .set_expression_attribute_names(Some(plan.names))
            .set_expression_attribute_values(Some(plan.values))
            .condition_expression(VERSION_GUARD)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => {
                phase_metrics(&self.metrics, prev, next);
                Ok(Applied::Written)
            }
            Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                UpdateItemError::ConditionalCheckFailedException(e) => Err(conflict(e.item())),
                other => Err(StoreError::Service(
                    aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
                )),
            },
            Err(e) => Err(service_error(e)),
        }
    }

    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> Result<DuePage, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::schema::DUE_INDEX)
            .key_condition_expression("due_pk = :shard AND due_at <= :before")
            .expression_attribute_values(":shard", AttributeValue::S(format!("DUE#{shard}")))
            .expression_attribute_values(":before", AttributeValue::N(before_ms.to_string()))
            .limit(limit)
            .set_exclusive_start_key(cursor.map(|c| decode_cursor(&c.0)).transpose()?)
            .send()
            .await
            .map_err(service_error)?;
        let items = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|i| serde_dynamo::from_item(i).map_err(|e| StoreError::Decode(e.to_string())))
            .collect::<Result<Vec<DueItem>, _>>()?;
        Ok(DuePage {
            items,
            next: out
                .last_evaluated_key
                .filter(|k| !k.is_empty())
                .as_ref()
                .and_then(encode_cursor)
                .map(DueCursor),
        })
    }

    async fn holders_of_remote_job(&self, job_id: &str) -> Result<Vec<OperationId>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::schema::JOB_INDEX)
            .key_condition_expression("remote_job_id = :job")
            .expression_attribute_values(":job", AttributeValue::S(job_id.to_owned()))
            .limit(10)
            .send()
            .await
            .map_err(service_error)?;
        operation_ids(out.items.unwrap_or_default())
    }

    async fn waiting(&self, tenant: &TenantId, limit: i32) -> Result<Vec<OperationId>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::schema::WAIT_INDEX)
            .key_condition_expression("wait_pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(wait_partition(tenant.as_str())))
            .limit(limit.max(1))
            .send()
            .await
            .map_err(service_error)?;
        operation_ids(out.items.unwrap_or_default())
    }

    async fn list(
        &self,
        tenant: Option<&TenantId>,
        filter: &genace_stages::ports::list::ListFilter,
        limit: i32,
        after: Option<&genace_stages::ports::list::ListPosition>,
        now: DateTime<Utc>,
    ) -> Result<genace_stages::ports::list::ListPage, StoreError> {
        self.list_page(tenant, filter, limit, after, now).await
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        // The case index holds whole records: the page is its items.
        let index = CaseIndex::Tenant(tenant.map(|t| case_tenant_prefix(t.as_str())));
        let (items, next) = self.case_keys(&index, filter, limit.max(1) as usize, cursor).await?;
        let records = items.into_iter().map(from_item).collect::<Result<Vec<_>, _>>()?;
        Ok(CasePage { records, next })
    }

    async fn open_cases_by_age(
        &self,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        let (keys, next) = self
            .case_keys(&CaseIndex::Age, filter, limit.max(1) as usize, cursor)
            .await?;
        // The age index holds keys and reasons; the page's records in one
        // batch, in the index's order. A case closed since the index was
        // read is left out.
        let wanted: Vec<Item> = keys
            .iter()
            .filter_map(|k| Some(HashMap::from([("pk".to_owned(), k.get("pk")?.clone())])))
            .collect();
        let mut found: HashMap<String, OperationRecord> = HashMap::new();
        for item in self.batch_get(wanted, false).await? {
            let rec = from_item(item)?;
            found.insert(rec.pk.clone(), rec);
        }
        let records = keys
            .iter()
            .filter_map(|k| found.remove(k.get("pk")?.as_s().ok()?))
            .filter(|r| r.case.is_some())
            .collect();
        Ok(CasePage { records, next })
    }

    async fn case_counts(&self, tenant: Option<&TenantId>) -> Result<Vec<CaseCount>, StoreError> {
        let mut seen = Vec::new();
        let mut start: Option<Item> = None;
        for page in 1..=CASE_COUNT_PAGES {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .expression_attribute_values(":pk", AttributeValue::S(CASE_PK.into()))
                .projection_expression("case_reason, case_age_sk")
                .set_exclusive_start_key(start.take());
            query = match tenant {
                // The tenant's part of the case index.
                Some(t) => query
                    .index_name(crate::schema::CASE_INDEX)
                    .key_condition_expression("case_pk = :pk AND begins_with(case_sk, :tenant)")
                    .expression_attribute_values(":tenant", AttributeValue::S(case_tenant_prefix(t.as_str()))),
                None => query
                    .index_name(crate::schema::CASE_AGE_INDEX)
                    .key_condition_expression("case_pk = :pk"),
            };
            let out = query.send().await.map_err(service_error)?;
            for item in out.items() {
                let reason = item
                    .get("case_reason")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|r| CaseReason::parse(r));
                let opened = item
                    .get("case_age_sk")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|k| case_age_key_opened(k));
                if let (Some(reason), Some(opened)) = (reason, opened) {
                    seen.push((reason, opened));
                }
            }
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(_) if page == CASE_COUNT_PAGES => {
                    tracing::warn!(
                        pages = page,
                        counted = seen.len(),
                        "case counts stop at their page limit"
                    );
                }
                Some(k) => start = Some(k),
                None => break,
            }
        }
        Ok(count_cases(seen))
    }
}

/// Index pages the case counts read at most: each page holds thousands of
/// the two small attributes read, so the limit is far past any backlog a
/// person can work through, and a runaway one costs a bounded read.
const CASE_COUNT_PAGES: usize = 200;

/// Index pages read for one page of cases that pass a filter, at most: a
/// full page costs a bounded read even when the cases that pass are few and
/// far between (a later page goes on from where this one stopped).
const CASE_INDEX_PAGES: usize = 8;

/// The two indexes of open cases.
enum CaseIndex {
    /// `case-index`: by tenant, then age; optionally one tenant's
    /// (its `case_sk` prefix).
    Tenant(Option<String>),
    /// `case-age-index`: every tenant's, by age.
    Age,
}

impl CaseIndex {
    fn name(&self) -> &'static str {
        match self {
            CaseIndex::Tenant(_) => crate::schema::CASE_INDEX,
            CaseIndex::Age => crate::schema::CASE_AGE_INDEX,
        }
    }

    fn sort_key(&self) -> &'static str {
        match self {
            CaseIndex::Tenant(_) => "case_sk",
            CaseIndex::Age => "case_age_sk",
        }
    }

    /// The start key in a cursor, if it has the shape of one of this
    /// index's keys (an operation's `pk`, the case partition, a sort key
    /// and nothing else); a forged or garbled one is [`StoreError::Cursor`],
    /// never a request DynamoDB refuses.
    fn start_key(&self, cursor: &str) -> Result<Item, StoreError> {
        let key = decode_cursor(cursor)?;
        let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).map(String::as_str);
        let shaped = key.len() == 3
            && text("pk").is_some_and(|pk| pk.strip_prefix("OP#").is_some_and(|id| OperationId::parse(id).is_ok()))
            && text("case_pk") == Some(CASE_PK)
            && text(self.sort_key()).is_some_and(|sk| !sk.is_empty());
        if shaped { Ok(key) } else { Err(StoreError::Cursor) }
    }

    /// The key condition for `filter`: the cases opened before its time
    /// are a key range on both indexes.
    fn condition(
        &self,
        filter: CaseFilter,
        mut query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        let sk = self.sort_key();
        // Each index's own spelling of a time (case_sort_key, case_age_key).
        let before = |prefix: &str, t: DateTime<Utc>| match self {
            CaseIndex::Tenant(_) => format!("{prefix}{}", t.format("%Y-%m-%dT%H:%M:%S%.3fZ")),
            CaseIndex::Age => format!("{prefix}{}", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
        };
        query = query.expression_attribute_values(":pk", AttributeValue::S(CASE_PK.into()));
        match (self, filter.opened_before) {
            (CaseIndex::Tenant(Some(prefix)), Some(t)) => query
                .key_condition_expression(format!("case_pk = :pk AND {sk} BETWEEN :low AND :high"))
                .expression_attribute_values(":low", AttributeValue::S(prefix.clone()))
                .expression_attribute_values(":high", AttributeValue::S(before(prefix, t))),
            (CaseIndex::Tenant(Some(prefix)), None) => query
                .key_condition_expression(format!("case_pk = :pk AND begins_with({sk}, :low)"))
                .expression_attribute_values(":low", AttributeValue::S(prefix.clone())),
            (CaseIndex::Age, Some(t)) => query
                .key_condition_expression(format!("case_pk = :pk AND {sk} < :high"))
                .expression_attribute_values(":high", AttributeValue::S(before("", t))),
            // Across tenants on the tenant index, the time is a filter.
            (CaseIndex::Tenant(None), Some(t)) => query
                .key_condition_expression("case_pk = :pk")
                .filter_expression("#case.opened_at < :high")
                .expression_attribute_names("#case", "case")
                .expression_attribute_values(":high", AttributeValue::S(before("", t))),
            (_, None) => query.key_condition_expression("case_pk = :pk"),
        }
    }
}

impl DynamoStore {
    /// The items of one page of cases that pass `filter`, in the index's
    /// order, and the cursor after them: `limit` items unless the index
    /// ends (or [`CASE_INDEX_PAGES`] pages were read).
    async fn case_keys(
        &self,
        index: &CaseIndex,
        filter: CaseFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Item>, Option<String>), StoreError> {
        let mut start = cursor.map(|c| index.start_key(c)).transpose()?;
        let mut items: Vec<Item> = Vec::new();
        let filtered =
            filter.reason.is_some() || matches!((index, filter.opened_before), (CaseIndex::Tenant(None), Some(_)));
        for page in 1..=CASE_INDEX_PAGES {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index.name())
                .set_exclusive_start_key(start.take());
            query = index.condition(filter, query);
            if let Some(r) = filter.reason {
                let with_reason = "case_reason = :reason";
                query = match query.get_filter_expression().clone() {
                    Some(f) => query.filter_expression(format!("{f} AND {with_reason}")),
                    None => query.filter_expression(with_reason),
                }
                .expression_attribute_values(":reason", AttributeValue::S(r.as_str().into()));
            }
            if !filtered {
                query = query.limit(limit as i32);
            }
            let out = query.send().await.map_err(service_error)?;
            let more = out.last_evaluated_key.clone().filter(|k| !k.is_empty());
            items.extend(out.items.unwrap_or_default().into_iter().take(limit - items.len()));
            if items.len() == limit {
                // A full page: the next starts after its last case.
                let keys = ["pk", "case_pk", index.sort_key()];
                let last = items.last().map(|i| {
                    i.iter()
                        .filter(|(name, _)| keys.contains(&name.as_str()))
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .collect::<Item>()
                });
                return Ok((items, last.as_ref().and_then(encode_cursor)));
            }
            match more {
                None => return Ok((items, None)),
                Some(k) if page == CASE_INDEX_PAGES => return Ok((items, encode_cursor(&k))),
                Some(k) => start = Some(k),
            }
        }
        Ok((items, None))
    }
}

impl TenantLedgers for DynamoStore {
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
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::schema::DUE_INDEX)
            .key_condition_expression("due_pk = :ledger")
            .expression_attribute_values(":ledger", AttributeValue::S(LEDGER_PARTITION.to_owned()))
            .limit(limit.max(1))
            .set_exclusive_start_key(cursor.map(decode_cursor).transpose()?)
            .send()
            .await
            .map_err(service_error)?;
        let mut ledgers = Vec::new();
        for key in out.items() {
            let Some(AttributeValue::S(pk)) = key.get("pk") else {
                continue;
            };
            let Some(tenant) = pk.strip_prefix(LEDGER_PREFIX) else {
                continue;
            };
            let tenant = TenantId::parse(tenant).map_err(|e| StoreError::Decode(e.to_string()))?;
            ledgers.push(self.ledger(&tenant).await?);
        }
        ledgers.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
        Ok(LedgerPage {
            ledgers,
            next: out.last_evaluated_key().and_then(encode_cursor),
        })
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

impl WebhookSettings for DynamoStore {
    async fn webhook(&self, tenant: &TenantId) -> Result<Option<WebhookConfig>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::webhook_key(tenant.as_str())))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        out.item
            .map(|mut item| {
                item.remove("pk");
                serde_dynamo::from_item(item).map_err(|e| StoreError::Decode(e.to_string()))
            })
            .transpose()
    }

    async fn set_webhook(&self, tenant: &TenantId, config: Option<&WebhookConfig>) -> Result<(), StoreError> {
        match config {
            Some(c) => {
                let mut item: Item = serde_dynamo::to_item(c).map_err(|e| StoreError::Decode(e.to_string()))?;
                item.extend(Self::webhook_key(tenant.as_str()));
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map_err(service_error)?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(Self::webhook_key(tenant.as_str())))
                    .send()
                    .await
                    .map_err(service_error)?;
            }
        }
        Ok(())
    }
}

/// Counts entries into phases and delivery outcomes, for the dashboard.
fn phase_metrics(metrics: &Metrics, prev: &OperationRecord, next: &OperationRecord) {
    use genace_core::record::DeliveryState;
    if prev.phase != next.phase {
        metrics.count("PhaseEntered", &[("Phase", next.phase.as_str())]);
    }
    if prev.delivery_state != next.delivery_state {
        let state = match next.delivery_state {
            DeliveryState::Delivered => "delivered",
            DeliveryState::DeliveryFailed => "delivery_failed",
            DeliveryState::Collecting => "collecting",
            DeliveryState::NotCollected => "not_collected",
        };
        metrics.count("PhaseEntered", &[("Phase", state)]);
    }
    // Genace reported credits the ledger could not believe; the evidence
    // is on the record, the count is for an alarm.
    if prev.held_credits_refused.is_none() && next.held_credits_refused.is_some() {
        metrics.count("HeldCreditsRefused", &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    #[test]
    fn plan_sets_changes_and_removes_disappearances() {
        let prev: Item = [
            ("pk", s("OP#1")),
            ("phase", s("prepared")),
            ("due_at", s("1")),
            ("same", s("x")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let next: Item = [
            ("pk", s("OP#1")),
            ("phase", s("submitting")),
            ("claim", s("c")),
            ("same", s("x")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let plan = plan_update(&prev, &next).unwrap();
        let named: HashMap<&str, &str> = plan.names.iter().map(|(k, v)| (v.as_str(), k.as_str())).collect();
        assert!(!named.contains_key("pk") && !named.contains_key("same"));
        assert!(plan.expression.contains(&format!("{} = ", named["phase"])));
        assert!(plan.expression.contains(&format!("{} = ", named["claim"])));
        assert!(plan.expression.ends_with(&format!("REMOVE {}", named["due_at"])));
        assert_eq!(plan.values.len(), 2);
        assert_eq!(plan_update(&prev, &prev), None);
    }
}
