//! Every paged route through the real HTTP handler, on the in-memory
//! stack (held to the DynamoDB store by the contract suite), with a cursor
//! and a time range from the input: the raw bytes as the cursor, or a
//! position the input writes sealed under the route's own binding (a seal
//! is public, so a client can make one). Never a 5xx and never a panic; a
//! 400 names `cursor` or the time range; a 200 page holds only the
//! caller's scope.
#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;

use chrono::{DateTime, TimeZone, Utc};
use genace_core::machine::{Input, Policy, transition};
use genace_edge::http::handle;
use genace_memory::{MemoryApp, memory_app};
use genace_stages::api::context::Api;
use genace_stages::ports::Ports;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::cursor::{binding, seal};
use genace_stages::ports::table::prelude::*;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

struct Stack {
    runtime: tokio::runtime::Runtime,
    app: MemoryApp,
    endpoint: String,
    /// Each operation's tenant (an application's own views do not say).
    owners: HashMap<String, String>,
    /// Each route's real second-page position, for inputs to change.
    real: Vec<String>,
}

/// A route: its path and fixed query, the caller, the binding its cursors
/// are sealed under (given the endpoint and the listing's time range, as
/// `to_rfc3339` writes them, empty when absent), and the tenants a page
/// may hold.
struct Route {
    query: &'static str,
    caller: fn() -> Value,
    bound: fn(&str, &str, &str) -> String,
    scope: &'static [&'static str],
}

/// The time the filtered case routes read before, as the binding spells it.
const OPENED_BEFORE: &str = "2026-12-01T13:00:00+00:00";

fn tenant_a() -> Value {
    json!({"sub": "user-1", "tenant_id": "ta", "scope": "operations.write operations.read operations.webhooks"})
}

fn every_tenant() -> Value {
    json!({"sub": "ops-1", "scope": "operations.read genace:operator genace:operator:all"})
}

fn scoped_a() -> Value {
    json!({"sub": "ops-a", "scope": "genace:operator", "tenant_id": "ta"})
}

const ROUTES: [Route; 9] = [
    Route {
        query: "/v1/operations?limit=2",
        caller: tenant_a,
        bound: |_, after, before| binding("operations", &["ta", "", "", after, before, ""]),
        scope: &["ta"],
    },
    Route {
        query: "/v1/operations?limit=2",
        caller: every_tenant,
        bound: |_, after, before| binding("operations", &["*", "", "", after, before, ""]),
        scope: &["ta", "tb"],
    },
    Route {
        query: "/v1/operations?limit=2",
        caller: scoped_a,
        bound: |_, after, before| binding("operations", &["ta", "", "", after, before, ""]),
        scope: &["ta"],
    },
    Route {
        query: "/v1/reconciliation-cases?tenant=ta&limit=1",
        caller: every_tenant,
        bound: |_, _, _| binding("cases", &["ta", "", ""]),
        scope: &["ta"],
    },
    Route {
        query: "/v1/reconciliation-cases?limit=1",
        caller: every_tenant,
        bound: |_, _, _| binding("cases", &["*", "", ""]),
        scope: &["ta", "tb"],
    },
    Route {
        query: "/v1/credits?limit=1",
        caller: every_tenant,
        bound: |_, _, _| binding("credits", &[]),
        scope: &["ta", "tb", "tc"],
    },
    Route {
        query: "/v1/webhooks/endpoints/{endpoint}/attempts?limit=1",
        caller: tenant_a,
        bound: |endpoint, _, _| binding("webhook attempts", &[endpoint]),
        scope: &["ta"],
    },
    Route {
        query: "/v1/reconciliation-cases?tenant=ta&reason=unknown_submit_outcome&opened_before=2026-12-01T13:00:00Z&limit=1",
        caller: every_tenant,
        bound: |_, _, _| binding("cases", &["ta", "unknown_submit_outcome", OPENED_BEFORE]),
        scope: &["ta"],
    },
    Route {
        query: "/v1/reconciliation-cases?reason=unknown_submit_outcome&opened_before=2026-12-01T13:00:00Z&limit=1",
        caller: every_tenant,
        bound: |_, _, _| binding("cases", &["*", "unknown_submit_outcome", OPENED_BEFORE]),
        scope: &["ta", "tb"],
    },
];

/// An API Gateway (HTTP API) event for `method path` by a caller with `claims`.
fn request(method: &str, path: &str, body: Option<&str>, claims: Value) -> lambda_http::Request {
    let (raw_path, query) = path.split_once('?').unwrap_or((path, ""));
    let params: serde_json::Map<String, Value> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), json!(v)))
        .collect();
    let event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": query,
        "queryStringParameters": params,
        "headers": {"content-type": "application/json", "host": "api.example.com"},
        "requestContext": {
            "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com",
            "domainPrefix": "api", "requestId": "r", "routeKey": "$default", "stage": "$default",
            "time": "01/Dec/2026:12:00:00 +0000", "timeEpoch": 1_796_126_400_000_u64,
            "authorizer": {"jwt": {"claims": claims, "scopes": null}},
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "fuzz"}
        },
        "body": body,
        "isBase64Encoded": false
    });
    lambda_http::request::from_str(&event.to_string()).expect("a valid event")
}

async fn call<P: Ports>(api: &Api<P>, method: &str, path: &str, body: Option<&str>, claims: Value) -> (u16, Value) {
    let resp = handle(api, request(method, path, body, claims)).await;
    let body = serde_json::from_slice(resp.body().as_ref()).unwrap_or(Value::Null);
    (resp.status().as_u16(), body)
}

/// Operations of two tenants, open cases of both, three ledgers and a
/// webhook endpoint with a log of three attempts: every route has more
/// than one page.
fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let app = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
        let (endpoint, owners) = runtime.block_on(seed(&app));
        let real = runtime.block_on(real_positions(&app, &endpoint));
        Stack {
            runtime,
            app,
            endpoint,
            owners,
            real,
        }
    })
}

async fn seed(app: &MemoryApp) -> (String, HashMap<String, String>) {
    let api = app.api();
    let mut owners = HashMap::new();
    for (i, t) in ["ta", "ta", "ta", "ta", "tb", "tb", "tb"].iter().enumerate() {
        let body = json!({"operation_key": format!("k{i}"), "media_type": "image",
            "specification": {"model": "genace-image-1", "prompt": "p"}})
        .to_string();
        let claims = json!({"sub": "u", "tenant_id": t, "scope": "operations.write"});
        let (status, view) = call(&api, "POST", "/v1/operations", Some(&body), claims).await;
        assert_eq!(status, 202, "{view}");
        owners.insert(
            view["operation_id"].as_str().expect("an id").to_owned(),
            (*t).to_owned(),
        );
        app.clock.advance(chrono::Duration::seconds(1));
        if i % 2 == 0 {
            open_case(app, view["operation_id"].as_str().expect("an id")).await;
        }
    }
    for t in ["ta", "tb", "tc"] {
        let body = json!({"spend_limit": 50}).to_string();
        let path = format!("/v1/tenants/{t}/spend-limit");
        let (status, view) = call(&api, "PUT", &path, Some(&body), every_tenant()).await;
        assert_eq!(status, 200, "{view}");
    }
    let body = json!({"url": "https://hooks.example.com/genace"}).to_string();
    let (status, view) = call(&api, "POST", "/v1/webhooks/endpoints", Some(&body), tenant_a()).await;
    assert_eq!(status, 201, "{view}");
    let endpoint = view["id"].as_str().expect("an endpoint id").to_owned();
    for n in 0..3 {
        let attempt = genace_core::webhook::WebhookAttempt {
            tenant_id: "ta".into(),
            endpoint_id: endpoint.clone(),
            event_id: format!("op_1:1:{n}:operation.accepted"),
            event_type: "operation.accepted".into(),
            at: app.clock.now() + chrono::Duration::seconds(n),
            attempt: 1,
            status: genace_core::webhook::AttemptStatus::Failed,
            http_status: Some(500),
            error: None,
            latency_ms: 5,
        };
        let keep = app.clock.now() + chrono::Duration::days(1);
        app.store.record_attempt(&attempt, keep).await.expect("recorded");
    }
    (endpoint, owners)
}

/// Each route's first next cursor, opened: its real page must hold
/// something, so that a binding the target gets wrong (every input a 400)
/// stops the run instead of passing it.
async fn real_positions(app: &MemoryApp, endpoint: &str) -> Vec<String> {
    let api = app.api();
    let mut out = Vec::new();
    for route in &ROUTES {
        let query = route.query.replace("{endpoint}", endpoint);
        let (status, first) = call(&api, "GET", &query, None, (route.caller)()).await;
        let next = first["next_cursor"]
            .as_str()
            .unwrap_or_else(|| panic!("{query}: {status} {first}"));
        let path = format!(
            "{query}&cursor={}",
            url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
        );
        let (status, page) = call(&api, "GET", &path, None, (route.caller)()).await;
        let items = ["operations", "cases", "tenants", "attempts"]
            .iter()
            .filter_map(|m| page[m].as_array())
            .flatten()
            .count();
        assert!(status == 200 && items > 0, "{path}: {status} {page}");
        let bound = (route.bound)(endpoint, "", "");
        out.push(genace_stages::ports::cursor::open(next, &bound).unwrap_or_else(|_| panic!("{query}: the binding")));
    }
    out
}

/// The operation `id`, claimed and left with an unknown outcome: a case.
async fn open_case(app: &MemoryApp, id: &str) {
    let id = genace_core::domain::OperationId::parse(id).expect("an id");
    let now = app.clock.now();
    let rec = app.store.get(&id, now).await.expect("readable").expect("created");
    let policy = Policy::default();
    let taken = transition(&rec, Input::ClaimDispatch { token: "t", shard: 0 }, now, &policy).expect("claimable");
    app.store.apply(&rec, &taken).await.expect("claimed");
    let unknown = Input::OutcomeUnknown {
        token: "t",
        evidence: "timed out",
    };
    let case = transition(&taken, unknown, now, &policy).expect("a case");
    app.store.apply(&taken, &case).await.expect("opened");
}

/// A time of the input's choosing, for a range.
fn time(byte: u8) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap() + chrono::Duration::seconds(i64::from(byte) - 128)
}

fuzz_target!(|data: &[u8]| {
    let [route, mode, after, before, rest @ ..] = data else {
        return;
    };
    let stack = stack();
    let at = usize::from(*route) % ROUTES.len();
    let route = &ROUTES[at];
    let text = String::from_utf8_lossy(rest);
    let mut query = route.query.replace("{endpoint}", &stack.endpoint);
    // An inverted, empty or ordinary time range on the listing, now and then.
    let timed = mode % 4 == 3 && query.starts_with("/v1/operations");
    let (low, high) = (time(*after), time(*before));
    let (after_part, before_part) = if timed {
        let stamp = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        query.push_str(&format!("&created_after={}&created_before={}", stamp(low), stamp(high)));
        (low.to_rfc3339(), high.to_rfc3339())
    } else {
        (String::new(), String::new())
    };
    let bound = (route.bound)(&stack.endpoint, &after_part, &before_part);
    let cursor = match mode % 4 {
        0 => text.into_owned(),
        // The route's real position, its tail written by the input.
        2 => {
            let real = &stack.real[at];
            let mut keep = usize::from(*after) % (real.len() + 1);
            while !real.is_char_boundary(keep) {
                keep -= 1;
            }
            seal(&format!("{}{text}", &real[..keep]), &bound)
        }
        _ => seal(&text, &bound),
    };
    let cursor: String = url::form_urlencoded::byte_serialize(cursor.as_bytes()).collect();
    let path = format!("{query}&cursor={cursor}");
    let api = stack.app.api();
    let (status, body) = stack.runtime.block_on(call(&api, "GET", &path, None, (route.caller)()));
    assert!(status < 500, "{path}: {status} {body}");
    match status {
        200 => {
            // An endpoint's log is the caller's by its path: only the
            // lists that name an operation or a tenant are checked.
            for item in ["operations", "cases", "tenants"]
                .iter()
                .filter_map(|m| body[m].as_array())
                .flatten()
            {
                let id = item["operation_id"].as_str().unwrap_or_default();
                let t = item["tenant_id"]
                    .as_str()
                    .or(stack.owners.get(id).map(String::as_str))
                    .unwrap_or_default();
                assert!(route.scope.contains(&t), "{path}: {t} is outside the scope");
            }
        }
        400 => {
            let field = body["field"].as_str().unwrap_or_default();
            let allowed = ["cursor"].iter().chain(if timed {
                &["created_after", "created_before"][..]
            } else {
                &[]
            });
            assert!(
                allowed.clone().any(|f| *f == field),
                "{path}: 400 naming {field:?}: {body}"
            );
        }
        _ => panic!("{path}: {status} {body}"),
    }
});
