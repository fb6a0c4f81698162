//! Genace, in memory: a plan of answers, the jobs it holds, and its books.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::DateTime;
use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status, classify_status_with, classify_submit};

/// How [`MemoryGenace`] answers the next POST.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitPlan {
    /// 202 with a new job in `state`.
    Accept { state: String },
    /// 202 with a new job in `state`, reporting `held_credits` as this raw
    /// JSON text (Genace's own figure, or one nobody can mean: `-5`, `1e400`).
    AcceptReporting { state: String, held_credits: String },
    /// 502 with `error.job_id` of a new, failed job.
    FailWithJob,
    /// 502 without a job id; nothing created.
    BadGateway,
    /// Any status and body, as Genace might send them; nothing created.
    Answer { status: u16, body: String },
    /// The job is created, then the answer is lost (a timeout after the fact).
    LostAfterCreate,
    /// The request never reached Genace (refused, timed out before sending).
    Unreachable,
}

/// One job Genace holds.
#[derive(Debug, Clone, PartialEq)]
pub struct GenaceJob {
    pub id: String,
    /// The submission's `client_reference` (the operation id).
    pub client_reference: Option<String>,
    pub state: String,
    pub outputs: Option<serde_json::Value>,
    /// What Genace holds for the job while it runs and charges once it
    /// completes: [`JOB_PRICE`] for a video, [`IMAGE_PRICE`] for an image,
    /// whatever the 202 reported.
    pub credits: f64,
}

/// The credits [`MemoryGenace`] charges per job: the default estimate for a
/// video, so a ledger that counts a job at its reservation agrees with
/// Genace's books.
pub const JOB_PRICE: f64 = 10.0;

/// The credits [`MemoryGenace`] charges per image job: the default estimate
/// for an image.
pub const IMAGE_PRICE: f64 = 1.0;

/// Genace, in memory: answers POSTs from a plan (accepting by default),
/// keeps the jobs it created, and answers status reads from them. Answers
/// go through the real response classification (`classify_submit`,
/// `classify_status`), so the stages see exactly what the HTTP client
/// would give them. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct MemoryGenace {
    state: Arc<Mutex<GenaceState>>,
}

#[derive(Debug, Default)]
struct GenaceState {
    plans: std::collections::VecDeque<SubmitPlan>,
    jobs: BTreeMap<String, GenaceJob>,
    posts: Vec<serde_json::Value>,
    next: u64,
    /// How many jobs the account renders at once; past it, 429.
    concurrency: Option<usize>,
    /// POSTs answered 429 because the account was full.
    refused_full: u64,
    /// Answers the next status reads give instead of the job: a status
    /// code and a Retry-After, in order.
    status_answers: std::collections::VecDeque<(u16, Option<String>)>,
}

/// Job states in which Genace counts a job against the account's concurrency.
pub const RUNNING_STATES: [&str; 2] = ["queued", "running"];

impl MemoryGenace {
    fn lock(&self) -> std::sync::MutexGuard<'_, GenaceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renders at most `jobs` at once: a POST past it is answered 429 with
    /// `Retry-After: 5`, as Genace answers an account at its limit.
    pub fn with_concurrency(self, jobs: usize) -> Self {
        self.lock().concurrency = Some(jobs);
        self
    }

    /// Jobs Genace counts against the account now (queued or running).
    pub fn running(&self) -> usize {
        Self::running_in(&self.lock())
    }

    /// POSTs answered 429 because the account was full.
    pub fn refused_full(&self) -> u64 {
        self.lock().refused_full
    }

    fn running_in(state: &GenaceState) -> usize {
        state
            .jobs
            .values()
            .filter(|j| RUNNING_STATES.contains(&j.state.as_str()))
            .count()
    }

    /// Queues how the next POSTs are answered (after that: accepted, queued).
    pub fn plan(&self, plans: impl IntoIterator<Item = SubmitPlan>) {
        self.lock().plans.extend(plans);
    }

    /// Moves a job to `state`, with `outputs` (a JSON list, or null).
    /// The next status read answers `code` (with `retry_after`, as the
    /// header would say) instead of the job.
    pub fn answer_status_with(&self, code: u16, retry_after: Option<&str>) {
        self.lock()
            .status_answers
            .push_back((code, retry_after.map(str::to_owned)));
    }

    pub fn set_job(&self, id: &str, state: &str, outputs: Option<serde_json::Value>) {
        if let Some(job) = self.lock().jobs.get_mut(id) {
            job.state = state.to_owned();
            job.outputs = outputs;
        }
    }

    /// Every job created, in creation order of their ids.
    pub fn jobs(&self) -> Vec<GenaceJob> {
        self.lock().jobs.values().cloned().collect()
    }

    /// Every POST body received, in order.
    pub fn posts(&self) -> Vec<serde_json::Value> {
        self.lock().posts.clone()
    }

    fn create(state: &mut GenaceState, body: &serde_json::Value, job_state: &str) -> String {
        state.next += 1;
        let id = format!("job-{:04}", state.next);
        state.jobs.insert(
            id.clone(),
            GenaceJob {
                id: id.clone(),
                client_reference: body.get("client_reference").and_then(|v| v.as_str()).map(str::to_owned),
                state: job_state.to_owned(),
                outputs: None,
                credits: match body.get("media_type").and_then(|m| m.as_str()) {
                    Some("image") => IMAGE_PRICE,
                    _ => JOB_PRICE,
                },
            },
        );
        id
    }
}

impl MemoryGenace {
    /// Answers a POST of `body` by `plan`, or by the next planned answer
    /// when `None` (accepting when none is planned). A plan given here is
    /// never queued, so an answer chosen for one POST cannot reach another.
    pub fn submit_by(&self, plan: Option<SubmitPlan>, body: &serde_json::Value) -> SubmitOutcome {
        let mut state = self.lock();
        state.posts.push(body.clone());
        if state.concurrency.is_some_and(|max| Self::running_in(&state) >= max) {
            state.refused_full += 1;
            let text = r#"{"error":{"code":"rate_limited","message":"too many jobs in flight"}}"#;
            return classify_submit(429, Some("5"), text, DateTime::UNIX_EPOCH);
        }
        let plan = plan
            .or_else(|| state.plans.pop_front())
            .unwrap_or(SubmitPlan::Accept { state: "queued".into() });

        let (status, text) = match plan {
            SubmitPlan::Accept { state: job_state } => {
                let id = Self::create(&mut state, body, &job_state);
                (202, serde_json::json!({"job_id": id, "state": job_state}).to_string())
            }
            SubmitPlan::AcceptReporting {
                state: job_state,
                held_credits,
            } => {
                let id = Self::create(&mut state, body, &job_state);
                let head = serde_json::json!({"job_id": id, "state": job_state}).to_string();
                // Spliced as text: `1e400` is no JSON value serde can hold.
                (
                    202,
                    format!("{},\"held_credits\":{held_credits}}}", &head[..head.len() - 1]),
                )
            }
            SubmitPlan::FailWithJob => {
                let id = Self::create(&mut state, body, "failed");
                (
                    502,
                    serde_json::json!({"error": {"code": "upstream_failed", "job_id": id}}).to_string(),
                )
            }
            SubmitPlan::BadGateway => (502, r#"{"error":{"code":"bad_gateway"}}"#.to_owned()),
            SubmitPlan::Answer { status, body } => (status, body),
            SubmitPlan::LostAfterCreate => {
                Self::create(&mut state, body, "queued");
                return SubmitOutcome::Unknown {
                    evidence: "timed out waiting for the response".into(),
                };
            }
            SubmitPlan::Unreachable => {
                return SubmitOutcome::Unknown {
                    evidence: "connection refused".into(),
                };
            }
        };
        // No Retry-After is sent, so the time it would count from does not matter.
        classify_submit(status, None, &text, DateTime::UNIX_EPOCH)
    }
}

impl genace_stages::ports::genace::Genace for MemoryGenace {
    async fn submit(&self, body: &serde_json::Value) -> SubmitOutcome {
        self.submit_by(None, body)
    }

    async fn status(&self, job_id: &str) -> StatusOutcome {
        if let Some((code, retry_after)) = self.lock().status_answers.pop_front() {
            return classify_status_with(code, retry_after.as_deref(), "", chrono::Utc::now());
        }
        let job = self.lock().jobs.get(job_id).cloned();
        match job {
            Some(job) => {
                let body = serde_json::json!({
                    "id": job.id,
                    "state": job.state,
                    "outputs": job.outputs,
                    "client_reference": job.client_reference,
                });
                classify_status(200, &body.to_string())
            }
            None => classify_status(404, r#"{"error":{"code":"not_found"}}"#),
        }
    }
}
