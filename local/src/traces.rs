//! The local stack's OTLP/HTTP receiver: `POST /v1/traces` with OTLP JSON,
//! each span appended to a file as one JSON line
//! ([`genace_trace::lines::SpanLine`]), which `genace-ops trace` and the
//! console's waterfall read back through the API.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use genace_trace::lines::{SpanLine, from_otlp_json};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Where the receiver writes spans: `GENACE_TRACES_FILE`, default
/// `.local/traces.jsonl`.
pub fn traces_file() -> PathBuf {
    std::env::var_os("GENACE_TRACES_FILE").map_or_else(|| PathBuf::from(".local/traces.jsonl"), PathBuf::from)
}

/// Largest export request read.
const READ_LIMIT: usize = 16 * 1024 * 1024;

/// A receiver on a loopback port; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:<port>`: what `OTEL_EXPORTER_OTLP_ENDPOINT` names.
    pub endpoint: String,
    pub file: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts on `port` (0: any free one) of 127.0.0.1, appending to `file`
    /// (created with its directory if missing).
    pub async fn start(port: u16, file: impl Into<PathBuf>) -> std::io::Result<Self> {
        let file = file.into();
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let writer = Arc::new(Mutex::new(file.clone()));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let writer = writer.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let writer = writer.clone();
                        async move { Ok::<_, Infallible>(receive(req, &writer).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Self { endpoint, file, task })
    }
}

async fn receive(req: hyper::Request<Incoming>, file: &Mutex<PathBuf>) -> hyper::Response<Full<Bytes>> {
    let answer = |status: u16, body: &str| {
        let mut resp = hyper::Response::new(Full::new(Bytes::from(body.to_owned())));
        *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_REQUEST);
        resp.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        resp
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/v1/traces" {
        return answer(404, r#"{"error":"only POST /v1/traces"}"#);
    }
    let body = match Limited::new(req.into_body(), READ_LIMIT).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return answer(413, r#"{"error":"too large"}"#),
    };
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return answer(400, r#"{"error":"not OTLP JSON"}"#);
    };
    let path = file.lock().unwrap_or_else(|p| p.into_inner());
    match append(&path, &from_otlp_json(&request)) {
        Ok(()) => answer(200, "{}"),
        Err(e) => answer(500, &serde_json::json!({"error": e.to_string()}).to_string()),
    }
}

fn append(path: &Path, spans: &[SpanLine]) -> std::io::Result<()> {
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    for span in spans {
        let line = serde_json::to_string(span).map_err(std::io::Error::other)?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}

pub use genace_app::traces::{TraceFile, read_trace};

impl Receiver {
    /// A receiver on a free loopback port appending to `file`, with this
    /// process's spans sent to it as `service`, every trace kept: what a
    /// test or a benchmark of the stack in process reads its traces from.
    pub async fn for_this_process(file: impl Into<PathBuf>, service: &str) -> std::io::Result<Self> {
        let receiver = Self::start(0, file).await?;
        genace_app::telemetry::init_with(Some(genace_app::telemetry::Tracing {
            endpoint: receiver.endpoint.clone(),
            service: service.to_owned(),
            rate: 1.0,
            headers: None,
        }));
        Ok(receiver)
    }
}
