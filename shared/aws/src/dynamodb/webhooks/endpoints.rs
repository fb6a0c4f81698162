//! Tenants' webhook endpoints and their attempt logs in the operations
//! table.
//!
//! A tenant's endpoints are one item, `ENDPOINTS#<tenant>`, holding the
//! list and a version; each change is a put on the condition that the
//! version is still the one read. Few endpoints per tenant (the limit is
//! small), read by every event of the tenant: one consistent read.
//!
//! Each webhook attempt is its own item, `WHLOG#<tenant>#<endpoint>#<sort
//! key>`, expiring with the table's TTL. The log index (`log_pk` =
//! `WHLOG#<tenant>#<endpoint>`, `log_sk` = [`WebhookAttempt::sort_key`])
//! pages an endpoint's log newest first.
//!
//! Each event of a tenant with endpoints is kept as `WHEVENT#<tenant>#<event
//! id>` for the same days, so an endpoint can be sent it again (replay).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use genace_core::domain::TenantId;
use std::collections::HashMap;

use genace_core::webhook::{AttemptStatus, EndpointSet, Receivers, WebhookAttempt};
use genace_stages::ports::table::{StoreError, WebhookEndpoints, log_page};

use crate::dynamodb::DynamoStore;
use crate::dynamodb::item::{Item, service_error};
use crate::schema::WEBHOOK_PREFIX;

fn endpoints_key(tenant: &TenantId) -> Item {
    Item::from([(
        "pk".to_owned(),
        AttributeValue::S(crate::schema::endpoints_key(tenant.as_str())),
    )])
}

/// `WHEVENT#<tenant>#<event id>`: an event kept for replay.
fn kept_key(tenant: &TenantId, event_id: &str) -> String {
    crate::schema::kept_event_key(tenant.as_str(), event_id)
}

fn log_partition(tenant: &str, endpoint_id: &str) -> String {
    crate::schema::attempt_log_partition(tenant, endpoint_id)
}

fn decode<T: serde::de::DeserializeOwned>(mut item: Item, computed: &[&str]) -> Result<T, StoreError> {
    for name in computed {
        item.remove(*name);
    }
    serde_dynamo::from_item(item).map_err(|e| StoreError::Decode(e.to_string()))
}

impl WebhookEndpoints for DynamoStore {
    async fn endpoints(&self, tenant: &TenantId) -> Result<EndpointSet, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(endpoints_key(tenant)))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        out.item
            .map_or(Ok(EndpointSet::default()), |item| decode(item, &["pk"]))
    }

    async fn save_endpoints(&self, tenant: &TenantId, set: &EndpointSet) -> Result<(), StoreError> {
        let mut item: Item = serde_dynamo::to_item(set).map_err(|e| StoreError::Decode(e.to_string()))?;
        item.extend(endpoints_key(tenant));
        let put = self.client.put_item().table_name(&self.table).set_item(Some(item));
        let put = match set.version.checked_sub(1) {
            None | Some(0) => put.condition_expression("attribute_not_exists(pk)"),
            Some(read) => put
                .condition_expression("version = :read")
                .expression_attribute_values(":read", AttributeValue::N(read.to_string())),
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(ctx)) if ctx.err().is_conditional_check_failed_exception() => {
                Err(StoreError::Conflict(None))
            }
            Err(e) => Err(service_error(e)),
        }
    }

    async fn receivers(&self, tenants: &[TenantId]) -> Result<HashMap<TenantId, Receivers>, StoreError> {
        let by_pk: HashMap<String, &TenantId> = tenants
            .iter()
            .flat_map(|t| {
                [
                    (crate::schema::webhook_key(t.as_str()), t),
                    (crate::schema::endpoints_key(t.as_str()), t),
                ]
            })
            .collect();
        let keys = tenants
            .iter()
            .flat_map(|t| [DynamoStore::webhook_key(t.as_str()), endpoints_key(t)])
            .collect();
        let mut out: HashMap<TenantId, Receivers> = HashMap::new();
        // Eventually consistent: half the price, and an event made within a
        // moment of a receiver's save is the only one it can miss.
        for item in self.batch_get(keys, false).await? {
            let pk = match item.get("pk") {
                Some(AttributeValue::S(pk)) => pk.clone(),
                _ => continue,
            };
            let Some(tenant) = by_pk.get(&pk) else { continue };
            let receivers = out.entry((*tenant).clone()).or_default();
            if pk.starts_with(WEBHOOK_PREFIX) {
                receivers.webhook = Some(decode(item, &["pk"])?);
            } else {
                receivers.endpoints = decode::<EndpointSet>(item, &["pk"])?.endpoints;
            }
        }
        Ok(out)
    }

    async fn record_attempt(&self, attempt: &WebhookAttempt, keep_until: DateTime<Utc>) -> Result<(), StoreError> {
        let mut item: Item = serde_dynamo::to_item(attempt).map_err(|e| StoreError::Decode(e.to_string()))?;
        let partition = log_partition(&attempt.tenant_id, &attempt.endpoint_id);
        let sort_key = attempt.sort_key();
        item.insert("pk".into(), AttributeValue::S(format!("{partition}#{sort_key}")));
        item.insert("log_pk".into(), AttributeValue::S(partition));
        item.insert("log_sk".into(), AttributeValue::S(sort_key));
        item.insert(
            "expires_at".into(),
            AttributeValue::N(keep_until.timestamp().to_string()),
        );
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(service_error)?;
        Ok(())
    }

    async fn keep_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        detail: &str,
        keep_until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Item::from([
                ("pk".to_owned(), AttributeValue::S(kept_key(tenant, event_id))),
                ("detail".to_owned(), AttributeValue::S(detail.to_owned())),
                (
                    "expires_at".to_owned(),
                    AttributeValue::N(keep_until.timestamp().to_string()),
                ),
            ])))
            .send()
            .await
            .map_err(service_error)?;
        Ok(())
    }

    async fn kept_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(kept_key(tenant, event_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        let Some(item) = out.item else { return Ok(None) };
        let expires = item
            .get("expires_at")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(i64::MAX);
        // The TTL deletes late: a kept event past its time is gone already.
        if expires <= now.timestamp() {
            return Ok(None);
        }
        Ok(item.get("detail").and_then(|v| v.as_s().ok()).cloned())
    }

    async fn attempts(
        &self,
        tenant: &TenantId,
        endpoint_id: &str,
        status: Option<AttemptStatus>,
        limit: usize,
        after: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<WebhookAttempt>, Option<String>), StoreError> {
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::schema::LOG_INDEX)
            .expression_attribute_values(":part", AttributeValue::S(log_partition(tenant.as_str(), endpoint_id)))
            .scan_index_forward(false)
            // One more than asked, to know whether more follow.
            .limit(i32::try_from(limit + 1).unwrap_or(101));
        query = match after {
            // A position of another shape (or too long for a sort key,
            // which DynamoDB refuses) was never one of ours.
            Some(after) if !genace_core::webhook::WebhookAttempt::is_sort_key(after) => return Err(StoreError::Cursor),
            Some(after) => query
                .key_condition_expression("log_pk = :part AND log_sk < :after")
                .expression_attribute_values(":after", AttributeValue::S(after.to_owned())),
            None => query.key_condition_expression("log_pk = :part"),
        };
        let out = query
            .send()
            .await
            .map_err(|e| crate::dynamodb::item::start_key_refused(e, after.is_some()))?;
        let mut read = Vec::new();
        for item in out.items.unwrap_or_default() {
            let key = item
                .get("log_sk")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            // The TTL deletes late: an entry past its time is gone already.
            let kept = item
                .get("expires_at")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<i64>().ok())
                .is_none_or(|expires| expires > now.timestamp());
            let attempt = decode(item, &["pk", "log_pk", "log_sk", "expires_at"])?;
            read.push((key, kept, attempt));
        }
        Ok(log_page(read, limit, status))
    }
}
