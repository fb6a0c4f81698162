//! The transport: one request, its retries, and the answer as read.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::error::{Error, Problem};
use crate::retry::{RetryPolicy, parse_retry_after, retryable_status};

/// Where the `traceparent` of each request comes from: the caller's
/// current span, so an operation's trace begins in the application.
pub type TraceSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// A client of one deployment's API, as one caller (its bearer token).
/// Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    retry: RetryPolicy,
    trace: Option<TraceSource>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// An answer as read: its status, its headers and its body (JSON, or the
/// text as a JSON string when it is not JSON; `null` when empty).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body when the status is a success; the problem otherwise.
    pub fn into_result(self) -> Result<Value, Error> {
        if self.is_success() {
            Ok(self.body)
        } else {
            Err(Error::Api(Problem {
                status: self.status,
                body: self.body,
            }))
        }
    }
}

/// One request to send: the escape hatch beside the typed methods, for a
/// caller that must send what the typed methods will not (a malformed
/// body, an unknown route).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// The path under the base URL, query string included, already encoded.
    pub path: String,
    pub body: Option<(String, String)>,
    pub headers: Vec<(String, String)>,
    /// Whether sending it twice is safe, so a failure may be retried.
    pub idempotent: bool,
}

impl Request {
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        let idempotent = method != Method::POST && method != Method::PATCH;
        Self {
            method,
            path: path.into(),
            body: None,
            headers: Vec::new(),
            idempotent,
        }
    }

    pub fn json(mut self, body: &Value) -> Self {
        self.body = Some(("application/json".to_owned(), body.to_string()));
        self
    }

    /// A body as given, with its content type.
    pub fn raw(mut self, content_type: &str, body: impl Into<String>) -> Self {
        self.body = Some((content_type.to_owned(), body.into()));
        self
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Marks the request safe, or unsafe, to send again.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }
}

impl Client {
    /// A client of the API at `base` (`https://api.example.com`) with the
    /// bearer `token`, the default [`RetryPolicy`] and a 30 s timeout per
    /// request.
    pub fn new(base: &str, token: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("an HTTP client"),
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            retry: RetryPolicy::default(),
            trace: None,
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sends `traceparent` from `source` with every request that has one.
    pub fn with_trace(mut self, source: TraceSource) -> Self {
        self.trace = Some(source);
        self
    }

    /// The same client as another caller.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            token: token.to_owned(),
            ..self.clone()
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn retry(&self) -> RetryPolicy {
        self.retry
    }

    /// Sends `req`, again while it fails in a way worth retrying: a 429
    /// always (the service did not act on it), a 5xx or a lost connection
    /// only when the request is idempotent or was never sent. Between
    /// tries it waits as [`RetryPolicy::backoff`] says. `Err` only when
    /// no answer came; an answer of any status is `Ok`.
    pub async fn send(&self, req: &Request) -> Result<Reply, Error> {
        let mut attempt = 1;
        loop {
            let last = attempt >= self.retry.attempts;
            match self.send_once(req).await {
                Ok(reply) => {
                    let worth = reply.status == 429 || (req.idempotent && retryable_status(reply.status));
                    let wait = reply
                        .header("retry-after")
                        .and_then(|r| parse_retry_after(r, chrono::Utc::now()));
                    if last || !worth || wait.is_some_and(|w| w > self.retry.max_retry_after) {
                        return Ok(reply);
                    }
                    tokio::time::sleep(self.retry.backoff(attempt, wait)).await;
                }
                Err(e) => {
                    let unsent = e.is_connect() || e.is_builder();
                    if last || !(req.idempotent || unsent) || e.is_builder() {
                        return Err(Error::Transport {
                            method: req.method.to_string(),
                            path: req.path.clone(),
                            reason: e.to_string(),
                        });
                    }
                    tokio::time::sleep(self.retry.backoff(attempt, None)).await;
                }
            }
            attempt += 1;
        }
    }

    async fn send_once(&self, req: &Request) -> Result<Reply, reqwest::Error> {
        let mut builder = self
            .http
            .request(req.method.clone(), format!("{}{}", self.base, req.path))
            .bearer_auth(&self.token);
        if let Some(parent) = self.trace.as_ref().and_then(|t| t()) {
            builder = builder.header("traceparent", parent);
        }
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        if let Some((content_type, body)) = &req.body {
            builder = builder.header("content-type", content_type).body(body.clone());
        }
        let resp = builder.send().await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await?;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Reply { status, headers, body })
    }

    /// Sends `req` and reads a success's body, or the problem.
    pub(crate) async fn call(&self, req: Request) -> Result<Value, Error> {
        self.send(&req).await?.into_result()
    }
}

/// Percent-encodes one path segment or query value (RFC 3986 unreserved
/// characters stay).
pub(crate) fn enc(s: &str) -> String {
    const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// `path` with the pairs that have a value as its query string.
pub(crate) fn with_query(path: &str, pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", parts.join("&"))
    }
}
