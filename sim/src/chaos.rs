//! Crashes and slowness at every port call: the in-memory adapters wrapped
//! in [`Chaotic`], which may drop the handler before or after a call's effect.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

mod genace;
mod ledgers;
pub(crate) mod time;
mod timing;

use crate::rng::Rng;
use chrono::{DateTime, Utc};
use genace_core::domain::{OperationId, TenantId};
use genace_core::messages::{Queue, RecoveryMessage};
use genace_core::record::OperationRecord;
use genace_core::webhook::{AttemptStatus, EndpointSet, WebhookAttempt, WebhookConfig};
use genace_memory::{MemoryBody, MemoryDownloads};
use genace_stages::ports::downloads::{Download, DownloadError, Downloads};
use genace_stages::ports::outputs::{ObjectHead, ObjectStore, PartReceipt, StorageError};
use genace_stages::ports::queue::{QueueError, RecoveryChannel, WorkQueue};
use genace_stages::ports::table::{
    Applied, CasePage, Created, DueCursor, DuePage, OperationRecords, StoreError, WebhookEndpoints, WebhookSettings,
};

// ------------------------------------------------------------ crashes

/// What happens at one port call.
pub(crate) enum Fate {
    Proceed,
    CrashBefore,
    CrashAfter,
}

#[derive(Debug)]
pub(crate) struct ChaosState {
    rng: Rng,
    /// Crashes per thousand port calls (0 in the quiet phase).
    crash_per_mille: u64,
    /// Set by a port call that crashed the handler being polled.
    crashed: bool,
    /// Whether Genace may answer 429 by the seed's choice; off, only a
    /// full account answers it (runs that check capacity never opens a case).
    pub(crate) plants_429s: bool,
    /// A calm run (the timed burst): Genace accepts every POST a free slot
    /// allows and answers every read truly, at once.
    pub(crate) calm: bool,
    /// The latency model: each request moves this clock on by this much.
    pub(crate) latency: Option<(genace_memory::ManualClock, chrono::Duration)>,
    /// A 429 storm on status reads: this share of GETs (percent) answered
    /// 429 with a Retry-After of this many seconds, calm or not.
    pub(crate) status_storm: Option<(u64, u32)>,
    /// Percent of status reads answered 5xx (an error storm when high).
    pub(crate) status_errors: u64,
    /// Requests made, as DynamoDB, SQS, S3 and Genace would count them.
    pub(crate) requests: u64,
    /// Wake-ups that read the waiting set, and the requests they made.
    pub(crate) wake_ups: u64,
    pub(crate) wake_requests: u64,
    /// Reads of the account item.
    pub(crate) account_reads: u64,
    /// `account_reads` when the due index was first read since this was
    /// last cleared: whether a sweep looked at the account first.
    pub(crate) reads_at_first_due_page: Option<u64>,
    /// Status reads (GETs) of each Genace job.
    pub(crate) gets: BTreeMap<String, u32>,
    /// The handler being polled now: its actor id, and whether it is a
    /// poll that began after its job was seen to end.
    pub(crate) polling: Option<(usize, bool)>,
    /// GETs made by each handler, by actor id.
    pub(crate) gets_by_actor: BTreeMap<usize, u32>,
    /// GETs made by polls that began after their job was seen to end.
    pub(crate) gets_after_end: Vec<String>,
    /// The shards of the due index each handler read a page of, by actor id.
    pub(crate) due_reads: BTreeMap<usize, std::collections::BTreeSet<u32>>,
    /// Requests each handler made, by actor id, and the handlers that read
    /// the waiting set (a wake-up).
    pub(crate) requests_by_actor: BTreeMap<usize, u64>,
    pub(crate) waking: std::collections::BTreeSet<usize>,
    /// The job ids Genace's answers gave each handler, by actor id.
    pub(crate) returned_ids: BTreeMap<usize, Vec<String>>,
    /// Calls that take time.
    pub(crate) time: timing::TimeState,
    /// An observer outside the service reads (the latency bench's
    /// clients): its requests are not the service's, and neither count nor
    /// move the clock.
    pub(crate) observing: bool,
    /// When Genace created each job, on the latency model's clock: its
    /// render starts then, before the 202 is back.
    pub(crate) created_at: BTreeMap<String, chrono::DateTime<chrono::Utc>>,
    /// When each job's render ends, in a calm run: a status read at or
    /// after it answers the end, even from inside a handler that waited
    /// for its look (the run applies ends only between its steps).
    pub(crate) render_ends: BTreeMap<String, chrono::DateTime<chrono::Utc>>,
}

/// The seed's say over every port call, shared by every wrapper.
#[derive(Debug, Clone)]
pub struct Chaos(Arc<Mutex<ChaosState>>);

impl Chaos {
    pub(crate) fn new(seed: u64, crash_per_mille: u64) -> Self {
        Self(Arc::new(Mutex::new(ChaosState {
            rng: Rng::new(seed.wrapping_mul(31).wrapping_add(7)),
            crash_per_mille,
            crashed: false,
            plants_429s: true,
            calm: false,
            latency: None,
            status_storm: None,
            status_errors: 5,
            observing: false,
            created_at: BTreeMap::new(),
            render_ends: BTreeMap::new(),
            requests: 0,
            wake_ups: 0,
            wake_requests: 0,
            account_reads: 0,
            reads_at_first_due_page: None,
            gets: BTreeMap::new(),
            polling: None,
            gets_by_actor: BTreeMap::new(),
            gets_after_end: Vec::new(),
            due_reads: BTreeMap::new(),
            requests_by_actor: BTreeMap::new(),
            waking: std::collections::BTreeSet::new(),
            returned_ids: BTreeMap::new(),
            time: timing::TimeState::default(),
        })))
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ChaosState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn fate(&self) -> Fate {
        let mut s = self.lock();
        let per_mille = s.crash_per_mille;
        if !s.rng.chance(per_mille) {
            return Fate::Proceed;
        }
        if s.rng.chance(500) {
            Fate::CrashBefore
        } else {
            Fate::CrashAfter
        }
    }

    pub(crate) fn crash(&self) {
        self.lock().crashed = true;
    }

    pub(crate) fn take_crashed(&self) -> bool {
        std::mem::take(&mut self.lock().crashed)
    }

    pub(crate) fn quiet(&self) {
        self.lock().crash_per_mille = 0;
        self.calm_time();
    }

    pub(crate) fn below(&self, n: u64) -> u64 {
        self.lock().rng.below(n)
    }

    /// `n` requests are made: counted, and the clock moved on by the
    /// latency model, if any.
    pub(crate) fn request(&self, n: u64) {
        let mut s = self.lock();
        if s.observing {
            return;
        }
        s.requests += n;
        if let Some((actor, _)) = s.polling {
            *s.requests_by_actor.entry(actor).or_default() += n;
        }
        if let Some((clock, latency)) = &s.latency {
            for _ in 0..n {
                clock.advance(*latency);
            }
        }
    }

    /// Runs `read` as an observer outside the service: its requests take
    /// none of the run's time.
    pub(crate) fn observe<T>(&self, read: impl FnOnce() -> T) -> T {
        /// Puts the flag back as it was, however `read` ends.
        struct Restore<'a>(&'a Chaos, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.lock().observing = self.1;
            }
        }
        let was = std::mem::replace(&mut self.lock().observing, true);
        let _restore = Restore(self, was);
        read()
    }

    /// `n` of those requests were a wake-up's.
    fn wake_request(&self, n: u64) {
        self.lock().wake_requests += n;
    }

    /// The handler being polled reads the waiting set: it wakes.
    pub(crate) fn waking(&self) {
        let mut s = self.lock();
        if let Some((actor, _)) = s.polling {
            s.waking.insert(actor);
        }
    }

    /// Actor `id` ended: the requests it made, if it woke operations.
    pub(crate) fn woke_with(&self, id: usize) -> Option<u64> {
        let mut s = self.lock();
        let made = s.requests_by_actor.remove(&id).unwrap_or(0);
        s.waking.remove(&id).then_some(made)
    }

    fn is_calm(&self) -> bool {
        self.lock().calm
    }
}

/// Pending once: the point where the scheduler may run something else.
pub(crate) struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A slow call (Genace over the network): several switch points, so other
/// handlers run while it waits.
pub(crate) async fn slow(chaos: &Chaos) {
    chaos.spend(timing::Call::Genace);
    if chaos.is_calm() {
        return;
    }
    for _ in 0..chaos.below(6) {
        YieldOnce(false).await;
    }
}

/// One port call: a switch point, then the effect, unless the seed crashes
/// the handler before or after it.
pub(crate) async fn port<T>(chaos: &Chaos, effect: impl Future<Output = T>) -> T {
    YieldOnce(false).await;
    chaos.request(1);
    chaos.spend(timing::Call::Aws);
    match chaos.fate() {
        Fate::Proceed => effect.await,
        Fate::CrashBefore => {
            chaos.crash();
            std::future::pending().await
        }
        Fate::CrashAfter => {
            let _ = effect.await;
            chaos.crash();
            std::future::pending().await
        }
    }
}

/// An in-memory adapter whose every call goes through [`port`].
#[derive(Debug, Clone)]
pub struct Chaotic<T> {
    pub(crate) inner: T,
    pub(crate) chaos: Chaos,
}

impl<T: OperationRecords> OperationRecords for Chaotic<T> {
    async fn create(&self, rec: &OperationRecord, now: DateTime<Utc>) -> Result<Created, StoreError> {
        port(&self.chaos, self.inner.create(rec, now)).await
    }

    async fn get(&self, id: &OperationId, now: DateTime<Utc>) -> Result<Option<OperationRecord>, StoreError> {
        port(&self.chaos, self.inner.get(id, now)).await
    }

    async fn pause_before_retry(&self, pause: std::time::Duration) {
        if !self.chaos.spend_pause(pause) {
            tokio::time::sleep(pause).await;
        }
    }

    async fn apply(&self, prev: &OperationRecord, next: &OperationRecord) -> Result<Applied, StoreError> {
        if self.chaos.timed_out_write() {
            return port(&self.chaos, async {
                Err(StoreError::Service("the request timed out (a brownout)".into()))
            })
            .await;
        }
        port(&self.chaos, self.inner.apply(prev, next)).await
    }

    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<DueCursor>,
    ) -> Result<DuePage, StoreError> {
        {
            let mut chaos = self.chaos.lock();
            let reads = chaos.account_reads;
            chaos.reads_at_first_due_page.get_or_insert(reads);
        }
        let page = port(&self.chaos, self.inner.due_page(shard, before_ms, limit, cursor)).await;
        let mut chaos = self.chaos.lock();
        if let Some((actor, _)) = chaos.polling {
            chaos.due_reads.entry(actor).or_default().insert(shard);
        }
        page
    }

    async fn sweep_start(&self) -> Result<Option<u32>, StoreError> {
        port(&self.chaos, self.inner.sweep_start()).await
    }

    async fn set_sweep_start(&self, shard: u32) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.set_sweep_start(shard)).await
    }

    async fn holders_of_remote_job(&self, job_id: &str) -> Result<Vec<OperationId>, StoreError> {
        port(&self.chaos, self.inner.holders_of_remote_job(job_id)).await
    }

    async fn waiting(&self, tenant: &TenantId, limit: i32) -> Result<Vec<OperationId>, StoreError> {
        // Only wake-ups read a tenant's waiting order.
        self.chaos.wake_request(1);
        port(&self.chaos, self.inner.waiting(tenant, limit)).await
    }

    async fn list(
        &self,
        tenant: Option<&TenantId>,
        filter: &genace_stages::ports::list::ListFilter,
        limit: i32,
        after: Option<&genace_stages::ports::list::ListPosition>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<genace_stages::ports::list::ListPage, StoreError> {
        port(&self.chaos, self.inner.list(tenant, filter, limit, after, now)).await
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        filter: genace_stages::ports::table::CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        port(&self.chaos, self.inner.open_cases(tenant, filter, limit, cursor)).await
    }

    async fn open_cases_by_age(
        &self,
        filter: genace_stages::ports::table::CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, StoreError> {
        port(&self.chaos, self.inner.open_cases_by_age(filter, limit, cursor)).await
    }

    async fn case_counts(
        &self,
        tenant: Option<&TenantId>,
    ) -> Result<Vec<genace_stages::ports::table::CaseCount>, StoreError> {
        port(&self.chaos, self.inner.case_counts(tenant)).await
    }
}

/// Render times are read and added outside the chaos: counted as requests
/// (and timed, in the models), but no crash point and no draw. Both are
/// best effort in the poller (a failure is logged, and the age-based
/// schedule used), after every write and message of its look, and drawing
/// for them would move every recorded schedule (the planted bugs' first
/// seeds).
impl<T: genace_stages::ports::table::RenderTimeLog> genace_stages::ports::table::RenderTimeLog for Chaotic<T> {
    async fn render_times(
        &self,
        class: &genace_core::render::RenderClass,
    ) -> Result<genace_core::render::RenderTimes, StoreError> {
        self.chaos.request(1);
        self.inner.render_times(class).await
    }

    async fn add_render_time(&self, class: &genace_core::render::RenderClass, seconds: f64) -> Result<(), StoreError> {
        self.chaos.request(1);
        self.inner.add_render_time(class, seconds).await
    }
}

impl<T: WebhookSettings> WebhookSettings for Chaotic<T> {
    async fn webhook(&self, tenant: &TenantId) -> Result<Option<WebhookConfig>, StoreError> {
        port(&self.chaos, self.inner.webhook(tenant)).await
    }

    async fn set_webhook(&self, tenant: &TenantId, config: Option<&WebhookConfig>) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.set_webhook(tenant, config)).await
    }
}

impl<T: WebhookEndpoints> WebhookEndpoints for Chaotic<T> {
    async fn endpoints(&self, tenant: &TenantId) -> Result<EndpointSet, StoreError> {
        port(&self.chaos, self.inner.endpoints(tenant)).await
    }

    async fn save_endpoints(&self, tenant: &TenantId, set: &EndpointSet) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.save_endpoints(tenant, set)).await
    }

    async fn receivers(
        &self,
        tenants: &[TenantId],
    ) -> Result<std::collections::HashMap<TenantId, genace_core::webhook::Receivers>, StoreError> {
        port(&self.chaos, self.inner.receivers(tenants)).await
    }

    async fn record_attempt(&self, attempt: &WebhookAttempt, keep_until: DateTime<Utc>) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.record_attempt(attempt, keep_until)).await
    }

    async fn keep_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        detail: &str,
        until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        port(&self.chaos, self.inner.keep_event(tenant, event_id, detail, until)).await
    }

    async fn kept_event(
        &self,
        tenant: &TenantId,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        port(&self.chaos, self.inner.kept_event(tenant, event_id, now)).await
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
        port(
            &self.chaos,
            self.inner.attempts(tenant, endpoint_id, status, limit, after, now),
        )
        .await
    }
}

impl<T: WorkQueue> WorkQueue for Chaotic<T> {
    async fn send_work(
        &self,
        queue: Queue,
        message: &genace_core::messages::WorkMessage,
        delay_seconds: u32,
    ) -> Result<(), QueueError> {
        if queue == Queue::Wake {
            self.chaos.wake_request(1);
        }
        port(&self.chaos, self.inner.send_work(queue, message, delay_seconds)).await
    }

    async fn send_webhook_copies(&self, bodies: Vec<String>) -> Result<(), String> {
        self.inner.send_webhook_copies(bodies).await
    }
}

impl<T: RecoveryChannel> RecoveryChannel for Chaotic<T> {
    async fn send_recovery(&self, message: &RecoveryMessage) -> Result<(), QueueError> {
        port(&self.chaos, self.inner.send_recovery(message)).await
    }
}

impl<T: ObjectStore> ObjectStore for Chaotic<T> {
    async fn put(&self, key: &str, content_type: &str, data: Vec<u8>, sha256: &str) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.put(key, content_type, data, sha256)).await
    }
    async fn begin(&self, key: &str, content_type: &str) -> Result<String, StorageError> {
        port(&self.chaos, self.inner.begin(key, content_type)).await
    }
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<PartReceipt, StorageError> {
        port(&self.chaos, self.inner.put_part(key, upload_id, number, data)).await
    }
    async fn complete(&self, key: &str, upload_id: &str, parts: &[PartReceipt]) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.complete(key, upload_id, parts)).await
    }
    async fn abort(&self, key: &str, upload_id: &str) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.abort(key, upload_id)).await
    }
    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        port(&self.chaos, self.inner.head(key)).await
    }
    async fn presign_get(&self, key: &str, expiry: std::time::Duration) -> Result<String, StorageError> {
        port(&self.chaos, self.inner.presign_get(key, expiry)).await
    }
    async fn delete_all(&self, keys: &[String]) -> Result<(), StorageError> {
        port(&self.chaos, self.inner.delete_all(keys)).await
    }
    async fn abort_uploads(&self, prefix: &str, limit: usize) -> Result<usize, StorageError> {
        port(&self.chaos, self.inner.abort_uploads(prefix, limit)).await
    }
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StorageError> {
        port(&self.chaos, self.inner.list(prefix, limit)).await
    }
}

impl Downloads for Chaotic<MemoryDownloads> {
    type Body = MemoryBody;
    async fn open(&self, url: &str) -> Result<Download<MemoryBody>, DownloadError> {
        port(&self.chaos, self.inner.open(url)).await
    }
}
