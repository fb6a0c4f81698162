//! Contention on the local stack: real DynamoDB cancels a transaction that
//! meets another on one of its items (`TransactionConflict`), and refuses a
//! plain write to an item a transaction holds
//! (`TransactionConflictException`), which moto never does. A fault proxy
//! between the stack and moto cancels 60 % of every `TransactWriteItems`
//! call that way (or refuses plain writes, and browns out). Every operation is still
//! delivered once, with one POST each, no case, and no job id handed to the
//! recovery channel: contention is retried, not escalated. A table that
//! turns busy as Genace answers has the job id saved once it is quiet
//! again, or handed to recovery when it stays busy past the save's budget.

use std::time::{Duration, Instant};

use genace_client::Client;
use genace_local::faults::FaultProxy;
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Genace: a POST's job id is `job-<prompt>`, holding half a credit, and
/// every job has completed by its first look, to one small image.
struct Genace {
    base: String,
}

impl Respond for Genace {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if request.method == wiremock::http::Method::POST {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let prompt = body["prompt"].as_str().unwrap_or("unknown");
            // Holding less than the reservation: saving the job id moves
            // the tenant's credits, so it is a transaction too.
            return ResponseTemplate::new(202)
                .set_body_json(json!({"job_id": format!("job-{prompt}"), "state": "queued", "held_credits": 0.5}));
        }
        let id = request.url.path().trim_start_matches("/v1/jobs/").to_owned();
        ResponseTemplate::new(200).set_body_json(json!({
            "id": id, "state": "completed", "error": null,
            "outputs": [{"url": format!("{}/outputs/{id}.png", self.base), "content_type": "image/png"}]
        }))
    }
}

/// A service config that finds nothing in the environment.
#[derive(Debug)]
struct NoEnvironment;

impl aws_types::service_config::LoadServiceConfig for NoEnvironment {
    fn load_config(&self, _key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        None
    }
}

const TENANTS: usize = 3;
const PER_TENANT: usize = 6;

/// The Genace stand-in on loopback.
async fn standin() -> MockServer {
    let genace = MockServer::start().await;
    let responder = || Genace { base: genace.uri() };
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(responder())
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/v1/jobs/[^/]+$"))
        .respond_with(responder())
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/outputs/"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"rendered".to_vec()))
        .mount(&genace)
        .await;
    genace
}

/// Each operation's view once delivered, within 150 s in all.
async fn delivered(operations: &[(Client, String)]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut views = Vec::new();
    for (user, id) in operations {
        let left = deadline.saturating_duration_since(Instant::now());
        views.push(e2e::until_delivery(user, id, "delivered", left).await);
    }
    views
}

/// What a burst through the fault proxy left: each operation's view once
/// delivered, Genace's POSTs, the proxy and the stack's config.
struct Burst {
    views: Vec<Value>,
    posts: usize,
    proxy: FaultProxy,
    config: genace_stages::config::Config,
    /// The answers to an operator's `PUT /v1/capacity`, made mid-burst.
    limit_set: Vec<u16>,
}

/// [`TENANTS`] × [`PER_TENANT`] images through the stack, its table behind
/// a fault proxy cancelling `conflict_percent` of the transactions, and
/// `during` run on the proxy as the burst begins (it returns to quiet
/// after `quiet_after`); mid-burst, an operator sets the account's limit
/// four times, to 4 last.
async fn burst(conflict_percent: u64, during: impl FnOnce(&FaultProxy), quiet_after: Duration) -> Burst {
    let env = LocalAws::fresh().await;
    let upstream = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let proxy = FaultProxy::start(&upstream, conflict_percent).await.unwrap();
    // Without the environment's service config, whose AWS_ENDPOINT_URL
    // would win over the endpoint set here.
    let mut sdk = env.sdk.to_builder().endpoint_url(proxy.url.clone());
    sdk.set_service_config(Some(NoEnvironment));
    let sdk = sdk.build();
    let genace = standin().await;
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    // Fewer slots than intents: claims wait, wake and free slots, so every
    // kind of transaction meets the proxy.
    config.max_in_flight = Some(4);
    let mut gconf = GenaceConfig::new(genace.uri(), "contention-test-key");
    gconf.timeout = Duration::from_secs(3);
    let settings = runner::RunnerSettings::for_tests();
    let api = format!("http://{}", settings.intake_addr);
    let running = runner::start(&sdk, config.clone(), gconf, settings).await.unwrap();
    let run = &uuid::Uuid::new_v4().simple().to_string()[..8];
    during(&proxy);
    let mut operations = Vec::new();
    for t in 0..TENANTS {
        let tenant = format!("busy-{t}-{run}");
        let user = e2e::client(&api, &devauth::issue("tenant_id", &tenant, 600).unwrap());
        for i in 0..PER_TENANT {
            let created = e2e::create(
                &user,
                json!({"operation_key": format!("k{i}"), "media_type": "image",
                       "specification": {"model": "genace-image-1", "prompt": format!("{tenant}-{i}")}}),
            )
            .await;
            operations.push((user.clone(), created["operation_id"].as_str().unwrap().to_owned()));
        }
    }
    // Mid-burst, with claims and ends writing the account item.
    let operator = e2e::client(
        &api,
        &devauth::issue_operator("ops@example.com", "tenant_id", None, 600).unwrap(),
    );
    let mut limit_set = Vec::new();
    for limit in [3, 4, 3, 4] {
        let put = operator.set_account_limit(Some(limit)).await;
        limit_set.push(put.map_or_else(|e| e.status().unwrap_or(0), |_| 200));
    }
    tokio::time::sleep(quiet_after).await;
    proxy.set_delay(Duration::ZERO);
    let views = delivered(&operations).await;
    running.shutdown().await;
    let posts = genace
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method == wiremock::http::Method::POST)
        .count();
    Burst {
        views,
        posts,
        proxy,
        config,
        limit_set,
    }
}

/// Every operation of `burst` delivered once: rendered, no case, one POST
/// each, and no job id handed to the recovery channel.
fn delivered_once_each(burst: &Burst) {
    for op in &burst.views {
        assert_eq!(op["phase"], "rendered", "{op}");
        assert!(op["reconciliation_case"].is_null(), "a conflict became a case: {op}");
    }
    assert_eq!(burst.posts, TENANTS * PER_TENANT, "one POST per operation");
    assert_eq!(
        burst.proxy.sends_to(&burst.config.queues.recovery),
        0,
        "a job id went to the recovery channel: contention became an incident"
    );
    assert!(
        burst.proxy.sends_to(&burst.config.queues.poll) > 0,
        "the proxy saw the stack's queue traffic"
    );
    assert_eq!(burst.limit_set, [200; 4], "every operator's limit was saved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_is_retried_never_an_incident_or_a_case() {
    let burst = burst(60, |_| {}, Duration::ZERO).await;
    delivered_once_each(&burst);
    assert!(
        burst.proxy.cancelled() > 10,
        "the proxy cancelled only {} transactions",
        burst.proxy.cancelled()
    );
}

/// Plain writes refused as DynamoDB refuses a write to an item a
/// transaction holds (every one while a transaction holds it, and half of
/// those to items transactions write), transactions cancelled at 30 %,
/// and a brownout (every answer 250 ms late) for the burst's first 3 s:
/// every operation is still delivered once, and an operator's limit set as
/// the burst begins is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_plain_writes_and_a_brownout_lose_nothing() {
    let brownout = |proxy: &FaultProxy| {
        proxy.set_plain_conflict_percent(50);
        proxy.set_delay(Duration::from_millis(250));
    };
    let burst = burst(30, brownout, Duration::from_secs(3)).await;
    delivered_once_each(&burst);
    assert!(
        burst.proxy.plain_refused() > 10,
        "the proxy refused only {} plain writes",
        burst.proxy.plain_refused()
    );
}

/// Genace accepts the POST, and as it answers the table turns busy: every
/// transaction from then on is cancelled with `TransactionConflict`.
struct TableTurnsBusy {
    proxy: std::sync::Arc<FaultProxy>,
}

impl Respond for TableTurnsBusy {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.proxy.set_conflict_percent(100);
        // Holding less than the reservation: saving the job id moves the
        // tenant's credits, so it is a transaction.
        ResponseTemplate::new(202).set_body_json(json!({"job_id": "job-busy", "state": "queued", "held_credits": 0.5}))
    }
}

/// One intent, dispatched through the fault proxy (quiet until Genace
/// answers): the dispatch's outcome, the seconds it took, and the proxy.
async fn dispatch_into_a_busy_table(
    quiet_again_after: Option<Duration>,
) -> (
    genace_stages::pipeline::dispatch::Dispatched,
    f64,
    std::sync::Arc<FaultProxy>,
    LocalAws,
) {
    use genace_core::domain::{Intent, TenantId};
    use genace_stages::api::intake::Submitted;
    let env = LocalAws::fresh().await;
    let upstream = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let proxy = std::sync::Arc::new(FaultProxy::start(&upstream, 0).await.unwrap());
    let mut sdk = env.sdk.to_builder().endpoint_url(proxy.url.clone());
    sdk.set_service_config(Some(NoEnvironment));
    let sdk = sdk.build();
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(TableTurnsBusy { proxy: proxy.clone() })
        .mount(&genace)
        .await;
    let mut gconf = GenaceConfig::new(genace.uri(), "contention-test-key");
    gconf.timeout = Duration::from_secs(3);
    let app =
        genace_app::from_sdk(&sdk, env.config.clone()).with_genace(genace_outbound::GenaceClient::new(gconf).unwrap());
    let body = json!({"operation_key": "k", "media_type": "image",
        "specification": {"model": "genace-image-1", "prompt": "busy"}});
    let intent = Intent::parse(&body, None).unwrap();
    let tenant = TenantId::parse("tenant-busy").unwrap();
    let Submitted::New(rec) = app.api().submit(&tenant, &intent, chrono::Utc::now()).await.unwrap() else {
        panic!("expected a new operation")
    };
    let quiet = async {
        if let Some(after) = quiet_again_after {
            while genace.received_requests().await.unwrap_or_default().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(after).await;
            proxy.set_conflict_percent(0);
        }
    };
    let started = Instant::now();
    let dispatcher = app.dispatcher();
    let (dispatched, ()) = tokio::join!(dispatcher.dispatch(&rec.operation_id), quiet);
    let took = started.elapsed().as_secs_f64();
    (dispatched.unwrap(), took, proxy, env)
}

/// A job id Genace named is saved by trying its commit again while the
/// table is busy: once the conflicts stop, it is saved, and nothing goes to
/// the recovery channel.
#[tokio::test]
async fn a_job_id_is_saved_once_a_busy_table_is_quiet_again() {
    use genace_stages::pipeline::dispatch::{Dispatched, PostResult};
    let (dispatched, _, proxy, env) = dispatch_into_a_busy_table(Some(Duration::from_secs(5))).await;
    assert_eq!(dispatched, Dispatched::Posted(PostResult::Accepted));
    assert!(
        proxy.cancelled() > u64::from(genace_stages::ports::table::CONFLICT_TRIES),
        "the save met more than one transaction's tries of conflicts: {}",
        proxy.cancelled()
    );
    assert_eq!(proxy.sends_to(&env.queues.recovery), 0, "contention became an incident");
}

/// A table busy for longer than the save's budget: the job id goes to the
/// recovery channel, after the save was tried for at most
/// `JOB_SAVE_SECONDS`, and Genace is never asked twice.
#[tokio::test]
async fn a_job_id_a_busy_table_cannot_take_in_time_goes_to_recovery() {
    use genace_stages::pipeline::dispatch::{Dispatched, JOB_SAVE_SECONDS, PostResult};
    let (dispatched, took, proxy, env) = dispatch_into_a_busy_table(None).await;
    assert_eq!(dispatched, Dispatched::Posted(PostResult::AcceptedUnpersisted));
    let tries = proxy.cancelled() / u64::from(genace_stages::ports::table::CONFLICT_TRIES);
    assert!(tries >= 3, "the save was tried {tries} times");
    assert!(
        took >= 2.0 && took <= (JOB_SAVE_SECONDS + 10) as f64,
        "the save took {took:.1} s"
    );
    let recovered = env.drain(&env.queues.recovery).await;
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(recovered[0].contains("job-busy"), "{}", recovered[0]);
}
