//! `docs/openapi.yaml` against the real handler: every documented route and
//! status is produced here by `api::handle` from real API Gateway events, and
//! every body must match its documented schema. The document cannot drift.

use genace_stages::ports::Parts;
use std::collections::BTreeSet;

use chrono::Utc;
use genace_aws::DynamoStore;
use genace_aws::S3Store;
use genace_aws::SqsQueue;
use genace_core::record::DeliveredObject;
use genace_core::record::DeliveryState;
use genace_core::record::OperationRecord;
use genace_core::record::Phase;
use genace_edge::http as api;
use genace_localaws::LocalAws;
use genace_stages::api::context::Api;
use genace_stages::ports::table::prelude::*;
use lambda_http::{Body, Response};
use serde_json::{Value, json};

const POST_FIXTURE: &str = include_str!("fixtures/apigw-v2-post-operations.json");

struct Doc {
    root: Value,
}

impl Doc {
    fn load() -> Self {
        let yaml: serde_yaml::Value = serde_yaml::from_str(include_str!("../../../docs/openapi.yaml")).unwrap();
        Doc {
            root: serde_json::to_value(yaml).unwrap(),
        }
    }

    fn resolve<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => self.root.pointer(r.trim_start_matches('#')).expect("a resolvable $ref"),
            None => v,
        }
    }

    /// Every (path, method, status) the document promises.
    fn promised(&self) -> BTreeSet<(String, String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in self.root["paths"].as_object().unwrap() {
            // Path-level members such as `parameters` are not operations.
            for (method, op) in item
                .as_object()
                .unwrap()
                .iter()
                .filter(|(_, op)| op.get("responses").is_some())
            {
                for status in op["responses"].as_object().unwrap().keys() {
                    out.insert((path.clone(), method.clone(), status.clone()));
                }
            }
        }
        out
    }

    fn check(&self, path: &str, method: &str, resp: &Response<Body>) -> (String, String, String) {
        let status = resp.status().as_u16().to_string();
        let op = &self.root["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        let response = self.resolve(&op["responses"][&status]);
        assert!(response.is_object(), "{method} {path} {status} is not documented");
        if status == "204" {
            assert!(resp.body().as_ref().is_empty(), "{method} {path} 204 with a body");
            return (path.to_owned(), method.to_owned(), status);
        }
        let ct = resp.headers()["content-type"].to_str().unwrap();
        let schema = self.resolve(&response["content"][ct]["schema"]);
        assert!(
            schema.is_object(),
            "{method} {path} {status}: content type {ct} is not documented"
        );
        let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
        for (header, _) in response["headers"].as_object().into_iter().flatten() {
            // Next-Look-In: exactly while the view shows progress (the
            // operation is unfinished).
            if header == "Next-Look-In" {
                assert_eq!(
                    resp.headers().contains_key(header.as_str()),
                    body.get("progress").is_some(),
                    "{method} {path} {status}: header {header}"
                );
            } else if header != "Idempotent-Replayed" || status == "200" {
                assert!(
                    resp.headers().contains_key(header.as_str()),
                    "{method} {path} {status}: header {header}"
                );
            }
        }
        let mut full = schema.clone();
        full["components"] = self.root["components"].clone();
        if let Err(e) = jsonschema::validate(&full, &body) {
            panic!("{method} {path} {status}: {e}\nbody: {body}");
        }
        (path.to_owned(), method.to_owned(), status)
    }
}

fn event(
    method: &str,
    path: &str,
    body: Option<&str>,
    claims: Value,
    headers: &[(&str, &str)],
) -> lambda_http::Request {
    let mut e: Value = serde_json::from_str(POST_FIXTURE).unwrap();
    let (raw_path, query) = path.split_once('?').unwrap_or((path, ""));
    e["rawPath"] = json!(raw_path);
    e["rawQueryString"] = json!(query);
    // API Gateway hands the decoded parameters apart, as the router reads them.
    let params: serde_json::Map<String, Value> = reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), json!(v)))
        .collect();
    e["queryStringParameters"] = Value::Object(params);
    e["requestContext"]["http"]["method"] = json!(method);
    e["requestContext"]["http"]["path"] = json!(raw_path);
    if claims.is_null() {
        // No authorizer context at all: an unauthenticated request.
        e["requestContext"].as_object_mut().unwrap().remove("authorizer");
    } else {
        e["requestContext"]["authorizer"]["jwt"]["claims"] = claims;
    }
    match body {
        Some(b) => e["body"] = json!(b),
        None => {
            e.as_object_mut().unwrap().remove("body");
        }
    }
    for (k, v) in headers {
        e["headers"][*k] = json!(v);
    }
    lambda_http::request::from_str(&e.to_string()).unwrap()
}

/// The `operation_id` of an answer's view.
fn operation_id_of(resp: &Response<Body>) -> String {
    serde_json::from_slice::<Value>(resp.body().as_ref()).unwrap()["operation_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn tenant(t: &str) -> Value {
    json!({"sub": "user-1", "tenant_id": t, "scope": "operations.write"})
}

fn operator() -> Value {
    json!({"sub": "ops-1", "scope": "operations.read genace:operator genace:operator:all"})
}

fn intent(key: &str, prompt: &str) -> String {
    json!({"operation_key": key, "media_type": "video",
           "specification": {"model": "genace-video-2", "prompt": prompt, "duration": 5}})
    .to_string()
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn every_documented_response_matches_what_the_handler_sends() {
    let env = LocalAws::fresh().await;
    let intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let doc = Doc::load();
    let mut seen = BTreeSet::new();
    let ops = "/v1/operations";
    let one = "/v1/operations/{operation_id}";
    let res = "/v1/operations/{operation_id}/resolution";
    let cases = "/v1/reconciliation-cases";
    // Boxed: the handler future inlined at every call would outgrow the test thread's stack.
    let call = |req| Box::pin(api::handle(&intake, req));

    // Intake.
    let created = call(event("POST", ops, Some(&intent("k1", "p")), tenant("t1"), &[])).await;
    let id = serde_json::from_slice::<Value>(created.body().as_ref()).unwrap()["operation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    seen.insert(doc.check(ops, "post", &created));
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some(&intent("k1", "p")), tenant("t1"), &[])).await,
    ));
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some("{"), tenant("t1"), &[])).await,
    ));
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some(&intent("k2", "p")), json!({"sub": "x"}), &[])).await,
    ));
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some(&intent("k1", "changed")), tenant("t1"), &[])).await,
    ));
    let huge = intent("k3", &"x".repeat(70_000));
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some(&huge), tenant("t1"), &[])).await,
    ));
    let text = [("content-type", "text/plain")];
    seen.insert(doc.check(
        ops,
        "post",
        &call(event("POST", ops, Some(&intent("k4", "p")), tenant("t1"), &text)).await,
    ));

    // Reads, including one with delivered objects and presigned links.
    let path = format!("/v1/operations/{id}");
    seen.insert(doc.check(one, "get", &call(event("GET", &path, None, tenant("t1"), &[])).await));
    seen.insert(doc.check(one, "get", &call(event("GET", &path, None, tenant("t2"), &[])).await));
    seen.insert(doc.check(one, "get", &call(event("GET", &path, None, json!({}), &[])).await));
    let store = env.store();
    let mut delivered = store
        .get(&genace_core::domain::OperationId::parse(&id).unwrap(), Utc::now())
        .await
        .unwrap()
        .unwrap();
    let before = delivered.clone();
    delivered.version += 1;
    delivered.phase = Phase::Rendered;
    delivered.delivery_state = DeliveryState::Delivered;
    // A delivered operation is finished: its retention clock runs.
    delivered.expires_at_seconds = Some(Utc::now().timestamp() + 3600);
    delivered.due_at_ms = None;
    delivered.remote_job_id = Some("job-1".into());
    delivered.delivered_objects = vec![DeliveredObject {
        key: format!("outputs/t1/{id}/output-0.mp4"),
        bytes: 3,
        sha256: "a".repeat(64),
        content_type: "video/mp4".into(),
    }];
    // Seen to end by the second look, the first having found it running.
    let now = Utc::now();
    delivered.detection = Some(genace_core::record::Detection {
        looks: 2,
        first_running_at: Some(now - chrono::Duration::seconds(3)),
        last_running_at: Some(now - chrono::Duration::seconds(3)),
        ended_seen_at: now,
        looked_at: vec![now - chrono::Duration::seconds(3), now],
    });
    store.apply(&before, &delivered).await.unwrap();
    let view = call(event("GET", &path, None, tenant("t1"), &[])).await;
    let body: Value = serde_json::from_slice(view.body().as_ref()).unwrap();
    assert_eq!(body["detection"]["looks"], 2, "{body}");
    assert_eq!(body["detection"]["lag_bound_seconds"], 3.0, "{body}");
    assert!(
        body["delivered_objects"][0]["url"]
            .as_str()
            .unwrap()
            .contains("X-Amz-Signature")
    );
    seen.insert(doc.check(one, "get", &view));

    // An uncertain operation with a case, for the operator routes.
    let uncertain_id = {
        let r = call(event("POST", ops, Some(&intent("k5", "p")), tenant("t1"), &[])).await;
        serde_json::from_slice::<Value>(r.body().as_ref()).unwrap()["operation_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let oid = genace_core::domain::OperationId::parse(&uncertain_id).unwrap();
    let prepared: OperationRecord = store.get(&oid, Utc::now()).await.unwrap().unwrap();
    let policy = genace_core::machine::Policy::default();
    let claimed = genace_core::machine::transition(
        &prepared,
        genace_core::machine::Input::ClaimDispatch { token: "tok", shard: 0 },
        Utc::now(),
        &policy,
    )
    .unwrap();
    store.apply(&prepared, &claimed).await.unwrap();
    let uncertain = genace_core::machine::transition(
        &claimed,
        genace_core::machine::Input::OutcomeUnknown {
            token: "tok",
            evidence: "timed out",
        },
        Utc::now(),
        &genace_core::machine::Policy::default(),
    )
    .unwrap();
    store.apply(&claimed, &uncertain).await.unwrap();

    seen.insert(doc.check(cases, "get", &call(event("GET", cases, None, operator(), &[])).await));
    let listed = call(event(
        "GET",
        &format!("{cases}?reason=unknown_submit_outcome&limit=10"),
        None,
        operator(),
        &[],
    ))
    .await;
    let page: Value = serde_json::from_slice(listed.body().as_ref()).unwrap();
    assert_eq!(page["cases"][0]["operation_id"], uncertain_id.as_str());
    seen.insert(doc.check(cases, "get", &listed));
    seen.insert(doc.check(
        cases,
        "get",
        &call(event("GET", &format!("{cases}?limit=0"), None, operator(), &[])).await,
    ));
    seen.insert(doc.check(cases, "get", &call(event("GET", cases, None, tenant("t1"), &[])).await));
    let long_ago = format!("{cases}?opened_before=2000-01-01T00:00:00Z");
    let none_yet = call(event("GET", &long_ago, None, operator(), &[])).await;
    let page: Value = serde_json::from_slice(none_yet.body().as_ref()).unwrap();
    assert_eq!(page["cases"], json!([]), "no case opened before 2000");
    seen.insert(doc.check(cases, "get", &none_yet));

    // Counts by reason, over every tenant or one.
    let counts = "/v1/reconciliation-cases/counts";
    let counted = call(event("GET", counts, None, operator(), &[])).await;
    let body: Value = serde_json::from_slice(counted.body().as_ref()).unwrap();
    assert_eq!(body["open"], 1);
    assert_eq!(body["reasons"][0]["reason"], "unknown_submit_outcome");
    seen.insert(doc.check(counts, "get", &counted));
    let elsewhere = call(event("GET", &format!("{counts}?tenant=t2"), None, operator(), &[])).await;
    let body: Value = serde_json::from_slice(elsewhere.body().as_ref()).unwrap();
    assert_eq!(body, json!({"open": 0, "reasons": []}));
    seen.insert(doc.check(counts, "get", &elsewhere));
    for (bad, who) in [("?tenant=", operator()), ("", tenant("t1")), ("", Value::Null)] {
        seen.insert(doc.check(
            counts,
            "get",
            &call(event("GET", &format!("{counts}{bad}"), None, who, &[])).await,
        ));
    }

    let rpath = format!("/v1/operations/{uncertain_id}/resolution");
    let settle = json!({"action": "mark_settled", "reason": "r"}).to_string();
    let seen_version = format!("\"{}\"", uncertain.version);
    let if_match = [("if-match", seen_version.as_str())];
    let view = call(event(
        "GET",
        &format!("/v1/operations/{uncertain_id}"),
        None,
        operator(),
        &[],
    ))
    .await;
    assert_eq!(
        view.headers()["etag"].to_str().unwrap(),
        seen_version,
        "the view's ETag is its version"
    );
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some(&settle), operator(), &if_match)).await,
    ));
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some("{}"), operator(), &if_match)).await,
    ));
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some(&settle), tenant("t1"), &if_match)).await,
    ));
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some(&settle), operator(), &text)).await,
    ));
    let missing = "/v1/operations/op_0123456789abcdef0123456789abcdef/resolution";
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", missing, Some(&settle), operator(), &if_match)).await,
    ));
    let abandon = json!({"action": "abandon", "reason": "customer withdrew"}).to_string();
    let no_precondition = call(event("POST", &rpath, Some(&abandon), operator(), &[])).await;
    assert_eq!(no_precondition.status(), 428);
    seen.insert(doc.check(res, "post", &no_precondition));
    let oversized = json!({"action": "abandon", "reason": "x".repeat(10_000)}).to_string();
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some(&oversized), operator(), &if_match)).await,
    ));
    let done = call(event("POST", &rpath, Some(&abandon), operator(), &if_match)).await;
    let done_body: Value = serde_json::from_slice(done.body().as_ref()).unwrap();
    assert_eq!(done_body["audit"][0]["actor"], "ops-1");
    seen.insert(doc.check(res, "post", &done));
    // Its tenant reads the decision under a pseudonym, in the view and in
    // its listing: never the operator's subject.
    let path = format!("/v1/operations/{uncertain_id}");
    for read in [path.as_str(), "/v1/operations"] {
        let shown = call(event("GET", read, None, tenant("t1"), &[])).await;
        let text = String::from_utf8_lossy(shown.body().as_ref()).into_owned();
        assert!(text.contains("\"actor\":\"operator-1\""), "{read}: {text}");
        assert!(!text.contains("ops-1"), "{read}: {text}");
    }
    // The same decision replayed on the version it was made on: 412, nothing changes.
    let replayed = call(event("POST", &rpath, Some(&abandon), operator(), &if_match)).await;
    assert_eq!(replayed.status(), 412);
    seen.insert(doc.check(res, "post", &replayed));
    // A body the document refuses is 400 before the version is compared:
    // a job id that is not a string, whatever the action.
    let numbered = json!({"action": "release_hold", "reason": "r", "job_id": 21_864_985}).to_string();
    let refused = call(event("POST", &rpath, Some(&numbered), operator(), &if_match)).await;
    let refused_body: Value = serde_json::from_slice(refused.body().as_ref()).unwrap();
    assert_eq!(
        (refused.status().as_u16(), &refused_body["field"]),
        (400, &json!("job_id"))
    );
    seen.insert(doc.check(res, "post", &refused));
    let after: Value = serde_json::from_slice(
        call(event(
            "GET",
            &format!("/v1/operations/{uncertain_id}"),
            None,
            operator(),
            &[],
        ))
        .await
        .body()
        .as_ref(),
    )
    .unwrap();
    assert_eq!(after["audit"].as_array().unwrap().len(), 1);
    // An operator token whose tenant claim is present but malformed.
    let bad_operator = json!({"sub": "ops-2", "scope": "genace:operator", "tenant_id": "not a tenant"});
    seen.insert(
        doc.check(
            one,
            "get",
            &call(event(
                "GET",
                &format!("/v1/operations/{uncertain_id}"),
                None,
                bad_operator,
                &[],
            ))
            .await,
        ),
    );
    seen.insert(doc.check(cases, "get", &call(event("GET", cases, None, Value::Null, &[])).await));
    seen.insert(doc.check(
        res,
        "post",
        &call(event("POST", &rpath, Some(&abandon), Value::Null, &[])).await,
    ));

    // Credits: the tenant's own, every tenant's for operators, and the limit.
    let mine = "/v1/tenants/me/credits";
    let all = "/v1/credits";
    let limit = "/v1/tenants/{tenant_id}/spend-limit";
    let own = call(event("GET", mine, None, tenant("t1"), &[])).await;
    let own_body: Value = serde_json::from_slice(own.body().as_ref()).unwrap();
    // The abandoned uncertain operation keeps its reservation: a job may exist.
    assert_eq!(own_body["held"], 10.0);
    assert_eq!(after["ledger_phase"], "uncertain");
    // Until an operator confirms it never ran.
    let now_version = format!("\"{}\"", after["version"]);
    let confirm = json!({"action": "confirm_not_created", "reason": "not in the Genace console"}).to_string();
    let confirmed = call(event(
        "POST",
        &rpath,
        Some(&confirm),
        operator(),
        &[("if-match", now_version.as_str())],
    ))
    .await;
    assert_eq!(confirmed.status(), 200);
    let own = call(event("GET", mine, None, tenant("t1"), &[])).await;
    let own_body: Value = serde_json::from_slice(own.body().as_ref()).unwrap();
    assert_eq!(own_body["held"], 0.0);
    assert_eq!(own_body["spend_limit"], Value::Null);
    seen.insert(doc.check(mine, "get", &own));
    seen.insert(doc.check(mine, "get", &call(event("GET", mine, None, Value::Null, &[])).await));
    let t1_limit = "/v1/tenants/t1/spend-limit";
    let fifteen = json!({"spend_limit": 15}).to_string();
    let set = call(event("PUT", t1_limit, Some(&fifteen), operator(), &[])).await;
    let set_body: Value = serde_json::from_slice(set.body().as_ref()).unwrap();
    assert_eq!(
        (set_body["spend_limit"].as_f64(), set_body["available"].as_f64()),
        (Some(15.0), Some(15.0))
    );
    seen.insert(doc.check(limit, "put", &set));
    for (body, claims, headers) in [
        (Some("{}"), operator(), &[][..]),
        (Some(&*fifteen), Value::Null, &[][..]),
        (Some(&*fifteen), tenant("t1"), &[][..]),
        (Some(&*fifteen), operator(), &text[..]),
    ] {
        seen.insert(doc.check(limit, "put", &call(event("PUT", t1_limit, body, claims, headers)).await));
    }
    let oversized_limit = json!({"spend_limit": 1, "note": "x".repeat(10_000)}).to_string();
    seen.insert(doc.check(
        limit,
        "put",
        &call(event("PUT", t1_limit, Some(&oversized_limit), operator(), &[])).await,
    ));
    // A tenant's limits are the platform's: an operator scoped to a tenant,
    // another or its own, may not set them, and the answer is the same.
    let five = json!({"spend_limit": 5}).to_string();
    for scoped_to in ["t2", "t1"] {
        let scoped = json!({"sub": "ops-3", "scope": "genace:operator", "tenant_id": scoped_to});
        let refused = call(event("PUT", t1_limit, Some(&five), scoped, &[])).await;
        assert_eq!(refused.status(), 403, "an operator scoped to {scoped_to}");
        let problem: Value = serde_json::from_slice(refused.body().as_ref()).unwrap();
        assert!(
            problem["type"].as_str().unwrap().ends_with("platform-limit"),
            "{problem}"
        );
        seen.insert(doc.check(limit, "put", &refused));
    }
    let own = call(event("GET", mine, None, tenant("t1"), &[])).await;
    let own_body: Value = serde_json::from_slice(own.body().as_ref()).unwrap();
    assert_eq!(own_body["spend_limit"], 15.0, "a refused limit changed nothing");
    let listed = call(event("GET", all, None, operator(), &[])).await;
    let listed_body: Value = serde_json::from_slice(listed.body().as_ref()).unwrap();
    assert!(
        listed_body["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tenant_id"] == "t1" && t["spend_limit"] == 15.0),
        "{listed_body}"
    );
    seen.insert(doc.check(all, "get", &listed));
    seen.insert(doc.check(
        all,
        "get",
        &call(event("GET", &format!("{all}?limit=0"), None, operator(), &[])).await,
    ));
    seen.insert(doc.check(all, "get", &call(event("GET", all, None, Value::Null, &[])).await));
    seen.insert(doc.check(all, "get", &call(event("GET", all, None, tenant("t1"), &[])).await));

    // With no room left, a new intent is recorded (202) and its view says
    // dispatch will wait.
    let five = json!({"spend_limit": 5}).to_string();
    assert_eq!(
        call(event("PUT", t1_limit, Some(&five), operator(), &[]))
            .await
            .status(),
        200
    );
    let tight = call(event("POST", ops, Some(&intent("k7", "p")), tenant("t1"), &[])).await;
    assert_eq!(tight.status(), 202);
    let tight_body: Value = serde_json::from_slice(tight.body().as_ref()).unwrap();
    assert_eq!(tight_body["hold"]["reason"], "spend_limit");
    assert_eq!(tight_body["hold"]["since"], Value::Null);
    seen.insert(doc.check(ops, "post", &tight));
    // With room, no hold is announced.
    call(event("PUT", t1_limit, Some(&fifteen), operator(), &[])).await;
    let roomy = call(event("POST", ops, Some(&intent("k8", "p")), tenant("t1"), &[])).await;
    let roomy_body: Value = serde_json::from_slice(roomy.body().as_ref()).unwrap();
    assert!(roomy_body.get("hold").is_none(), "{roomy_body}");

    // Webhooks: set, read, removed; operators only, within their tenant.
    let hook = "/v1/tenants/{tenant_id}/webhook";
    let t1_hook = "/v1/tenants/t1/webhook";
    let hook_body = json!({"url": "https://hooks.t1.example/genace", "secret_id": "genace/webhooks/t1/hook",
                           "events": ["operation.delivered"]})
    .to_string();
    let set_hook = call(event("PUT", t1_hook, Some(&hook_body), operator(), &[])).await;
    let set_hook_body: Value = serde_json::from_slice(set_hook.body().as_ref()).unwrap();
    assert_eq!(
        (
            set_hook_body["configured"].as_bool(),
            set_hook_body["updated_by"].as_str()
        ),
        (Some(true), Some("ops-1"))
    );
    seen.insert(doc.check(hook, "put", &set_hook));
    let read_hook = call(event("GET", t1_hook, None, operator(), &[])).await;
    let read_hook_body: Value = serde_json::from_slice(read_hook.body().as_ref()).unwrap();
    assert_eq!(read_hook_body["url"], "https://hooks.t1.example/genace");
    seen.insert(doc.check(hook, "get", &read_hook));
    let plain = json!({"url": "http://hooks.t1.example/genace", "secret_id": "genace/webhooks/t1/hook"}).to_string();
    let refused_hook = call(event("PUT", t1_hook, Some(&plain), operator(), &[])).await;
    assert_eq!(refused_hook.status(), 400);
    seen.insert(doc.check(hook, "put", &refused_hook));
    let big_hook =
        json!({"url": "https://x.example", "secret_id": "genace/webhooks/t1/hook", "note": "x".repeat(10_000)})
            .to_string();
    seen.insert(doc.check(
        hook,
        "put",
        &call(event("PUT", t1_hook, Some(&big_hook), operator(), &[])).await,
    ));
    seen.insert(doc.check(
        hook,
        "put",
        &call(event("PUT", t1_hook, Some(&hook_body), operator(), &text)).await,
    ));
    let t2_operator = json!({"sub": "ops-4", "scope": "genace:operator", "tenant_id": "t2"});
    for method in ["GET", "PUT", "DELETE"] {
        let body = (method == "PUT").then_some(hook_body.as_str());
        let lower = method.to_ascii_lowercase();
        let hidden = call(event(method, t1_hook, body, t2_operator.clone(), &[])).await;
        assert_eq!(hidden.status(), 404, "{method}");
        seen.insert(doc.check(hook, &lower, &hidden));
        seen.insert(doc.check(
            hook,
            &lower,
            &call(event(method, t1_hook, body, tenant("t1"), &[])).await,
        ));
        seen.insert(doc.check(
            hook,
            &lower,
            &call(event(method, t1_hook, body, Value::Null, &[])).await,
        ));
    }
    let removed_hook = call(event("DELETE", t1_hook, None, operator(), &[])).await;
    seen.insert(doc.check(hook, "delete", &removed_hook));
    let after_hook: Value =
        serde_json::from_slice(call(event("GET", t1_hook, None, operator(), &[])).await.body().as_ref()).unwrap();
    assert_eq!(after_hook["configured"], false);

    // An operation waiting for the spend limit shows the hold.
    let waiting_id = {
        let r = call(event("POST", ops, Some(&intent("k6", "p")), tenant("t1"), &[])).await;
        genace_core::domain::OperationId::parse(
            serde_json::from_slice::<Value>(r.body().as_ref()).unwrap()["operation_id"]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    };
    let fresh = store.get(&waiting_id, Utc::now()).await.unwrap().unwrap();
    let waiting = genace_core::machine::transition(
        &fresh,
        genace_core::machine::Input::SpendLimitReached,
        Utc::now(),
        &policy,
    )
    .unwrap();
    store.apply(&fresh, &waiting).await.unwrap();
    let held_view = call(event(
        "GET",
        &format!("/v1/operations/{waiting_id}"),
        None,
        tenant("t1"),
        &[],
    ))
    .await;
    let held_body: Value = serde_json::from_slice(held_view.body().as_ref()).unwrap();
    assert_eq!(held_body["phase"], "prepared");
    assert_eq!(held_body["hold"]["reason"], "spend_limit");
    seen.insert(doc.check(one, "get", &held_view));

    // An operation waiting for a slot of the Genace account: the view's
    // hold, and the capacity route counts it for its tenant.
    let slot_id = {
        let r = call(event("POST", ops, Some(&intent("k9", "p")), tenant("t1"), &[])).await;
        genace_core::domain::OperationId::parse(
            serde_json::from_slice::<Value>(r.body().as_ref()).unwrap()["operation_id"]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    };
    let fresh = store.get(&slot_id, Utc::now()).await.unwrap().unwrap();
    let since = Utc::now();
    let queued =
        genace_core::machine::transition(&fresh, genace_core::machine::Input::CapacityReached, since, &policy).unwrap();
    store.apply(&fresh, &queued).await.unwrap();
    let slot_view = call(event(
        "GET",
        &format!("/v1/operations/{slot_id}"),
        None,
        tenant("t1"),
        &[],
    ))
    .await;
    let slot_body: Value = serde_json::from_slice(slot_view.body().as_ref()).unwrap();
    assert_eq!(slot_body["hold"]["reason"], "capacity", "{slot_body}");
    assert_eq!(
        slot_body["queue"],
        json!({"reason": "capacity", "since": slot_body["hold"]["since"], "position": 2, "priority": "interactive"}),
        "behind t1's operation waiting for credits, in the same order: {slot_body}"
    );
    seen.insert(doc.check(one, "get", &slot_view));
    assert_eq!(held_body["queue"]["reason"], "spend_limit", "{held_body}");
    assert_eq!(held_body["queue"]["position"], 1, "{held_body}");
    // A priority is taken, shown, and not part of the fingerprint; an
    // unknown one is refused with its field.
    let mut batch: Value = serde_json::from_str(&intent("k-batch", "p")).unwrap();
    batch["priority"] = json!("batch");
    let made = call(event("POST", ops, Some(&batch.to_string()), tenant("t1"), &[])).await;
    let made_body: Value = serde_json::from_slice(made.body().as_ref()).unwrap();
    assert_eq!(
        (made.status().as_u16(), &made_body["priority"]),
        (202, &json!("batch")),
        "{made_body}"
    );
    seen.insert(doc.check(ops, "post", &made));
    batch["priority"] = json!("interactive");
    let replayed = call(event("POST", ops, Some(&batch.to_string()), tenant("t1"), &[])).await;
    let replayed_body: Value = serde_json::from_slice(replayed.body().as_ref()).unwrap();
    assert_eq!(
        (replayed.status().as_u16(), &replayed_body["priority"]),
        (200, &json!("batch")),
        "a replay, keeping the first priority: {replayed_body}"
    );
    batch["priority"] = json!("urgent");
    let unknown = call(event("POST", ops, Some(&batch.to_string()), tenant("t1"), &[])).await;
    let unknown_body: Value = serde_json::from_slice(unknown.body().as_ref()).unwrap();
    assert_eq!(
        (unknown.status().as_u16(), &unknown_body["field"]),
        (400, &json!("priority"))
    );
    seen.insert(doc.check(ops, "post", &unknown));
    let capacity = "/v1/capacity";
    let report = call(event("GET", capacity, None, operator(), &[])).await;
    let report_body: Value = serde_json::from_slice(report.body().as_ref()).unwrap();
    assert_eq!(
        report_body["waiting"], 2,
        "a wait for credits and one for a slot: {report_body}"
    );
    let t1_row = report_body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant_id"] == "t1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(t1_row["waiting"], 2, "{report_body}");
    assert_eq!(
        t1_row["oldest_wait_since"], held_body["queue"]["since"],
        "{report_body}"
    );
    seen.insert(doc.check(capacity, "get", &report));
    let scoped = json!({"sub": "ops-5", "scope": "genace:operator", "tenant_id": "t2"});
    let scoped_report = call(event("GET", capacity, None, scoped, &[])).await;
    let scoped_body: Value = serde_json::from_slice(scoped_report.body().as_ref()).unwrap();
    assert_eq!(
        (scoped_body["waiting"].clone(), scoped_body["tenants"].clone()),
        (Value::Null, json!([])),
        "a tenant-scoped operator sees its own tenant only"
    );
    seen.insert(doc.check(capacity, "get", &scoped_report));

    // The whole account's limit, set at run time: shown in force, refused
    // out of range and to a tenant-scoped operator, given back with null.
    let seven = json!({"max_in_flight": 7}).to_string();
    let set_account = call(event("PUT", capacity, Some(&seven), operator(), &[])).await;
    let set_account_body: Value = serde_json::from_slice(set_account.body().as_ref()).unwrap();
    assert_eq!(
        (
            set_account_body["max_in_flight"].clone(),
            set_account_body["set_at_run_time"].clone(),
            set_account_body["effective_max_in_flight"].clone()
        ),
        (json!(7), json!(true), json!(7)),
        "{set_account_body}"
    );
    seen.insert(doc.check(capacity, "put", &set_account));
    let scoped = json!({"sub": "ops-5", "scope": "genace:operator", "tenant_id": "t2"});
    let refused_scoped = call(event("PUT", capacity, Some(&seven), scoped, &[])).await;
    assert_eq!(refused_scoped.status(), 403);
    seen.insert(doc.check(capacity, "put", &refused_scoped));
    for bad in [json!({"max_in_flight": 0}), json!({"max_in_flight": 10_001}), json!({})] {
        let bad = bad.to_string();
        let refused = call(event("PUT", capacity, Some(&bad), operator(), &[])).await;
        assert_eq!(refused.status(), 400, "{bad}");
        seen.insert(doc.check(capacity, "put", &refused));
    }
    let oversized_account = json!({"max_in_flight": 1, "note": "x".repeat(10_000)}).to_string();
    for (body, claims, headers) in [
        (Some(&*seven), Value::Null, &[][..]),
        (Some(&*seven), operator(), &text[..]),
        (Some(&*oversized_account), operator(), &[][..]),
    ] {
        seen.insert(doc.check(
            capacity,
            "put",
            &call(event("PUT", capacity, body, claims, headers)).await,
        ));
    }
    let null = json!({"max_in_flight": null}).to_string();
    let given_back = call(event("PUT", capacity, Some(&null), operator(), &[])).await;
    let given_back_body: Value = serde_json::from_slice(given_back.body().as_ref()).unwrap();
    assert_eq!(given_back_body["set_at_run_time"], false, "{given_back_body}");
    assert_eq!(
        given_back_body["max_in_flight"], given_back_body["configured_max_in_flight"],
        "{given_back_body}"
    );
    seen.insert(doc.check(capacity, "put", &given_back));

    // A tenant's own limit of jobs in flight: set, refused out of range,
    // operators only, within their tenant; the capacity route shows it.
    let slots = "/v1/tenants/{tenant_id}/max-in-flight";
    let t1_slots = "/v1/tenants/t1/max-in-flight";
    let two = json!({"max_in_flight": 2}).to_string();
    let set_slots = call(event("PUT", t1_slots, Some(&two), operator(), &[])).await;
    let set_slots_body: Value = serde_json::from_slice(set_slots.body().as_ref()).unwrap();
    assert_eq!(
        (
            set_slots_body["max_in_flight"].clone(),
            set_slots_body["waiting"].clone()
        ),
        (json!(2), json!(2)),
        "{set_slots_body}"
    );
    seen.insert(doc.check(slots, "put", &set_slots));
    // JSON Schema's integer: 3.0 is one.
    let whole = json!({"max_in_flight": 3.0}).to_string();
    let as_float = call(event("PUT", t1_slots, Some(&whole), operator(), &[])).await;
    assert_eq!(as_float.status(), 200);
    seen.insert(doc.check(slots, "put", &as_float));
    call(event("PUT", t1_slots, Some(&two), operator(), &[])).await;
    for bad in [
        json!({}),
        json!({"max_in_flight": 0}),
        json!({"max_in_flight": 10_001}),
        json!({"max_in_flight": 1.5}),
    ] {
        let bad = bad.to_string();
        let refused = call(event("PUT", t1_slots, Some(&bad), operator(), &[])).await;
        assert_eq!(refused.status(), 400, "{bad}");
        seen.insert(doc.check(slots, "put", &refused));
    }
    let oversized_slots = json!({"max_in_flight": 1, "note": "x".repeat(10_000)}).to_string();
    let t2_scoped = json!({"sub": "ops-6", "scope": "genace:operator", "tenant_id": "t2"});
    for (body, claims, headers) in [
        (Some(&*two), Value::Null, &[][..]),
        (Some(&*two), tenant("t1"), &[][..]),
        (Some(&*two), operator(), &text[..]),
        (Some(&*oversized_slots), operator(), &[][..]),
        (Some(&*two), t2_scoped, &[][..]),
    ] {
        seen.insert(doc.check(slots, "put", &call(event("PUT", t1_slots, body, claims, headers)).await));
    }
    // Its own tenant's operator may not set it either (the platform's
    // limit); the capacity report below still shows 2.
    let one = json!({"max_in_flight": 1}).to_string();
    let t1_scoped = json!({"sub": "ops-7", "scope": "genace:operator", "tenant_id": "t1"});
    let refused = call(event("PUT", t1_slots, Some(&one), t1_scoped, &[])).await;
    assert_eq!(refused.status(), 403);
    seen.insert(doc.check(slots, "put", &refused));
    let with_limit: Value = serde_json::from_slice(
        call(event("GET", capacity, None, operator(), &[]))
            .await
            .body()
            .as_ref(),
    )
    .unwrap();
    assert!(
        with_limit["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tenant_id"] == "t1" && t["max_in_flight"] == 2),
        "{with_limit}"
    );
    seen.insert(doc.check(
        capacity,
        "get",
        &call(event("GET", capacity, None, Value::Null, &[])).await,
    ));
    seen.insert(doc.check(
        capacity,
        "get",
        &call(event("GET", capacity, None, tenant("t1"), &[])).await,
    ));

    // Cancel: a prepared operation is taken back, and a repeat answers the
    // same; an uncertain one (its job may exist) is 409 with its phase.
    let cancel = "/v1/operations/{operation_id}/cancel";
    let prepared_id =
        operation_id_of(&call(event("POST", ops, Some(&intent("k-cancel", "p")), tenant("t1"), &[])).await);
    let cancel_path = format!("/v1/operations/{prepared_id}/cancel");
    for claims in [tenant("t2"), json!({}), tenant("t1"), tenant("t1")] {
        seen.insert(doc.check(
            cancel,
            "post",
            &call(event("POST", &cancel_path, None, claims, &[])).await,
        ));
    }
    let cancelled: Value = serde_json::from_slice(
        call(event(
            "GET",
            &format!("/v1/operations/{prepared_id}"),
            None,
            tenant("t1"),
            &[],
        ))
        .await
        .body()
        .as_ref(),
    )
    .unwrap();
    assert_eq!(
        (
            &cancelled["phase"],
            &cancelled["cancellation"]["by"],
            &cancelled["cancellation"]["reason"]
        ),
        (&json!("cancelled"), &json!("t1"), &json!("requested")),
        "{cancelled}"
    );
    let bad_operator = json!({"sub": "ops-2", "scope": "genace:operator", "tenant_id": "not a tenant"});
    seen.insert(doc.check(
        cancel,
        "post",
        &call(event("POST", &cancel_path, None, bad_operator, &[])).await,
    ));
    let claimed_id =
        operation_id_of(&call(event("POST", ops, Some(&intent("k-claimed", "p")), tenant("t1"), &[])).await);
    let claimed_oid = genace_core::domain::OperationId::parse(&claimed_id).unwrap();
    let recorded = store.get(&claimed_oid, Utc::now()).await.unwrap().unwrap();
    // An operation waits for a slot (above), so a claim that did not wait
    // yields to it: this one waits first, and is claimed as if woken.
    let before_claim = genace_core::machine::transition(
        &recorded,
        genace_core::machine::Input::CapacityReached,
        Utc::now(),
        &policy,
    )
    .unwrap();
    store.apply(&recorded, &before_claim).await.unwrap();
    let after_claim = genace_core::machine::transition(
        &before_claim,
        genace_core::machine::Input::ClaimDispatch { token: "tok", shard: 0 },
        Utc::now(),
        &policy,
    )
    .unwrap();
    store.apply(&before_claim, &after_claim).await.unwrap();
    let too_late = call(event(
        "POST",
        &format!("/v1/operations/{claimed_id}/cancel"),
        None,
        operator(),
        &[],
    ))
    .await;
    let problem: Value = serde_json::from_slice(too_late.body().as_ref()).unwrap();
    assert_eq!(
        (too_late.status().as_u16(), &problem["phase"]),
        (409, &json!("submitting")),
        "{problem}"
    );
    seen.insert(doc.check(cancel, "post", &too_late));

    // Erasure: the delivered operation's objects are deleted and its view
    // keeps them without links; a repeat answers the same; an operation
    // still in dispatch is refused.
    let outputs = "/v1/operations/{operation_id}/outputs";
    let erase_path = format!("/v1/operations/{id}/outputs");
    for claims in [tenant("t2"), json!({}), tenant("t1"), tenant("t1")] {
        seen.insert(doc.check(
            outputs,
            "delete",
            &call(event("DELETE", &erase_path, None, claims, &[])).await,
        ));
    }
    let erased: Value = serde_json::from_slice(
        call(event("GET", &format!("/v1/operations/{id}"), None, tenant("t1"), &[]))
            .await
            .body()
            .as_ref(),
    )
    .unwrap();
    assert!(erased["outputs_erased_at"].is_string(), "{erased}");
    assert_eq!(erased["delivered_objects"][0]["url"], Value::Null, "{erased}");
    // The keys deleted, the delivered one among them.
    assert_eq!(
        erased["erased_objects"],
        json!([erased["delivered_objects"][0]["key"]]),
        "{erased}"
    );
    assert_eq!(erased["erased_object_count"], 1, "{erased}");
    assert_eq!(
        erased["audit"].as_array().unwrap().last().unwrap()["action"],
        "erase_outputs"
    );
    let bad_operator = json!({"sub": "ops-2", "scope": "genace:operator", "tenant_id": "not a tenant"});
    seen.insert(doc.check(
        outputs,
        "delete",
        &call(event("DELETE", &erase_path, None, bad_operator, &[])).await,
    ));
    let early = call(event(
        "DELETE",
        &format!("/v1/operations/{claimed_id}/outputs"),
        None,
        operator(),
        &[],
    ))
    .await;
    let problem: Value = serde_json::from_slice(early.body().as_ref()).unwrap();
    assert_eq!(
        (early.status().as_u16(), &problem["delivery_state"]),
        (409, &json!("not_collected")),
        "{problem}"
    );
    seen.insert(doc.check(outputs, "delete", &early));

    // Deadlines: one ahead is recorded and shown; one past is refused.
    let with_deadline = |key: &str, deadline: &str| {
        let mut v: Value = serde_json::from_str(&intent(key, "p")).unwrap();
        v["dispatch_deadline"] = json!(deadline);
        v.to_string()
    };
    let ahead = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let made = call(event(
        "POST",
        ops,
        Some(&with_deadline("k-deadline", &ahead)),
        tenant("t1"),
        &[],
    ))
    .await;
    let made_body: Value = serde_json::from_slice(made.body().as_ref()).unwrap();
    assert_eq!(made.status(), 202, "{made_body}");
    assert!(made_body["dispatch_deadline"].is_string(), "{made_body}");
    seen.insert(doc.check(ops, "post", &made));
    let past = call(event(
        "POST",
        ops,
        Some(&with_deadline("k-past", "2020-01-01T00:00:00Z")),
        tenant("t1"),
        &[],
    ))
    .await;
    let problem: Value = serde_json::from_slice(past.body().as_ref()).unwrap();
    assert_eq!(
        (past.status().as_u16(), &problem["field"]),
        (400, &json!("dispatch_deadline"))
    );
    seen.insert(doc.check(ops, "post", &past));

    // Listing: a tenant's own, an operator's across tenants, bad input.
    let listed = call(event("GET", "/v1/operations?limit=100", None, tenant("t1"), &[])).await;
    let page: Value = serde_json::from_slice(listed.body().as_ref()).unwrap();
    assert_eq!(listed.status(), 200, "{page}");
    let tenants: BTreeSet<&str> = page["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["operation_id"].as_str().unwrap())
        .collect();
    assert!(tenants.contains(id.as_str()), "{page}");
    seen.insert(doc.check(ops, "get", &listed));
    seen.insert(doc.check(ops, "get", &call(event("GET", ops, None, operator(), &[])).await));
    for bad in [
        "?limit=0",
        "?phase=rendering",
        "?cursor=abc",
        "?created_after=yesterday",
    ] {
        let refused = call(event("GET", &format!("{ops}{bad}"), None, tenant("t1"), &[])).await;
        assert_eq!(refused.status(), 400, "{bad}");
        seen.insert(doc.check(ops, "get", &refused));
    }
    seen.insert(doc.check(ops, "get", &call(event("GET", ops, None, json!({}), &[])).await));
    let bad_operator = json!({"sub": "ops-2", "scope": "genace:operator", "tenant_id": "not a tenant"});
    seen.insert(doc.check(ops, "get", &call(event("GET", ops, None, bad_operator, &[])).await));

    // Every promise was exercised, except an unavailable store (503); the
    // webhook endpoints' have their own test below.
    let untested: Vec<_> = doc
        .promised()
        .difference(&seen)
        .filter(|(p, _, s)| s != "503" && !p.starts_with("/v1/webhooks/") && !p.ends_with("/trace"))
        .cloned()
        .collect();
    assert!(untested.is_empty(), "documented but never produced: {untested:?}");
}

/// A trace reader holding the spans of one trace.
#[derive(Debug)]
struct KeptSpans(Vec<genace_trace::lines::SpanLine>);

impl genace_stages::ports::traces::TraceReader for KeptSpans {
    fn read<'a>(&'a self, trace: &'a genace_core::trace::TraceId) -> genace_stages::ports::traces::TraceFuture<'a> {
        let hex = trace.to_hex();
        let spans = self.0.iter().filter(|s| s.trace_id == hex).cloned().collect();
        Box::pin(async move { Ok(genace_stages::ports::traces::Trace::Spans(spans)) })
    }
}

/// A trace reader whose store fails.
#[derive(Debug)]
struct Unreadable;

impl genace_stages::ports::traces::TraceReader for Unreadable {
    fn read<'a>(&'a self, _trace: &'a genace_core::trace::TraceId) -> genace_stages::ports::traces::TraceFuture<'a> {
        Box::pin(async { Err("the span file cannot be read".to_owned()) })
    }
}

fn span(
    trace: &str,
    id: &str,
    parent: Option<&str>,
    name: &str,
    at_ms: u128,
    attributes: Value,
) -> genace_trace::lines::SpanLine {
    genace_trace::lines::SpanLine {
        trace_id: trace.to_owned(),
        span_id: id.to_owned(),
        parent_span_id: parent.map(str::to_owned),
        name: name.to_owned(),
        service: "genace-local".to_owned(),
        start_ns: at_ms * 1_000_000,
        end_ns: (at_ms + 100) * 1_000_000,
        attributes: serde_json::from_value(attributes).unwrap(),
    }
}

/// The operator's trace route: the kept spans of the operation's trace
/// only, in causal order with their offsets, or the X-Ray link where the
/// spans go there; not for tenants, nor for operations out of scope.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_operator_reads_an_operations_trace_as_its_spans_or_its_link() {
    let env = LocalAws::fresh().await;
    let mut intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let doc = Doc::load();
    let route = "/v1/operations/{operation_id}/trace";
    let created = api::handle(
        &intake,
        event("POST", "/v1/operations", Some(&intent("k1", "p")), tenant("t1"), &[]),
    )
    .await;
    let id = operation_id_of(&created);
    let trace = id.trim_start_matches("op_").to_owned();
    intake.traces = std::sync::Arc::new(KeptSpans(vec![
        span(&trace, "b", Some("a"), "dispatch", 1_000, json!({"outcome": "posted"})),
        span(
            &trace,
            "c",
            Some("b"),
            "genace.post",
            1_050,
            json!({"http.response.status_code": 202}),
        ),
        span(&trace, "a", None, "operation", 0, json!({})),
        span(&"f".repeat(32), "x", None, "another operation", 0, json!({})),
    ]));
    let path = format!("/v1/operations/{id}/trace");
    let mut seen = BTreeSet::new();

    let read = api::handle(&intake, event("GET", &path, None, operator(), &[])).await;
    seen.insert(doc.check(route, "get", &read));
    let body: Value = serde_json::from_slice(read.body().as_ref()).unwrap();
    assert_eq!(body["trace_id"], trace);
    assert_eq!(body["source"], "receiver");
    let rows: Vec<(&str, u64, f64)> = body["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["depth"].as_u64().unwrap(),
                s["offset_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("operation", 0, 0.0),
            ("dispatch", 1, 1_000.0),
            ("genace.post", 2, 1_050.0)
        ],
        "{body}"
    );
    assert_eq!(body["spans"][2]["status_code"], 202);
    assert_eq!(body["spans"][1]["outcome"], "posted");

    for (who, status) in [(tenant("t1"), 403), (Value::Null, 401)] {
        let refused = api::handle(&intake, event("GET", &path, None, who, &[])).await;
        assert_eq!(refused.status(), status);
        seen.insert(doc.check(route, "get", &refused));
    }
    let elsewhere = json!({"sub": "ops-2", "scope": "genace:operator", "tenant_id": "t2"});
    let hidden = api::handle(&intake, event("GET", &path, None, elsewhere, &[])).await;
    assert_eq!(hidden.status(), 404, "out of the operator's scope");
    let missing = format!("/v1/operations/op_{}/trace", "0".repeat(32));
    seen.insert(doc.check(
        route,
        "get",
        &api::handle(&intake, event("GET", &missing, None, operator(), &[])).await,
    ));

    // The kept spans cannot be read: 503, with when to ask again.
    intake.traces = std::sync::Arc::new(Unreadable);
    let unavailable = api::handle(&intake, event("GET", &path, None, operator(), &[])).await;
    assert_eq!(unavailable.status(), 503);
    assert!(unavailable.headers().contains_key("retry-after"));
    seen.insert(doc.check(route, "get", &unavailable));

    intake.traces = std::sync::Arc::new(genace_stages::ports::traces::XRayLink {
        region: "eu-west-1".into(),
    });
    let linked = api::handle(&intake, event("GET", &path, None, operator(), &[])).await;
    doc.check(route, "get", &linked);
    let body: Value = serde_json::from_slice(linked.body().as_ref()).unwrap();
    assert_eq!(body["source"], "xray");
    assert_eq!(body["spans"], json!([]));
    let link = body["link"].as_str().unwrap();
    assert!(
        link.ends_with(&format!("#xray:traces/1-{}-{}", &trace[..8], &trace[8..])),
        "{link}"
    );

    let untested: Vec<_> = doc
        .promised()
        .into_iter()
        .filter(|(p, _, _)| p == route)
        .filter(|k| !seen.contains(k))
        .collect();
    assert!(untested.is_empty(), "documented but never produced: {untested:?}");
}

/// The webhook's event filter in the document names exactly the event
/// types there are, each at most once.
#[test]
fn the_webhook_event_filter_names_every_event_type_once() {
    let doc = Doc::load();
    let schemas = &doc.root["components"]["schemas"];
    // Both ways of subscribing name the one filter.
    for request in ["WebhookRequest", "EndpointRequest", "EndpointUpdate"] {
        assert_eq!(
            schemas[request]["properties"]["events"]["$ref"], "#/components/schemas/EventFilter",
            "{request}"
        );
    }
    let events = &schemas["EventFilter"];
    let documented: Vec<&str> = events["items"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let kinds: Vec<&str> = genace_core::events::Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(documented, kinds);
    assert_eq!(events["maxItems"].as_u64(), Some(kinds.len() as u64));
    assert_eq!(events["uniqueItems"], true);
}

/// The router's one route table and the document name the same routes:
/// every row is a documented operation, and every documented operation a
/// row.
#[test]
fn the_route_table_is_the_documents_list_of_operations() {
    let doc = Doc::load();
    let documented: BTreeSet<(String, String)> = doc
        .promised()
        .into_iter()
        .map(|(path, method, _)| (path, method.to_ascii_uppercase()))
        .collect();
    let table: BTreeSet<(String, String)> = api::routes::ROUTES
        .iter()
        .map(|r| (r.path.to_owned(), r.method.as_str().to_owned()))
        .collect();
    assert_eq!(table.len(), api::routes::ROUTES.len(), "a row is listed twice");
    assert_eq!(table, documented);
}

/// Every page of a listing through the API, with the cursor each returns.
async fn pages(
    intake: &Api<Parts<DynamoStore, SqsQueue, S3Store>>,
    query: &str,
    claims: &Value,
) -> (Vec<String>, usize) {
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1..=50 {
        let path = match &cursor {
            Some(c) => format!("/v1/operations?{query}&cursor={c}"),
            None => format!("/v1/operations?{query}"),
        };
        let resp = Box::pin(api::handle(intake, event("GET", &path, None, claims.clone(), &[]))).await;
        let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
        assert_eq!(resp.status(), 200, "{body}");
        for op in body["operations"].as_array().unwrap() {
            found.push(op["operation_id"].as_str().unwrap().to_owned());
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (found, pages),
        }
    }
    panic!("the listing never ended");
}

/// The field a 400 names.
async fn refused_field(intake: &Api<Parts<DynamoStore, SqsQueue, S3Store>>, path: &str, claims: Value) -> String {
    let resp = Box::pin(api::handle(intake, event("GET", path, None, claims, &[]))).await;
    let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
    assert_eq!(resp.status(), 400, "{path}: {body}");
    body["field"].as_str().unwrap_or_default().to_owned()
}

/// 25 operations of tenant `ta` (their ids, oldest first) and 3 of `tb`.
async fn create_listed(intake: &Api<Parts<DynamoStore, SqsQueue, S3Store>>) -> Vec<String> {
    let mut mine = Vec::new();
    for i in 0..25 {
        let made = Box::pin(api::handle(
            intake,
            event(
                "POST",
                "/v1/operations",
                Some(&intent(&format!("k-{i}"), "p")),
                tenant("ta"),
                &[],
            ),
        ))
        .await;
        mine.push(operation_id_of(&made));
        // Creation times a millisecond apart at least: the order is by time.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    for i in 0..3 {
        let body = intent(&format!("k-{i}"), "p");
        Box::pin(api::handle(
            intake,
            event("POST", "/v1/operations", Some(&body), tenant("tb"), &[]),
        ))
        .await;
    }
    mine
}

#[tokio::test]
async fn a_listing_pages_through_one_tenant_and_its_cursor_serves_no_other() {
    let env = LocalAws::fresh().await;
    let intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let mut mine = create_listed(&intake).await;
    mine.reverse();
    let (listed, page_count) = pages(&intake, "limit=10", &tenant("ta")).await;
    assert_eq!(page_count, 3);
    assert_eq!(listed, mine, "all 25, newest first, none of tb's");
    let (theirs, _) = pages(&intake, "limit=10", &tenant("tb")).await;
    assert_eq!(theirs.len(), 3);
    assert!(theirs.iter().all(|id| !mine.contains(id)));

    // A cursor serves only the tenant and the filter it was made for.
    let first = Box::pin(api::handle(
        &intake,
        event("GET", "/v1/operations?limit=10", None, tenant("ta"), &[]),
    ))
    .await;
    let cursor = serde_json::from_slice::<Value>(first.body().as_ref()).unwrap()["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    for (path, claims) in [
        (format!("/v1/operations?limit=10&cursor={cursor}"), tenant("tb")),
        (
            format!("/v1/operations?limit=10&phase=prepared&cursor={cursor}"),
            tenant("ta"),
        ),
        (format!("/v1/operations?limit=10&cursor={cursor}"), operator()),
        ("/v1/operations?cursor=bm90IGEgY3Vyc29y".to_owned(), tenant("ta")),
    ] {
        assert_eq!(refused_field(&intake, &path, claims).await, "cursor", "{path}");
    }
    for (query, field) in [
        ("phase=rendering", "phase"),
        ("delivery_state=lost", "delivery_state"),
        ("limit=101", "limit"),
        ("limit=0", "limit"),
        ("created_before=soon", "created_before"),
        ("key_prefix=a%20b", "key_prefix"),
        ("tenant=tb", "tenant"),
    ] {
        let path = format!("/v1/operations?{query}");
        assert_eq!(refused_field(&intake, &path, tenant("ta")).await, field, "{query}");
    }

    // Operators: one tenant, every tenant, or only their scoped tenant.
    assert_eq!(pages(&intake, "tenant=ta&limit=100", &operator()).await.0, mine);
    assert_eq!(pages(&intake, "limit=7", &operator()).await.0.len(), 28);
    let scoped = json!({"sub": "ops-b", "scope": "genace:operator", "tenant_id": "tb"});
    assert_eq!(pages(&intake, "limit=100", &scoped).await.0, theirs);
    assert!(pages(&intake, "tenant=ta", &scoped).await.0.is_empty());
}

/// The case list's cursors are bound like the operation list's: a cursor
/// used with another reason, another age filter or another scope is a 400
/// naming `cursor` (never a page that skips cases), and so is a forged one
/// (never a 5xx). Paged under its own filter, every case comes once.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn a_case_cursor_serves_only_its_own_scope_and_filter() {
    use genace_localaws::{claimed, intent_record, uncertain};
    use genace_stages::ports::table::OperationRecords;
    let env = LocalAws::fresh().await;
    let intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let mut opened = Vec::new();
    for (tenant, key) in [("ta", "c1"), ("ta", "c2"), ("tb", "c3"), ("ta", "c4"), ("ta", "c5")] {
        let rec = intent_record(tenant, key, "p");
        env.store().create(&rec, Utc::now()).await.unwrap();
        let taken = claimed(&rec, "tok");
        env.store().apply(&rec, &taken).await.unwrap();
        env.store()
            .apply(&taken, &uncertain(&taken, "tok", "timed out"))
            .await
            .unwrap();
        opened.push(rec.operation_id.to_string());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let page = |path: String, claims: Value| {
        let intake = &intake;
        async move {
            let resp = Box::pin(api::handle(intake, event("GET", &path, None, claims, &[]))).await;
            (
                resp.status().as_u16(),
                serde_json::from_slice::<Value>(resp.body().as_ref()).unwrap(),
            )
        }
    };
    let base = "/v1/reconciliation-cases?reason=unknown_submit_outcome&limit=2";
    let (status, first) = page(format!("{base}&tenant=ta"), operator()).await;
    assert_eq!(status, 200, "{first}");
    let cursor = first["next_cursor"].as_str().expect("a next page").to_owned();
    let mut seen: Vec<String> = Vec::new();
    let mut next = Some(cursor.clone());
    seen.extend(
        first["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["operation_id"].as_str().unwrap().to_owned()),
    );
    while let Some(c) = next.take() {
        let (status, body) = page(format!("{base}&tenant=ta&cursor={c}"), operator()).await;
        assert_eq!(status, 200, "{body}");
        seen.extend(
            body["cases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["operation_id"].as_str().unwrap().to_owned()),
        );
        next = body["next_cursor"].as_str().map(str::to_owned);
    }
    let ta: Vec<String> = [0, 1, 3, 4].iter().map(|i| opened[*i].clone()).collect();
    assert_eq!(seen, ta, "every case of ta once, oldest first");

    let scoped_tb = json!({"sub": "ops-b", "scope": "genace:operator", "tenant_id": "tb"});
    for (path, claims) in [
        (
            format!("/v1/reconciliation-cases?limit=2&tenant=ta&cursor={cursor}"),
            operator(),
        ),
        (
            format!("/v1/reconciliation-cases?reason=account_problem&limit=2&tenant=ta&cursor={cursor}"),
            operator(),
        ),
        (
            format!("{base}&tenant=ta&opened_before=2100-01-01T00:00:00Z&cursor={cursor}"),
            operator(),
        ),
        (format!("{base}&cursor={cursor}"), operator()),
        (format!("{base}&tenant=tb&cursor={cursor}"), operator()),
        (format!("{base}&cursor={cursor}"), scoped_tb),
        (format!("{base}&cursor=eyJwayI6WyJTIiwieCJdfQ"), operator()),
        (format!("{base}&tenant=ta&cursor=%25%25"), operator()),
    ] {
        let (status, body) = page(path.clone(), claims).await;
        assert_eq!((status, &body["field"]), (400, &json!("cursor")), "{path}: {body}");
    }
}

/// The webhook endpoints' routes through the real handler, on moto's
/// table and Secrets Manager, every answer checked against the document
/// and every documented one produced: an application with the scope
/// manages its own; without it, 403; an operator names the tenant; the
/// limit is 409; a URL that can never be delivered and an unknown event
/// type are 400 with their field; the secret is shown once.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn webhook_endpoints_are_managed_through_the_api_and_show_their_secret_once() {
    use genace_stages::ports::webhooks::SecretStore;
    let env = LocalAws::fresh().await;
    let mut config = env.config.clone();
    config.webhook_max_endpoints = 2;
    let mut intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), config);
    let vault = genace_aws::SecretsManager::new(genace_aws::clients::secrets(&env.sdk), chrono::Duration::hours(24));
    intake.vault = std::sync::Arc::new(vault.clone());
    let doc = Doc::load();
    let mut seen = BTreeSet::new();
    let call = |req| Box::pin(api::handle(&intake, req));
    let body_of = |r: &Response<Body>| serde_json::from_slice::<Value>(r.body().as_ref()).unwrap();
    let (hooks, one_doc) = ("/v1/webhooks/endpoints", "/v1/webhooks/endpoints/{endpoint_id}");
    let (rotate_doc, log_doc) = (
        "/v1/webhooks/endpoints/{endpoint_id}/rotate",
        "/v1/webhooks/endpoints/{endpoint_id}/attempts",
    );
    let (replay_doc, recover_doc) = (
        "/v1/webhooks/endpoints/{endpoint_id}/replay",
        "/v1/webhooks/endpoints/{endpoint_id}/recover",
    );
    let app = json!({"sub": "dev-1", "tenant_id": "wh-acme", "scope": "operations.read operations.webhooks"});

    // Without the scope: refused; without credentials: 401.
    let refused = call(event("GET", hooks, None, tenant("wh-acme"), &[])).await;
    assert_eq!(body_of(&refused)["scope"], json!("operations.webhooks"));
    seen.insert(doc.check(hooks, "get", &refused));
    seen.insert(doc.check(
        hooks,
        "get",
        &call(event("GET", hooks, None, json!({"sub": "x"}), &[])).await,
    ));
    seen.insert(doc.check(
        hooks,
        "post",
        &call(event("POST", hooks, Some("{}"), tenant("wh-acme"), &[])).await,
    ));
    seen.insert(doc.check(
        hooks,
        "post",
        &call(event("POST", hooks, Some("{}"), json!({"sub": "x"}), &[])).await,
    ));

    let create =
        |url: &str| json!({"url": url, "description": "billing", "events": ["operation.delivered"]}).to_string();
    let created = call(event(
        "POST",
        hooks,
        Some(&create("https://hooks.acme.example/a")),
        app.clone(),
        &[],
    ))
    .await;
    assert_eq!(created.headers()["cache-control"], "no-store");
    seen.insert(doc.check(hooks, "post", &created));
    let view = body_of(&created);
    let id = view["id"].as_str().unwrap().to_owned();
    let secret = view["secret"].as_str().unwrap().to_owned();
    let secret_name = format!("genace/webhooks/wh-acme/{id}");
    let stored = vault.signing_secrets(&secret_name, 0).await.unwrap().unwrap();
    assert_eq!(stored, std::slice::from_ref(&secret));
    // Read back: never the secret.
    let listed = call(event("GET", hooks, None, app.clone(), &[])).await;
    assert_eq!(body_of(&listed)["endpoints"][0]["id"], json!(id));
    assert!(!body_of(&listed).to_string().contains(&secret));
    seen.insert(doc.check(hooks, "get", &listed));
    let one = format!("{hooks}/{id}");
    let read = call(event("GET", &one, None, app.clone(), &[])).await;
    assert_eq!(body_of(&read)["enabled"], json!(true));
    assert!(body_of(&read).get("secret").is_none());
    seen.insert(doc.check(one_doc, "get", &read));
    // An operator disables it: the tenant's views name no operator.
    let as_operator = format!("{one}?tenant=wh-acme");
    let off = r#"{"enabled": false}"#;
    let disabled = call(event("PATCH", &as_operator, Some(off), operator(), &[])).await;
    assert_eq!(body_of(&disabled)["updated_by"], json!("operator:ops-1"));
    for path in [one.as_str(), hooks] {
        let shown = body_of(&call(event("GET", path, None, app.clone(), &[])).await).to_string();
        assert!(!shown.contains("ops-1"), "{shown}");
        assert!(shown.contains("an operator"), "{shown}");
    }
    let on = r#"{"enabled": true}"#;
    assert_eq!(
        call(event("PATCH", &one, Some(on), app.clone(), &[])).await.status(),
        200
    );

    // On every route of one endpoint: no credentials (401), no scope
    // (403), an operator naming no tenant (400).
    for (route, method, path) in [
        (one_doc, "get", one.clone()),
        (one_doc, "patch", one.clone()),
        (one_doc, "delete", one.clone()),
        (rotate_doc, "post", format!("{one}/rotate")),
        (log_doc, "get", format!("{one}/attempts")),
        (replay_doc, "post", format!("{one}/replay")),
        (recover_doc, "post", format!("{one}/recover?since=2026-01-01T00:00:00Z")),
    ] {
        let body = match method {
            "patch" => Some(r#"{"enabled": true}"#),
            "post" => Some(r#"{"event_id": "e"}"#),
            _ => None,
        };
        for claims in [json!({"sub": "x"}), tenant("wh-acme"), operator()] {
            let answer = call(event(&method.to_ascii_uppercase(), &path, body, claims.clone(), &[])).await;
            assert!(
                [400, 401, 403].contains(&answer.status().as_u16()),
                "{method} {path} {claims}"
            );
            seen.insert(doc.check(route, method, &answer));
        }
    }
    let too_big = json!({"description": "x".repeat(9000)}).to_string();
    let patched = call(event("PATCH", &one, Some(&too_big), app.clone(), &[])).await;
    seen.insert(doc.check(one_doc, "patch", &patched));

    // Bad input names its field.
    for (body, field) in [
        (create("http://hooks.acme.example/a"), "url"),
        (create("https://10.0.0.1/a"), "url"),
        (create("https://hooks.acme.example:8443/a"), "url"),
        (
            json!({"url": "https://hooks.acme.example/a", "events": ["operation.exploded"]}).to_string(),
            "events",
        ),
    ] {
        let bad = call(event("POST", hooks, Some(&body), app.clone(), &[])).await;
        assert_eq!(body_of(&bad)["field"], json!(field), "{body}");
        seen.insert(doc.check(hooks, "post", &bad));
    }
    let huge = create(&format!("https://hooks.acme.example/{}", "x".repeat(9000)));
    seen.insert(doc.check(
        hooks,
        "post",
        &call(event("POST", hooks, Some(&huge), app.clone(), &[])).await,
    ));
    // The limit (2 here): the third is 409.
    let second = call(event(
        "POST",
        hooks,
        Some(&create("https://hooks.acme.example/b")),
        app.clone(),
        &[],
    ))
    .await;
    assert_eq!(second.status(), 201);
    let third = call(event(
        "POST",
        hooks,
        Some(&create("https://hooks.acme.example/c")),
        app.clone(),
        &[],
    ))
    .await;
    assert_eq!(body_of(&third)["limit"], json!(2));
    seen.insert(doc.check(hooks, "post", &third));

    // Rotate: a new secret, shown once, and stored.
    let rotated = call(event("POST", &format!("{one}/rotate"), None, app.clone(), &[])).await;
    let new_secret = body_of(&rotated)["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    seen.insert(doc.check(rotate_doc, "post", &rotated));
    let missing = format!("{hooks}/ep_00000000000000000000000000000000");
    seen.insert(doc.check(
        rotate_doc,
        "post",
        &call(event("POST", &format!("{missing}/rotate"), None, app.clone(), &[])).await,
    ));
    // Update: disabled, and enabled again; bad input and a missing one refused.
    let patch = |path: &str, b: Value| event("PATCH", path, Some(&b.to_string()), app.clone(), &[]);
    let disabled = call(patch(&one, json!({"enabled": false}))).await;
    assert_eq!(body_of(&disabled)["enabled"], json!(false));
    seen.insert(doc.check(one_doc, "patch", &disabled));
    let enabled = call(patch(&one, json!({"enabled": true, "description": "new"}))).await;
    assert_eq!(
        (
            body_of(&enabled)["enabled"].clone(),
            body_of(&enabled)["description"].clone()
        ),
        (json!(true), json!("new"))
    );
    seen.insert(doc.check(one_doc, "patch", &call(patch(&one, json!({}))).await));
    seen.insert(doc.check(one_doc, "patch", &call(patch(&missing, json!({"enabled": true}))).await));

    // The log: empty, paged; a bad status or cursor is 400.
    let log = call(event(
        "GET",
        &format!("{one}/attempts?status=failed"),
        None,
        app.clone(),
        &[],
    ))
    .await;
    assert_eq!(body_of(&log), json!({"attempts": [], "next_cursor": null}));
    seen.insert(doc.check(log_doc, "get", &log));
    // A sealed cursor is a digest of public values: one whose position is
    // empty (no key is) is refused before the store, never a 5xx.
    let empty = genace_stages::ports::cursor::seal(
        "",
        &genace_stages::ports::cursor::binding("webhook attempts", &[id.as_str()]),
    );
    for bad in ["status=lost", "cursor=abc", "limit=0", &format!("cursor={empty}")] {
        let refused = call(event("GET", &format!("{one}/attempts?{bad}"), None, app.clone(), &[])).await;
        assert_eq!(refused.status(), 400, "{bad}");
        seen.insert(doc.check(log_doc, "get", &refused));
    }
    seen.insert(doc.check(
        log_doc,
        "get",
        &call(event("GET", &format!("{missing}/attempts"), None, app.clone(), &[])).await,
    ));

    // Replay and recovery: a kept event with a failed attempt is queued
    // again with its id; an unknown event is 404; without input, 400.
    let store = env.store();
    let acme = genace_core::domain::TenantId::parse("wh-acme").unwrap();
    let event_id = "op_1:1:3:operation.delivered";
    let detail = json!({"id": event_id, "type": "operation.delivered", "tenant_id": "wh-acme"});
    let keep = Utc::now() + chrono::Duration::days(1);
    store
        .keep_event(&acme, event_id, &detail.to_string(), keep)
        .await
        .unwrap();
    // An event of a type the endpoint does not take is not sent to it.
    let untaken = "op_1:1:2:operation.accepted";
    let untaken_detail = json!({"id": untaken, "type": "operation.accepted", "tenant_id": "wh-acme"});
    store
        .keep_event(&acme, untaken, &untaken_detail.to_string(), keep)
        .await
        .unwrap();
    let failed = genace_core::webhook::WebhookAttempt {
        tenant_id: "wh-acme".into(),
        endpoint_id: id.clone(),
        event_id: event_id.into(),
        event_type: "operation.delivered".into(),
        at: Utc::now() - chrono::Duration::minutes(5),
        attempt: 1,
        status: genace_core::webhook::AttemptStatus::Failed,
        http_status: None,
        error: Some("timeout".into()),
        latency_ms: 10_000,
    };
    store.record_attempt(&failed, keep).await.unwrap();
    let replay = |path: &str, body: &str| event("POST", path, Some(body), app.clone(), &[]);
    let replayed = call(replay(
        &format!("{one}/replay"),
        &json!({"event_id": event_id}).to_string(),
    ))
    .await;
    assert_eq!(body_of(&replayed)["queued"], json!(1));
    seen.insert(doc.check(replay_doc, "post", &replayed));
    let unknown = call(replay(
        &format!("{one}/replay"),
        r#"{"event_id": "op_9:1:1:operation.held"}"#,
    ))
    .await;
    assert_eq!(body_of(&unknown)["title"], json!("No such event"));
    seen.insert(doc.check(replay_doc, "post", &unknown));
    seen.insert(doc.check(replay_doc, "post", &call(replay(&format!("{one}/replay"), "{}")).await));
    let not_taken = call(replay(
        &format!("{one}/replay"),
        &json!({"event_id": untaken}).to_string(),
    ))
    .await;
    assert_eq!(not_taken.status(), 409);
    assert!(
        body_of(&not_taken)["detail"]
            .as_str()
            .unwrap()
            .contains("operation.accepted"),
        "{:?}",
        body_of(&not_taken)
    );
    seen.insert(doc.check(replay_doc, "post", &not_taken));
    let since = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let recovered = call(replay(&format!("{one}/recover?since={since}"), "")).await;
    assert_eq!(
        (
            body_of(&recovered)["queued"].clone(),
            body_of(&recovered)["missing"].clone()
        ),
        (json!(1), json!(0))
    );
    seen.insert(doc.check(recover_doc, "post", &recovered));
    seen.insert(doc.check(recover_doc, "post", &call(replay(&format!("{one}/recover"), "")).await));
    seen.insert(doc.check(
        recover_doc,
        "post",
        &call(replay(&format!("{missing}/recover?since={since}"), "")).await,
    ));
    seen.insert(doc.check(
        replay_doc,
        "post",
        &call(replay(&format!("{missing}/replay"), r#"{"event_id": "x"}"#)).await,
    ));
    // Disabled, the endpoint is sent nothing, copies included: 409 with
    // the reason, and nothing queued.
    assert_eq!(call(patch(&one, json!({"enabled": false}))).await.status(), 200);
    for (doc_path, path, body) in [
        (
            replay_doc,
            format!("{one}/replay"),
            json!({"event_id": event_id}).to_string(),
        ),
        (recover_doc, format!("{one}/recover?since={since}"), String::new()),
    ] {
        let refused = call(replay(&path, &body)).await;
        assert_eq!(refused.status(), 409, "{path}");
        assert!(
            body_of(&refused)["type"].as_str().unwrap().ends_with("not-replayable"),
            "{path}"
        );
        seen.insert(doc.check(doc_path, "post", &refused));
    }
    assert_eq!(call(patch(&one, json!({"enabled": true}))).await.status(), 200);
    let copies = env.drain(&env.config.queues.webhooks).await;
    let copies: Vec<Value> = copies.iter().map(|c| serde_json::from_str(c).unwrap()).collect();
    assert_eq!(
        copies,
        [json!({"to": id, "detail": detail}), json!({"to": id, "detail": detail})]
    );

    // An operator names the tenant; another tenant sees nothing of it.
    let by_operator = call(event("GET", &format!("{one}?tenant=wh-acme"), None, operator(), &[])).await;
    assert_eq!(by_operator.status(), 200);
    let no_tenant = call(event("GET", hooks, None, operator(), &[])).await;
    assert_eq!(body_of(&no_tenant)["field"], json!("tenant"));
    seen.insert(doc.check(hooks, "get", &no_tenant));
    let other = json!({"sub": "dev-2", "tenant_id": "wh-globex", "scope": "operations.webhooks"});
    seen.insert(doc.check(
        one_doc,
        "get",
        &call(event("GET", &one, None, other.clone(), &[])).await,
    ));
    seen.insert(doc.check(one_doc, "delete", &call(event("DELETE", &one, None, other, &[])).await));

    // Every body is read by the one reader: not JSON is 415, too large 413,
    // unparsable 400 malformed-json, on each route that takes one.
    let text = [("content-type", "text/plain")];
    let replay_path = format!("{one}/replay");
    for (route, method, path, good) in [
        (hooks, "post", hooks.to_owned(), create("https://hooks.acme.example/d")),
        (one_doc, "patch", one.clone(), json!({"enabled": true}).to_string()),
        (
            replay_doc,
            "post",
            replay_path.clone(),
            json!({"event_id": event_id}).to_string(),
        ),
    ] {
        let verb = method.to_ascii_uppercase();
        let not_json = call(event(&verb, &path, Some(&good), app.clone(), &text)).await;
        assert_eq!(not_json.status(), 415, "{method} {path}");
        seen.insert(doc.check(route, method, &not_json));
        let unparsable = call(event(&verb, &path, Some("{\"url\":"), app.clone(), &[])).await;
        assert_eq!(
            body_of(&unparsable)["type"]
                .as_str()
                .map(|t| t.ends_with("malformed-json")),
            Some(true)
        );
        seen.insert(doc.check(route, method, &unparsable));
    }
    let huge_replay = json!({"event_id": "e".repeat(9000)}).to_string();
    let too_large = call(event("POST", &replay_path, Some(&huge_replay), app.clone(), &[])).await;
    assert_eq!(too_large.status(), 413);
    seen.insert(doc.check(replay_doc, "post", &too_large));

    // Delete: gone, with its secret.
    let deleted = call(event("DELETE", &one, None, app.clone(), &[])).await;
    seen.insert(doc.check(one_doc, "delete", &deleted));
    assert_eq!(call(event("GET", &one, None, app.clone(), &[])).await.status(), 404);
    assert_eq!(vault.signing_secrets(&secret_name, 0).await.unwrap(), None);
    assert_eq!(call(event("PUT", &one, None, app, &[])).await.status(), 405);

    let untested: Vec<_> = doc
        .promised()
        .difference(&seen)
        .filter(|(p, _, s)| s != "503" && p.starts_with("/v1/webhooks/"))
        .cloned()
        .collect();
    assert!(untested.is_empty(), "documented but never produced: {untested:?}");
}

/// Attaching a job id another operation holds is 409 through the API: a
/// global operator is told which operation holds it (`remote-job-held`);
/// an operator scoped to one tenant, when the holder is another tenant's,
/// is refused without its name (`remote-job-not-attachable`), as the
/// document says.
#[tokio::test]
async fn attaching_a_held_job_is_refused_and_names_the_holder_only_in_scope() {
    use genace_localaws::{claimed, intent_record, uncertain};
    use genace_stages::ports::table::OperationRecords;
    let env = LocalAws::fresh().await;
    let intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let mut ops = Vec::new();
    for tenant in ["ta", "tb"] {
        let rec = intent_record(tenant, "held", "p");
        env.store().create(&rec, Utc::now()).await.unwrap();
        let taken = claimed(&rec, "tok");
        env.store().apply(&rec, &taken).await.unwrap();
        let open = uncertain(&taken, "tok", "timed out");
        env.store().apply(&taken, &open).await.unwrap();
        ops.push((rec.operation_id.to_string(), format!("\"{}\"", open.version)));
    }
    let attach = json!({"action": "attach_remote_job", "job_id": "job-shared", "reason": "found it"}).to_string();
    let resolve = |id: &str, version: &str, claims: Value| {
        let req = event(
            "POST",
            &format!("/v1/operations/{id}/resolution"),
            Some(&attach),
            claims,
            &[("if-match", version)],
        );
        let intake = &intake;
        async move {
            let resp = Box::pin(api::handle(intake, req)).await;
            let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
            (resp.status().as_u16(), body)
        }
    };
    let (ta, ta_version) = (&ops[0].0, &ops[0].1);
    let (tb, tb_version) = (&ops[1].0, &ops[1].1);
    let (status, body) = resolve(tb, tb_version, operator()).await;
    assert_eq!(status, 200, "{body}");

    let scoped_ta = json!({"sub": "ops-a", "scope": "genace:operator", "tenant_id": "ta"});
    // A job id that the operation's evidence does not name: refused to a
    // scoped operator, whoever holds it.
    let (status, body) = resolve(ta, ta_version, scoped_ta.clone()).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["type"].as_str().unwrap().ends_with("remote-job-not-in-evidence"),
        "{body}"
    );
    assert!(!body.to_string().contains(tb.as_str()), "{body}");
    // Named by its evidence, but held by another tenant's operation.
    let mut ta_rec = env
        .store()
        .get(&genace_core::domain::OperationId::parse(ta).unwrap(), Utc::now())
        .await
        .unwrap()
        .unwrap();
    let read = ta_rec.clone();
    ta_rec.case.as_mut().unwrap().evidence = "timed out; Genace lists job-shared".into();
    ta_rec.version += 1;
    env.store().apply(&read, &ta_rec).await.unwrap();
    let ta_version = &format!("\"{}\"", ta_rec.version);
    let (status, body) = resolve(ta, ta_version, scoped_ta).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["type"].as_str().unwrap().ends_with("remote-job-not-attachable"),
        "{body}"
    );
    assert!(
        body.get("operation_id").is_none(),
        "another tenant's operation is not named: {body}"
    );
    assert!(!body.to_string().contains(tb.as_str()), "{body}");

    let (status, body) = resolve(ta, ta_version, operator()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["type"].as_str().unwrap().ends_with("remote-job-held"), "{body}");
    assert_eq!(body["operation_id"], tb.as_str());
}

/// Found in a security read: a cursor's seal is a digest of public values,
/// so a client can seal any position, and some reached DynamoDB as start
/// keys it refuses (a credits cursor's inner key of any shape, a listing
/// position below the filter's range, a case key of another tenant), as
/// did an inverted time range: each a 5xx. Every one is now 400 before
/// the store sees it.
#[tokio::test]
async fn forged_positions_in_valid_seals_and_an_inverted_range_are_400() {
    use base64::Engine;
    use genace_stages::ports::cursor::{binding, seal};
    let env = LocalAws::fresh().await;
    let intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let encoded = |key: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.to_string());
    let op_pk = format!("OP#op_{}", "a".repeat(32));
    // Credits: the inner key must be a ledger's key in the cursor's shard.
    let credits = binding("credits", &[]);
    for inner in [
        json!({"pk": ["S", "TENANT#ta"]}),
        json!({"pk": ["S", op_pk], "due_pk": ["S", "LEDGER#3"], "due_at": ["N", "0"]}),
        json!({"pk": ["S", "TENANT#ta"], "due_pk": ["S", "LEDGER#4"], "due_at": ["N", "0"]}),
        json!({"pk": ["S", "TENANT#ta"], "due_pk": ["S", "LEDGER#3"], "due_at": ["S", "x"]}),
        json!({"pk": ["S", "TENANT#ta"], "due_pk": ["S", "LEDGER#3"], "due_at": ["N", "0"], "x": ["S", "y"]}),
    ] {
        let cursor = seal(&format!("3.{}", encoded(inner.clone())), &credits);
        let path = format!("/v1/credits?cursor={cursor}");
        assert_eq!(refused_field(&intake, &path, operator()).await, "cursor", "{inner}");
    }
    // Operations: an inverted range, and a position below the filter's.
    let inverted = "/v1/operations?created_after=2026-02-01T00:00:00Z&created_before=2026-01-01T00:00:00Z";
    assert_eq!(refused_field(&intake, inverted, tenant("ta")).await, "created_after");
    let after = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let listing = binding("operations", &["ta", "", "", &after.to_rfc3339(), "", ""]);
    let below = seal(&format!("{:013}#op_{}", 1, "b".repeat(32)), &listing);
    let path = format!("/v1/operations?created_after=2026-01-01T00:00:00Z&cursor={below}");
    assert_eq!(refused_field(&intake, &path, tenant("ta")).await, "cursor");
    // Cases: a key of another tenant's range, sealed for this one's.
    let cases = binding("cases", &["ta", "", ""]);
    let other = encoded(json!({"pk": ["S", op_pk], "case_pk": ["S", "CASE"], "case_sk": ["S", "tb#2026"]}));
    let path = format!("/v1/reconciliation-cases?tenant=ta&cursor={}", seal(&other, &cases));
    assert_eq!(refused_field(&intake, &path, operator()).await, "cursor");
}

/// Every paged route, with its filters and on both case indexes, given
/// cursors a client could make:
/// - garbage (not a cursor), and a real position sealed for another
///   scope, filter or list (tampered): 400 `cursor`;
/// - the route's own real position, changed into one outside the range
///   of the query that would use it (an attribute dropped, added,
///   retyped or emptied, another partition, another index's key, a time
///   outside the filter, a shard that does not exist): 400 `cursor`;
/// - random positions sealed under the route's own binding: 200 or 400,
///   never a 5xx, and a 200 page holds only the caller's scope.
///
/// The real next cursor of each route is 200 (the test can tell).
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn no_cursor_a_client_can_send_makes_a_paged_route_answer_5xx() {
    use genace_localaws::{claimed, intent_record, uncertain};
    use genace_stages::ports::cursor::{binding, open, seal};
    use genace_stages::ports::table::OperationRecords;
    let env = LocalAws::fresh().await;
    let mut intake: Api<Parts<DynamoStore, SqsQueue, S3Store>> =
        Api::new(env.store(), env.queue(), env.objects(), env.config.clone());
    let vault = genace_aws::SecretsManager::new(genace_aws::clients::secrets(&env.sdk), chrono::Duration::hours(24));
    intake.vault = std::sync::Arc::new(vault);
    create_listed(&intake).await;
    for (tenant, key) in [("ta", "c1"), ("tb", "c2"), ("ta", "c3"), ("ta", "c4"), ("tb", "c5")] {
        let rec = intent_record(tenant, key, "p");
        env.store().create(&rec, Utc::now()).await.unwrap();
        let taken = claimed(&rec, "tok");
        env.store().apply(&rec, &taken).await.unwrap();
        let case = uncertain(&taken, "tok", "timed out");
        env.store().apply(&taken, &case).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    for t in ["ta", "tb", "tc"] {
        let path = format!("/v1/tenants/{t}/spend-limit");
        let body = json!({"spend_limit": 50}).to_string();
        let resp = Box::pin(api::handle(&intake, event("PUT", &path, Some(&body), operator(), &[]))).await;
        assert_eq!(resp.status(), 200, "{:?}", resp.body());
    }
    let after = "2000-01-01T00:00:00Z";
    let (after_t, before_t) = (
        "2000-01-01T00:00:00+00:00".to_owned(),
        "2100-01-01T00:00:00+00:00".to_owned(),
    );
    let opened = before_t.clone();
    let ops = |scope: &str, filter: [&str; 5]| {
        let mut parts = vec![scope];
        parts.extend(filter);
        binding("operations", &parts)
    };
    let scoped_ta = json!({"sub": "ops-a", "scope": "genace:operator", "tenant_id": "ta"});
    // (query, caller, the binding its cursors are sealed under, whether
    // it reads a time range, the tenants a page may hold)
    let none = ["", "", "", "", ""];
    let routes: Vec<(String, Value, String, bool, &[&str])> = vec![
        ("/v1/operations?limit=2".into(), tenant("ta"), ops("ta", none), false, &["ta"]),
        (
            format!("/v1/operations?limit=2&phase=prepared&created_after={after}&created_before=2100-01-01T00:00:00Z&key_prefix=k"),
            tenant("ta"),
            ops("ta", ["prepared", "", &after_t, &before_t, "k"]),
            true,
            &["ta"],
        ),
        ("/v1/operations?limit=2".into(), operator(), ops("*", none), false, &["ta", "tb"]),
        (
            format!("/v1/operations?limit=2&tenant=ta&created_after={after}"),
            operator(),
            ops("ta", ["", "", &after_t, "", ""]),
            true,
            &["ta"],
        ),
        ("/v1/operations?limit=2".into(), scoped_ta.clone(), ops("ta", none), false, &["ta"]),
        ("/v1/reconciliation-cases?tenant=ta&limit=1".into(), operator(), binding("cases", &["ta", "", ""]), false, &["ta"]),
        (
            "/v1/reconciliation-cases?tenant=ta&reason=unknown_submit_outcome&opened_before=2100-01-01T00:00:00Z&limit=1".into(),
            operator(),
            binding("cases", &["ta", "unknown_submit_outcome", &opened]),
            true,
            &["ta"],
        ),
        ("/v1/reconciliation-cases?limit=1".into(), operator(), binding("cases", &["*", "", ""]), false, &["ta", "tb"]),
        (
            "/v1/reconciliation-cases?reason=unknown_submit_outcome&opened_before=2100-01-01T00:00:00Z&limit=1".into(),
            operator(),
            binding("cases", &["*", "unknown_submit_outcome", &opened]),
            true,
            &["ta", "tb"],
        ),
        ("/v1/credits?limit=1".into(), operator(), binding("credits", &[]), false, &["ta", "tb", "tc"]),
    ];
    let get = |path: String, claims: Value| {
        let intake = &intake;
        async move {
            let resp = Box::pin(api::handle(intake, event("GET", &path, None, claims, &[]))).await;
            let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap_or(Value::Null);
            (resp.status().as_u16(), body)
        }
    };
    // An endpoint of ta's with a log of three attempts: its own route.
    let hooks = json!({"sub": "dev-1", "tenant_id": "ta", "scope": "operations.read operations.webhooks"});
    let made = json!({"url": "https://hooks.acme.example/a"}).to_string();
    let resp = Box::pin(api::handle(
        &intake,
        event("POST", "/v1/webhooks/endpoints", Some(&made), hooks.clone(), &[]),
    ))
    .await;
    assert_eq!(resp.status(), 201, "{:?}", resp.body());
    let endpoint = serde_json::from_slice::<Value>(resp.body().as_ref()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for n in 0..3 {
        let attempt = genace_core::webhook::WebhookAttempt {
            tenant_id: "ta".into(),
            endpoint_id: endpoint.clone(),
            event_id: format!("op_1:1:{n}:operation.accepted"),
            event_type: "operation.accepted".into(),
            at: Utc::now() - chrono::Duration::minutes(10 - n),
            attempt: 1,
            status: genace_core::webhook::AttemptStatus::Failed,
            http_status: Some(500),
            error: None,
            latency_ms: 5,
        };
        env.store()
            .record_attempt(&attempt, Utc::now() + chrono::Duration::days(1))
            .await
            .unwrap();
    }
    let attempts = binding("webhook attempts", &[&endpoint]);
    let mut routes = routes;
    routes.push((
        format!("/v1/webhooks/endpoints/{endpoint}/attempts?limit=1"),
        hooks,
        attempts,
        false,
        &["ta"],
    ));
    let owners = owners_of(&env).await;
    let in_scope = |path: &str, body: &Value, scope: &[&str]| -> usize {
        let items: Vec<&Value> = ["operations", "cases", "tenants", "attempts"]
            .iter()
            .filter_map(|m| body[m].as_array())
            .flatten()
            .collect();
        for item in &items {
            let id = item["operation_id"].as_str().unwrap_or_default();
            let t = item["tenant_id"]
                .as_str()
                .or(owners.get(id).map(String::as_str))
                .unwrap_or("ta");
            assert!(scope.contains(&t), "{path}: {t} is outside the scope");
        }
        items.len()
    };
    let mut forger = Forger(0x9e37_79b9_7f4a_7c15);
    let other_binding = binding("operations", &["tb", "", "", "", "", ""]);
    for (query, claims, bound, timed, scope) in &routes {
        let (status, first) = get(query.clone(), claims.clone()).await;
        assert_eq!(status, 200, "{query}: {first}");
        let real = first["next_cursor"]
            .as_str()
            .unwrap_or_else(|| panic!("{query}: a next page"))
            .to_owned();
        let path = format!("{query}&cursor={real}");
        let (status, body) = get(path.clone(), claims.clone()).await;
        assert_eq!(status, 200, "{query}: the real cursor: {body}");
        assert!(
            in_scope(&path, &body, scope) > 0,
            "{path}: the next page holds something: {body}"
        );
        let position = open(&real, bound).unwrap_or_else(|_| panic!("{query}: the test's binding is the route's"));
        let mut refused: Vec<String> = out_of_range(&position, *timed).iter().map(|p| seal(p, bound)).collect();
        refused.extend(
            [
                &other_binding,
                &binding("cases", &["tb", "", ""]),
                &binding("credits", &["x"]),
            ]
            .map(|b| seal(&position, b)),
        );
        refused.extend((0..20).map(|_| forger.position()));
        for cursor in refused {
            let path = format!("{query}&cursor={}", percent(&cursor));
            let (status, body) = get(path.clone(), claims.clone()).await;
            assert_eq!((status, &body["field"]), (400, &json!("cursor")), "{path}: {body}");
        }
        for _ in 0..30 {
            let path = format!("{query}&cursor={}", percent(&seal(&forger.position(), bound)));
            let (status, body) = get(path.clone(), claims.clone()).await;
            assert!(
                status == 200 || (status, &body["field"]) == (400, &json!("cursor")),
                "{path}: {status} {body}"
            );
            in_scope(&path, &body, scope);
        }
        // An inverted time range, wherever the route takes one.
        if query.starts_with("/v1/operations") && !timed {
            let path = format!("{query}&created_after=2026-02-01T00:00:00Z&created_before=2026-01-01T00:00:00Z");
            let (status, body) = get(path.clone(), claims.clone()).await;
            assert_eq!(
                (status, &body["field"]),
                (400, &json!("created_after")),
                "{path}: {body}"
            );
        }
    }
}

/// Each operation's tenant, as the table holds them (an application's own
/// views do not name it).
async fn owners_of(env: &LocalAws) -> std::collections::HashMap<String, String> {
    env.scan()
        .await
        .iter()
        .filter_map(|item| {
            let id = item.get("operation_id")?.as_s().ok()?;
            let tenant = item.get("tenant_id")?.as_s().ok()?;
            Some((id.clone(), tenant.clone()))
        })
        .collect()
}

/// A store position's key (base64url JSON of `name: [type, value]`).
type PositionKey = serde_json::Map<String, Value>;

fn key_of(text: &str) -> Option<PositionKey> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()?;
    serde_json::from_slice(&raw).ok()
}

fn encode_key(key: &PositionKey) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Value::Object(key.clone()).to_string())
}

/// Positions outside the query's range made from `real`, a position of
/// the route: its shape broken in each way a client could break it, and
/// (when the query reads a time range, `timed`) a time outside it.
fn out_of_range(real: &str, timed: bool) -> Vec<String> {
    // A credits position: `shard.key`.
    if let Some((shard, inner)) = real.split_once('.') {
        let mut out: Vec<String> = ["99", "-1", "", "x", "3.5"]
            .iter()
            .map(|s| format!("{s}.{inner}"))
            .collect();
        // A key of one shard's partition under another shard's number.
        if let Some(mut moved) = key_of(inner) {
            out.extend(out_of_range(inner, timed).into_iter().map(|k| format!("{shard}.{k}")));
            out.push(format!("{}.{inner}", shard.parse::<u32>().unwrap() + 1));
            moved.insert("due_pk".into(), json!(["S", "LEDGER#x"]));
            out.push(format!("{shard}.{}", encode_key(&moved)));
        }
        return out;
    }
    let Some(key) = key_of(real) else {
        // A listing position (`millis#operation id`, here after 2000) or a
        // log position (`millis#event id#attempt`).
        let (ms, id) = real.split_once('#').expect("a listing or log position");
        let mut out = vec![
            String::new(),
            format!("123#{id}"),
            format!("{:013}#op_short", 4_102_444_800_000_u64),
            format!("{:013}", 4_102_444_800_000_u64),
            format!("{real}#"),
            // Of the right shape, but longer than a sort key may be.
            format!("{ms}#{}#0001", "e".repeat(1100)),
        ];
        if timed {
            out.push(format!("0000000000001#{id}"));
        }
        return out;
    };
    let mut out = vec![String::new(), encode_key(&PositionKey::new())];
    out.extend(key_broken(&key, timed).iter().map(encode_key));
    out
}

/// `key` with each attribute dropped, retyped, emptied or malformed, an
/// attribute added, the other case index's sort key in place of its own,
/// and (on a tenant's case index) another tenant's case or (when `timed`)
/// a case opened after the filter's time.
fn key_broken(key: &PositionKey, timed: bool) -> Vec<PositionKey> {
    let mut out = Vec::new();
    let with = |name: &str, value: Value| {
        let mut changed = key.clone();
        changed.insert(name.into(), value);
        changed
    };
    for (name, value) in key {
        let mut dropped = key.clone();
        dropped.remove(name);
        out.push(dropped);
        let text = value[1].as_str().unwrap_or_default().to_owned();
        let retyped = if value[0] == "S" { "N" } else { "S" };
        out.extend([
            with(name, json!([retyped, text])),
            with(name, json!([value[0], ""])),
            with(name, json!(["B", text])),
            with(name, json!([value[0]])),
            // In range, but longer than a key may be.
            with(name, json!([value[0], format!("{text}{}", "0".repeat(1100))])),
        ]);
        // Any text sorts inside an unfiltered age index.
        if name != "case_age_sk" || timed {
            out.push(with(name, json!([value[0], format!("tb#{text}")])));
        }
    }
    out.push(with("list_pk", json!(["S", "LIST#ta"])));
    for (from, to) in [("case_sk", "case_age_sk"), ("case_age_sk", "case_sk")] {
        if let Some(v) = key.get(from) {
            let mut swapped = key.clone();
            swapped.remove(from);
            swapped.insert(to.into(), v.clone());
            out.push(swapped);
        }
    }
    let moves = [
        ("case_sk", "tb#2026-01-01T00:00:00.000Z", false),
        ("case_sk", "ta#2200-01-01T00:00:00.000Z", true),
        ("case_age_sk", "2200-01-01T00:00:00.000000Z", true),
    ];
    for (name, value, needs_time) in moves {
        if key.contains_key(name) && (timed || !needs_time) {
            out.push(with(name, json!(["S", value])));
        }
    }
    out
}

/// Cursors a client could make, from a seed.
struct Forger(u64);

impl Forger {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[usize::try_from(self.next()).unwrap_or(0) % from.len()]
    }

    /// A store position: keys of any shape and name, a credits position
    /// around one, or a bare string.
    fn position(&mut self) -> String {
        use base64::Engine;
        const PIECES: [&str; 15] = [
            "",
            "TENANT#ta",
            "TENANT#tb",
            "OP#op_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "CASE",
            "LEDGER#3",
            "ta#",
            "tb#2026",
            "0",
            "~",
            "0000000000001#op_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
            "9999999999999#x",
            "-1",
            "1e99",
            "\u{0}",
        ];
        const NAMES: [&str; 9] = [
            "pk",
            "due_pk",
            "due_at",
            "case_pk",
            "case_sk",
            "case_age_sk",
            "list_pk",
            "list_sk",
            "x",
        ];
        let mut key = serde_json::Map::new();
        for _ in 0..self.next() % 5 {
            let name = self.pick(&NAMES);
            let kind = if self.next().is_multiple_of(3) { "N" } else { "S" };
            key.insert(name.into(), json!([kind, self.pick(&PIECES)]));
        }
        let inner = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Value::Object(key).to_string());
        match self.next() % 4 {
            0 => format!("{}.{inner}", self.next() % 20),
            1 => self.pick(&PIECES).to_owned(),
            _ => inner,
        }
    }
}

/// `s` as a query value.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
