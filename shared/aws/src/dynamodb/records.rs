//! The operation records: create, read, the version-guarded change, and
//! the index reads of the sweep, the wake-up and the recovery channel.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::{self};
use genace_core::record::{CaseReason, OperationRecord};
use genace_stages::ports::metrics::Metrics;
use genace_stages::ports::table::{
    Applied, CaseCount, CaseFilter, CasePage, Created, DueCursor, DueItem, DuePage, OperationRecords, StoreError,
    case_age_key_opened, case_tenant_prefix, count_cases, wait_partition,
};

use crate::schema::CASE_PK;

use super::DynamoStore;
use super::cases::{CASE_COUNT_PAGES, CaseIndex};
use super::item::{Item, conflict, from_item, operation_ids, refused_by, service_error, to_item};
use super::position::{decode_cursor, encode_cursor};
use super::update::{VERSION_GUARD, plan_update};

impl OperationRecords for DynamoStore {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(rec)?))
            // An item whose TTL has passed counts as absent, even before DynamoDB deletes it.
            .condition_expression("attribute_not_exists(pk) OR expires_at <= :now")
            .expression_attribute_values(":now", AttributeValue::N(now.timestamp().to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let created = self
            .plain_write(|| async {
                match put.clone().send().await {
                    Ok(_) => Ok(Created::New),
                    Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                        PutItemError::ConditionalCheckFailedException(e) => match conflict(e.item()) {
                            // A retried put whose first attempt landed finds exactly
                            // our record (its creation time is ours): it is new.
                            StoreError::Conflict(Some(existing)) if *existing == *rec => Ok(Created::New),
                            StoreError::Conflict(Some(existing)) => Ok(Created::Existing(existing)),
                            other => Err(other),
                        },
                        other => Err(refused_by(&other)),
                    },
                    Err(e) => Err(service_error(e)),
                }
            })
            .await?;
        if created == Created::New {
            self.metrics.count("PhaseEntered", &[("Phase", rec.phase.as_str())]);
        }
        Ok(created)
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
        let counted = genace_core::shard::moves_counters(prev, next).map_err(|e| StoreError::Decode(e.to_string()))?;
        if counted {
            self.apply_with_ledger(prev, next, plan, delta).await?;
            phase_metrics(&self.metrics, prev, next);
            return Ok(Applied::Written);
        }
        let plan = plan.guarded_by(prev.version);
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&prev.operation_id)))
            .update_expression(plan.expression)
            .set_expression_attribute_names(Some(plan.names))
            .set_expression_attribute_values(Some(plan.values))
            .condition_expression(VERSION_GUARD)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        self.plain_write(|| async {
            match update.clone().send().await {
                Ok(_) => Ok(()),
                Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                    UpdateItemError::ConditionalCheckFailedException(e) => Err(conflict(e.item())),
                    other => Err(refused_by(&other)),
                },
                Err(e) => Err(service_error(e)),
            }
        })
        .await?;
        phase_metrics(&self.metrics, prev, next);
        Ok(Applied::Written)
    }

    async fn sweep_start(&self) -> Result<Option<u32>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(crate::schema::SWEEP_START_ITEM.into()))
            .send()
            .await
            .map_err(service_error)?;
        Ok(out
            .item
            .as_ref()
            .and_then(|item| item.get("start_shard"))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok()))
    }

    async fn set_sweep_start(&self, shard: u32) -> Result<(), StoreError> {
        // Only the sweep writes it, one run at a time (its reserved
        // concurrency is 1): a plain write, an update as its role allows.
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(crate::schema::SWEEP_START_ITEM.into()))
            .update_expression("SET start_shard = :shard")
            .expression_attribute_values(":shard", AttributeValue::N(shard.to_string()))
            .send()
            .await
            .map_err(service_error)?;
        Ok(())
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
            .expression_attribute_values(":shard", AttributeValue::S(crate::schema::due_partition(shard)))
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
