//! In-memory adapters for stage-logic tests and simulation (feature
//! `testkit`). [`MemoryStore`] keeps DynamoDB's semantics as the stages rely
//! on them: a create conditional on absence (an expired record counts as
//! absent), an update conditional on the version read, the current record
//! returned with a lost condition (`ALL_OLD`), no write when nothing changed,
//! and the sparse due, case and job indexes. `shared/tests/store_contract.rs`
//! runs one suite of assertions against this store and the DynamoDB store on
//! the local endpoint, so the two cannot drift.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use crate::domain::{OperationId, TenantId};
use crate::record::OperationRecord;
use crate::store::{
    Applied, CASE_PK, CasePage, Created, DueCursor, DueItem, DuePage, OperationStore, StoreError, case_sort_key,
    case_tenant_prefix, decode_cursor, encode_cursor,
};

/// The operation table, in memory. Clones share the same table.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    table: Arc<Mutex<BTreeMap<String, OperationRecord>>>,
}

impl MemoryStore {
    /// Every stored record (expired ones included), by key.
    pub fn records(&self) -> Vec<OperationRecord> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, OperationRecord>> {
        // A test that panicked while holding the lock leaves a usable table.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn case_key(rec: &OperationRecord) -> Option<String> {
    rec.case
        .as_ref()
        .map(|c| case_sort_key(rec.tenant_id.as_str(), c.opened_at, &rec.operation_id))
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

impl OperationStore for MemoryStore {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        let mut table = self.lock();
        match table.get(&rec.pk) {
            Some(existing) if !existing.is_expired(now) => {
                if existing == rec {
                    Ok(Created::New)
                } else {
                    Ok(Created::Existing(Box::new(existing.clone())))
                }
            }
            _ => {
                table.insert(rec.pk.clone(), rec.clone());
                Ok(Created::New)
            }
        }
    }

    async fn get(&self, id: &OperationId, now: DateTime<Utc>) -> Result<Option<OperationRecord>, StoreError> {
        Ok(self
            .lock()
            .get(&OperationRecord::pk_for(id))
            .filter(|r| !r.is_expired(now))
            .cloned())
    }

    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        if prev == next {
            return Ok(Applied::Unchanged);
        }
        let mut table = self.lock();
        match table.get_mut(&prev.pk) {
            Some(current) if current.version == prev.version => {
                *current = next.clone();
                Ok(Applied::Written)
            }
            Some(current) => Err(StoreError::Conflict(Some(Box::new(current.clone())))),
            None => Err(StoreError::Conflict(None)),
        }
    }

    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> Result<DuePage, StoreError> {
        let shard_key = format!("DUE#{shard}");
        let after = match &cursor {
            Some(c) => {
                let due_at =
                    c.0.get("due_at")
                        .and_then(|v| v.as_n().ok())
                        .and_then(|n| n.parse::<i64>().ok());
                let pk = c.0.get("pk").and_then(|v| v.as_s().ok()).cloned();
                Some((due_at.ok_or(StoreError::Cursor)?, pk.ok_or(StoreError::Cursor)?))
            }
            None => None,
        };
        let table = self.lock();
        let mut entries: Vec<(i64, &OperationRecord)> = table
            .values()
            .filter(|r| r.due_pk == shard_key)
            .filter_map(|r| r.due_at.filter(|d| *d <= before_ms).map(|d| (d, r)))
            .filter(|(d, r)| after.as_ref().is_none_or(|(ad, apk)| (*d, &r.pk) > (*ad, apk)))
            .collect();
        entries.sort_by(|a, b| (a.0, &a.1.pk).cmp(&(b.0, &b.1.pk)));
        let limit = limit.max(1) as usize;
        let full = entries.len() >= limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((d, r)) if full => Some(DueCursor(
                [
                    ("pk".to_owned(), s(&r.pk)),
                    ("due_pk".to_owned(), s(&r.due_pk)),
                    ("due_at".to_owned(), AttributeValue::N(d.to_string())),
                ]
                .into(),
            )),
            _ => None,
        };
        let items = entries
            .into_iter()
            .map(|(d, r)| DueItem {
                operation_id: r.operation_id.clone(),
                phase: r.phase,
                delivery_state: r.delivery_state,
                due_at: d,
            })
            .collect();
        Ok(DuePage { items, next })
    }

    async fn holders_of_remote_job(&self, job_id: &str) -> Result<Vec<OperationId>, StoreError> {
        Ok(self
            .lock()
            .values()
            .filter(|r| r.remote_job_id.as_deref() == Some(job_id))
            .take(10)
            .map(|r| r.operation_id.clone())
            .collect())
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        let after = match cursor {
            Some(c) => {
                let key = decode_cursor(c)?;
                let sk = key.get("case_sk").and_then(|v| v.as_s().ok()).cloned();
                let pk = key.get("pk").and_then(|v| v.as_s().ok()).cloned();
                Some((sk.ok_or(StoreError::Cursor)?, pk.ok_or(StoreError::Cursor)?))
            }
            None => None,
        };
        let prefix = tenant.map(|t| case_tenant_prefix(t.as_str()));
        let table = self.lock();
        let mut entries: Vec<(String, &OperationRecord)> = table
            .values()
            .filter_map(|r| case_key(r).map(|k| (k, r)))
            .filter(|(k, _)| prefix.as_ref().is_none_or(|p| k.starts_with(p.as_str())))
            .filter(|(k, r)| after.as_ref().is_none_or(|(ak, apk)| (k, &r.pk) > (ak, apk)))
            .collect();
        entries.sort_by(|a, b| (&a.0, &a.1.pk).cmp(&(&b.0, &b.1.pk)));
        let limit = limit.max(1) as usize;
        let full = entries.len() >= limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((k, r)) if full => encode_cursor(
                &[
                    ("case_pk".to_owned(), s(CASE_PK)),
                    ("case_sk".to_owned(), s(k)),
                    ("pk".to_owned(), s(&r.pk)),
                ]
                .into(),
            ),
            _ => None,
        };
        Ok(CasePage {
            records: entries.into_iter().map(|(_, r)| r.clone()).collect(),
            next,
        })
    }
}
