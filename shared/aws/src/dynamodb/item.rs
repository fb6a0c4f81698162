//! An operation record as a DynamoDB item and back: the computed index
//! attributes added on the way in and dropped on the way out, the keys, and
//! the batched read.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use genace_core::domain::OperationId;
use genace_core::record::OperationRecord;
use genace_stages::ports::table::{StoreError, case_age_key, case_sort_key, wait_partition, wait_sort_key};

use crate::schema::{CASE_PK, COMPUTED_ATTRIBUTES};

use super::DynamoStore;
use crate::schema::{list_all_partition, list_partition};
use genace_stages::ports::list::list_sort_key;

pub(super) type Item = HashMap<String, AttributeValue>;

pub(super) fn service_error<E, R>(e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + aws_sdk_dynamodb::error::ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    let code = e.code().map(str::to_owned);
    refused(
        code.as_deref(),
        aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
    )
}

/// A failed query that started at a client's position (`from_position`):
/// DynamoDB refuses one it cannot use (outside the query's key range, of
/// another index's shape) with `ValidationException`, which is the
/// client's cursor at fault, [`StoreError::Cursor`], never a 5xx. Every
/// other failure as [`service_error`].
pub(super) fn start_key_refused<E, R>(e: SdkError<E, R>, from_position: bool) -> StoreError
where
    E: std::error::Error + aws_sdk_dynamodb::error::ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    // Only a refusal of the start key: any other ValidationException is a
    // fault of the query itself, and stays one.
    let of_start_key = e.message().is_some_and(|m| m.to_ascii_lowercase().contains("start"));
    if from_position && e.code() == Some("ValidationException") && of_start_key {
        return StoreError::Cursor;
    }
    service_error(e)
}

/// A failed request's modelled error, by its code (see [`refused`]).
pub(super) fn refused_by<E>(e: &E) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error,
{
    refused(e.code(), aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
}

/// A failed request by its error code: a plain write to an item that a
/// transaction holds is refused (`TransactionConflictException`) with
/// nothing written, as when a transaction meets another: the table is
/// busy, not down, and the write may be sent again.
pub(super) fn refused(code: Option<&str>, described: String) -> StoreError {
    match code {
        Some("TransactionConflictException") => StoreError::Contention,
        _ => StoreError::Service(described),
    }
}

pub(super) fn to_item(rec: &OperationRecord) -> Result<Item, StoreError> {
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
    for (name, value) in list_attributes(rec) {
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

pub(super) fn from_item(mut item: Item) -> Result<OperationRecord, StoreError> {
    for computed in COMPUTED_ATTRIBUTES {
        item.remove(computed);
    }
    serde_dynamo::from_item(item).map_err(|e| StoreError::Decode(e.to_string()))
}

/// The operations of a keys-only index page.
pub(super) fn operation_ids(items: Vec<Item>) -> Result<Vec<OperationId>, StoreError> {
    items
        .iter()
        .filter_map(|item| {
            item.get("pk")?
                .as_s()
                .ok()?
                .strip_prefix(crate::schema::OPERATION_PREFIX)
                .map(str::to_owned)
        })
        .map(|id| OperationId::parse(&id).map_err(|e| StoreError::Decode(e.to_string())))
        .collect()
}

pub(super) fn conflict(item: Option<&Item>) -> StoreError {
    match item.cloned().map(from_item) {
        Some(Ok(rec)) => StoreError::Conflict(Some(Box::new(rec))),
        Some(Err(e)) => e,
        None => StoreError::Conflict(None),
    }
}

impl DynamoStore {
    pub(super) fn key(id: &OperationId) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(OperationRecord::pk_for(id)))])
    }

    /// Every item of `keys` that exists, in any order, by `BatchGetItem`
    /// (100 keys a request); unprocessed keys are asked again a few times,
    /// then it is a failure.
    pub(super) async fn batch_get(&self, keys: Vec<Item>, consistent: bool) -> Result<Vec<Item>, StoreError> {
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

    pub(super) fn webhook_key(tenant: &str) -> Item {
        HashMap::from([("pk".to_owned(), AttributeValue::S(crate::schema::webhook_key(tenant)))])
    }
}

/// The computed attributes that put a record in both list orders.
fn list_attributes(rec: &OperationRecord) -> [(&'static str, String); 3] {
    [
        ("list_pk", list_partition(rec.tenant_id.as_str())),
        (
            "list_all_pk",
            list_all_partition(rec.operation_id.shard(crate::schema::LIST_ACROSS_SHARDS)),
        ),
        ("list_sk", list_sort_key(rec)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_refused_for_an_open_transaction_is_contention() {
        assert!(matches!(
            refused(Some("TransactionConflictException"), "busy".into()),
            StoreError::Contention
        ));
        assert!(matches!(
            refused(Some("ResourceNotFoundException"), "gone".into()),
            StoreError::Service(_)
        ));
        assert!(matches!(refused(None, "timed out".into()), StoreError::Service(_)));
    }
}
