//! Listing operations from the two list indexes: a tenant's own order
//! (`list_pk` = `LIST#<tenant>`) and the order across tenants, spread over
//! [`LIST_ACROSS_SHARDS`] partitions (`list_all_pk` = `ALL#<shard>`) so that no
//! one partition takes every create. Both sort by `list_sk`
//! ([`list_sort_key`]), and both project the operation key, so a key prefix
//! is filtered in the index. Phase and delivery state change with every
//! transition; projecting them would cost an index write per transition, so
//! they are filtered on the records read.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::record::OperationRecord;
use genace_stages::ports::list::{ListFilter, ListPage, ListPosition};
use genace_stages::ports::table::StoreError;

use super::DynamoStore;
use super::item::{Item, from_item, start_key_refused};
use crate::schema::{LIST_ACROSS_SHARDS, list_all_partition, list_partition};

/// What one partition gave: list keys (newest first) and, when it has more,
/// the last key it read.
struct Read {
    keys: Vec<String>,
    frontier: Option<String>,
}

impl DynamoStore {
    pub(super) async fn list_page(
        &self,
        tenant: Option<&TenantId>,
        filter: &ListFilter,
        limit: i32,
        after: Option<&ListPosition>,
        now: DateTime<Utc>,
    ) -> Result<ListPage, StoreError> {
        let partitions: Vec<(&str, &str, String)> = match tenant {
            Some(t) => vec![(crate::schema::LIST_INDEX, "list_pk", list_partition(t.as_str()))],
            None => (0..LIST_ACROSS_SHARDS)
                .map(|s| (crate::schema::LIST_ALL_INDEX, "list_all_pk", list_all_partition(s)))
                .collect(),
        };
        let limit = usize::try_from(limit.clamp(1, 100)).unwrap_or(1);
        // The shards are read at once: a page across tenants costs one
        // round trip of queries, not eight in a row.
        let reads = futures_util::future::try_join_all(partitions.iter().map(|(index, attribute, partition)| {
            self.read_partition(index, attribute, partition, filter, limit, after)
        }))
        .await?;
        let (keys, next) = merge(reads, limit);
        let mut records = self.records_at(&keys, now).await?;
        records.retain(|r| filter.matches(r));
        Ok(ListPage { records, next })
    }

    /// Up to `limit` list keys of one partition, newest first, that sort
    /// before `after` and within the filter's creation range.
    async fn read_partition(
        &self,
        index: &str,
        attribute: &str,
        partition: &str,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListPosition>,
    ) -> Result<Read, StoreError> {
        let (low, high) = filter.key_range();
        // A position below the filter's range was never one of its pages
        // (DynamoDB would refuse the inverted range it makes).
        if after.is_some_and(|a| a.0 < low) {
            return Err(StoreError::Cursor);
        }
        if low > high {
            return Ok(Read {
                keys: Vec::new(),
                frontier: None,
            });
        }
        // BETWEEN is inclusive: the position itself was listed already, so
        // read one more and drop it.
        let high = after.map_or(high.clone(), |a| a.0.clone().min(high));
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index)
            .key_condition_expression("#part = :part AND list_sk BETWEEN :low AND :high")
            .expression_attribute_names("#part", attribute)
            .expression_attribute_values(":part", AttributeValue::S(partition.to_owned()))
            .expression_attribute_values(":low", AttributeValue::S(low))
            .expression_attribute_values(":high", AttributeValue::S(high))
            .scan_index_forward(false)
            .limit(i32::try_from(limit + 1).unwrap_or(101));
        if let Some(prefix) = &filter.key_prefix {
            query = query
                .filter_expression("begins_with(operation_key, :prefix)")
                .expression_attribute_values(":prefix", AttributeValue::S(prefix.clone()));
        }
        let out = query.send().await.map_err(|e| start_key_refused(e, after.is_some()))?;
        let sort_key = |item: &Item| item.get("list_sk").and_then(|v| v.as_s().ok()).cloned();
        let keys = out
            .items()
            .iter()
            .filter_map(sort_key)
            .filter(|k| after.is_none_or(|a| *k != a.0))
            .collect();
        let frontier = out.last_evaluated_key().filter(|k| !k.is_empty()).and_then(sort_key);
        Ok(Read { keys, frontier })
    }

    /// The records at `keys` (list keys), in that order, by consistent
    /// batch reads; expired ones are left out.
    async fn records_at(&self, keys: &[String], now: DateTime<Utc>) -> Result<Vec<OperationRecord>, StoreError> {
        let ids: Vec<OperationId> = keys
            .iter()
            .filter_map(|k| k.split_once('#').and_then(|(_, id)| OperationId::parse(id).ok()))
            .collect();
        let mut found: HashMap<OperationId, OperationRecord> = HashMap::new();
        for item in self.batch_get(ids.iter().map(DynamoStore::key).collect(), true).await? {
            let rec = from_item(item)?;
            found.insert(rec.operation_id.clone(), rec);
        }
        Ok(ids
            .iter()
            .filter_map(|id| found.remove(id))
            .filter(|r| !r.is_expired(now))
            .collect())
    }
}

/// The newest `limit` keys over every partition that are safe to list, and
/// where the next page starts. A partition that has more than it returned
/// read down to its frontier only; anything below the highest frontier may
/// yet be passed by that partition's unread keys, so it waits for the next
/// page, which starts at that frontier.
fn merge(reads: Vec<Read>, limit: usize) -> (Vec<String>, Option<ListPosition>) {
    let frontier = reads.iter().filter_map(|r| r.frontier.clone()).max();
    let mut keys: Vec<String> = reads
        .into_iter()
        .flat_map(|r| r.keys)
        .filter(|k| frontier.as_ref().is_none_or(|f| k >= f))
        .collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    keys.dedup();
    if keys.len() >= limit {
        // Exactly the limit and nothing left anywhere: no next page.
        let more = frontier.is_some() || keys.len() > limit;
        keys.truncate(limit);
        let next = keys.last().cloned().map(ListPosition).filter(|_| more);
        return (keys, next);
    }
    (keys, frontier.map(ListPosition))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(keys: &[&str], frontier: Option<&str>) -> Read {
        Read {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            frontier: frontier.map(str::to_owned),
        }
    }

    #[test]
    fn a_merge_lists_nothing_below_an_unfinished_partition() {
        // Partition a read 9 and 8 and has more; b read 7 and 3 and is done.
        let (keys, next) = merge(vec![read(&["9", "8"], Some("8")), read(&["7", "3"], None)], 5);
        assert_eq!(keys, ["9", "8"]);
        assert_eq!(next, Some(ListPosition("8".into())));
        // Both done: everything, newest first, no next page.
        let (keys, next) = merge(vec![read(&["9", "2"], None), read(&["7", "3"], None)], 5);
        assert_eq!(keys, ["9", "7", "3", "2"]);
        assert_eq!(next, None);
        // Over the limit: the page ends at its last key.
        let (keys, next) = merge(vec![read(&["9", "2"], None), read(&["7", "3"], Some("3"))], 2);
        assert_eq!(keys, ["9", "7"]);
        assert_eq!(next, Some(ListPosition("7".into())));
    }
}
