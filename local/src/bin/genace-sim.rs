//! `genace-sim`: a stand-in for Genace on loopback, for local runs.
//!
//! - `POST /v1/jobs` answers 202 with a fresh `job_id` (state `queued`).
//! - `GET /v1/jobs/{id}` moves `queued -> running -> completed` over time;
//!   `outputs` is null until completion, then URLs served by the simulator.
//! - `GET /outputs/{id}/{n}` serves deterministic bytes.
//!
//! Settings (environment): `SIM_PORT` (9400), `SIM_QUEUED_SECONDS` (2),
//! `SIM_RUNNING_SECONDS` (5), `SIM_OUTPUT_BYTES` (1048576), and failure modes
//! in percent of submissions: `SIM_502_PERCENT` (a 502 naming a failed job),
//! `SIM_LOST_PERCENT` (the job is created but the response never arrives),
//! `SIM_FAILED_PERCENT` (the job ends `failed`). `SIM_LOST_DELAY_SECONDS` (120)
//! is how long a lost response hangs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[derive(Clone)]
struct Settings {
    queued: Duration,
    running: Duration,
    output_bytes: usize,
    pct_502: u64,
    pct_lost: u64,
    pct_failed: u64,
    lost_delay: Duration,
    base: String,
}

struct Job {
    created: Instant,
    fails: bool,
    media_type: String,
}

struct Sim {
    settings: Settings,
    jobs: Mutex<HashMap<String, Job>>,
    counter: AtomicU64,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether submission `n` falls in a `percent` share, spread evenly.
fn picked(n: u64, percent: u64, salt: u64) -> bool {
    (n.wrapping_mul(37).wrapping_add(salt)) % 100 < percent
}

fn json_response(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

impl Sim {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        match (req.method().as_str(), segments.as_slice()) {
            ("POST", ["v1", "jobs"]) => {
                let body = req
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                self.submit(&body).await
            }
            ("GET", ["v1", "jobs", id]) => self.status(id),
            ("GET", ["outputs", id, n]) => self.output(id, n),
            _ => json_response(StatusCode::NOT_FOUND, json!({"error": {"code": "not_found"}})),
        }
    }

    async fn submit(&self, body: &[u8]) -> Response<Full<Bytes>> {
        let spec: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let s = &self.settings;
        let job_id = format!("sim-{}", uuid::Uuid::new_v4().simple());
        let model = spec["model"].as_str().unwrap_or("genace-sim").to_owned();
        let media_type = spec["media_type"].as_str().unwrap_or("video").to_owned();
        if picked(n, s.pct_502, 11) {
            println!("POST -> 502 (failed job {job_id})");
            return json_response(
                StatusCode::BAD_GATEWAY,
                json!({"error": {"code": "provider_failed", "message": "the provider rejected the job", "job_id": job_id}}),
            );
        }
        self.jobs.lock().expect("jobs lock").insert(
            job_id.clone(),
            Job {
                created: Instant::now(),
                fails: picked(n, s.pct_failed, 53),
                media_type,
            },
        );
        let accepted = json!({
            "job_id": job_id, "state": "queued", "model": model,
            "created_at": chrono::Utc::now().to_rfc3339(), "held_credits": 10
        });
        if picked(n, s.pct_lost, 29) {
            println!("POST -> job {job_id} created, response lost");
            tokio::time::sleep(s.lost_delay).await;
        } else {
            println!("POST -> 202 job {job_id}");
        }
        json_response(StatusCode::ACCEPTED, accepted)
    }

    fn status(&self, id: &str) -> Response<Full<Bytes>> {
        let jobs = self.jobs.lock().expect("jobs lock");
        let Some(job) = jobs.get(id) else {
            return json_response(StatusCode::NOT_FOUND, json!({"error": {"code": "job_not_found"}}));
        };
        let s = &self.settings;
        let age = job.created.elapsed();
        let (state, outputs, error) = if age < s.queued {
            ("queued", Value::Null, Value::Null)
        } else if age < s.queued + s.running {
            ("running", Value::Null, Value::Null)
        } else if job.fails {
            (
                "failed",
                Value::Null,
                json!({"code": "generation_failed", "message": "the provider could not render this prompt"}),
            )
        } else {
            let content_type = if job.media_type == "image" {
                "image/png"
            } else {
                "video/mp4"
            };
            let url = format!("{}/outputs/{id}/0", s.base);
            (
                "completed",
                json!([{"url": url, "content_type": content_type}]),
                Value::Null,
            )
        };
        json_response(
            StatusCode::OK,
            json!({"id": id, "state": state, "outputs": outputs, "error": error}),
        )
    }

    fn output(&self, id: &str, n: &str) -> Response<Full<Bytes>> {
        let jobs = self.jobs.lock().expect("jobs lock");
        let Some(job) = jobs.get(id) else {
            return json_response(StatusCode::NOT_FOUND, json!({"error": {"code": "not_found"}}));
        };
        let seed = id.bytes().fold(n.len() as u8, |a, b| a.wrapping_add(b));
        let bytes: Vec<u8> = (0..self.settings.output_bytes)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        let content_type = if job.media_type == "image" {
            "image/png"
        } else {
            "video/mp4"
        };
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(bytes)))
            .expect("valid response")
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = env_num("SIM_PORT", 9400) as u16;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let settings = Settings {
        queued: Duration::from_secs(env_num("SIM_QUEUED_SECONDS", 2)),
        running: Duration::from_secs(env_num("SIM_RUNNING_SECONDS", 5)),
        output_bytes: env_num("SIM_OUTPUT_BYTES", 1024 * 1024) as usize,
        pct_502: env_num("SIM_502_PERCENT", 0),
        pct_lost: env_num("SIM_LOST_PERCENT", 0),
        pct_failed: env_num("SIM_FAILED_PERCENT", 0),
        lost_delay: Duration::from_secs(env_num("SIM_LOST_DELAY_SECONDS", 120)),
        base: format!("http://{addr}"),
    };
    let sim = Arc::new(Sim {
        settings,
        jobs: Mutex::new(HashMap::new()),
        counter: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("genace-sim listening on http://{addr}");
    loop {
        let (stream, _) = listener.accept().await?;
        let sim = sim.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let sim = sim.clone();
                async move { Ok::<_, Infallible>(sim.handle(req).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
