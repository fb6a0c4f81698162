//! Reading ledgers without reading them all: the waiting set (the tenants
//! with operations waiting, in the sparse `wait-index` under
//! `WAITING#<shard>`, sorted by when each joined) for wake-ups, and the
//! sharded listing of every ledger (`due-index` under `LEDGER#<shard>`) for
//! operators' reports. Ledgers are fetched by `BatchGetItem`, up to 100 a
//! request, never one `GetItem` each.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use genace_core::domain::TenantId;
use genace_core::ledger::{Millicredits, Shares, TenantLedger};
use genace_stages::ports::table::{LedgerPage, StoreError, WAITING_READ_MAX};

use crate::schema::{
    DUE_INDEX, LEDGER_LIST_SHARDS, LEDGER_PREFIX, LEGACY_LEDGER_PARTITION, WAIT_INDEX, WAITING_SET_SHARDS, ledger_key,
    ledger_list_partition, parked_set_key, waiting_set_key,
};

use super::DynamoStore;
use super::item::{Item, service_error};
use super::position::{decode_cursor, encode_cursor};

/// Reads of the waiting set per call, when the entries read had drained.
const WAITING_SET_PASSES: usize = 4;

/// The number attribute `name`, if the item has it, as a `T`: an amount
/// of millicredits or a count.
pub(super) fn number<T: std::str::FromStr>(item: &Item, name: &str) -> Result<Option<T>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse::<T>()
            .map(Some)
            .map_err(|_| StoreError::Decode(format!("{name} is not an integer: {v}"))),
        Some(other) => Err(StoreError::Decode(format!("{name} is not a number: {other:?}"))),
    }
}

pub(super) fn ledger_from_item(tenant: &str, item: &Item) -> Result<TenantLedger, StoreError> {
    let credits = |name| number::<Millicredits>(item, name).map(Option::unwrap_or_default);
    let count = |name| number::<i64>(item, name).map(Option::unwrap_or_default);
    Ok(TenantLedger {
        tenant_id: tenant.to_owned(),
        totals: Shares {
            held: credits("held_mc")?,
            spent: credits("spent_mc")?,
            pending_refund: credits("pending_refund_mc")?,
            settled: credits("settled_mc")?,
            in_flight: count("in_flight")?,
            waiting: count("waiting")?,
            queued: count("queued")?,
        },
        spend_limit: number(item, "spend_limit_mc")?,
        max_in_flight: number::<i64>(item, "max_in_flight")?.and_then(|m| u32::try_from(m).ok()),
    })
}

/// The tenant of a ledger item's key.
fn tenant_of(item: &Item) -> Option<&str> {
    match item.get("pk") {
        Some(AttributeValue::S(pk)) => pk.strip_prefix(LEDGER_PREFIX),
        _ => None,
    }
}

/// Where a ledger listing stands: the shard, and the key it stopped at.
fn split_cursor(cursor: Option<&str>) -> Result<(u32, Option<Item>), StoreError> {
    let Some(cursor) = cursor else {
        return Ok((0, None));
    };
    let (shard, inner) = cursor.split_once('.').ok_or(StoreError::Cursor)?;
    let shard: u32 = shard.parse().map_err(|_| StoreError::Cursor)?;
    if shard > LEDGER_LIST_SHARDS {
        return Err(StoreError::Cursor);
    }
    let inner = (!inner.is_empty()).then(|| decode_cursor(inner)).transpose()?;
    match inner {
        Some(key) if !is_listing_key(&key, shard) => Err(StoreError::Cursor),
        key => Ok((shard, key)),
    }
}

/// Whether `key` has the shape of a key the listing's partition `shard`
/// returns: a ledger's `pk` (of a valid tenant), that partition, a number,
/// and nothing else. Any other is a forged cursor: DynamoDB would refuse
/// it as a start key.
fn is_listing_key(key: &Item, shard: u32) -> bool {
    let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).map(String::as_str);
    key.len() == 3
        && tenant_of(key).is_some_and(|t| TenantId::parse(t).is_ok())
        && text("due_pk") == Some(list_partition(shard).as_str())
        && key
            .get("due_at")
            .and_then(|v| v.as_n().ok())
            .is_some_and(|n| n.parse::<i64>().is_ok())
}

/// The listing's partition `shard`; the last is the one from before shards.
fn list_partition(shard: u32) -> String {
    if shard == LEDGER_LIST_SHARDS {
        LEGACY_LEDGER_PARTITION.to_owned()
    } else {
        ledger_list_partition(shard)
    }
}

/// Whether a conditional update of a ledger was made: false when its
/// condition did not hold, which is no failure here.
fn conditionally_applied(
    out: Result<
        aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
        SdkError<
            aws_sdk_dynamodb::operation::update_item::UpdateItemError,
            aws_sdk_dynamodb::config::http::HttpResponse,
        >,
    >,
) -> Result<bool, StoreError> {
    match out {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => Ok(false),
        Err(e) => Err(service_error(e)),
    }
}

impl DynamoStore {
    /// Tenants' ledgers by `BatchGetItem` (consistent), in the order asked;
    /// a tenant never seen has zeros.
    pub(super) async fn batch_ledgers(&self, tenants: &[String]) -> Result<Vec<TenantLedger>, StoreError> {
        let keys = tenants
            .iter()
            .map(|t| HashMap::from([("pk".to_owned(), AttributeValue::S(ledger_key(t)))]))
            .collect();
        let mut found: HashMap<String, TenantLedger> = HashMap::new();
        for item in self.batch_get(keys, true).await? {
            if let Some(tenant) = tenant_of(&item) {
                found.insert(tenant.to_owned(), ledger_from_item(tenant, &item)?);
            }
        }
        Ok(tenants
            .iter()
            .map(|t| {
                found.remove(t).unwrap_or_else(|| TenantLedger {
                    tenant_id: t.clone(),
                    ..TenantLedger::default()
                })
            })
            .collect())
    }

    /// The first `limit` entries of a set's partition `set` (a shard of
    /// the waiting or the parked set): (the tenant's place, the tenant).
    async fn set_shard(&self, set: String, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(WAIT_INDEX)
            .key_condition_expression("wait_pk = :set")
            .expression_attribute_values(":set", AttributeValue::S(set))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(service_error)?;
        Ok(out
            .items()
            .iter()
            .filter_map(|item| {
                let joined = item.get("wait_sk")?.as_s().ok()?.clone();
                Some((joined, tenant_of(item)?.to_owned()))
            })
            .collect())
    }

    /// See `TenantLedgers::park`: one conditional update each, on the
    /// tenant's own ledger item, that holds only while the tenant is in the
    /// waiting set and its counters and limits are as read.
    pub(super) async fn park_tenants(&self, as_read: &[TenantLedger]) -> Result<usize, StoreError> {
        let parks = as_read.iter().map(|ledger| self.park_one(ledger));
        Ok(futures_util::future::try_join_all(parks)
            .await?
            .into_iter()
            .filter(|parked| *parked)
            .count())
    }

    async fn park_one(&self, read: &TenantLedger) -> Result<bool, StoreError> {
        let tenant = read.tenant_id.as_str();
        let shard = crate::schema::tenant_shard(tenant, WAITING_SET_SHARDS);
        let mut update = self
            .ledger_item(tenant)
            .update_expression("SET wait_pk = :parked")
            .expression_attribute_values(":parked", AttributeValue::S(parked_set_key(shard)))
            .expression_attribute_values(":set", AttributeValue::S(waiting_set_key(shard)))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()));
        let mut guards = vec!["wait_pk = :set".to_owned()];
        let t = &read.totals;
        let counters = [
            ("held_mc", t.held.get()),
            ("in_flight", t.in_flight),
            ("waiting", t.waiting),
            ("queued", t.queued),
        ];
        for (name, value) in counters {
            // A counter never written reads as 0.
            guards.push(format!(
                "({name} = :{name} OR (attribute_not_exists({name}) AND :{name} = :zero))"
            ));
            update = update.expression_attribute_values(format!(":{name}"), AttributeValue::N(value.to_string()));
        }
        let limits = [
            ("spend_limit_mc", read.spend_limit.map(Millicredits::get)),
            ("max_in_flight", read.max_in_flight.map(i64::from)),
        ];
        for (name, value) in limits {
            match value {
                Some(v) => {
                    guards.push(format!("{name} = :{name}"));
                    update = update.expression_attribute_values(format!(":{name}"), AttributeValue::N(v.to_string()));
                }
                None => guards.push(format!("attribute_not_exists({name})")),
            }
        }
        let update = update.condition_expression(guards.join(" AND "));
        self.plain_write(|| async { conditionally_applied(update.clone().send().await) })
            .await
    }

    /// An update of `tenant`'s ledger item, by its key.
    fn ledger_item(&self, tenant: &str) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(ledger_key(tenant)))
    }

    /// See `TenantLedgers::unpark`.
    pub(super) async fn unpark_tenant(&self, tenant: &str) -> Result<bool, StoreError> {
        let shard = crate::schema::tenant_shard(tenant, WAITING_SET_SHARDS);
        let update = self
            .ledger_item(tenant)
            .update_expression("SET wait_pk = :set")
            .condition_expression("wait_pk = :parked")
            .expression_attribute_values(":parked", AttributeValue::S(parked_set_key(shard)))
            .expression_attribute_values(":set", AttributeValue::S(waiting_set_key(shard)));
        self.plain_write(|| async { conditionally_applied(update.clone().send().await) })
            .await
    }

    /// Takes a drained tenant out of the waiting set, unless an operation
    /// of its started waiting meanwhile. One try, not retried on
    /// contention: the caller treats it as best effort.
    async fn leave_waiting_set(&self, tenant: &str) -> Result<(), StoreError> {
        let out = self
            .ledger_item(tenant)
            .update_expression("REMOVE wait_pk, wait_sk")
            .condition_expression("attribute_exists(pk) AND (attribute_not_exists(waiting) OR waiting <= :zero)")
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send()
            .await;
        // One try: it is best effort, and a wake-up must not wait on it.
        conditionally_applied(out).map(|_| ())
    }

    /// See `TenantLedgers::send_to_back`: each tenant's place in the
    /// waiting set becomes now, if it is still in the set (one conditional
    /// update each, on the tenant's own ledger item).
    pub(super) async fn send_to_back_of_waiting_set(&self, tenants: &[String]) -> Result<(), StoreError> {
        let now = chrono::Utc::now().timestamp_millis().max(0);
        let updates = tenants.iter().map(|tenant| self.send_one_to_back(tenant, now));
        futures_util::future::try_join_all(updates).await.map(|_| ())
    }

    async fn send_one_to_back(&self, tenant: &str, now: i64) -> Result<(), StoreError> {
        let out = self
            .ledger_item(tenant)
            .update_expression("SET wait_sk = :joined")
            .condition_expression("attribute_exists(wait_sk)")
            .expression_attribute_values(":joined", AttributeValue::S(format!("{now:015}#{tenant}")));
        self.plain_write(|| async { conditionally_applied(out.clone().send().await) })
            .await
            .map(|_| ())
    }

    /// See `TenantLedgers::rejoin_waiting_set`: the ledger listing, page by
    /// page, and for each ledger counting waiters one conditional update
    /// that puts it in the set unless it is there.
    pub(super) async fn rejoin_stranded_waiters(&self, pages: usize) -> Result<usize, StoreError> {
        let mut cursor: Option<String> = None;
        let mut joined = 0;
        for _ in 0..pages {
            let page = self.ledger_page(100, cursor.as_deref()).await?;
            for ledger in page.ledgers.iter().filter(|l| l.totals.waiting > 0) {
                joined += usize::from(self.join_waiting_set(&ledger.tenant_id).await?);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(joined)
    }

    /// Puts a tenant that waits in the waiting set, at the back, unless it
    /// is there; whether it joined.
    async fn join_waiting_set(&self, tenant: &str) -> Result<bool, StoreError> {
        let now = chrono::Utc::now().timestamp_millis().max(0);
        let out = self
            .ledger_item(tenant)
            .update_expression("SET wait_pk = if_not_exists(wait_pk, :set), wait_sk = :joined")
            .condition_expression("attribute_not_exists(wait_sk) AND waiting > :zero")
            .expression_attribute_values(
                ":set",
                AttributeValue::S(waiting_set_key(crate::schema::tenant_shard(tenant, WAITING_SET_SHARDS))),
            )
            .expression_attribute_values(":joined", AttributeValue::S(format!("{now:015}#{tenant}")))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()));
        self.plain_write(|| async { conditionally_applied(out.clone().send().await) })
            .await
    }

    /// See `TenantLedgers::waiting_ledgers` and `parked_ledgers`: of the
    /// set whose shards `set` names, each shard's first entries (one query
    /// a shard), their ledgers in one batch, the drained ones dropped from
    /// the set; read again only while drained entries hid waiting ones, a
    /// bounded number of times.
    pub(super) async fn read_set(&self, set: fn(u32) -> String, limit: usize) -> Result<Vec<TenantLedger>, StoreError> {
        let limit = limit.clamp(1, WAITING_READ_MAX);
        let mut waiting = Vec::new();
        for pass in 1..=WAITING_SET_PASSES {
            let reads = (0..WAITING_SET_SHARDS).map(|shard| self.set_shard(set(shard), limit));
            let mut entries: Vec<(String, String)> = futures_util::future::try_join_all(reads)
                .await?
                .into_iter()
                .flatten()
                .collect();
            entries.sort();
            entries.truncate(limit);
            let tenants: Vec<String> = entries.into_iter().map(|(_, t)| t).collect();
            let mut drained = 0;
            waiting.clear();
            for ledger in self.batch_ledgers(&tenants).await? {
                if ledger.totals.waiting > 0 {
                    waiting.push(ledger);
                } else {
                    drained += 1;
                    // Best effort: an entry left behind costs the next
                    // read the same look, never this read.
                    if let Err(e) = self.leave_waiting_set(&ledger.tenant_id).await {
                        tracing::warn!(tenant = %ledger.tenant_id, error = %e, "a drained tenant stays in the waiting set");
                    }
                }
            }
            // Read again only while drained entries hid waiting ones; the
            // last pass's tenants are kept whatever they were.
            if drained == 0 || waiting.len() >= limit || pass == WAITING_SET_PASSES {
                break;
            }
        }
        waiting.truncate(limit);
        Ok(waiting)
    }

    /// See `TenantLedgers::ledgers`: shard after shard, then the partition
    /// from before the shards.
    pub(super) async fn ledger_page(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        let limit = limit.max(1);
        let (mut shard, mut start) = split_cursor(cursor)?;
        let mut tenants = Vec::new();
        let mut next = None;
        let mut from_position = start.is_some();
        while shard <= LEDGER_LIST_SHARDS {
            let want = limit - i32::try_from(tenants.len()).unwrap_or(i32::MAX);
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(DUE_INDEX)
                .key_condition_expression("due_pk = :ledger")
                .expression_attribute_values(":ledger", AttributeValue::S(list_partition(shard)))
                .limit(want)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| super::item::start_key_refused(e, from_position))?;
            from_position = false;
            tenants.extend(out.items().iter().filter_map(|k| tenant_of(k).map(str::to_owned)));
            match out.last_evaluated_key() {
                Some(key) => start = Some(key.clone()),
                None => shard += 1,
            }
            if i32::try_from(tenants.len()).unwrap_or(i32::MAX) >= limit {
                if shard <= LEDGER_LIST_SHARDS {
                    let inner = start.as_ref().and_then(encode_cursor).unwrap_or_default();
                    next = Some(format!("{shard}.{inner}"));
                }
                break;
            }
        }
        for t in &tenants {
            TenantId::parse(t).map_err(|e| StoreError::Decode(e.to_string()))?;
        }
        // A ledger moved from the old partition may show in both while the
        // index lags; BatchGetItem refuses a key asked twice.
        tenants.sort();
        tenants.dedup();
        let mut ledgers = self.batch_ledgers(&tenants).await?;
        ledgers.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
        Ok(LedgerPage { ledgers, next })
    }
}
