//! Tenant ledgers and the account item: the counters every slot-moving
//! write moves in the same transaction as the record, and the operator's
//! limits.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use genace_core::capacity::AccountCapacity;
use genace_core::domain::TenantId;
use genace_core::ledger::{self, Millicredits, Shares, TenantLedger};
use genace_core::record::OperationRecord;
use genace_core::shard;
use genace_stages::ports::table::{LedgerPage, PlaceRule, SetMove, SetRule, StoreError, TenantLedgers};

use crate::schema::{
    LEDGER_LIST_SHARDS, WAITING_SET_SHARDS, ledger_list_partition, parked_set_key, tenant_shard, waiting_set_key,
};

use super::DynamoStore;
use super::item::{Item, service_error};
use super::ledger_reads::ledger_from_item;
use super::transact::Refusals;
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

    /// The record's update and the tenant's counters, in one transaction.
    /// A tenant that begins to wait keeps its place in its set only while
    /// it still waits: a place left by its last wait (its entry not yet
    /// dropped by a read) fails the first try, and the second places it
    /// at the back.
    pub(super) async fn apply_with_ledger(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
        plan: UpdatePlan,
        delta: Shares,
    ) -> Result<(), StoreError> {
        let plan = plan.guarded_by(prev.version);
        let moves = SetMove::of(&delta);
        let first = self.ledger_transaction(prev, next, &plan, delta, moves).await;
        match first {
            Err(StoreError::Conflict(None)) if moves.place == PlaceRule::NowIfNone => {
                let anew = SetMove {
                    place: PlaceRule::Now,
                    ..moves
                };
                self.ledger_transaction(prev, next, &plan, delta, anew).await
            }
            done => done,
        }
    }

    async fn ledger_transaction(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
        plan: &UpdatePlan,
        delta: Shares,
        moves: SetMove,
    ) -> Result<(), StoreError> {
        let record = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key(&prev.operation_id)))
            .update_expression(plan.expression.clone())
            .set_expression_attribute_names(Some(plan.names.clone()))
            .set_expression_attribute_values(Some(plan.values.clone()))
            .condition_expression(VERSION_GUARD)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Service(e.to_string()))?;
        let reserves = ledger::reserves(prev, next);
        let counters = self.ledger_update(prev, delta, moves, reserves)?;
        let mut items = vec![
            TransactWriteItem::builder().update(record).build(),
            TransactWriteItem::builder().update(counters).build(),
        ];
        // The account's shards it moves; the one a claim takes a slot on
        // may refuse it.
        let mut admits = None;
        for m in shard::account_moves(prev, next).map_err(|e| StoreError::Decode(e.to_string()))? {
            if m.admits {
                admits = Some(items.len());
            }
            items.push(TransactWriteItem::builder().update(self.account_update(&m)?).build());
        }
        self.transact(
            items,
            Refusals {
                reserves,
                admits,
                parts: false,
                places: moves.place == PlaceRule::NowIfNone,
            },
        )
        .await
    }

    /// The tenant's counters move by `delta`; a claim (`reserves`) only
    /// while the spend limit leaves room for its reservation.
    fn ledger_update(
        &self,
        prev: &OperationRecord,
        delta: Shares,
        moves: SetMove,
        reserves: bool,
    ) -> Result<Update, StoreError> {
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mc = |v: Millicredits| n(v.get());
        let mut counters = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::ledger_key(prev.tenant_id.as_str())))
            .update_expression(format!(
                "ADD held_mc :held, spent_mc :spent, pending_refund_mc :pending, settled_mc :settled, \
                 in_flight :in_flight, waiting :waiting, queued :queued, headroom_mc :room SET tenant_id = :tenant, \
                 due_pk = :ledger, due_at = :zero{set}{place}",
                // The tenant's move between the waiting and parked sets
                // (`SetMove::of`); one that drained is dropped by the next
                // read of its set.
                set = match moves.set {
                    SetRule::Keep => "",
                    SetRule::Waiting => ", wait_pk = :set",
                    SetRule::WaitingIfNone => ", wait_pk = if_not_exists(wait_pk, :set)",
                    SetRule::ParkedIfNone => ", wait_pk = if_not_exists(wait_pk, :parked)",
                },
                place = match moves.place {
                    PlaceRule::Keep => "",
                    PlaceRule::NowIfNone => ", wait_sk = if_not_exists(wait_sk, :joined)",
                    PlaceRule::Now => ", wait_sk = :joined",
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
        let tenant = prev.tenant_id.as_str();
        if matches!(moves.set, SetRule::Waiting | SetRule::WaitingIfNone) {
            counters = counters.expression_attribute_values(
                ":set",
                AttributeValue::S(waiting_set_key(tenant_shard(tenant, WAITING_SET_SHARDS))),
            );
        }
        if moves.set == SetRule::ParkedIfNone {
            counters = counters.expression_attribute_values(
                ":parked",
                AttributeValue::S(parked_set_key(tenant_shard(tenant, WAITING_SET_SHARDS))),
            );
        }
        if moves.place != PlaceRule::Keep {
            let joined = format!("{:015}#{tenant}", chrono::Utc::now().timestamp_millis().max(0));
            counters = counters.expression_attribute_values(":joined", AttributeValue::S(joined));
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
        } else if moves.place == PlaceRule::NowIfNone {
            // A place kept only while the tenant waits (see
            // `apply_with_ledger`).
            counters = counters.condition_expression("attribute_not_exists(wait_sk) OR waiting > :zero");
        }
        counters.build().map_err(|e| StoreError::Service(e.to_string()))
    }
}

impl TenantLedgers for DynamoStore {
    async fn send_to_back(&self, tenants: &[String]) -> Result<(), StoreError> {
        self.send_to_back_of_waiting_set(tenants).await
    }

    async fn park(&self, as_read: &[TenantLedger]) -> Result<usize, StoreError> {
        self.park_tenants(as_read).await
    }

    async fn parked_ledgers(&self, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        self.read_set(parked_set_key, limit).await
    }

    async fn unpark(&self, tenant: &str) -> Result<bool, StoreError> {
        self.unpark_tenant(tenant).await
    }

    async fn rejoin_waiting_set(&self, pages: usize) -> Result<usize, StoreError> {
        self.rejoin_stranded_waiters(pages).await
    }

    async fn account(&self) -> Result<AccountCapacity, StoreError> {
        self.read_account().await
    }

    async fn account_shards(&self) -> Result<Vec<AccountCapacity>, StoreError> {
        self.read_account_shards().await
    }

    async fn set_account_limit(&self, limit: Option<u32>) -> Result<AccountCapacity, StoreError> {
        self.write_account_limit(limit).await
    }

    async fn learn_account_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, StoreError> {
        self.write_learned_limit(seen, learned, raise_every, at).await
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
        self.read_set(waiting_set_key, limit).await
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
        let out = self
            .plain_write(|| async { update.clone().send().await.map_err(service_error) })
            .await?;
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
            let sent = self
                .plain_write(|| async {
                    match update.clone().send().await {
                        Ok(_) => Ok(true),
                        Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => {
                            Ok(false)
                        }
                        Err(e) => Err(service_error(e)),
                    }
                })
                .await?;
            if sent {
                return Ok(TenantLedger {
                    spend_limit: limit,
                    ..current
                });
            }
        }
        Err(StoreError::Conflict(None))
    }
}
