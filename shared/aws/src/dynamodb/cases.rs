//! The open cases, read from the two case indexes: by tenant and age, and
//! every tenant's in the order they opened.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use genace_core::domain::OperationId;
use genace_stages::ports::table::{CaseFilter, StoreError};

use crate::schema::CASE_PK;

use super::DynamoStore;
use super::item::{Item, start_key_refused};
use super::position::{decode_cursor, encode_cursor};

/// Index pages the case counts read at most: each page holds thousands of
/// the two small attributes read, so the limit is far past any backlog a
/// person can work through, and a runaway one costs a bounded read.
pub(super) const CASE_COUNT_PAGES: usize = 200;

/// Index pages read for one page of cases that pass a filter, at most: a
/// full page costs a bounded read even when the cases that pass are few and
/// far between (a later page goes on from where this one stopped).
const CASE_INDEX_PAGES: usize = 8;

/// The two indexes of open cases.
pub(super) enum CaseIndex {
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
    /// It must also lie inside the key range the query for `filter` reads
    /// ([`Self::condition`]): DynamoDB refuses a start key outside it.
    fn start_key(&self, cursor: &str, filter: CaseFilter) -> Result<Item, StoreError> {
        let key = decode_cursor(cursor)?;
        let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).map(String::as_str);
        let shaped = key.len() == 3
            && text("pk").is_some_and(|pk| {
                pk.strip_prefix(crate::schema::OPERATION_PREFIX)
                    .is_some_and(|id| OperationId::parse(id).is_ok())
            })
            && text("case_pk") == Some(CASE_PK)
            && text(self.sort_key()).is_some_and(|sk| !sk.is_empty() && self.in_range(filter, sk));
        if shaped { Ok(key) } else { Err(StoreError::Cursor) }
    }

    /// Whether sort key `sk` lies inside the range [`Self::condition`]
    /// reads for `filter`.
    fn in_range(&self, filter: CaseFilter, sk: &str) -> bool {
        let (low, high) = self.range(filter);
        low.as_deref().is_none_or(|low| sk.starts_with(low))
            && high.as_deref().is_none_or(|high| match self {
                CaseIndex::Tenant(_) => sk <= high,
                CaseIndex::Age => sk < high,
            })
    }

    /// The prefix every sort key the query reads starts with, and the
    /// bound it reads up to, each if the query has one.
    fn range(&self, filter: CaseFilter) -> (Option<String>, Option<String>) {
        // Each index's own spelling of a time (case_sort_key, case_age_key).
        let before = |prefix: &str, t: DateTime<Utc>| match self {
            CaseIndex::Tenant(_) => format!("{prefix}{}", t.format("%Y-%m-%dT%H:%M:%S%.3fZ")),
            CaseIndex::Age => format!("{prefix}{}", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
        };
        match (self, filter.opened_before) {
            (CaseIndex::Tenant(Some(prefix)), Some(t)) => (Some(prefix.clone()), Some(before(prefix, t))),
            (CaseIndex::Tenant(Some(prefix)), None) => (Some(prefix.clone()), None),
            (CaseIndex::Age, Some(t)) => (None, Some(before("", t))),
            // Across tenants on the tenant index, the time is a filter.
            (CaseIndex::Tenant(None), _) | (CaseIndex::Age, None) => (None, None),
        }
    }

    /// The key condition for `filter`: the cases opened before its time
    /// are a key range on both indexes.
    fn condition(
        &self,
        filter: CaseFilter,
        mut query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        let sk = self.sort_key();
        query = query.expression_attribute_values(":pk", AttributeValue::S(CASE_PK.into()));
        match (self, self.range(filter), filter.opened_before) {
            (CaseIndex::Tenant(Some(_)), (Some(low), Some(high)), _) => query
                .key_condition_expression(format!("case_pk = :pk AND {sk} BETWEEN :low AND :high"))
                .expression_attribute_values(":low", AttributeValue::S(low))
                .expression_attribute_values(":high", AttributeValue::S(high)),
            (CaseIndex::Tenant(Some(_)), (Some(low), None), _) => query
                .key_condition_expression(format!("case_pk = :pk AND begins_with({sk}, :low)"))
                .expression_attribute_values(":low", AttributeValue::S(low)),
            (CaseIndex::Age, (_, Some(high)), _) => query
                .key_condition_expression(format!("case_pk = :pk AND {sk} < :high"))
                .expression_attribute_values(":high", AttributeValue::S(high)),
            // Across tenants on the tenant index, the time is a filter.
            (CaseIndex::Tenant(None), _, Some(t)) => query
                .key_condition_expression("case_pk = :pk")
                .filter_expression("#case.opened_at < :high")
                .expression_attribute_names("#case", "case")
                .expression_attribute_values(
                    ":high",
                    AttributeValue::S(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
                ),
            _ => query.key_condition_expression("case_pk = :pk"),
        }
    }
}

impl DynamoStore {
    /// The items of one page of cases that pass `filter`, in the index's
    /// order, and the cursor after them: `limit` items unless the index
    /// ends (or [`CASE_INDEX_PAGES`] pages were read).
    pub(super) async fn case_keys(
        &self,
        index: &CaseIndex,
        filter: CaseFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Item>, Option<String>), StoreError> {
        let mut start = cursor.map(|c| index.start_key(c, filter)).transpose()?;
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
            let from_position = cursor.is_some() && page == 1;
            let out = query.send().await.map_err(|e| start_key_refused(e, from_position))?;
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
