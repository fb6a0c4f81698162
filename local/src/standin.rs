//! The Genace simulator, as a library: `genace-standin` serves it on its own,
//! and the benchmark hosts it in-process to count what Genace was asked.
//!
//! - `POST /v1/jobs` answers 202 with a fresh `job_id` (state `queued`).
//! - `GET /v1/jobs/{id}` moves `queued -> running -> completed` over time;
//!   `outputs` is null until completion, then URLs served by the simulator.
//! - `GET /outputs/{id}/{n}` serves deterministic bytes.

use std::collections::HashMap;
use std::convert::Infallible;
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

#[derive(Debug, Clone)]
pub struct Settings {
    pub queued: Duration,
    pub running: Duration,
    pub output_bytes: usize,
    /// Percent of submissions answered 502 with a failed job's id.
    pub pct_502: u64,
    /// Percent of submissions whose job is created but whose answer hangs.
    pub pct_lost: u64,
    /// Percent of jobs that end `failed`.
    pub pct_failed: u64,
    pub lost_delay: Duration,
    /// Base URL of the served outputs (this server's own address).
    pub base: String,
    /// Print one line per submission.
    pub verbose: bool,
    /// Jobs the account renders at once (queued or running); past it, a
    /// POST is answered 429 with `Retry-After: 5`. None: no limit.
    pub max_in_flight: Option<usize>,
}

impl Settings {
    /// `SIM_QUEUED_SECONDS` (2), `SIM_RUNNING_SECONDS` (5), `SIM_OUTPUT_BYTES`
    /// (1048576), `SIM_502_PERCENT`, `SIM_LOST_PERCENT`, `SIM_FAILED_PERCENT`
    /// (0), `SIM_LOST_DELAY_SECONDS` (120).
    pub fn from_env(base: String) -> Self {
        Self {
            queued: Duration::from_secs(env_num("SIM_QUEUED_SECONDS", 2)),
            running: Duration::from_secs(env_num("SIM_RUNNING_SECONDS", 5)),
            output_bytes: env_num("SIM_OUTPUT_BYTES", 1024 * 1024) as usize,
            pct_502: env_num("SIM_502_PERCENT", 0),
            pct_lost: env_num("SIM_LOST_PERCENT", 0),
            pct_failed: env_num("SIM_FAILED_PERCENT", 0),
            lost_delay: Duration::from_secs(env_num("SIM_LOST_DELAY_SECONDS", 120)),
            base,
            max_in_flight: std::env::var("SIM_MAX_IN_FLIGHT").ok().and_then(|v| v.parse().ok()),
            verbose: true,
        }
    }
}

/// What the simulator was asked, for benchmarks.
#[derive(Debug, Default)]
pub struct Counters {
    pub posts: AtomicU64,
    pub status_gets: AtomicU64,
    pub output_gets: AtomicU64,
    /// POSTs answered 429 because the account was full.
    pub rate_limited: AtomicU64,
    /// The most jobs rendering at once.
    pub peak_in_flight: AtomicU64,
}

struct Job {
    created: Instant,
    fails: bool,
    media_type: String,
    /// When a status read first answered the job's end.
    seen_ended: Option<Instant>,
}

/// One job's times as the stand-in saw them, for benchmarks that measure
/// from Genace's side: when it was created (its POST accepted), when its
/// render ended, and when a status read first reported that end.
#[derive(Debug, Clone, Copy)]
pub struct JobTimes {
    pub created: Instant,
    pub ended: Instant,
    pub seen_ended: Option<Instant>,
}

pub struct StandIn {
    settings: Settings,
    jobs: Mutex<HashMap<String, Job>>,
    counter: AtomicU64,
    pub counters: Counters,
}

pub fn env_num(name: &str, default: u64) -> u64 {
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

impl StandIn {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        match (req.method().as_str(), segments.as_slice()) {
            ("POST", ["v1", "jobs"]) => {
                self.counters.posts.fetch_add(1, Ordering::Relaxed);
                let body = req
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                self.submit(&body).await
            }
            ("GET", ["v1", "jobs", id]) => {
                self.counters.status_gets.fetch_add(1, Ordering::Relaxed);
                self.status(id)
            }
            ("GET", ["outputs", id, n]) => {
                self.counters.output_gets.fetch_add(1, Ordering::Relaxed);
                self.output(id, n)
            }
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
        if let Err(answer) = self.create(n, &job_id, media_type) {
            return *answer;
        }
        let accepted = json!({
            "job_id": job_id, "state": "queued", "model": model,
            "created_at": chrono::Utc::now().to_rfc3339(), "held_credits": 10
        });
        if picked(n, s.pct_lost, 29) {
            if s.verbose {
                println!("POST -> job {job_id} created, response lost");
            }
            tokio::time::sleep(s.lost_delay).await;
        } else if s.verbose {
            println!("POST -> 202 job {job_id}");
        }
        json_response(StatusCode::ACCEPTED, accepted)
    }

    /// Creates the job of submission `n`, unless the account is full (429)
    /// or the submission is one of the share answered 502.
    fn create(&self, n: u64, job_id: &str, media_type: String) -> Result<(), Box<Response<Full<Bytes>>>> {
        let s = &self.settings;
        // One lock for the count and the new job: two POSTs racing for the
        // last slot cannot both take it.
        let mut jobs = self.jobs.lock().expect("jobs lock");
        if let Some(max) = s.max_in_flight {
            let done_after = s.queued + s.running;
            let rendering = jobs.values().filter(|j| j.created.elapsed() < done_after).count();
            if rendering >= max {
                self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                return Err(Box::new(
                    Response::builder()
                        .status(StatusCode::TOO_MANY_REQUESTS)
                        .header("content-type", "application/json")
                        .header("retry-after", "5")
                        .body(Full::new(Bytes::from(
                            json!({"error": {"code": "rate_limited", "message": "too many jobs in flight"}})
                                .to_string(),
                        )))
                        .expect("valid response"),
                ));
            }
            self.counters
                .peak_in_flight
                .fetch_max(rendering as u64 + 1, Ordering::Relaxed);
        }
        if picked(n, s.pct_502, 11) {
            if s.verbose {
                println!("POST -> 502 (failed job {job_id})");
            }
            return Err(Box::new(json_response(
                StatusCode::BAD_GATEWAY,
                json!({"error": {"code": "provider_failed", "message": "the provider rejected the job", "job_id": job_id}}),
            )));
        }
        jobs.insert(
            job_id.to_owned(),
            Job {
                created: Instant::now(),
                fails: picked(n, s.pct_failed, 53),
                media_type,
                seen_ended: None,
            },
        );
        Ok(())
    }

    /// Every job's times, in no order.
    pub fn timeline(&self) -> Vec<JobTimes> {
        let done_after = self.settings.queued + self.settings.running;
        let jobs = self.jobs.lock().expect("jobs lock");
        jobs.values()
            .map(|j| JobTimes {
                created: j.created,
                ended: j.created + done_after,
                seen_ended: j.seen_ended,
            })
            .collect()
    }

    fn status(&self, id: &str) -> Response<Full<Bytes>> {
        let mut jobs = self.jobs.lock().expect("jobs lock");
        let Some(job) = jobs.get_mut(id) else {
            return json_response(StatusCode::NOT_FOUND, json!({"error": {"code": "job_not_found"}}));
        };
        let s = &self.settings;
        let age = job.created.elapsed();
        let (state, outputs, error) = if age < s.queued {
            ("queued", Value::Null, Value::Null)
        } else if age < s.queued + s.running {
            ("running", Value::Null, Value::Null)
        } else if job.fails {
            job.seen_ended.get_or_insert_with(Instant::now);
            (
                "failed",
                Value::Null,
                json!({"code": "generation_failed", "message": "the provider could not render this prompt"}),
            )
        } else {
            job.seen_ended.get_or_insert_with(Instant::now);
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

/// Serves the simulator on `listener` until the task is dropped.
pub fn serve(listener: tokio::net::TcpListener, settings: Settings) -> (Arc<StandIn>, tokio::task::JoinHandle<()>) {
    let sim = Arc::new(StandIn {
        settings,
        jobs: Mutex::new(HashMap::new()),
        counter: AtomicU64::new(0),
        counters: Counters::default(),
    });
    let serving = sim.clone();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sim = serving.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let sim = sim.clone();
                    async move { Ok::<_, Infallible>(sim.handle(req).await) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (sim, task)
}
