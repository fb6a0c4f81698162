//! The Genace HTTP client: where Genace lives, how to authenticate, and the
//! transport rules a job-creating POST needs (never retried, never
//! redirected, bounded bodies). What the answers mean is
//! `genace_core::remote`'s business.

use std::time::Duration;

use genace_core::remote::{MAX_BODY_BYTES, StatusOutcome, SubmitOutcome, classify_status_with, classify_submit};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use tracing::Instrument;

#[derive(Clone)]
pub struct GenaceConfig {
    pub base_url: String,
    /// Path of job creation (default `/v1/jobs`).
    pub submit_path: String,
    /// Path of a job's status, with `{id}` for the job id (default `/v1/jobs/{id}`).
    pub status_path: String,
    pub api_key: String,
    pub connect_timeout: Duration,
    /// Total time allowed for one request, response body included.
    pub timeout: Duration,
}

/// The API key never appears in logs or panics.
impl std::fmt::Debug for GenaceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenaceConfig")
            .field("base_url", &self.base_url)
            .field("submit_path", &self.submit_path)
            .field("status_path", &self.status_path)
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    "<empty>"
                } else {
                    "<redacted>"
                },
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl GenaceConfig {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            submit_path: "/v1/jobs".into(),
            status_path: "/v1/jobs/{id}".into(),
            api_key: api_key.into(),
            connect_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(30),
        }
    }

    /// `GENACE_BASE_URL` (required), `GENACE_API_KEY`, `GENACE_SUBMIT_PATH`,
    /// `GENACE_STATUS_PATH`, `GENACE_TIMEOUT_SECONDS` (default 30), looked
    /// up in `vars` (the composition root passes the environment).
    pub fn from_vars(vars: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let var = |n: &str| vars(n).filter(|v| !v.trim().is_empty());
        let base = var("GENACE_BASE_URL").ok_or("GENACE_BASE_URL is not set")?;
        let mut conf = Self::new(base, var("GENACE_API_KEY").unwrap_or_default());
        if let Some(p) = var("GENACE_SUBMIT_PATH") {
            conf.submit_path = p;
        }
        if let Some(p) = var("GENACE_STATUS_PATH") {
            conf.status_path = p;
        }
        if let Some(t) = var("GENACE_TIMEOUT_SECONDS") {
            let secs: u64 = t
                .parse()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| format!("GENACE_TIMEOUT_SECONDS must be a positive integer, got {t:?}"))?;
            conf.timeout = Duration::from_secs(secs);
        }
        Ok(conf)
    }
}

#[derive(Debug, Clone)]
pub struct GenaceClient {
    http: reqwest::Client,
    conf: GenaceConfig,
}

impl GenaceClient {
    pub fn new(conf: GenaceConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(conf.connect_timeout)
            .timeout(conf.timeout)
            // A POST here is never repeated by the transport, not even on a protocol NACK.
            .retry(reqwest::retry::never())
            // A 307/308 would re-send the POST (a second paid job) and a 301/302
            // would turn it into a GET: every 3xx is answered as it is.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http, conf })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.conf.base_url.trim_end_matches('/'), path)
    }

    fn authorization(&self) -> HeaderValue {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", self.conf.api_key))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
        value.set_sensitive(true);
        value
    }
}

/// Why a body was not read whole.
#[derive(Debug)]
enum BodyError {
    TooLarge,
    Broken(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge => write!(f, "the body is larger than {MAX_BODY_BYTES} bytes"),
            BodyError::Broken(e) => write!(f, "the body could not be read: {}", chain(e)),
        }
    }
}

/// What Genace answered, recorded on the call's span: the status, and its
/// `Retry-After` as text.
fn answered(response: &reqwest::Response) -> (reqwest::StatusCode, Option<String>) {
    let status = response.status();
    tracing::Span::current().record("http.response.status_code", status.as_u16());
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry_after)
}

/// Reads a response body of at most [`MAX_BODY_BYTES`], chunk by chunk, so
/// an endless or huge answer never fills memory.
async fn bounded_text(mut response: reqwest::Response) -> Result<String, BodyError> {
    if response.content_length().is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    // Evidence is shown in views: errors lose their URL before they are kept.
    while let Some(chunk) = response.chunk().await.map_err(|e| BodyError::Broken(e.without_url()))? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A span for one call to Genace (`genace.post`, `genace.get`): its
/// method, the status answered, and what it meant.
fn call_span(name: &'static str, method: &'static str) -> tracing::Span {
    tracing::info_span!(
        "genace",
        otel.name = name,
        otel.kind = "client",
        http.request.method = method,
        http.response.status_code = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

impl genace_stages::ports::genace::Genace for GenaceClient {
    async fn submit(&self, body: &Value) -> SubmitOutcome {
        let span = call_span("genace.post", "POST");
        let outcome = self.post(body).instrument(span.clone()).await;
        let said = match &outcome {
            SubmitOutcome::Accepted { .. } => "accepted",
            SubmitOutcome::FailedWithJob { .. } => "failed_with_job",
            SubmitOutcome::Rejected { .. } => "rejected",
            SubmitOutcome::AccountProblem { .. } => "account_problem",
            SubmitOutcome::RateLimited { .. } => "rate_limited",
            SubmitOutcome::Unknown { .. } => "unknown",
        };
        span.record("outcome", said);
        outcome
    }

    fn longest_submit(&self) -> Duration {
        self.conf.connect_timeout.max(self.conf.timeout)
    }

    async fn status(&self, job_id: &str) -> StatusOutcome {
        let span = call_span("genace.get", "GET");
        let outcome = self.get(job_id).instrument(span.clone()).await;
        let said = match &outcome {
            StatusOutcome::Snapshot(s) => s.state.as_str(),
            StatusOutcome::NotFound => "not_found",
            StatusOutcome::RateLimited { .. } => "rate_limited",
            StatusOutcome::Transient { .. } => "unreadable",
        };
        span.record("outcome", said);
        outcome
    }
}

impl GenaceClient {
    async fn post(&self, body: &Value) -> SubmitOutcome {
        let sent = self
            .http
            .post(self.url(&self.conf.submit_path))
            .header(AUTHORIZATION, self.authorization())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return transport_unknown(e),
        };
        let (status, retry_after) = answered(&response);
        match bounded_text(response).await {
            Ok(text) => classify_submit(status.as_u16(), retry_after.as_deref(), &text, chrono::Utc::now()),
            Err(e) => SubmitOutcome::Unknown {
                evidence: format!("HTTP {}: {e}", status.as_u16()),
            },
        }
    }

    async fn get(&self, job_id: &str) -> StatusOutcome {
        let path = self.conf.status_path.replace("{id}", &path_segment(job_id));
        let sent = self
            .http
            .get(self.url(&path))
            .header(AUTHORIZATION, self.authorization())
            .send()
            .await;
        let transient = |why: String| StatusOutcome::Transient { evidence: why };
        match sent {
            Err(e) => transient(format!(
                "no response: {}: {}",
                transport_kind(&e),
                chain(&e.without_url())
            )),
            Ok(response) => {
                let (status, retry_after) = answered(&response);
                match bounded_text(response).await {
                    Ok(text) => {
                        classify_status_with(status.as_u16(), retry_after.as_deref(), &text, chrono::Utc::now())
                    }
                    Err(e) => transient(format!("HTTP {}: {e}", status.as_u16())),
                }
            }
        }
    }
}

/// Everything but RFC 3986's unreserved characters is percent-encoded.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a job id for use as one path segment.
fn path_segment(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, UNRESERVED).to_string()
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn transport_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "transport failed"
    }
}

fn transport_unknown(e: reqwest::Error) -> SubmitOutcome {
    SubmitOutcome::Unknown {
        evidence: format!("no response: {}: {}", transport_kind(&e), chain(&e.without_url())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let conf = GenaceConfig::new("https://genace.example", "sk-live-secret");
        let shown = format!("{conf:?}");
        assert!(!shown.contains("sk-live-secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
        let client = GenaceClient::new(conf).unwrap();
        assert!(client.authorization().is_sensitive());
        assert!(!format!("{client:?}").contains("sk-live-secret"));
    }

    #[test]
    fn job_ids_are_one_path_segment() {
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }
}
