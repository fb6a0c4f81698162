//! Genace as the deployment under test sees it: a wiremock server, behind a
//! small HTTP front that can also drop a connection without answering (a
//! reset), which wiremock itself cannot do.
//!
//! Scenarios share one server. Each marks its requests with a unique token in
//! the prompt, so mocks match only their own scenario and POSTs are counted
//! per scenario.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use wiremock::{Match, MockServer, Request};

/// Prompts containing this make the front reset the connection.
pub const RESET_MARKER: &str = "[conformance:reset]";

/// Matches a job-creating POST whose prompt carries `marker`.
pub struct PromptMarker(pub String);

impl Match for PromptMarker {
    fn matches(&self, request: &Request) -> bool {
        request
            .body_json::<Value>()
            .ok()
            .and_then(|b| b.get("prompt").and_then(Value::as_str).map(|p| p.contains(&self.0)))
            .unwrap_or(false)
    }
}

pub struct GenaceDouble {
    pub mock: MockServer,
    front_addr: SocketAddr,
    resets: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GenaceDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GenaceDouble {
    /// Starts wiremock on an ephemeral loopback port and the front on `listen`.
    pub async fn start(listen: SocketAddr) -> std::io::Result<Self> {
        let mock = MockServer::start().await;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let front_addr = listener.local_addr()?;
        let resets = Arc::new(AtomicUsize::new(0));
        let upstream = mock.uri();
        let counter = resets.clone();
        let client = reqwest::Client::new();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (upstream, counter, client) = (upstream.clone(), counter.clone(), client.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let (upstream, counter, client) = (upstream.clone(), counter.clone(), client.clone());
                        async move { forward(req, &upstream, &counter, &client).await }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Self {
            mock,
            front_addr,
            resets,
            task,
        })
    }

    /// The base URL the deployment under test must use as `GENACE_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.front_addr)
    }

    /// Job-creating POSTs that carried `marker` and reached wiremock.
    pub async fn posts_with(&self, marker: &str) -> usize {
        let matcher = PromptMarker(marker.to_owned());
        let received = self.mock.received_requests().await.unwrap_or_default();
        received
            .iter()
            .filter(|r| r.method.as_str() == "POST" && matcher.matches(r))
            .count()
    }

    /// POSTs whose connection the front dropped.
    pub fn resets(&self) -> usize {
        self.resets.load(Ordering::SeqCst)
    }

    /// Status reads of one job id.
    pub async fn gets_of(&self, job_id: &str) -> usize {
        let path = format!("/v1/jobs/{job_id}");
        self.mock
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.method.as_str() == "GET" && r.url.path() == path)
            .count()
    }
}

#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by the conformance front")
    }
}

impl std::error::Error for Dropped {}

async fn forward(
    req: hyper::Request<Incoming>,
    upstream: &str,
    resets: &AtomicUsize,
    client: &reqwest::Client,
) -> Result<hyper::Response<Full<Bytes>>, Dropped> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if parts.method == hyper::Method::POST && String::from_utf8_lossy(&body).contains(RESET_MARKER) {
        resets.fetch_add(1, Ordering::SeqCst);
        // Failing the service makes hyper close the connection without a response.
        return Err(Dropped);
    }
    let url = format!(
        "{upstream}{}",
        parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut out = client.request(parts.method.clone(), url).body(body);
    for (name, value) in parts.headers.iter() {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let Ok(resp) = out.send().await else {
        return Err(Dropped);
    };
    let mut builder = hyper::Response::builder().status(resp.status());
    for (name, value) in resp.headers().iter() {
        if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING {
            builder = builder.header(name, value);
        }
    }
    let bytes = resp.bytes().await.map_err(|_| Dropped)?;
    Ok(builder.body(Full::new(bytes)).expect("valid response"))
}
