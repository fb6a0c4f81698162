//! A fault proxy in front of local AWS: what moto cannot show of real
//! DynamoDB. Every request goes on to the endpoint behind it, except:
//!
//! - a share of `TransactWriteItems` calls, which it answers itself, as real
//!   DynamoDB does when a transaction meets another on one of its items:
//!   HTTP 400, `TransactionCanceledException`, a `TransactionConflict`
//!   reason, and nothing written (the request never reaches moto);
//! - plain writes (`PutItem`, `UpdateItem`, `DeleteItem`) to an item that a
//!   transaction holds at that moment (one the proxy is forwarding), and a
//!   share of those to items that transactions write at all (the holds of a
//!   busy table moto's milliseconds never show), answered as DynamoDB does:
//!   HTTP 400, `TransactionConflictException`, nothing written;
//! - a brownout: every answer held back for a set time.
//!
//! Tests point the stack's SDK at it (`SdkConfig::to_builder().endpoint_url`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running fault proxy; stops when dropped.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`, for the SDK's endpoint.
    pub url: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    upstream: String,
    /// The share of transactions cancelled, in percent; a test may change it.
    conflict_percent: AtomicU64,
    http: reqwest::Client,
    /// Draws so far (deterministic: the n-th transaction's fate is fixed).
    draws: AtomicU64,
    cancelled: AtomicU64,
    forwarded_transactions: AtomicU64,
    /// SQS `SendMessage` calls by queue URL.
    sends: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// The share of plain writes to items transactions write that are
    /// refused, in percent.
    plain_percent: AtomicU64,
    plain_draws: AtomicU64,
    plain_refused: AtomicU64,
    /// Items (table and key, as sent) that transactions have written, and
    /// how many transactions hold each right now.
    items: std::sync::Mutex<Items>,
    /// How long every answer is held back (a brownout), in milliseconds.
    delay_ms: AtomicU64,
}

#[derive(Default)]
struct Items {
    written: std::collections::HashSet<String>,
    held: std::collections::HashMap<String, u32>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts on a free loopback port, forwarding to `upstream` and
    /// cancelling `conflict_percent` of the `TransactWriteItems` calls.
    pub async fn start(upstream: &str, conflict_percent: u64) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(State {
            upstream: upstream.trim_end_matches('/').to_owned(),
            conflict_percent: AtomicU64::new(conflict_percent.min(100)),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .map_err(std::io::Error::other)?,
            draws: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            forwarded_transactions: AtomicU64::new(0),
            sends: std::sync::Mutex::default(),
            plain_percent: AtomicU64::new(0),
            plain_draws: AtomicU64::new(0),
            plain_refused: AtomicU64::new(0),
            items: std::sync::Mutex::default(),
            delay_ms: AtomicU64::new(0),
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = serving.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.answer(req).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Self { url, state, task })
    }

    /// From now on, cancels `percent` of the `TransactWriteItems` calls: a
    /// table that turns busy, or quiet again, while the stack runs.
    pub fn set_conflict_percent(&self, percent: u64) {
        self.state.conflict_percent.store(percent.min(100), Ordering::SeqCst);
    }

    /// From now on, refuses `percent` of the plain writes to items that
    /// transactions write (besides those a transaction holds right then,
    /// always refused).
    pub fn set_plain_conflict_percent(&self, percent: u64) {
        self.state.plain_percent.store(percent.min(100), Ordering::SeqCst);
    }

    /// From now on, holds every answer back for `delay` (zero: none).
    pub fn set_delay(&self, delay: std::time::Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Plain writes refused with `TransactionConflictException` so far.
    pub fn plain_refused(&self) -> u64 {
        self.state.plain_refused.load(Ordering::SeqCst)
    }

    /// Transactions cancelled with `TransactionConflict` so far.
    pub fn cancelled(&self) -> u64 {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// SQS messages sent to `queue_url` so far.
    pub fn sends_to(&self, queue_url: &str) -> u64 {
        let sends = self.state.sends.lock().unwrap_or_else(|p| p.into_inner());
        sends.get(queue_url).copied().unwrap_or(0)
    }

    /// Transactions let through to the endpoint so far.
    pub fn forwarded_transactions(&self) -> u64 {
        self.state.forwarded_transactions.load(Ordering::SeqCst)
    }
}

impl State {
    /// Whether the next transaction is cancelled: a fixed, well-mixed
    /// sequence (SplitMix64 of the draw's number).
    fn conflicts(&self) -> bool {
        let n = self.draws.fetch_add(1, Ordering::SeqCst);
        mixed(n.wrapping_add(0x9e37_79b9_7f4a_7c15)) % 100 < self.conflict_percent.load(Ordering::SeqCst)
    }

    async fn answer(&self, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
        let answer = self.answer_now(req).await;
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        answer
    }

    /// Whether the next plain write to an item transactions write is refused.
    fn plain_conflicts(&self) -> bool {
        let n = self.plain_draws.fetch_add(1, Ordering::SeqCst);
        mixed(n.wrapping_add(0x5851_f42d_4c95_7f2d)) % 100 < self.plain_percent.load(Ordering::SeqCst)
    }

    fn items(&self) -> std::sync::MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn answer_now(&self, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let target = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if target.ends_with(".TransactWriteItems") {
            if self.conflicts() {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                return conflict(&body);
            }
            self.forwarded_transactions.fetch_add(1, Ordering::SeqCst);
            // Its items are held while moto writes them.
            let keys = transaction_items(&body);
            {
                let mut items = self.items();
                for key in &keys {
                    items.written.insert(key.clone());
                    *items.held.entry(key.clone()).or_default() += 1;
                }
            }
            let answer = self.forward_or_502(parts, body).await;
            let mut items = self.items();
            for key in &keys {
                if let Some(n) = items.held.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        items.held.remove(key);
                    }
                }
            }
            return answer;
        }
        if [".PutItem", ".UpdateItem", ".DeleteItem"]
            .iter()
            .any(|op| target.ends_with(op))
            && let Some(key) = plain_item(&body)
        {
            let (held, written) = {
                let items = self.items();
                (items.held.contains_key(&key), items.written.contains(&key))
            };
            if held || (written && self.plain_conflicts()) {
                self.plain_refused.fetch_add(1, Ordering::SeqCst);
                return refused_plain_write();
            }
        }
        if target.ends_with(".SendMessage") {
            let queue = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["QueueUrl"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let mut sends = self.sends.lock().unwrap_or_else(|p| p.into_inner());
            *sends.entry(queue).or_default() += 1;
        }
        self.forward_or_502(parts, body).await
    }

    async fn forward_or_502(&self, parts: hyper::http::request::Parts, body: Bytes) -> hyper::Response<Full<Bytes>> {
        match self.forward(parts, body).await {
            Ok(resp) => resp,
            Err(e) => {
                let mut resp = hyper::Response::new(Full::new(Bytes::from(e)));
                *resp.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                resp
            }
        }
    }

    async fn forward(
        &self,
        parts: hyper::http::request::Parts,
        body: Bytes,
    ) -> Result<hyper::Response<Full<Bytes>>, String> {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).map_err(|e| e.to_string())?;
        let mut out = self.http.request(method, format!("{}{path}", self.upstream));
        // The body is forwarded whole: its framing headers are the new
        // request's own.
        let framing = ["host", "content-length", "transfer-encoding", "connection", "expect"];
        for (name, value) in &parts.headers {
            if !framing.contains(&name.as_str()) {
                out = out.header(name.as_str(), value.as_bytes());
            }
        }
        let answer = out.body(body).send().await.map_err(|e| e.to_string())?;
        let mut resp = hyper::Response::builder().status(answer.status().as_u16());
        // The length stays as the endpoint said: a HEAD's names the
        // object's size, not its own empty body's.
        for (name, value) in answer.headers() {
            if name != "transfer-encoding" && name != "connection" {
                resp = resp.header(name.as_str(), value.as_bytes());
            }
        }
        let bytes = answer.bytes().await.map_err(|e| e.to_string())?;
        resp.body(Full::new(bytes)).map_err(|e| e.to_string())
    }
}

/// SplitMix64's mixing of `z`.
fn mixed(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An item as the proxy names it: its table and key, as sent.
fn item_name(table: &serde_json::Value, key: &serde_json::Value) -> Option<String> {
    Some(format!("{}\u{0}{key}", table.as_str()?))
}

/// The items a `TransactWriteItems` request writes or checks.
fn transaction_items(request: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(request) else {
        return Vec::new();
    };
    v["TransactItems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| {
            let action = ["Update", "Put", "Delete", "ConditionCheck"]
                .iter()
                .find_map(|a| item.get(*a))?;
            let key = action.get("Key").cloned().or_else(|| {
                // A put names its item whole; its key is the partition key.
                action["Item"].get("pk").map(|pk| serde_json::json!({"pk": pk}))
            })?;
            item_name(&action["TableName"], &key)
        })
        .collect()
}

/// The item a plain write names.
fn plain_item(request: &[u8]) -> Option<String> {
    let v = serde_json::from_slice::<serde_json::Value>(request).ok()?;
    let key = v
        .get("Key")
        .cloned()
        .or_else(|| v["Item"].get("pk").map(|pk| serde_json::json!({"pk": pk})))?;
    item_name(&v["TableName"], &key)
}

/// DynamoDB's answer to a plain write on an item a transaction holds.
fn refused_plain_write() -> hyper::Response<Full<Bytes>> {
    let body = serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
        "message": "Transaction is ongoing for the item",
    });
    let mut resp = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = hyper::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    resp
}

/// DynamoDB's answer to a transaction that met another: one reason per
/// item, `TransactionConflict` on the first, `None` on the others.
fn conflict(request: &[u8]) -> hyper::Response<Full<Bytes>> {
    let items = serde_json::from_slice::<serde_json::Value>(request)
        .ok()
        .and_then(|v| v["TransactItems"].as_array().map(Vec::len))
        .unwrap_or(1)
        .max(1);
    let reasons: Vec<serde_json::Value> = (0..items)
        .map(|i| {
            if i == 0 {
                serde_json::json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})
            } else {
                serde_json::json!({"Code": "None"})
            }
        })
        .collect();
    let codes: Vec<&str> = (0..items)
        .map(|i| if i == 0 { "TransactionConflict" } else { "None" })
        .collect();
    let body = serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": format!("Transaction cancelled, please refer cancellation reasons for specific reasons [{}]", codes.join(", ")),
        "CancellationReasons": reasons,
    });
    let mut resp = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = hyper::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    resp
}
