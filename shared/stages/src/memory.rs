//! In-memory adapters for stage-logic tests and simulation (feature
//! `testkit`). [`MemoryStore`] keeps DynamoDB's semantics as the stages rely
//! on them: a create conditional on absence (an expired record counts as
//! absent), an update conditional on the version read, the current record
//! returned with a lost condition (`ALL_OLD`), no write when nothing changed,
//! the sparse due, case and job indexes, and the tenant ledgers moved in the
//! same atomic write as the record, with the spend limit checked on claims. `shared/aws/tests/store_contract.rs`
//! runs one suite of assertions against this store and the DynamoDB store on
//! the local endpoint, so the two cannot drift.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::{self, Millicredits, TenantLedger};
use genace_core::messages::{Queue, RecoveryMessage, WorkMessage};
use genace_core::record::OperationRecord;
use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status, classify_submit};

use crate::queue::QueueError;
use crate::table::{
    Applied, CasePage, Created, DueCursor, DueItem, DuePage, LedgerPage, OperationStore, StoreError, case_sort_key,
    case_tenant_prefix,
};

/// The operation table, in memory. Clones share the same table.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    table: Arc<Mutex<Tables>>,
}

#[derive(Debug, Default)]
struct Tables {
    records: BTreeMap<String, OperationRecord>,
    ledgers: BTreeMap<String, TenantLedger>,
    webhooks: BTreeMap<String, genace_core::webhook::WebhookConfig>,
}

impl std::ops::Deref for Tables {
    type Target = BTreeMap<String, OperationRecord>;
    fn deref(&self) -> &Self::Target {
        &self.records
    }
}

impl std::ops::DerefMut for Tables {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.records
    }
}

impl MemoryStore {
    /// Every stored record (expired ones included), by key.
    pub fn records(&self) -> Vec<OperationRecord> {
        self.lock().values().cloned().collect()
    }

    /// Every tenant ledger, by tenant.
    pub fn ledgers_now(&self) -> BTreeMap<String, TenantLedger> {
        self.lock().ledgers.clone()
    }

    /// Sets a tenant's spend limit (a simulation's starting state).
    pub fn set_spend_limit_now(&self, tenant: &str, limit: Option<Millicredits>) {
        self.lock()
            .ledgers
            .entry(tenant.to_owned())
            .or_insert_with(|| TenantLedger {
                tenant_id: tenant.to_owned(),
                ..TenantLedger::default()
            })
            .spend_limit = limit;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        // A test that panicked while holding the lock leaves a usable table.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn case_key(rec: &OperationRecord) -> Option<String> {
    rec.case
        .as_ref()
        .map(|c| case_sort_key(rec.tenant_id.as_str(), c.opened_at, &rec.operation_id))
}

/// The memory store's page cursors: `<sort key>\u{1f}<pk>` of the last item.
const CURSOR_SEPARATOR: char = '\u{1f}';

fn make_cursor(sort: &str, pk: &str) -> String {
    format!("{sort}{CURSOR_SEPARATOR}{pk}")
}

fn parse_cursor(c: &str) -> Result<(String, String), StoreError> {
    c.split_once(CURSOR_SEPARATOR)
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .ok_or(StoreError::Cursor)
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
        let found = self
            .lock()
            .get(&OperationRecord::pk_for(id))
            .filter(|r| !r.is_expired(now))
            .cloned();
        found.iter().for_each(genace_core::machine::debug_check);
        Ok(found)
    }

    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        if prev == next {
            return Ok(Applied::Unchanged);
        }
        let mut table = self.lock();
        let tables = &mut *table;
        match tables.records.get_mut(&prev.pk) {
            Some(current) if current.version == prev.version => {
                debug_assert!(
                    genace_core::events::derive(Some(prev), next, &genace_core::events::Context::default()).len()
                        <= genace_core::events::MAX_EVENTS_PER_CHANGE,
                    "one change announces more than {} events",
                    genace_core::events::MAX_EVENTS_PER_CHANGE
                );
                let delta = ledger::delta(prev, next).map_err(|e| StoreError::Decode(e.to_string()))?;
                if !delta.is_zero() {
                    let tenant = prev.tenant_id.as_str();
                    let entry = tables.ledgers.entry(tenant.to_owned()).or_insert_with(|| TenantLedger {
                        tenant_id: tenant.to_owned(),
                        ..TenantLedger::default()
                    });
                    if ledger::reserves(prev, next) && entry.headroom().is_some_and(|room| room < delta.held) {
                        return Err(StoreError::SpendLimit);
                    }
                    entry.totals = entry
                        .totals
                        .plus(&delta)
                        .map_err(|e| StoreError::Decode(e.to_string()))?;
                }
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
                let (due_at_ms, pk) = parse_cursor(&c.0)?;
                Some((due_at_ms.parse::<i64>().map_err(|_| StoreError::Cursor)?, pk))
            }
            None => None,
        };
        let table = self.lock();
        let mut entries: Vec<(i64, &OperationRecord)> = table
            .values()
            .filter(|r| r.due_pk == shard_key)
            .filter_map(|r| r.due_at_ms.filter(|d| *d <= before_ms).map(|d| (d, r)))
            .filter(|(d, r)| after.as_ref().is_none_or(|(ad, apk)| (*d, &r.pk) > (*ad, apk)))
            .collect();
        entries.sort_by(|a, b| (a.0, &a.1.pk).cmp(&(b.0, &b.1.pk)));
        let limit = limit.max(1) as usize;
        let full = entries.len() >= limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((d, r)) if full => Some(DueCursor(make_cursor(&d.to_string(), &r.pk))),
            _ => None,
        };
        let items = entries
            .into_iter()
            .map(|(d, r)| DueItem {
                operation_id: r.operation_id.clone(),
                phase: r.phase,
                delivery_state: r.delivery_state,
                due_at_ms: d,
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

    async fn ledger(&self, tenant: &TenantId) -> Result<TenantLedger, StoreError> {
        Ok(self
            .lock()
            .ledgers
            .get(tenant.as_str())
            .cloned()
            .unwrap_or_else(|| TenantLedger {
                tenant_id: tenant.as_str().to_owned(),
                ..TenantLedger::default()
            }))
    }

    async fn ledgers(&self, limit: i32, cursor: Option<&str>) -> Result<LedgerPage, StoreError> {
        let table = self.lock();
        let limit = limit.max(1) as usize;
        let mut page: Vec<TenantLedger> = table
            .ledgers
            .values()
            .filter(|l| cursor.is_none_or(|c| l.tenant_id.as_str() > c))
            .take(limit + 1)
            .cloned()
            .collect();
        let next = (page.len() > limit).then(|| {
            page.truncate(limit);
            page.last().map(|l| l.tenant_id.clone()).unwrap_or_default()
        });
        Ok(LedgerPage { ledgers: page, next })
    }

    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<Millicredits>,
    ) -> Result<TenantLedger, StoreError> {
        let mut table = self.lock();
        let entry = table
            .ledgers
            .entry(tenant.as_str().to_owned())
            .or_insert_with(|| TenantLedger {
                tenant_id: tenant.as_str().to_owned(),
                ..TenantLedger::default()
            });
        entry.spend_limit = limit;
        Ok(entry.clone())
    }

    async fn webhook(&self, tenant: &TenantId) -> Result<Option<genace_core::webhook::WebhookConfig>, StoreError> {
        Ok(self.lock().webhooks.get(tenant.as_str()).cloned())
    }

    async fn set_webhook(
        &self,
        tenant: &TenantId,
        config: Option<&genace_core::webhook::WebhookConfig>,
    ) -> Result<(), StoreError> {
        let mut table = self.lock();
        match config {
            Some(c) => table.webhooks.insert(tenant.as_str().to_owned(), c.clone()),
            None => table.webhooks.remove(tenant.as_str()),
        };
        Ok(())
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        let after = cursor.map(parse_cursor).transpose()?;
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
            Some((k, r)) if full => Some(make_cursor(k, &r.pk)),
            _ => None,
        };
        Ok(CasePage {
            records: entries.into_iter().map(|(_, r)| r.clone()).collect(),
            next,
        })
    }
}

/// A clock that moves only when told. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(start)))
    }

    pub fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl crate::clock::Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One message on a [`MemoryQueue`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedMessage {
    pub queue: Queue,
    pub body: String,
    pub visible_at: DateTime<Utc>,
    /// How many times it was received.
    pub receives: u32,
    /// The receipt of its latest receive (a delete needs the latest).
    pub receipt: u64,
}

/// The four work queues, in memory, with SQS's delay, visibility timeout
/// and redelivery: a received message is hidden for the visibility timeout
/// and comes back unless deleted with its latest receipt. Time is the given
/// clock's. Clones share the same queues.
#[derive(Debug, Clone)]
pub struct MemoryQueue<C = ManualClock> {
    clock: C,
    state: Arc<Mutex<QueueState>>,
}

#[derive(Debug, Default)]
struct QueueState {
    next: u64,
    messages: BTreeMap<u64, QueuedMessage>,
}

/// A received message: its body and the receipt that deletes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub id: u64,
    pub receipt: u64,
    pub body: String,
    pub receives: u32,
}

impl<C: crate::clock::Clock> MemoryQueue<C> {
    pub fn new(clock: C) -> Self {
        Self {
            clock,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a message, visible after `delay_seconds` (at most 900, as SQS).
    pub fn send(&self, queue: Queue, body: String, delay_seconds: u32) -> u64 {
        let visible_at =
            self.clock.now() + chrono::Duration::seconds(delay_seconds.min(crate::queue::MAX_DELAY_SECONDS) as i64);
        let mut state = self.lock();
        state.next += 1;
        let id = state.next;
        state.messages.insert(
            id,
            QueuedMessage {
                queue,
                body,
                visible_at,
                receives: 0,
                receipt: 0,
            },
        );
        id
    }

    /// Receives up to `max` visible messages of `queue`, oldest first, and
    /// hides them for `visibility`.
    pub fn receive(&self, queue: Queue, max: usize, visibility: chrono::Duration) -> Vec<Received> {
        let now = self.clock.now();
        let mut state = self.lock();
        let ids: Vec<u64> = state
            .messages
            .iter()
            .filter(|(_, m)| m.queue == queue && m.visible_at <= now)
            .map(|(id, _)| *id)
            .take(max)
            .collect();
        let mut out = Vec::new();
        for id in ids {
            state.next += 1;
            let receipt = state.next;
            let m = state.messages.get_mut(&id).expect("a listed message");
            m.receives += 1;
            m.receipt = receipt;
            m.visible_at = now + visibility;
            out.push(Received {
                id,
                receipt,
                body: m.body.clone(),
                receives: m.receives,
            });
        }
        out
    }

    /// Deletes a received message; a stale receipt (the message was received
    /// again since) deletes nothing, as SQS.
    pub fn delete(&self, id: u64, receipt: u64) -> bool {
        let mut state = self.lock();
        match state.messages.get(&id) {
            Some(m) if m.receipt == receipt => state.messages.remove(&id).is_some(),
            _ => false,
        }
    }

    /// Every message, visible or not.
    pub fn messages(&self) -> Vec<QueuedMessage> {
        self.lock().messages.values().cloned().collect()
    }
}

impl<C: crate::clock::Clock> crate::queue::WorkQueue for MemoryQueue<C> {
    /// Refuses a delay SQS would refuse (over [`crate::queue::MAX_DELAY_SECONDS`]).
    async fn enqueue(&self, queue: Queue, id: &OperationId, delay_seconds: u32) -> Result<(), QueueError> {
        if delay_seconds > crate::queue::MAX_DELAY_SECONDS {
            return Err(QueueError {
                queue,
                detail: format!("DelaySeconds {delay_seconds} is over SQS's 900"),
            });
        }
        let body = serde_json::to_string(&WorkMessage {
            operation_id: id.clone(),
        })
        .expect("a work message serializes");
        self.send(queue, body, delay_seconds);
        Ok(())
    }
}

impl<C: crate::clock::Clock> crate::queue::RecoveryChannel for MemoryQueue<C> {
    async fn send_recovery(&self, message: &RecoveryMessage) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).expect("a recovery message serializes");
        self.send(Queue::Recovery, body, 0);
        Ok(())
    }
}

/// One stored object.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredObject {
    pub content_type: String,
    pub data: Vec<u8>,
    pub checksum_sha256: String,
}

/// The output bucket, in memory: whole puts and multipart uploads, each
/// checked against its SHA-256 as S3 checks it. Clones share the bucket.
#[derive(Debug, Clone, Default)]
pub struct MemoryObjects {
    state: Arc<Mutex<ObjectState>>,
}

#[derive(Debug, Default)]
struct ObjectState {
    next_upload: u64,
    objects: BTreeMap<String, StoredObject>,
    uploads: BTreeMap<String, Upload>,
}

/// A multipart upload in progress: its key, content type and parts.
#[derive(Debug)]
struct Upload {
    key: String,
    content_type: String,
    parts: BTreeMap<i32, Vec<u8>>,
}

impl MemoryObjects {
    fn lock(&self) -> std::sync::MutexGuard<'_, ObjectState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<StoredObject> {
        self.lock().objects.get(key).cloned()
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }
}

impl crate::outputs::ObjectStore for MemoryObjects {
    async fn put(
        &self,
        key: &str,
        content_type: &str,
        data: Vec<u8>,
        sha256: &str,
    ) -> Result<(), crate::outputs::StorageError> {
        let checksum = crate::outputs::b64_sha256(&data);
        if checksum != sha256 {
            return Err(crate::outputs::StorageError(
                "the SHA-256 does not match the body".into(),
            ));
        }
        self.lock().objects.insert(
            key.to_owned(),
            StoredObject {
                content_type: content_type.to_owned(),
                data,
                checksum_sha256: checksum,
            },
        );
        Ok(())
    }

    async fn begin(&self, key: &str, content_type: &str) -> Result<String, crate::outputs::StorageError> {
        let mut state = self.lock();
        state.next_upload += 1;
        let id = format!("upload-{}", state.next_upload);
        state.uploads.insert(
            id.clone(),
            Upload {
                key: key.to_owned(),
                content_type: content_type.to_owned(),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<crate::outputs::PartReceipt, crate::outputs::StorageError> {
        let sha256 = crate::outputs::b64_sha256(&data);
        let mut state = self.lock();
        let upload = state
            .uploads
            .get_mut(upload_id)
            .filter(|u| u.key == key)
            .ok_or_else(|| crate::outputs::StorageError(format!("no upload {upload_id} for {key}")))?;
        upload.parts.insert(number, data);
        Ok(crate::outputs::PartReceipt {
            number,
            etag: format!("\"{upload_id}-{number}\""),
            sha256,
        })
    }

    async fn complete(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[crate::outputs::PartReceipt],
    ) -> Result<(), crate::outputs::StorageError> {
        let mut state = self.lock();
        let Upload {
            key: upload_key,
            content_type,
            parts: stored,
        } = state
            .uploads
            .remove(upload_id)
            .ok_or_else(|| crate::outputs::StorageError(format!("no upload {upload_id}")))?;
        if upload_key != key {
            return Err(crate::outputs::StorageError(format!(
                "upload {upload_id} is not for {key}"
            )));
        }
        let mut data = Vec::new();
        for p in parts {
            let part = stored
                .get(&p.number)
                .ok_or_else(|| crate::outputs::StorageError(format!("part {} was never uploaded", p.number)))?;
            if crate::outputs::b64_sha256(part) != p.sha256 {
                return Err(crate::outputs::StorageError(format!(
                    "part {} checksum mismatch",
                    p.number
                )));
            }
            data.extend_from_slice(part);
        }
        state.objects.insert(
            key.to_owned(),
            StoredObject {
                content_type,
                data,
                checksum_sha256: crate::outputs::composite_sha256(parts),
            },
        );
        Ok(())
    }

    async fn abort(&self, _key: &str, upload_id: &str) -> Result<(), crate::outputs::StorageError> {
        self.lock().uploads.remove(upload_id);
        Ok(())
    }

    async fn head(&self, key: &str) -> Result<Option<crate::outputs::ObjectHead>, crate::outputs::StorageError> {
        Ok(self.lock().objects.get(key).map(|o| crate::outputs::ObjectHead {
            bytes: o.data.len() as u64,
            content_type: Some(o.content_type.clone()),
            checksum_sha256: Some(o.checksum_sha256.clone()),
        }))
    }

    async fn presign_get(
        &self,
        key: &str,
        expiry: std::time::Duration,
    ) -> Result<String, crate::outputs::StorageError> {
        Ok(format!("memory://outputs/{key}?expires-in={}", expiry.as_secs()))
    }
}

/// How [`MemoryGenace`] answers the next POST.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitPlan {
    /// 202 with a new job in `state`.
    Accept { state: String },
    /// 202 with a new job in `state`, reporting `held_credits` as this raw
    /// JSON text (Genace's own figure, or one nobody can mean: `-5`, `1e400`).
    AcceptReporting { state: String, held_credits: String },
    /// 502 with `error.job_id` of a new, failed job.
    FailWithJob,
    /// 502 without a job id; nothing created.
    BadGateway,
    /// Any status and body, as Genace might send them; nothing created.
    Answer { status: u16, body: String },
    /// The job is created, then the answer is lost (a timeout after the fact).
    LostAfterCreate,
    /// The request never reached Genace (refused, timed out before sending).
    Unreachable,
}

/// One job Genace holds.
#[derive(Debug, Clone, PartialEq)]
pub struct GenaceJob {
    pub id: String,
    /// The submission's `client_reference` (the operation id).
    pub client_reference: Option<String>,
    pub state: String,
    pub outputs: Option<serde_json::Value>,
    /// What Genace holds for the job while it runs and charges once it
    /// completes: [`JOB_PRICE`], whatever the 202 reported.
    pub credits: f64,
}

/// The credits [`MemoryGenace`] charges per job: the default estimate for a
/// video, so a ledger that counts a job at its reservation agrees with
/// Genace's books.
pub const JOB_PRICE: f64 = 10.0;

/// Genace, in memory: answers POSTs from a plan (accepting by default),
/// keeps the jobs it created, and answers status reads from them. Answers
/// go through the real response classification (`classify_submit`,
/// `classify_status`), so the stages see exactly what the HTTP client
/// would give them. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct MemoryGenace {
    state: Arc<Mutex<GenaceState>>,
}

#[derive(Debug, Default)]
struct GenaceState {
    plans: std::collections::VecDeque<SubmitPlan>,
    jobs: BTreeMap<String, GenaceJob>,
    posts: Vec<serde_json::Value>,
    next: u64,
}

impl MemoryGenace {
    fn lock(&self) -> std::sync::MutexGuard<'_, GenaceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues how the next POSTs are answered (after that: accepted, queued).
    pub fn plan(&self, plans: impl IntoIterator<Item = SubmitPlan>) {
        self.lock().plans.extend(plans);
    }

    /// Moves a job to `state`, with `outputs` (a JSON list, or null).
    pub fn set_job(&self, id: &str, state: &str, outputs: Option<serde_json::Value>) {
        if let Some(job) = self.lock().jobs.get_mut(id) {
            job.state = state.to_owned();
            job.outputs = outputs;
        }
    }

    /// Every job created, in creation order of their ids.
    pub fn jobs(&self) -> Vec<GenaceJob> {
        self.lock().jobs.values().cloned().collect()
    }

    /// Every POST body received, in order.
    pub fn posts(&self) -> Vec<serde_json::Value> {
        self.lock().posts.clone()
    }

    fn create(state: &mut GenaceState, body: &serde_json::Value, job_state: &str) -> String {
        state.next += 1;
        let id = format!("job-{:04}", state.next);
        state.jobs.insert(
            id.clone(),
            GenaceJob {
                id: id.clone(),
                client_reference: body.get("client_reference").and_then(|v| v.as_str()).map(str::to_owned),
                state: job_state.to_owned(),
                outputs: None,
                credits: JOB_PRICE,
            },
        );
        id
    }
}

impl crate::genace::Genace for MemoryGenace {
    async fn submit(&self, body: &serde_json::Value) -> SubmitOutcome {
        let mut state = self.lock();
        state.posts.push(body.clone());
        let plan = state
            .plans
            .pop_front()
            .unwrap_or(SubmitPlan::Accept { state: "queued".into() });
        let (status, text) = match plan {
            SubmitPlan::Accept { state: job_state } => {
                let id = Self::create(&mut state, body, &job_state);
                (202, serde_json::json!({"job_id": id, "state": job_state}).to_string())
            }
            SubmitPlan::AcceptReporting {
                state: job_state,
                held_credits,
            } => {
                let id = Self::create(&mut state, body, &job_state);
                let head = serde_json::json!({"job_id": id, "state": job_state}).to_string();
                // Spliced as text: `1e400` is no JSON value serde can hold.
                (
                    202,
                    format!("{},\"held_credits\":{held_credits}}}", &head[..head.len() - 1]),
                )
            }
            SubmitPlan::FailWithJob => {
                let id = Self::create(&mut state, body, "failed");
                (
                    502,
                    serde_json::json!({"error": {"code": "upstream_failed", "job_id": id}}).to_string(),
                )
            }
            SubmitPlan::BadGateway => (502, r#"{"error":{"code":"bad_gateway"}}"#.to_owned()),
            SubmitPlan::Answer { status, body } => (status, body),
            SubmitPlan::LostAfterCreate => {
                Self::create(&mut state, body, "queued");
                return SubmitOutcome::Unknown {
                    evidence: "timed out waiting for the response".into(),
                };
            }
            SubmitPlan::Unreachable => {
                return SubmitOutcome::Unknown {
                    evidence: "connection refused".into(),
                };
            }
        };
        // No Retry-After is sent, so the time it would count from does not matter.
        classify_submit(status, None, &text, DateTime::UNIX_EPOCH)
    }

    async fn status(&self, job_id: &str) -> StatusOutcome {
        let job = self.lock().jobs.get(job_id).cloned();
        match job {
            Some(job) => {
                let body = serde_json::json!({
                    "id": job.id,
                    "state": job.state,
                    "outputs": job.outputs,
                    "client_reference": job.client_reference,
                });
                classify_status(200, &body.to_string())
            }
            None => classify_status(404, r#"{"error":{"code":"not_found"}}"#),
        }
    }
}

/// Outputs served from memory, by URL.
#[derive(Debug, Clone, Default)]
pub struct MemoryDownloads {
    files: Arc<Mutex<BTreeMap<String, ServedFile>>>,
}

/// What a URL answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedFile {
    pub status: u16,
    pub content_type: Option<String>,
    pub data: Vec<u8>,
}

impl MemoryDownloads {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ServedFile>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves `data` at `url` with a 200.
    pub fn serve(&self, url: &str, content_type: Option<&str>, data: Vec<u8>) {
        self.answer(
            url,
            ServedFile {
                status: 200,
                content_type: content_type.map(str::to_owned),
                data,
            },
        );
    }

    /// Answers `url` with anything.
    pub fn answer(&self, url: &str, file: ServedFile) {
        self.lock().insert(url.to_owned(), file);
    }
}

/// A served body, handed out in chunks of at most 64 KiB.
#[derive(Debug)]
pub struct MemoryBody {
    data: Vec<u8>,
    at: usize,
}

impl crate::downloads::DownloadBody for MemoryBody {
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, crate::downloads::DownloadError> {
        if self.at >= self.data.len() {
            return Ok(None);
        }
        let end = (self.at + 64 * 1024).min(self.data.len());
        let chunk = self.data[self.at..end].to_vec();
        self.at = end;
        Ok(Some(chunk))
    }
}

impl crate::downloads::Downloads for MemoryDownloads {
    type Body = MemoryBody;

    async fn open(&self, url: &str) -> Result<crate::downloads::Download<MemoryBody>, crate::downloads::DownloadError> {
        let file = self
            .lock()
            .get(url)
            .cloned()
            .ok_or_else(|| crate::downloads::DownloadError::Failed("connection refused".into()))?;
        Ok(crate::downloads::Download {
            status: file.status,
            content_length: Some(file.data.len() as u64),
            content_type: file.content_type,
            body: MemoryBody { data: file.data, at: 0 },
        })
    }
}

/// Every adapter in memory, on a manual clock.
pub type MemoryApp =
    crate::app::App<MemoryStore, MemoryQueue, MemoryObjects, MemoryGenace, MemoryDownloads, ManualClock>;

/// An app on in-memory adapters whose clock starts at `start`, with the
/// default configuration (fault injection off).
pub fn memory_app(start: DateTime<Utc>) -> MemoryApp {
    let names = crate::config::ResourceNames::with_prefix("memory-");
    let queues = crate::config::QueueUrls::local("http://memory.invalid", &names);
    let clock = ManualClock::new(start);
    crate::app::App {
        store: MemoryStore::default(),
        queue: MemoryQueue::new(clock.clone()),
        objects: MemoryObjects::default(),
        genace: MemoryGenace::default(),
        downloads: MemoryDownloads::default(),
        clock,
        config: crate::config::Config::for_resources(&names, queues),
    }
}

/// Secrets, in memory. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct MemorySecrets {
    values: Arc<Mutex<BTreeMap<String, String>>>,
}

impl MemorySecrets {
    pub fn put(&self, id: &str, value: &str) {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), value.to_owned());
    }
}

impl crate::webhooks::SecretStore for MemorySecrets {
    async fn secret(&self, id: &str) -> Result<Option<String>, String> {
        Ok(self.values.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned())
    }
}

/// A webhook receiver, in memory: answers each POST with the next planned
/// status (200 once the plan is used up) and keeps what it received.
#[derive(Debug, Clone, Default)]
pub struct MemoryReceiver {
    inner: Arc<Mutex<(Vec<u16>, Vec<ReceivedPost>)>>,
}

/// One POST a [`MemoryReceiver`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPost {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl MemoryReceiver {
    /// The statuses the next POSTs get, in order.
    pub fn answer(&self, statuses: &[u16]) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0 = statuses.to_vec();
    }

    pub fn received(&self) -> Vec<ReceivedPost> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.clone()
    }
}

/// The receiver applies the production webhook URL policy (https, public
/// addresses, port 443), as the HTTP adapter does before connecting.
impl crate::webhooks::WebhookSender for MemoryReceiver {
    async fn post(
        &self,
        url: &str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> Result<u16, crate::webhooks::PostError> {
        crate::urlguard::check_url_text(url, &crate::config::UrlPolicy::default())
            .map_err(crate::webhooks::PostError::Refused)?;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.1.push(ReceivedPost {
            url: url.to_owned(),
            headers,
            body,
        });
        Ok(if inner.0.is_empty() { 200 } else { inner.0.remove(0) })
    }
}

/// A dead-letter queue, in memory: keeps each body with its reason.
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    letters: Arc<Mutex<Vec<(String, String)>>>,
}

impl MemoryDeadLetters {
    /// Every (body, reason) received, in order.
    pub fn letters(&self) -> Vec<(String, String)> {
        self.letters.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl crate::webhooks::DeadLetters for MemoryDeadLetters {
    async fn dead_letter(&self, body: String, reason: String) -> Result<(), String> {
        self.letters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((body, reason));
        Ok(())
    }
}
