//! Dispatch against moto (DynamoDB, SQS) with wiremock as Genace.

use genace_stages::ports::Parts;
use std::time::Duration;

use chrono::Utc;
use genace_aws::DynamoStore;
use genace_aws::S3Store;
use genace_aws::SqsQueue;
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::messages::RecoveryMessage;
use genace_core::record::CaseReason;
use genace_core::record::OperationRecord;
use genace_core::record::Phase;
use genace_core::record::Settlement;
use genace_core::webhook::{AttemptStatus, EndpointSet, WebhookAttempt};
use genace_localaws::LocalAws;
use genace_outbound::GenaceClient;
use genace_outbound::GenaceConfig;
use genace_stages::api::context::Api;
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::dispatch::Dispatched;
use genace_stages::pipeline::dispatch::Dispatcher;
use genace_stages::pipeline::dispatch::PostResult;
use genace_stages::pipeline::stage::StageError;
use genace_stages::ports::clock::SystemClock;
use genace_stages::ports::table::StoreError;
use genace_stages::ports::table::prelude::*;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

struct Rig {
    env: LocalAws,
    genace: MockServer,
    dispatcher: Dispatcher<Parts<DynamoStore, SqsQueue, S3Store, GenaceClient>>,
    api: Api<Parts<DynamoStore, SqsQueue, S3Store>>,
}

fn accepted(job_id: &str, state: &str) -> ResponseTemplate {
    ResponseTemplate::new(202).set_body_json(json!({
        "job_id": job_id, "state": state, "model": "genace-video-2",
        "created_at": "2026-11-30T10:00:00Z", "held_credits": 40
    }))
}

async fn rig_with(response: ResponseTemplate, lease_seconds: i64) -> Rig {
    rig_configured(response, |config| {
        config.policy.dispatch_lease = chrono::Duration::seconds(lease_seconds)
    })
    .await
}

async fn rig_configured(response: ResponseTemplate, configure: impl FnOnce(&mut genace_stages::config::Config)) -> Rig {
    let env = LocalAws::fresh().await;
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(response)
        .mount(&genace)
        .await;
    let mut config = env.config.clone();
    config.fault_injection = true;
    configure(&mut config);
    let mut gconf = GenaceConfig::new(genace.uri(), "key");
    gconf.timeout = Duration::from_secs(1);
    let app = genace_app::from_sdk(&env.sdk, config).with_genace(GenaceClient::new(gconf).unwrap());
    let (dispatcher, api) = (app.dispatcher(), app.api());
    Rig {
        env,
        genace,
        dispatcher,
        api,
    }
}

async fn rig(response: ResponseTemplate) -> Rig {
    rig_with(response, 120).await
}

impl Rig {
    async fn intent(&self, key: &str, fault: Option<&str>) -> OperationId {
        let mut body = json!({"operation_key": key, "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": "a lighthouse", "duration": 5}});
        if let Some(f) = fault {
            body["fault"] = json!(f);
        }
        let intent = Intent::parse(&body, None).unwrap();
        let tenant = TenantId::parse("tenant-a").unwrap();
        let Submitted::New(rec) = self.api.submit(&tenant, &intent, Utc::now()).await.unwrap() else {
            panic!("expected a new operation")
        };
        self.env.drain(&self.env.queues.dispatch).await;
        rec.operation_id
    }

    async fn record(&self, id: &OperationId) -> OperationRecord {
        self.env.store().get(id, Utc::now()).await.unwrap().unwrap()
    }

    async fn posts(&self) -> usize {
        self.genace.received_requests().await.unwrap().len()
    }

    async fn queued(&self, url: &str) -> Vec<Value> {
        self.env
            .drain(url)
            .await
            .iter()
            .map(|b| serde_json::from_str(b).unwrap())
            .collect()
    }
}

#[tokio::test]
async fn an_accepted_job_is_saved_then_polled() {
    let rig = rig(accepted("job-1", "queued")).await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Accepted);
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-1"));
    assert_eq!(rec.remote_state.as_deref(), Some("queued"));
    assert_eq!(rec.remote_model.as_deref(), Some("genace-video-2"));
    assert_eq!(rec.held_credits, Some(40.0));
    assert!(rec.accepted_at.is_some());
    assert_eq!(rec.claim, None);
    assert_eq!(rig.posts().await, 1);
    // Submitted body: the specification, never our id as a job id.
    let sent: Value = serde_json::from_slice(&rig.genace.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(sent["prompt"], "a lighthouse");
    assert_eq!(sent["client_reference"], id.as_str());
    // Poll is enqueued (delayed), carrying the operation id, the plan
    // dispatch read for it (none yet, with no render of its class learned)
    // and the chain of looks the acceptance named.
    assert_eq!(rec.poll_chain, Some(rec.version));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut queued = rig.queued(&rig.env.queues.poll).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    // The look is planned 5 s after the 202 (dispatch's clock, just after
    // the acceptance it wrote).
    let look_at = queued[0]["poll"]
        .as_object_mut()
        .and_then(|p| p.remove("look_at_ms"))
        .and_then(|v| v.as_i64())
        .expect("the first look's planned time");
    let after = look_at - rec.accepted_at.unwrap().timestamp_millis();
    assert!((5_000..6_000).contains(&after), "{after} ms after the acceptance");
    assert_eq!(
        queued,
        vec![json!({"operation_id": id, "poll": {"looks": 0, "planned": true, "chain": rec.version}})]
    );
    // A message received again changes nothing and never POSTs again.
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::NotDispatchable(Phase::Accepted)
    );
    assert_eq!(rig.posts().await, 1);
}

#[tokio::test]
async fn running_at_the_202_is_accepted() {
    let rig = rig(accepted("job-2", "running")).await;
    let id = rig.intent("k", None).await;
    rig.dispatcher.dispatch(&id).await.unwrap();
    let rec = rig.record(&id).await;
    assert_eq!(
        (rec.phase, rec.remote_state.as_deref()),
        (Phase::Accepted, Some("running"))
    );
}

#[tokio::test]
async fn concurrent_messages_make_one_post() {
    let rig = rig(accepted("job-3", "queued").set_delay(Duration::from_millis(300))).await;
    let id = rig.intent("k", None).await;
    let results = futures::future::join_all((0..10).map(|_| rig.dispatcher.dispatch(&id))).await;
    let posted = results
        .iter()
        .filter(|r| matches!(r, Ok(Dispatched::Posted(_))))
        .count();
    assert_eq!(posted, 1, "{results:?}");
    assert_eq!(rig.posts().await, 1);
    assert_eq!(rig.record(&id).await.phase, Phase::Accepted);
}

#[tokio::test]
async fn a_lost_202_is_uncertain_with_a_case_and_never_reposted() {
    let rig = rig(accepted("job-late", "queued").set_delay(Duration::from_secs(3))).await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Uncertain)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    let case = rec.case.unwrap();
    assert_eq!(case.reason, CaseReason::UnknownSubmitOutcome);
    assert!(case.evidence.contains("timed out"), "{}", case.evidence);
    for _ in 0..3 {
        assert_eq!(
            rig.dispatcher.dispatch(&id).await.unwrap(),
            Dispatched::NotDispatchable(Phase::Uncertain)
        );
    }
    assert_eq!(rig.posts().await, 1);
}

#[tokio::test]
async fn a_malformed_202_is_uncertain() {
    let rig = rig(ResponseTemplate::new(202).set_body_json(json!({"state": "queued"}))).await;
    let id = rig.intent("k", None).await;
    rig.dispatcher.dispatch(&id).await.unwrap();
    assert_eq!(rig.record(&id).await.phase, Phase::Uncertain);
}

#[tokio::test]
async fn a_502_with_a_job_id_is_submit_failed_with_the_id_saved() {
    let rig =
        rig(ResponseTemplate::new(502).set_body_json(json!({"error": {"code": "provider_error", "job_id": "job-f"}})))
            .await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::SubmitFailed)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::SubmitFailed);
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-f"));
    assert_eq!(rec.settlement, Some(Settlement::Pending));
    assert_eq!(rec.case.clone().unwrap().reason, CaseReason::SettlementPending);
    rig.dispatcher.dispatch(&id).await.unwrap();
    assert_eq!(rig.posts().await, 1);
    // The failed job's reservation waits for its refund in the ledger...
    let tenant = TenantId::parse("tenant-a").unwrap();
    let totals = rig.api.credits(&tenant).await.unwrap().totals;
    assert_eq!(
        (totals.held, totals.pending_refund, totals.settled),
        (
            genace_core::ledger::Millicredits::ZERO,
            genace_core::ledger::Millicredits::new(10_000),
            genace_core::ledger::Millicredits::ZERO
        )
    );
    // ...until an operator marks it settled.
    let op = genace_stages::api::operator::Operator {
        actor: "ops".into(),
        tenant: None,
    };
    let settle = genace_core::machine::Resolution::MarkSettled;
    rig.api
        .operator(&op)
        .resolve(&id, &settle, "refund seen on the invoice", rec.version)
        .await
        .unwrap();
    let totals = rig.api.credits(&tenant).await.unwrap().totals;
    assert_eq!(
        (totals.pending_refund, totals.settled),
        (
            genace_core::ledger::Millicredits::ZERO,
            genace_core::ledger::Millicredits::new(10_000)
        )
    );
}

#[tokio::test]
async fn a_4xx_is_rejected() {
    let rig = rig(ResponseTemplate::new(400).set_body_string("unknown model")).await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Rejected)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Rejected);
    let err = rec.last_error.unwrap();
    assert_eq!(err.status, Some(400));
    assert!(err.detail.contains("unknown model"));
    assert!(rec.expires_at_seconds.is_some(), "a finished operation gets its TTL");
}

#[tokio::test]
async fn a_429_releases_the_claim_and_retries_after_the_delay() {
    let rig = rig(ResponseTemplate::new(429).insert_header("retry-after", "4")).await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Prepared);
    assert_eq!(rec.claim, None);
    assert_eq!(rec.rate_limited_count, 1);
    assert!(rec.retry_at_ms.is_some());
    // An early duplicate does not POST and is dropped, so copies never multiply.
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Deferred);
    assert_eq!(rig.posts().await, 1);
    assert!(
        rig.queued(&rig.env.queues.dispatch).await.is_empty(),
        "the retry is delayed"
    );
    tokio::time::sleep(Duration::from_millis(5600)).await;
    let retries = rig.queued(&rig.env.queues.dispatch).await;
    assert_eq!(retries.len(), 1, "exactly one delayed retry");
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_the_outcome_is_uncertain() {
    let rig = rig(ResponseTemplate::new(307).insert_header("location", "/v1/jobs-elsewhere")).await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs-elsewhere"))
        .respond_with(accepted("job-2", "queued"))
        .mount(&rig.genace)
        .await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Uncertain)
    );
    assert_eq!(
        rig.posts().await,
        1,
        "exactly one POST arrived: the 307 was not re-sent"
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert_eq!(rec.case.unwrap().reason, CaseReason::UnknownSubmitOutcome);
}

#[tokio::test]
async fn an_oversized_answer_to_a_post_is_uncertain() {
    let padding = "x".repeat(genace_core::remote::MAX_BODY_BYTES);
    let body = json!({"job_id": "job-big", "state": "queued", "padding": padding});
    let rig = rig(ResponseTemplate::new(202).set_body_json(body)).await;
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Uncertain)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert!(rec.case.unwrap().evidence.contains("larger than"));
}

#[tokio::test]
async fn an_account_refusal_holds_the_operation_and_a_later_try_succeeds_under_the_same_key() {
    let env_rig = rig(accepted("job-after-fix", "queued")).await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(401).set_body_string("invalid api key"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&env_rig.genace)
        .await;
    let mut rig = env_rig;
    rig.dispatcher.config.policy.account_hold = chrono::Duration::seconds(2);
    let id = rig.intent("k", None).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AccountHeld)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Prepared, "held, not rejected");
    assert_eq!(rec.case.as_ref().unwrap().reason, CaseReason::AccountProblem);
    assert!(rec.expires_at_seconds.is_none());
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Deferred);
    assert_eq!(rig.posts().await, 1, "nothing is POSTed while held");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-after-fix"));
    assert_eq!(rec.case, None);
    assert_eq!(rig.posts().await, 2);
}

#[tokio::test]
async fn only_400_409_422_reject_the_intent() {
    for (status, held) in [
        (400, false),
        (409, false),
        (422, false),
        (402, true),
        (403, true),
        (404, true),
        (405, true),
    ] {
        let rig = rig(ResponseTemplate::new(status)).await;
        let id = rig.intent("k", None).await;
        let rec = {
            rig.dispatcher.dispatch(&id).await.unwrap();
            rig.record(&id).await
        };
        if held {
            assert_eq!(rec.phase, Phase::Prepared, "{status}");
            assert_eq!(rec.case.unwrap().reason, CaseReason::AccountProblem, "{status}");
        } else {
            assert_eq!(rec.phase, Phase::Rejected, "{status}");
        }
    }
}

/// A store whose every successful write is reported as a conflict carrying
/// the stored record, as when the SDK retries a write that had landed.
struct EchoingStore(DynamoStore);

impl OperationRecords for EchoingStore {
    async fn create(
        &self,
        rec: &OperationRecord,
        now: chrono::DateTime<Utc>,
    ) -> Result<genace_stages::ports::table::Created, genace_stages::ports::table::StoreError> {
        self.0.create(rec, now).await
    }

    async fn get(
        &self,
        id: &OperationId,
        now: chrono::DateTime<Utc>,
    ) -> Result<Option<OperationRecord>, genace_stages::ports::table::StoreError> {
        self.0.get(id, now).await
    }

    async fn apply(
        &self,
        prev: &OperationRecord,
        next: &OperationRecord,
    ) -> Result<genace_stages::ports::table::Applied, genace_stages::ports::table::StoreError> {
        match self.0.apply(prev, next).await? {
            genace_stages::ports::table::Applied::Written => {
                let stored = self.0.get(&next.operation_id, Utc::now()).await?.unwrap();
                Err(genace_stages::ports::table::StoreError::Conflict(Some(Box::new(
                    stored,
                ))))
            }
            unchanged => Ok(unchanged),
        }
    }

    async fn due_page(
        &self,
        shard: u32,
        before_ms: i64,
        limit: i32,
        cursor: Option<genace_stages::ports::table::DueCursor>,
    ) -> Result<genace_stages::ports::table::DuePage, genace_stages::ports::table::StoreError> {
        self.0.due_page(shard, before_ms, limit, cursor).await
    }

    async fn sweep_start(&self) -> Result<Option<u32>, genace_stages::ports::table::StoreError> {
        self.0.sweep_start().await
    }

    async fn set_sweep_start(&self, shard: u32) -> Result<(), genace_stages::ports::table::StoreError> {
        self.0.set_sweep_start(shard).await
    }

    async fn holders_of_remote_job(
        &self,
        job_id: &str,
    ) -> Result<Vec<OperationId>, genace_stages::ports::table::StoreError> {
        self.0.holders_of_remote_job(job_id).await
    }

    async fn waiting(
        &self,
        tenant: &TenantId,
        limit: i32,
    ) -> Result<Vec<OperationId>, genace_stages::ports::table::StoreError> {
        self.0.waiting(tenant, limit).await
    }

    async fn list(
        &self,
        tenant: Option<&TenantId>,
        filter: &genace_stages::ports::list::ListFilter,
        limit: i32,
        after: Option<&genace_stages::ports::list::ListPosition>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<genace_stages::ports::list::ListPage, genace_stages::ports::table::StoreError> {
        self.0.list(tenant, filter, limit, after, now).await
    }

    async fn open_cases(
        &self,
        tenant: Option<&TenantId>,
        filter: genace_stages::ports::table::CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<genace_stages::ports::table::CasePage, genace_stages::ports::table::StoreError> {
        self.0.open_cases(tenant, filter, limit, cursor).await
    }

    async fn open_cases_by_age(
        &self,
        filter: genace_stages::ports::table::CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<genace_stages::ports::table::CasePage, genace_stages::ports::table::StoreError> {
        self.0.open_cases_by_age(filter, limit, cursor).await
    }

    async fn case_counts(
        &self,
        tenant: Option<&TenantId>,
    ) -> Result<Vec<genace_stages::ports::table::CaseCount>, genace_stages::ports::table::StoreError> {
        self.0.case_counts(tenant).await
    }
}

impl genace_stages::ports::table::RenderTimeLog for EchoingStore {
    async fn render_times(
        &self,
        class: &genace_core::render::RenderClass,
    ) -> Result<genace_core::render::RenderTimes, genace_stages::ports::table::StoreError> {
        self.0.render_times(class).await
    }

    async fn add_render_time(
        &self,
        class: &genace_core::render::RenderClass,
        seconds: f64,
    ) -> Result<(), genace_stages::ports::table::StoreError> {
        self.0.add_render_time(class, seconds).await
    }
}

impl TenantLedgers for EchoingStore {
    async fn account(&self) -> Result<genace_core::capacity::AccountCapacity, genace_stages::ports::table::StoreError> {
        self.0.account().await
    }

    async fn account_shards(
        &self,
    ) -> Result<Vec<genace_core::capacity::AccountCapacity>, genace_stages::ports::table::StoreError> {
        self.0.account_shards().await
    }

    async fn ledger(
        &self,
        tenant: &TenantId,
    ) -> Result<genace_core::ledger::TenantLedger, genace_stages::ports::table::StoreError> {
        self.0.ledger(tenant).await
    }

    async fn ledgers(
        &self,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<genace_stages::ports::table::LedgerPage, genace_stages::ports::table::StoreError> {
        self.0.ledgers(limit, cursor).await
    }

    async fn waiting_ledgers(
        &self,
        limit: usize,
    ) -> Result<Vec<genace_core::ledger::TenantLedger>, genace_stages::ports::table::StoreError> {
        self.0.waiting_ledgers(limit).await
    }

    async fn send_to_back(&self, tenants: &[String]) -> Result<(), genace_stages::ports::table::StoreError> {
        self.0.send_to_back(tenants).await
    }

    async fn park(
        &self,
        as_read: &[genace_core::ledger::TenantLedger],
    ) -> Result<usize, genace_stages::ports::table::StoreError> {
        self.0.park(as_read).await
    }

    async fn parked_ledgers(
        &self,
        limit: usize,
    ) -> Result<Vec<genace_core::ledger::TenantLedger>, genace_stages::ports::table::StoreError> {
        self.0.parked_ledgers(limit).await
    }

    async fn unpark(&self, tenant: &str) -> Result<bool, genace_stages::ports::table::StoreError> {
        self.0.unpark(tenant).await
    }

    async fn rejoin_waiting_set(&self, pages: usize) -> Result<usize, genace_stages::ports::table::StoreError> {
        self.0.rejoin_waiting_set(pages).await
    }

    async fn set_account_limit(
        &self,
        limit: Option<u32>,
    ) -> Result<genace_core::capacity::AccountCapacity, genace_stages::ports::table::StoreError> {
        self.0.set_account_limit(limit).await
    }

    async fn learn_account_limit(
        &self,
        seen: Option<u32>,
        learned: Option<u32>,
        raise_every: Option<u32>,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, genace_stages::ports::table::StoreError> {
        self.0.learn_account_limit(seen, learned, raise_every, at).await
    }

    async fn set_spend_limit(
        &self,
        tenant: &TenantId,
        limit: Option<genace_core::ledger::Millicredits>,
    ) -> Result<genace_core::ledger::TenantLedger, genace_stages::ports::table::StoreError> {
        self.0.set_spend_limit(tenant, limit).await
    }

    async fn set_max_in_flight(
        &self,
        tenant: &TenantId,
        limit: Option<u32>,
    ) -> Result<genace_core::ledger::TenantLedger, genace_stages::ports::table::StoreError> {
        self.0.set_max_in_flight(tenant, limit).await
    }
}

impl WebhookSettings for EchoingStore {
    async fn webhook(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<genace_core::webhook::WebhookConfig>, genace_stages::ports::table::StoreError> {
        self.0.webhook(tenant).await
    }

    async fn set_webhook(
        &self,
        tenant: &TenantId,
        config: Option<&genace_core::webhook::WebhookConfig>,
    ) -> Result<(), genace_stages::ports::table::StoreError> {
        self.0.set_webhook(tenant, config).await
    }
}

/// Endpoints as the table has them: dispatch never reads them.
impl WebhookEndpoints for EchoingStore {
    async fn endpoints(&self, tenant: &TenantId) -> Result<EndpointSet, StoreError> {
        self.0.endpoints(tenant).await
    }

    async fn save_endpoints(&self, tenant: &TenantId, set: &EndpointSet) -> Result<(), StoreError> {
        self.0.save_endpoints(tenant, set).await
    }

    async fn receivers(
        &self,
        tenants: &[TenantId],
    ) -> Result<std::collections::HashMap<TenantId, genace_core::webhook::Receivers>, StoreError> {
        self.0.receivers(tenants).await
    }

    async fn record_attempt(&self, attempt: &WebhookAttempt, until: chrono::DateTime<Utc>) -> Result<(), StoreError> {
        self.0.record_attempt(attempt, until).await
    }

    async fn keep_event(
        &self,
        t: &TenantId,
        id: &str,
        detail: &str,
        until: chrono::DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.0.keep_event(t, id, detail, until).await
    }

    async fn kept_event(
        &self,
        t: &TenantId,
        id: &str,
        now: chrono::DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        self.0.kept_event(t, id, now).await
    }

    async fn attempts(
        &self,
        tenant: &TenantId,
        endpoint: &str,
        status: Option<AttemptStatus>,
        limit: usize,
        after: Option<&str>,
        now: chrono::DateTime<Utc>,
    ) -> Result<(Vec<WebhookAttempt>, Option<String>), StoreError> {
        self.0.attempts(tenant, endpoint, status, limit, after, now).await
    }
}

#[tokio::test]
async fn a_retried_write_that_already_landed_is_recognised_as_our_own() {
    let rig = rig(accepted("job-own", "queued")).await;
    let id = rig.intent("k", None).await;
    let echoing = Dispatcher::<Parts<_, _, S3Store, _>> {
        store: EchoingStore(rig.env.store()),
        queue: rig.env.queue(),
        genace: rig.dispatcher.genace.clone(),
        config: rig.dispatcher.config.clone(),
        clock: SystemClock,
        metrics: genace_stages::ports::metrics::Metrics::off(),
    };
    assert_eq!(
        echoing.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted),
        "our own claim is not a duplicate, our own accept is not a conflict"
    );
    assert_eq!(rig.posts().await, 1);
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Accepted);
    assert_eq!(rec.case, None);
    assert!(
        rig.env.drain(&rig.env.queues.recovery).await.is_empty(),
        "nothing went to the recovery channel"
    );
}

#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_job_id_is_logged_when_received_before_any_commit() {
    let rig = rig(accepted("job-logged", "queued")).await;
    let id = rig.intent("k", Some("dispatch.after_response")).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Tests on other threads may have cached the log callsites' interest
    // while no subscriber of this thread existed: ask again. A callsite
    // that another thread hits for the first time while the cache is
    // rebuilt can still cache an interest without this thread's
    // subscriber (tracing registers callsites lazily), so an attempt that
    // logged nothing is made once more, with every callsite registered.
    let mut attempt = 0;
    let (id, line) = loop {
        attempt += 1;
        let id = match attempt {
            1 => id.clone(),
            _ => rig.intent("k2", Some("dispatch.after_response")).await,
        };
        tracing::callsite::rebuild_interest_cache();
        // The handler stops right after the response: nothing was committed.
        assert!(matches!(
            rig.dispatcher.dispatch(&id).await,
            Err(StageError::Crashed("dispatch.after_response"))
        ));
        assert_eq!(rig.record(&id).await.remote_job_id, None);
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        match log.lines().find(|l| l.contains("Genace job id received")) {
            Some(line) => break (id, line.to_owned()),
            None if attempt < 2 => continue,
            None => panic!("no receipt line in {log}"),
        }
    };
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["fields"]["remote_job_id"], "job-logged");
    assert_eq!(v["fields"]["operation_id"], id.as_str());
}

#[tokio::test]
async fn an_expired_claim_becomes_uncertain_without_a_post() {
    let rig = rig_with(accepted("job-x", "queued"), 3).await;
    let id = rig.intent("k", Some("dispatch.before_post")).await;
    assert!(matches!(
        rig.dispatcher.dispatch(&id).await,
        Err(StageError::Crashed("dispatch.before_post"))
    ));
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Submitting);
    assert_eq!(rec.fault, None, "a fault fires once");
    // Redelivered while the lease lives: a duplicate.
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Duplicate);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Interrupted);
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert_eq!(rec.case.unwrap().reason, CaseReason::InterruptedDispatch);
    assert_eq!(rig.posts().await, 0);
}

#[tokio::test]
async fn a_crash_after_the_202_before_the_commit_leaves_a_visible_case() {
    let rig = rig_with(accepted("job-c", "queued"), 3).await;
    let id = rig.intent("k", Some("dispatch.after_response")).await;
    assert!(matches!(
        rig.dispatcher.dispatch(&id).await,
        Err(StageError::Crashed("dispatch.after_response"))
    ));
    assert_eq!(rig.record(&id).await.phase, Phase::Submitting);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Interrupted);
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert!(rec.case.is_some());
    assert_eq!(rig.posts().await, 1, "exactly one POST, even after redelivery");
}

#[tokio::test]
async fn a_crash_after_the_commit_resumes_polling_on_redelivery() {
    let rig = rig(accepted("job-r", "queued")).await;
    let id = rig.intent("k", Some("dispatch.after_commit")).await;
    assert!(matches!(
        rig.dispatcher.dispatch(&id).await,
        Err(StageError::Crashed("dispatch.after_commit"))
    ));
    assert_eq!(rig.record(&id).await.phase, Phase::Accepted);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        rig.queued(&rig.env.queues.poll).await.is_empty(),
        "the crash stopped before the poll"
    );
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::NotDispatchable(Phase::Accepted)
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The first look of the chain the acceptance named.
    let chain = rig.record(&id).await.poll_chain;
    assert!(chain.is_some());
    assert_eq!(
        rig.queued(&rig.env.queues.poll).await,
        vec![json!({"operation_id": id, "poll": {"looks": 0, "planned": false, "chain": chain}})]
    );
    assert_eq!(rig.posts().await, 1);
}

#[tokio::test]
async fn an_unsaved_acceptance_goes_to_the_recovery_queue_and_is_applied_from_it() {
    let rig = rig(accepted("job-p", "running")).await;
    let id = rig.intent("k", Some("dispatch.persist_fails")).await;
    assert_eq!(
        rig.dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AcceptedUnpersisted)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Submitting, "nothing announced acceptance");
    let token = rec.claim.as_ref().unwrap().token.clone();

    let bodies = rig.env.drain(&rig.env.queues.recovery).await;
    assert_eq!(bodies.len(), 1);
    let msg: RecoveryMessage = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(msg.operation_id, id);
    assert_eq!(msg.claim_token, token);
    assert!(msg.raw_response.contains("job-p"));

    // ReceiptDeferral never POSTs again.
    assert_eq!(rig.dispatcher.dispatch(&id).await.unwrap(), Dispatched::Duplicate);
    assert_eq!(rig.posts().await, 1);

    // A message under another claim is refused; the right one is applied, twice harmlessly.
    let mut forged = msg.clone();
    forged.claim_token = "someone-else".into();
    let recovery = genace_app::from_sdk(&rig.env.sdk, rig.dispatcher.config.clone()).recovery();
    assert!(recovery.apply(&forged).await.is_err());
    for _ in 0..2 {
        recovery.apply(&msg).await.unwrap();
    }
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Accepted);
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-p"));
    assert_eq!(rec.remote_state.as_deref(), Some("running"));
    assert_eq!(rig.posts().await, 1);
}

#[tokio::test]
async fn a_connection_reset_is_uncertain() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let _ = sock.set_zero_linger();
            drop(sock);
        }
    });
    let env = LocalAws::fresh().await;
    let config = env.config.clone();
    let app = genace_app::from_sdk(&env.sdk, config)
        .with_genace(GenaceClient::new(GenaceConfig::new(format!("http://{addr}"), "k")).unwrap());
    let (dispatcher, api) = (app.dispatcher(), app.api());
    let intent = Intent::parse(
        &json!({"operation_key": "k", "media_type": "image", "specification": {"model": "m", "prompt": "p"}}),
        None,
    )
    .unwrap();
    let Submitted::New(rec) = api
        .submit(&TenantId::parse("t").unwrap(), &intent, Utc::now())
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        dispatcher.dispatch(&rec.operation_id).await.unwrap(),
        Dispatched::Posted(PostResult::Uncertain)
    );
    let stored = env.store().get(&rec.operation_id, Utc::now()).await.unwrap().unwrap();
    assert_eq!(stored.phase, Phase::Uncertain);
}

#[tokio::test]
async fn a_batch_reports_only_the_messages_that_must_come_back() {
    let rig = rig(accepted("job-b", "queued")).await;
    let id = rig.intent("k", None).await;
    let fixture = include_str!("fixtures/sqs-event.json").replace("REPLACED", id.as_str());
    let event: aws_lambda_events::event::sqs::SqsEvent = serde_json::from_str(&fixture).unwrap();
    let response = genace_edge::sqs::process_batch(event, &rig.dispatcher).await;
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    // The dispatched message is acknowledged; the malformed one stays (and ends in the DLQ).
    assert_eq!(failed, ["2e1424d4-f796-459a-8184-9c92662be6da"]);
    assert_eq!(rig.record(&id).await.phase, Phase::Accepted);
    assert_eq!(rig.posts().await, 1);
}

/// Two dispatches race for room under the tenant's spend limit: exactly one
/// claims and POSTs; the other waits in `prepared`, shows the hold, and is
/// claimed by itself once the first job's credits are released.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn two_dispatches_race_for_room_for_one_and_the_loser_resumes() {
    let rig = rig(accepted("job-limit", "queued")).await;
    let tenant = TenantId::parse("tenant-a").unwrap();
    let store = rig.env.store();
    // Room for one video reservation (10 credits), not two.
    store
        .set_spend_limit(&tenant, Some(genace_core::ledger::Millicredits::new(15_000)))
        .await
        .unwrap();
    let a = rig.intent("a", None).await;
    let b = rig.intent("b", None).await;
    let (ra, rb) = tokio::join!(rig.dispatcher.dispatch(&a), rig.dispatcher.dispatch(&b));
    let outcomes = [ra.unwrap(), rb.unwrap()];
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Dispatched::Posted(PostResult::Accepted))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&Dispatched::WaitingForCredits), "{outcomes:?}");
    assert_eq!(rig.posts().await, 1);
    let (winner, loser) = if outcomes[0] == Dispatched::WaitingForCredits {
        (b, a)
    } else {
        (a, b)
    };
    let waiting = rig.record(&loser).await;
    assert_eq!(waiting.phase, Phase::Prepared);
    assert!(waiting.spend_hold.is_some());
    assert_eq!(waiting.due_at_ms, None, "no timer: woken when credits may be free");
    // The view api answers with reports the hold.
    let replay = Intent::parse(
        &json!({"operation_key": waiting.operation_key, "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": "a lighthouse", "duration": 5}}),
        None,
    )
    .unwrap();
    let Submitted::Replayed(seen) = rig.api.submit(&tenant, &replay, Utc::now()).await.unwrap() else {
        panic!("expected the recorded operation")
    };
    assert!(seen.spend_hold.is_some());
    // The 202 said 40 credits: held now exceeds the limit, and stays recorded.
    assert_eq!(
        store.ledger(&tenant).await.unwrap().totals.held,
        genace_core::ledger::Millicredits::new(40_000)
    );
    // Still no room: a look (a wake-up, or the sweep's repair) waits again without a POST.
    assert_eq!(
        rig.dispatcher.dispatch(&loser).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    assert_eq!(rig.posts().await, 1);
    // The first job fails to render: its credits are released.
    let accepted_rec = rig.record(&winner).await;
    let snapshot = genace_core::remote::JobSnapshot {
        id: Some("job-limit".into()),
        state: "failed".into(),
        status: genace_core::remote::RenderStatus::Failed,
        outputs: None,
        outputs_unreadable: None,
        client_reference: None,
        error: Some(json!({"message": "provider error"})),
    };
    let failed = genace_core::machine::transition(
        &accepted_rec,
        genace_core::machine::Input::Observed(genace_core::machine::Look {
            snapshot: &snapshot,
            next_check: Utc::now(),
            stalled: None,
            seen: &Default::default(),
        }),
        Utc::now(),
        &rig.dispatcher.config.policy,
    )
    .unwrap();
    store.apply(&accepted_rec, &failed).await.unwrap();
    assert_eq!(
        store.ledger(&tenant).await.unwrap().totals.held,
        genace_core::ledger::Millicredits::ZERO
    );
    assert_eq!(
        rig.dispatcher.dispatch(&loser).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(rig.posts().await, 2);
    let resumed = rig.record(&loser).await;
    assert_eq!((resumed.phase, resumed.spend_hold), (Phase::Accepted, None));
}
