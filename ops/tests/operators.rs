//! Operators find and resolve reconciliation cases with the CLI, against the
//! whole stack hosted in-process on the local AWS endpoint, with wiremock as Genace.

use std::process::Output;
use std::time::{Duration, Instant};

use genace_client::{Client, Error, Intent, Request, Submitted};
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

struct Stack {
    env: LocalAws,
    genace: MockServer,
    api: String,
    running: Option<runner::Running>,
}

impl Stack {
    async fn start() -> Self {
        let env = LocalAws::fresh().await;
        let genace = MockServer::start().await;
        let mut config = env.config.clone();
        config.url_policy.allow_http = true;
        config.url_policy.allow_private = true;
        config.policy.dispatch_lease = chrono::Duration::seconds(8);
        let mut gconf = GenaceConfig::new(genace.uri(), "ops-test-key");
        gconf.timeout = Duration::from_secs(2);
        let settings = runner::RunnerSettings {
            visibility_seconds: 4,
            ..runner::RunnerSettings::for_tests()
        };
        let addr = settings.intake_addr;
        let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();
        Stack {
            env,
            genace,
            api: format!("http://{addr}"),
            running: Some(running),
        }
    }

    async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    async fn create(&self, tenant: &str, key: &str) -> String {
        let token = devauth::issue("tenant_id", tenant, 600).unwrap();
        let spec = json!({"model": "genace-image-1", "prompt": format!("a lighthouse {key}")});
        match Client::new(&self.api, &token)
            .submit(&Intent::new(key, "image", spec))
            .await
            .unwrap()
        {
            Submitted::Created(op) => op.id().to_owned(),
            other => panic!("not created: {other:?}"),
        }
    }

    /// The answer's status and body to `GET` of operation `id`.
    async fn view(&self, token: &str, id: &str) -> (u16, Value) {
        match Client::new(&self.api, token).operation(id).await {
            Ok(op) => (200, op.view),
            Err(Error::Api(p)) => (p.status, p.body),
            Err(e) => panic!("{e}"),
        }
    }

    async fn wait(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let token = operator(None);
        let start = Instant::now();
        loop {
            let (_, v) = self.view(&token, id).await;
            if done(&v) {
                return v;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{what} not reached: {v}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn posts(&self) -> usize {
        let reqs = self.genace.received_requests().await.unwrap();
        reqs.iter().filter(|r| r.method.as_str() == "POST").count()
    }

    fn cli(&self, token: &str, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_genace-ops"))
            .args(["--url", &self.api, "--token", token])
            .args(args)
            .output()
            .unwrap()
    }
}

fn operator(tenant: Option<&str>) -> String {
    devauth::issue_operator("ops-alice", "tenant_id", tenant, 600).unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The first POST's response is lost (held past the client timeout); later POSTs are accepted as `job-ok`.
async fn first_post_lost(genace: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(
            ResponseTemplate::new(202)
                .set_body_json(json!({"job_id": "job-lost", "state": "queued"}))
                .set_delay(Duration::from_secs(5)),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(genace)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": "job-ok", "state": "queued"})))
        .with_priority(2)
        .mount(genace)
        .await;
}

/// [`first_post_lost`], and `job-ok` reads as running.
async fn first_post_lost_then_job_ok_runs(genace: &MockServer) {
    first_post_lost(genace).await;
    Mock::given(method("GET"))
        .and(path("/v1/jobs/job-ok"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": "job-ok", "state": "running"})))
        .mount(genace)
        .await;
}

async fn completes(genace: &MockServer, job: &str) {
    let file = format!("/files/{job}.png");
    Mock::given(method("GET"))
        .and(path(file.clone()))
        .respond_with(ResponseTemplate::new(200).set_body_raw(vec![7u8; 2048], "image/png"))
        .mount(genace)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{job}")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"id": job, "state": "completed", "outputs": [format!("{}{file}", genace.uri())]}),
            ),
        )
        .mount(genace)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_202_is_listed_and_attached_then_delivered_with_one_post() {
    let stack = Stack::start().await;
    first_post_lost(&stack.genace).await;
    completes(&stack.genace, "job-lost").await;
    let id = stack.create("tenant-a", "lost-then-found").await;
    stack.wait(&id, "uncertain", |v| v["phase"] == "uncertain").await;

    let ops = operator(None);
    let listed = stack.cli(&ops, &["cases", "list", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let page: Value = serde_json::from_str(&stdout(&listed)).expect("--json output parses");
    let case = page["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["operation_id"] == id.as_str())
        .cloned();
    let case = case.expect("the case is listed");
    assert_eq!(case["reason"], "unknown_submit_outcome");
    assert!(case["evidence"].as_str().unwrap().contains("timed out"));
    let table = stack.cli(&ops, &["cases", "list"]);
    assert!(stdout(&table).contains(&id) && stdout(&table).contains("unknown_submit_outcome"));
    the_case_is_counted_and_advised(&stack, &ops, &id);

    let attached = stack.cli(
        &ops,
        &[
            "resolve",
            &id,
            "attach",
            "--job-id",
            "job-lost",
            "--reason",
            "found in the Genace console",
        ],
    );
    assert!(attached.status.success(), "{attached:?}");
    let done = stack
        .wait(&id, "delivered", |v| v["delivery_state"] == "delivered")
        .await;
    assert_eq!(done["remote_job_id"], "job-lost");
    assert_eq!(stack.posts().await, 1, "attaching never POSTs");

    let timeline = stack.cli(&ops, &["op", "show", &id]);
    let text = stdout(&timeline);
    assert!(
        text.contains("attach_remote_job by ops-alice (job job-lost): found in the Genace console"),
        "{text}"
    );
    assert!(text.contains("delivered outputs/tenant-a/"), "{text}");
    the_outputs_are_erased_and_counted(&stack, &ops, &id).await;
    let listed = stack.cli(&ops, &["cases", "list", "--json"]);
    let page: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert!(
        page["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["operation_id"] != id.as_str()),
        "the case is closed"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirming_nothing_was_created_authorizes_exactly_one_new_post() {
    let stack = Stack::start().await;
    first_post_lost_then_job_ok_runs(&stack.genace).await;
    let id = stack.create("tenant-a", "retry-authorized").await;
    stack.wait(&id, "uncertain", |v| v["phase"] == "uncertain").await;
    assert_eq!(stack.posts().await, 1);

    let ops = operator(None);
    let out = stack.cli(
        &ops,
        &[
            "resolve",
            &id,
            "confirm-not-created",
            "--reason",
            "nothing in the Genace console",
            "--json",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let v = stack.wait(&id, "accepted", |v| v["phase"] == "accepted").await;
    assert_eq!(v["remote_job_id"], "job-ok");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(stack.posts().await, 2, "exactly one new POST");
    let audit = v["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["actor"], "ops-alice");
    assert_eq!(audit[0]["action"], "confirm_not_created");
    assert_eq!(audit[0]["reason"], "nothing in the Genace console");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_phases_non_operators_and_other_tenants_are_refused() {
    let stack = Stack::start().await;
    every_post_fails(&stack.genace).await;
    let a = stack.create("tenant-a", "a-case").await;
    let b = stack.create("tenant-b", "b-case").await;
    stack.wait(&a, "uncertain", |v| v["phase"] == "uncertain").await;
    stack.wait(&b, "uncertain", |v| v["phase"] == "uncertain").await;

    // Wrong phase: 409, nothing changes.
    let ops = operator(None);
    let wrong = stack.cli(&ops, &["resolve", &a, "mark-settled", "--reason", "no"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("409"), "{wrong:?}");
    assert_eq!(stack.view(&ops, &a).await.1["phase"], "uncertain");

    // A tenant's own token is not an operator's.
    let user = devauth::issue("tenant_id", "tenant-a", 600).unwrap();
    let refused = stack.cli(&user, &["cases", "list"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("403"), "{refused:?}");
    // Sent as is, without If-Match: the token is refused before the version matters.
    let resolution = Request::new(reqwest::Method::POST, format!("/v1/operations/{a}/resolution"))
        .json(&json!({"action": "abandon", "reason": "mine"}));
    let resp = Client::new(&stack.api, &user).send(&resolution).await.unwrap();
    assert_eq!(resp.status, 403);
    assert_eq!(resp.header("content-type"), Some("application/problem+json"));

    // An operator limited to tenant A sees and resolves only A's cases.
    let ops_a = operator(Some("tenant-a"));
    let page: Value = serde_json::from_str(&stdout(&stack.cli(&ops_a, &["cases", "list", "--json"]))).unwrap();
    let ids: Vec<&str> = page["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["operation_id"].as_str())
        .collect();
    assert!(ids.contains(&a.as_str()) && !ids.contains(&b.as_str()), "{ids:?}");
    let asked_b: Value = serde_json::from_str(&stdout(
        &stack.cli(&ops_a, &["cases", "list", "--tenant", "tenant-b", "--json"]),
    ))
    .unwrap();
    assert!(asked_b["cases"].as_array().unwrap().is_empty());
    let not_theirs = stack.cli(&ops_a, &["resolve", &b, "abandon", "--reason", "not mine"]);
    assert!(
        String::from_utf8_lossy(&not_theirs.stderr).contains("404"),
        "{not_theirs:?}"
    );

    // The unrestricted operator filters by tenant and reason.
    let page: Value = serde_json::from_str(&stdout(&stack.cli(
        &ops,
        &[
            "cases",
            "list",
            "--tenant",
            "tenant-b",
            "--reason",
            "unknown_submit_outcome",
            "--json",
        ],
    )))
    .unwrap();
    let ids: Vec<&str> = page["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["operation_id"].as_str())
        .collect();
    assert_eq!(ids, [b.as_str()]);
    let abandoned = stack.cli(&ops, &["resolve", &b, "abandon", "--reason", "customer withdrew"]);
    assert!(abandoned.status.success(), "{abandoned:?}");
    assert_eq!(stack.view(&ops, &b).await.1["phase"], "abandoned");
    stack.stop().await;
}

/// Every POST's response is lost: each dispatch ends uncertain.
async fn every_post_lost(genace: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(
            ResponseTemplate::new(202)
                .set_body_json(json!({"job_id": "job-lost", "state": "queued"}))
                .set_delay(Duration::from_secs(5)),
        )
        .mount(genace)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replayed_confirmation_is_refused_with_412_and_never_posts_again() {
    let stack = Stack::start().await;
    every_post_lost(&stack.genace).await;
    let id = stack.create("tenant-a", "replayed-confirm").await;
    let first = stack.wait(&id, "uncertain", |v| v["phase"] == "uncertain").await;
    let seen = first["version"].as_u64().unwrap().to_string();
    let ops = operator(None);
    let confirm = [
        "resolve",
        &id,
        "confirm-not-created",
        "--reason",
        "not in the console",
        "--version",
        &seen,
    ];
    let out = stack.cli(&ops, &confirm);
    assert!(out.status.success(), "{out:?}");
    // The authorized dispatch is lost too: uncertain again, after two POSTs.
    stack
        .wait(&id, "uncertain again", |v| {
            v["phase"] == "uncertain" && v["version"].as_u64() > first["version"].as_u64()
        })
        .await;
    assert_eq!(stack.posts().await, 2);

    let replayed = stack.cli(&ops, &confirm);
    assert_eq!(replayed.status.code(), Some(1), "{replayed:?}");
    assert!(
        String::from_utf8_lossy(&replayed.stderr).contains("412"),
        "{replayed:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(stack.posts().await, 2, "no third POST");
    let (_, v) = stack.view(&ops, &id).await;
    assert_eq!(v["phase"], "uncertain");
    assert_eq!(
        v["audit"].as_array().unwrap().len(),
        1,
        "only the first decision is recorded"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_token_with_a_malformed_tenant_is_refused_not_made_global() {
    let stack = Stack::start().await;
    every_post_lost(&stack.genace).await;
    let id = stack.create("tenant-a", "malformed-tenant").await;
    stack.wait(&id, "uncertain", |v| v["phase"] == "uncertain").await;
    // Present, but not a tenant id (a space is not allowed).
    let bad = operator(Some("tenant a"));
    let out = stack.cli(&bad, &["cases", "list", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"), "{out:?}");
    let (status, _) = stack.view(&bad, &id).await;
    assert_eq!(status, 403);
    stack.stop().await;
}

/// An operator token that names no tenant is an operator of every tenant
/// only when it carries the global-operator scope: one with neither (as
/// when the issuer names the tenant claim differently) is refused on every
/// operator route and may not read an operation, never made global.
/// `whoami` says which kind each token signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_token_with_neither_a_tenant_nor_the_global_mark_is_refused() {
    let stack = Stack::start().await;
    every_post_lost(&stack.genace).await;
    let id = stack.create("tenant-a", "unscoped").await;
    stack.wait(&id, "uncertain", |v| v["phase"] == "uncertain").await;
    // The tenant under a claim this deployment does not read.
    let mut claims = serde_json::Map::new();
    claims.insert("sub".into(), json!("ops-carol"));
    claims.insert("scope".into(), json!("genace:operator"));
    claims.insert("custom:tenant_id".into(), json!("tenant-a"));
    let unscoped = devauth::issue_claims(claims, 600).unwrap();
    for args in [
        &["cases", "list", "--json"][..],
        &["capacity", "--json"][..],
        &["credits", "list", "--json"][..],
    ] {
        let out = stack.cli(&unscoped, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("403") && err.contains("not marked global"),
            "{args:?}: {err}"
        );
    }
    let (status, problem) = stack.view(&unscoped, &id).await;
    assert_eq!(
        (
            status,
            problem["type"]
                .as_str()
                .unwrap_or_default()
                .ends_with("operator-scope-unknown")
        ),
        (403, true),
        "{problem}"
    );
    // The global mark makes it an operator of every tenant.
    let global = operator(None);
    let out = stack.cli(&global, &["cases", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let kinds: Vec<String> = [&unscoped, &global, &operator(Some("tenant-a"))]
        .iter()
        .map(|token| {
            let out = stack.cli(token, &["whoami", "--json"]);
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            v["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(kinds, ["none", "global", "tenant"]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attach_refuses_a_job_id_another_operation_holds_and_ids_out_of_bounds() {
    let stack = Stack::start().await;
    first_post_lost_then_job_ok_runs(&stack.genace).await;
    let lost = stack.create("tenant-a", "lost-one").await;
    stack.wait(&lost, "uncertain", |v| v["phase"] == "uncertain").await;
    let holder = stack.create("tenant-a", "holder").await;
    stack
        .wait(&holder, "accepted", |v| v["remote_job_id"] == "job-ok")
        .await;
    let ops = operator(None);
    let taken = stack.cli(
        &ops,
        &[
            "resolve", &lost, "attach", "--job-id", "job-ok", "--reason", "wrong id", "--json",
        ],
    );
    assert_eq!(taken.status.code(), Some(1), "{taken:?}");
    let err = String::from_utf8_lossy(&taken.stderr);
    assert!(err.contains("409") && err.contains("another operation"), "{err}");
    let long = "j".repeat(300);
    for bad in [long.as_str(), "has space"] {
        let out = stack.cli(&ops, &["resolve", &lost, "attach", "--job-id", bad, "--reason", "r"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("400"), "{out:?}");
    }
    let (_, v) = stack.view(&ops, &lost).await;
    assert_eq!(v["phase"], "uncertain", "nothing changed");
    stack.stop().await;
}

/// The whole account's limit of jobs in flight, set at run time, shown as
/// such, refused out of range, and given back to the deployment's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_set_the_accounts_limit_at_run_time() {
    let stack = Stack::start().await;
    let ops = operator(None);
    // The whole account's limit, set at run time and given back.
    let account = stack.cli(&ops, &["capacity", "account", "7", "--json"]);
    assert_eq!(account.status.code(), Some(0), "{account:?}");
    let set: Value = serde_json::from_slice(&account.stdout).unwrap();
    assert_eq!(
        (
            &set["max_in_flight"],
            &set["set_at_run_time"],
            &set["effective_max_in_flight"]
        ),
        (&json!(7), &json!(true), &json!(7)),
        "{set}"
    );
    let table = stack.cli(&ops, &["capacity"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("limit 7 (set at run time"),
        "{table:?}"
    );
    let back: Value =
        serde_json::from_slice(&stack.cli(&ops, &["capacity", "account", "none", "--json"]).stdout).unwrap();
    assert_eq!(back["set_at_run_time"], false, "{back}");
    assert_eq!(back["max_in_flight"], back["configured_max_in_flight"], "{back}");
    assert_eq!(stack.cli(&ops, &["capacity", "account", "0"]).status.code(), Some(2));
    stack.stop().await;
}

/// An operation waiting for a slot is taken back with `op cancel`: it ends
/// `cancelled` and Genace never sees its POST. One whose job may exist
/// (uncertain, holding the only slot) is refused with 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn op_cancel_takes_back_a_waiting_operation_op_list_finds_it_and_a_job_that_may_exist_is_refused() {
    let stack = Stack::start().await;
    every_post_fails(&stack.genace).await;
    let ops = operator(None);
    assert_eq!(stack.cli(&ops, &["capacity", "account", "1"]).status.code(), Some(0));
    let first = stack.create("tenant-a", "holds-the-slot").await;
    stack.wait(&first, "uncertain", |v| v["phase"] == "uncertain").await;
    let second = stack.create("tenant-a", "waits").await;
    stack
        .wait(&second, "waiting for a slot", |v| v["queue"]["reason"] == "capacity")
        .await;
    let cancelled = stack.cli(&ops, &["op", "cancel", &second, "--json"]);
    assert_eq!(cancelled.status.code(), Some(0), "{cancelled:?}");
    let view: Value = serde_json::from_slice(&cancelled.stdout).unwrap();
    assert_eq!(
        (&view["phase"], &view["cancellation"]["by"]),
        (&json!("cancelled"), &json!("ops-alice")),
        "{view}"
    );
    let shown = stack.cli(&ops, &["op", "show", &second]);
    assert!(
        stdout(&shown).contains("cancelled (requested) by ops-alice"),
        "{shown:?}"
    );
    let too_late = stack.cli(&ops, &["op", "cancel", &first]);
    assert_eq!(too_late.status.code(), Some(1), "{too_late:?}");
    assert!(
        String::from_utf8_lossy(&too_late.stderr).contains("409"),
        "{too_late:?}"
    );
    // Listing: by phase, every operation of the tenant, scope, bad filters.
    let listed = stack.cli(
        &ops,
        &["op", "list", "--tenant", "tenant-a", "--phase", "cancelled", "--json"],
    );
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let page: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(page["operations"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["operations"][0]["operation_id"], json!(second), "{page}");
    let table = stdout(&stack.cli(&ops, &["op", "list", "--limit", "10"]));
    assert!(table.contains(&first) && table.contains(&second), "{table}");
    assert!(table.find(&second) < table.find(&first), "newest first: {table}");
    let elsewhere = stack.cli(&operator(Some("tenant-b")), &["op", "list", "--json"]);
    let page: Value = serde_json::from_slice(&elsewhere.stdout).unwrap();
    assert_eq!(page["operations"], json!([]), "a scoped operator sees only its tenant");
    let bogus = stack.cli(&ops, &["op", "list", "--phase", "rendering"]);
    assert_eq!(bogus.status.code(), Some(1), "{bogus:?}");
    assert!(String::from_utf8_lossy(&bogus.stderr).contains("phase"), "{bogus:?}");
    // Nothing was delivered: erasing outputs is refused too.
    let erase = stack.cli(&ops, &["op", "erase", &first]);
    assert_eq!(erase.status.code(), Some(1), "{erase:?}");
    assert!(String::from_utf8_lossy(&erase.stderr).contains("409"), "{erase:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(stack.posts().await, 1, "no POST for the cancelled operation");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_set_a_spend_limit_and_read_every_tenants_credits() {
    let stack = Stack::start().await;
    every_post_fails(&stack.genace).await;
    // An uncertain outcome keeps holding its reservation (an image: 1 credit).
    let a = stack.create("tenant-a", "credits").await;
    stack.wait(&a, "uncertain", |v| v["phase"] == "uncertain").await;
    let ops = operator(None);
    let set = stack.cli(&ops, &["credits", "limit", "tenant-a", "25"]);
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    let listed = stack.cli(&ops, &["credits", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let page: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = page["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant_id"] == "tenant-a")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (row["held"].as_f64(), row["spend_limit"].as_f64()),
        (Some(1.0), Some(25.0)),
        "{row}"
    );
    assert_eq!(row["available"].as_f64(), Some(24.0));
    let table = stack.cli(&ops, &["credits", "list"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("tenant-a"), "{table:?}");
    let capacity = stack.cli(&ops, &["capacity", "--json"]);
    assert_eq!(capacity.status.code(), Some(0), "{capacity:?}");
    let report: Value = serde_json::from_slice(&capacity.stdout).unwrap();
    assert!(
        report["tenants"].is_array() && report.get("max_in_flight").is_some(),
        "{report}"
    );
    let limited = stack.cli(&ops, &["capacity", "limit", "tenant-a", "3", "--json"]);
    let slots: Value = serde_json::from_slice(&limited.stdout).unwrap();
    assert_eq!(slots["max_in_flight"], 3, "{limited:?}");
    let shown: Value = serde_json::from_slice(&stack.cli(&ops, &["capacity", "--json"]).stdout).unwrap();
    assert!(
        shown["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tenant_id"] == "tenant-a" && t["max_in_flight"] == 3),
        "{shown}"
    );
    let removed = stack.cli(&ops, &["capacity", "limit", "tenant-a", "none", "--json"]);
    let slots: Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(slots["max_in_flight"], Value::Null);
    assert_eq!(
        stack.cli(&ops, &["capacity", "limit", "tenant-a", "0"]).status.code(),
        Some(2)
    );
    let removed = stack.cli(&ops, &["credits", "limit", "tenant-a", "none", "--json"]);
    let ledger: Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(ledger["spend_limit"], Value::Null);
    let bad = stack.cli(&ops, &["credits", "limit", "tenant-a", "lots"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    // A tenant's own token reads only its own credits, through the API.
    let user = devauth::issue("tenant_id", "tenant-a", 600).unwrap();
    let refused = stack.cli(&user, &["credits", "list"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("403"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_set_show_and_remove_a_tenants_webhook() {
    let stack = Stack::start().await;
    let ops = operator(None);
    let set = stack.cli(
        &ops,
        &[
            "webhook",
            "set",
            "tenant-a",
            "--hook-url",
            "https://hooks.tenant-a.example/genace",
            "--secret-id",
            "genace/webhooks/tenant-a/hook",
            "--events",
            "operation.delivered, operation.case_opened",
        ],
    );
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    let shown = stack.cli(&ops, &["webhook", "show", "tenant-a", "--json"]);
    let hook: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(hook["url"], "https://hooks.tenant-a.example/genace");
    assert_eq!(hook["events"], json!(["operation.delivered", "operation.case_opened"]));
    assert_eq!(hook["updated_by"], "ops-alice");
    let text = stdout(&stack.cli(&ops, &["webhook", "show", "tenant-a"]));
    assert!(text.contains("signed with genace/webhooks/tenant-a/hook"), "{text}");
    // A secret outside the webhook prefix is refused by the API (400).
    let wrong = stack.cli(
        &ops,
        &[
            "webhook",
            "set",
            "tenant-a",
            "--hook-url",
            "https://x.example",
            "--secret-id",
            "prod/db",
        ],
    );
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("400"), "{wrong:?}");
    // Measured before the prefix rule: an operator scoped to tenant-a set
    // tenant-a's webhook to sign with tenant-b's secret, and got 200.
    let scoped = operator(Some("tenant-a"));
    let borrowed = stack.cli(
        &scoped,
        &[
            "webhook",
            "set",
            "tenant-a",
            "--hook-url",
            "https://hooks.tenant-a.example/genace",
            "--secret-id",
            "genace/webhooks/tenant-b/hook",
        ],
    );
    assert_eq!(borrowed.status.code(), Some(1), "{borrowed:?}");
    let err = String::from_utf8_lossy(&borrowed.stderr);
    assert!(
        err.contains("400") && err.contains("genace/webhooks/tenant-a/"),
        "{borrowed:?}"
    );
    let still: Value =
        serde_json::from_slice(&stack.cli(&ops, &["webhook", "show", "tenant-a", "--json"]).stdout).unwrap();
    assert_eq!(
        still["secret_id"], "genace/webhooks/tenant-a/hook",
        "nothing was changed"
    );
    let removed = stack.cli(&ops, &["webhook", "remove", "tenant-a"]);
    assert!(stdout(&removed).contains("no webhook"), "{removed:?}");
    // An operator limited to another tenant cannot see it.
    let other = operator(Some("tenant-b"));
    let hidden = stack.cli(&other, &["webhook", "show", "tenant-a"]);
    assert_eq!(hidden.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&hidden.stderr).contains("404"), "{hidden:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_manage_a_tenants_webhook_endpoints_and_see_the_secret_once() {
    let stack = Stack::start().await;
    let ops = operator(None);
    let run = |args: &[&str]| {
        let mut all = vec!["endpoint", "--tenant", "tenant-a"];
        all.extend_from_slice(args);
        stack.cli(&ops, &all)
    };
    let created = run(&[
        "create",
        "--hook-url",
        "https://hooks.tenant-a.example/genace",
        "--description",
        "billing",
        "--events",
        "operation.delivered",
        "--json",
    ]);
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let endpoint: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    let listed = stdout(&run(&["list"]));
    assert!(
        listed.contains(&id) && listed.contains("enabled") && !listed.contains(&secret),
        "{listed}"
    );
    let disabled: Value = serde_json::from_slice(&run(&["update", &id, "--disable", "--json"]).stdout).unwrap();
    assert_eq!(disabled["enabled"], false);
    let rotated = stdout(&run(&["rotate", &id]));
    assert!(
        rotated.contains("secret (shown once") && !rotated.contains(&secret),
        "{rotated}"
    );
    let log: Value = serde_json::from_slice(&run(&["attempts", &id, "--status", "failed", "--json"]).stdout).unwrap();
    assert_eq!(log, json!({"attempts": [], "next_cursor": null}));
    // An event type that does not exist is refused by the API (400).
    let refused = run(&[
        "create",
        "--hook-url",
        "https://hooks.tenant-a.example/x",
        "--events",
        "operation.exploded",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("400"), "{refused:?}");
    // An operator limited to another tenant sees none of them.
    let hidden = stack.cli(
        &operator(Some("tenant-b")),
        &["endpoint", "--tenant", "tenant-a", "list"],
    );
    assert_eq!(hidden.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&hidden.stderr).contains("404"), "{hidden:?}");
    let deleted = run(&["delete", &id]);
    assert!(stdout(&deleted).contains("deleted"), "{deleted:?}");
    assert!(!stdout(&run(&["list"])).contains(&id));
    stack.stop().await;
}

/// Genace answers every POST with a 500: the outcome is unknown, and each
/// operation becomes uncertain.
async fn every_post_fails(genace: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream broke"))
        .mount(genace)
        .await;
}

/// `--help` answers on every command and subcommand, names the environment
/// variables the flags read, and a usage error exits 2 without calling anything.
#[test]
fn help_on_every_command_and_usage_errors_exit_two() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_genace-ops"))
            .args(args)
            .env_remove("GENACE_OPS_URL")
            .env_remove("GENACE_OPS_TOKEN")
            .output()
            .unwrap()
    };
    for command in [
        &["--help"][..],
        &["cases", "--help"],
        &["cases", "list", "--help"],
        &["resolve", "op_x", "attach", "--help"],
        &["resolve", "op_x", "confirm-not-created", "--help"],
        &["op", "show", "--help"],
        &["credits", "limit", "--help"],
        &["webhook", "set", "--help"],
        &["endpoint", "--tenant", "t", "create", "--help"],
        &["capacity", "--help"],
        &["capacity", "limit", "--help"],
        &["capacity", "account", "--help"],
    ] {
        let out = run(command);
        assert_eq!(out.status.code(), Some(0), "{command:?}: {out:?}");
        let text = stdout(&out);
        assert!(text.contains("Usage: genace-ops"), "{command:?}: {text}");
        assert!(text.contains("[env: GENACE_OPS_URL]"), "{command:?}: {text}");
        assert!(text.contains("[env: GENACE_OPS_TOKEN]"), "{command:?}: {text}");
    }
    for bad in [
        &[][..],
        &["cases", "list"],
        &["--url", "http://127.0.0.1:9", "cases", "list"],
        &[
            "--url", "u", "--token", "t", "resolve", "op_x", "attach", "--reason", "r",
        ],
        &["--url", "u", "--token", "t", "credits", "list", "--limit", "many"],
        &["--url", "u", "--token", "t", "cases", "explode"],
    ] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error:") || err.contains("Usage: genace-ops"),
            "{bad:?}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{bad:?}: {out:?}");
    }
}

/// The one open case is counted, left out of a list of older cases, and
/// shown with the runbook's advice and the decisions its version takes.
/// `op erase` deletes the delivered object from the bucket, answers the
/// view with the count, and the timeline prints it; a repeat answers the same.
async fn the_outputs_are_erased_and_counted(stack: &Stack, ops: &str, id: &str) {
    use genace_stages::ports::outputs::ObjectStore;
    let bucket = stack.env.objects();
    let prefix = format!("outputs/tenant-a/{id}/");
    let stored = bucket.list(&prefix, 100).await.unwrap();
    assert_eq!(stored.len(), 1, "one output delivered: {stored:?}");
    let erased = stack.cli(ops, &["op", "erase", id, "--json"]);
    assert_eq!(erased.status.code(), Some(0), "{erased:?}");
    let view: Value = serde_json::from_slice(&erased.stdout).unwrap();
    assert_eq!(view["erased_object_count"], json!(1), "{view}");
    assert_eq!(view["erased_objects"], json!(stored), "{view}");
    assert_eq!(bucket.list(&prefix, 100).await.unwrap(), Vec::<String>::new());
    let again = stack.cli(ops, &["op", "erase", id]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let text = stdout(&again);
    assert!(
        text.contains("outputs erased from the bucket (1 objects deleted)"),
        "{text}"
    );
}

fn the_case_is_counted_and_advised(stack: &Stack, ops: &str, id: &str) {
    let counted = stdout(&stack.cli(ops, &["cases", "counts"]));
    assert!(
        counted.contains("unknown_submit_outcome") && counted.contains("1 open case(s)"),
        "{counted}"
    );
    let before = stack.cli(
        ops,
        &["cases", "list", "--opened-before", "2000-01-01T00:00:00Z", "--json"],
    );
    let none: Value = serde_json::from_str(&stdout(&before)).unwrap();
    assert_eq!(none["cases"], serde_json::json!([]), "no case opened before 2000");
    let shown = stdout(&stack.cli(ops, &["cases", "show", id]));
    assert!(
        shown.contains("runbook:    attach_remote_job or confirm_not_created"),
        "{shown}"
    );
    assert!(
        shown.contains("decisions:  attach_remote_job, confirm_not_created, abandon"),
        "{shown}"
    );
}
