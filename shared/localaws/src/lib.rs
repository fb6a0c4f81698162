//! Helpers for tests that run against the local AWS endpoint (moto over
//! HTTP), beside the adapters they test (`genace-aws`) and never in a
//! deployed function. Each call to [`LocalAws::fresh`] provisions its own uniquely named
//! table, queues and bucket, so tests never share state.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

use genace_aws::provision;
use genace_aws::{DynamoStore, S3Store, SqsQueue, clients as aws};
use genace_core::record::OperationRecord;
use genace_stages::config::{Config, QueueUrls, ResourceNames};

pub struct LocalAws {
    pub sdk: SdkConfig,
    pub names: ResourceNames,
    pub queues: QueueUrls,
    pub config: Config,
}

/// Counts the requests a client sends (one per attempt).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<AtomicUsize>);

impl RequestCounter {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Answers the next `count` requests of one DynamoDB operation (for
/// example `UpdateItem`) as DynamoDB answers a plain write to an item that
/// a transaction holds: HTTP 400, `TransactionConflictException`. The
/// request is turned into a read that changes nothing before it is sent
/// (nothing is written, as DynamoDB writes nothing), and its answer
/// replaced, in the SDK's own pipeline, so the store's error mapping is the
/// real one. Conflicts a test sets up this way are ones moto never makes.
#[derive(Debug, Clone)]
pub struct TransactionConflicts {
    operation: &'static str,
    left: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
}

impl TransactionConflicts {
    pub fn new(operation: &'static str, count: usize) -> Self {
        Self {
            operation,
            left: Arc::new(AtomicUsize::new(count)),
            answered: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How many answers were replaced so far.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Intercept for TransactionConflicts {
    fn name(&self) -> &'static str {
        "TransactionConflicts"
    }

    fn modify_before_transmit(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if !is_operation(cfg, self.operation) {
            return Ok(());
        }
        let take = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_err() {
            return Ok(());
        }
        // Refused: nothing is written. The request becomes a read that
        // changes nothing, and its answer a conflict.
        let request = context.request_mut();
        request
            .headers_mut()
            .insert("x-amz-target", "DynamoDB_20120810.ListTables");
        request.headers_mut().insert("content-length", "2");
        *request.body_mut() = aws_smithy_types::body::SdkBody::from("{}");
        cfg.interceptor_state().store_put(Refused);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if cfg.load::<Refused>().is_none() {
            return Ok(());
        }
        self.answered.fetch_add(1, Ordering::SeqCst);
        let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#;
        let mut response = aws_sdk_dynamodb::config::http::HttpResponse::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(400)?,
            aws_smithy_types::body::SdkBody::from(body),
        );
        response
            .headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        response
            .headers_mut()
            .insert("x-amzn-errortype", "TransactionConflictException");
        *context.response_mut() = response;
        Ok(())
    }
}

/// Runs a rival's write once, just before the first request of one
/// DynamoDB operation is sent: a write landing between a reader's read and
/// its own write, which moto, answering one request at a time, never
/// interleaves by itself. The rival runs on a thread of its own with a
/// runtime of its own (interceptors are synchronous), and the request
/// waits for it.
#[derive(Clone)]
pub struct RivalWrite {
    operation: &'static str,
    rival: Arc<std::sync::Mutex<Option<RivalFn>>>,
}

type RivalFn = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

impl std::fmt::Debug for RivalWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RivalWrite")
            .field("operation", &self.operation)
            .finish()
    }
}

impl RivalWrite {
    pub fn new<F, Fut>(operation: &'static str, rival: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let rival: RivalFn = Box::new(move || Box::pin(rival()));
        Self {
            operation,
            rival: Arc::new(std::sync::Mutex::new(Some(rival))),
        }
    }

    /// Whether the rival has run.
    pub fn ran(&self) -> bool {
        self.rival.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }
}

impl Intercept for RivalWrite {
    fn name(&self) -> &'static str {
        "RivalWrite"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if !is_operation(cfg, self.operation) {
            return Ok(());
        }
        let Some(rival) = self.rival.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(());
        };
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the rival")
                .block_on(rival());
        })
        .join()
        .map_err(|_| "the rival write panicked".into())
    }
}

/// Whether the request `cfg` belongs to is of the DynamoDB operation named
/// `operation` (for example `UpdateItem`).
fn is_operation(cfg: &ConfigBag, operation: &str) -> bool {
    cfg.load::<aws_smithy_runtime_api::client::orchestrator::Metadata>()
        .is_some_and(|m| m.name() == operation)
}

/// Marks a request [`TransactionConflicts`] refused.
#[derive(Debug, Clone)]
struct Refused;

impl aws_smithy_types::config_bag::Storable for Refused {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl LocalAws {
    /// Provisions a fresh set of resources. Panics with instructions when the
    /// local endpoint is not configured: run the tests through `scripts/test.sh`.
    pub async fn fresh() -> Self {
        assert!(
            std::env::var("AWS_ENDPOINT_URL").is_ok(),
            "AWS_ENDPOINT_URL is not set: run the tests with scripts/test.sh, which starts the local AWS endpoint"
        );
        let sdk = aws::load().await;
        let prefix = format!("t{}-", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let names = ResourceNames::with_prefix(&prefix);
        let queues = provision::ensure_all(&sdk, &names)
            .await
            .expect("provisioning the local stack");
        let config = Config::for_resources(&names, queues.clone());
        Self {
            sdk,
            names,
            queues,
            config,
        }
    }

    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(aws::dynamodb(&self.sdk), &self.names.table)
    }

    /// A store whose client counts its requests.
    pub fn counted_store(&self) -> (DynamoStore, RequestCounter) {
        let counter = RequestCounter::default();
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.sdk)
            .interceptor(counter.clone())
            .build();
        (
            DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &self.names.table),
            counter,
        )
    }

    /// A store whose client answers some requests with conflicts (see
    /// [`TransactionConflicts`]).
    pub fn conflicting_store(&self, conflicts: &TransactionConflicts) -> DynamoStore {
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.sdk)
            .interceptor(conflicts.clone())
            .build();
        DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &self.names.table)
    }

    /// A store whose client lets a rival write first (see [`RivalWrite`]).
    pub fn store_with_rival(&self, rival: &RivalWrite) -> DynamoStore {
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.sdk)
            .interceptor(rival.clone())
            .build();
        DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &self.names.table)
    }

    /// An object store whose client counts its requests.
    pub fn counted_objects(&self) -> (S3Store, RequestCounter) {
        let counter = RequestCounter::default();
        let conf = aws_sdk_s3::config::Builder::from(&self.sdk)
            .force_path_style(true)
            .interceptor(counter.clone())
            .build();
        (
            S3Store::new(aws_sdk_s3::Client::from_conf(conf), &self.names.bucket),
            counter,
        )
    }

    pub fn objects(&self) -> S3Store {
        S3Store::new(aws::s3(&self.sdk), &self.names.bucket)
    }

    pub fn queue(&self) -> SqsQueue {
        SqsQueue::new(aws::sqs(&self.sdk), self.queues.clone())
    }

    /// A queue whose client counts its requests.
    pub fn counted_queue(&self) -> (SqsQueue, RequestCounter) {
        let counter = RequestCounter::default();
        let conf = aws_sdk_sqs::config::Builder::from(&self.sdk)
            .interceptor(counter.clone())
            .build();
        (
            SqsQueue::new(aws_sdk_sqs::Client::from_conf(conf), self.queues.clone()),
            counter,
        )
    }

    /// Receives (and deletes) every message currently visible on a queue.
    pub async fn drain(&self, url: &str) -> Vec<String> {
        let sqs = aws::sqs(&self.sdk);
        let mut bodies = Vec::new();
        loop {
            let out = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
                .expect("receive from the local queue");
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                return bodies;
            }
            for m in messages {
                if let Some(handle) = &m.receipt_handle {
                    sqs.delete_message()
                        .queue_url(url)
                        .receipt_handle(handle)
                        .send()
                        .await
                        .expect("delete from the local queue");
                }
                bodies.extend(m.body);
            }
        }
    }

    /// Every item in the table, raw, for assertions on what was written.
    pub async fn scan(&self) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
        aws::dynamodb(&self.sdk)
            .scan()
            .table_name(&self.names.table)
            .consistent_read(true)
            .send()
            .await
            .expect("scan the local table")
            .items
            .unwrap_or_default()
    }
}

/// A new intent's record for `tenant`, with operation key `key` and a
/// one-field specification of `prompt`.
pub fn intent_record(tenant: &str, key: &str, prompt: &str) -> genace_core::record::OperationRecord {
    let intent = genace_core::domain::Intent::parse(
        &serde_json::json!({"operation_key": key, "media_type": "video",
                "specification": {"model": "m", "prompt": prompt}}),
        None,
    )
    .expect("a valid intent");
    genace_core::record::OperationRecord::new_intent(
        &genace_core::domain::TenantId::parse(tenant).expect("a valid tenant"),
        &intent,
        None,
        chrono::Utc::now(),
        chrono::Duration::seconds(60),
    )
}

/// `rec` claimed for dispatch under `token`, now, by the lifecycle rules.
pub fn claimed(rec: &genace_core::record::OperationRecord, token: &str) -> genace_core::record::OperationRecord {
    use genace_core::machine::{Input, Policy, transition};
    transition(
        rec,
        Input::ClaimDispatch { token, shard: 0 },
        chrono::Utc::now(),
        &Policy::default(),
    )
    .expect("a claimable record")
}

/// A claimed `rec` whose POST outcome is unknown: `uncertain`, with a case.
pub fn uncertain(
    rec: &genace_core::record::OperationRecord,
    token: &str,
    evidence: &str,
) -> genace_core::record::OperationRecord {
    use genace_core::machine::{Input, Policy, transition};
    let input = Input::OutcomeUnknown { token, evidence };
    transition(rec, input, chrono::Utc::now(), &Policy::default()).expect("a claimed record")
}

/// Runs each contract case (an `async fn(adapter)`) once per adapter: in
/// module `$a` on the adapter `$make_a` builds, and in module `$b` on the
/// one `$make_b` builds from a fresh [`LocalAws`] named `$env`.
#[macro_export]
macro_rules! contract_tests {
    ($a:ident => $make_a:expr, $b:ident => |$env:ident| $make_b:expr; $($case:ident),* $(,)?) => {
        mod $a {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($make_a).await;
                }
            )*
        }
        mod $b {
            $(
                #[tokio::test]
                async fn $case() {
                    let $env = $crate::LocalAws::fresh().await;
                    super::$case($make_b).await;
                }
            )*
        }
    };
}

/// `claimed`, accepted by Genace as job `job_id` holding `held` credits.
pub fn accepted_with(claimed: &OperationRecord, job_id: &str, held: Option<f64>) -> OperationRecord {
    let job = genace_core::machine::AcceptedJob {
        job_id: job_id.into(),
        state: Some("queued".into()),
        model: None,
        created_at: None,
        held_credits: held,
    };
    let input = genace_core::machine::Input::Accepted {
        token: "tok",
        job: &job,
    };
    genace_core::machine::transition(
        claimed,
        input,
        chrono::Utc::now(),
        &genace_core::machine::Policy::default(),
    )
    .unwrap()
}

/// A job of Genace's, rendered: the slot it held is free.
pub fn rendered(accepted: &OperationRecord, job_id: &str) -> OperationRecord {
    let snapshot = genace_core::remote::JobSnapshot {
        id: Some(job_id.into()),
        state: "completed".into(),
        status: genace_core::remote::RenderStatus::Succeeded,
        outputs: Some(vec![genace_core::record::OutputRef {
            url: "https://cdn.example/a.mp4".into(),
            content_type: None,
        }]),
        outputs_unreadable: None,
        client_reference: None,
        error: None,
    };
    let observed = genace_core::machine::Input::Observed(genace_core::machine::Look {
        snapshot: &snapshot,
        next_check: chrono::Utc::now(),
        stalled: None,
        seen: &Default::default(),
    });
    genace_core::machine::transition(
        accepted,
        observed,
        chrono::Utc::now(),
        &genace_core::machine::Policy::default(),
    )
    .unwrap()
}

// Claims `count` new operations of `tenant` on account shard `shard`
/// with `store`, none of which reads the account first; how many were
/// admitted.
pub async fn claims_admitted<S: genace_stages::ports::table::OperationStore>(
    store: &S,
    tenant: &str,
    shard: u16,
    count: usize,
) -> usize {
    use genace_core::machine::{self, Input, Policy};
    let now = chrono::Utc::now();
    let mut admitted = 0;
    for i in 0..count {
        let rec = intent_record(tenant, &format!("s{shard}-{i}"), "p");
        store.create(&rec, now).await.unwrap();
        let input = Input::ClaimDispatch { token: "t", shard };
        let claimed = machine::transition(&rec, input, now, &Policy::default()).unwrap();
        match store.apply(&rec, &claimed).await {
            Ok(_) => admitted += 1,
            Err(genace_stages::ports::table::StoreError::AccountFull) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    admitted
}

/// Claims `per_shard` new operations of tenant `t` on each of `shards`,
/// every one admitted; the claimed records.
pub async fn running_on<S: genace_stages::ports::table::OperationStore>(
    store: &S,
    shards: std::ops::Range<u16>,
    per_shard: usize,
) -> Vec<genace_core::record::OperationRecord> {
    use genace_core::machine::{self, Input, Policy};
    let now = chrono::Utc::now();
    let mut running = Vec::new();
    for shard in shards {
        for i in 0..per_shard {
            let rec = intent_record("t", &format!("r{shard}-{i}"), "p");
            store.create(&rec, now).await.unwrap();
            let input = Input::ClaimDispatch { token: "tok", shard };
            let claimed = machine::transition(&rec, input, now, &Policy::default()).unwrap();
            store.apply(&rec, &claimed).await.unwrap();
            running.push(claimed);
        }
    }
    running
}

/// Releases each of `claimed` (Genace never took its job): its slot is
/// free again.
pub async fn release_all<S: genace_stages::ports::table::OperationStore>(
    store: &S,
    claimed: Vec<genace_core::record::OperationRecord>,
) {
    use genace_core::machine::{self, Input, Policy};
    let now = chrono::Utc::now();
    for claimed in claimed {
        let input = Input::ClaimUnused {
            token: "tok",
            retry_at: now,
        };
        let released = machine::transition(&claimed, input, now, &Policy::default()).unwrap();
        store.apply(&claimed, &released).await.unwrap();
    }
}
