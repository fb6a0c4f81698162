//! The deployment's public API, as a client sees it. This crate defines its
//! own view of the JSON on purpose: it must catch contract drift.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub replayed: bool,
    pub location: Option<String>,
    pub body: Value,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("an HTTP client"),
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        }
    }

    async fn reply(resp: reqwest::Response) -> Result<Reply, String> {
        let header = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let status = resp.status();
        let content_type = header("content-type").unwrap_or_default();
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let location = header("location");
        let text = resp.text().await.map_err(|e| e.to_string())?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(Reply {
            status,
            content_type,
            replayed,
            location,
            body,
        })
    }

    /// `POST /v1/operations` with a raw JSON body.
    pub async fn create_raw(&self, body: &str) -> Result<Reply, String> {
        let resp = self
            .http
            .post(format!("{}/v1/operations", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .map_err(|e| format!("POST /v1/operations: {e}"))?;
        Self::reply(resp).await
    }

    pub async fn create(&self, body: &Value) -> Result<Reply, String> {
        self.create_raw(&body.to_string()).await
    }

    pub async fn get(&self, id: &str) -> Result<Reply, String> {
        let resp = self
            .http
            .get(format!("{}/v1/operations/{id}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("GET /v1/operations/{id}: {e}"))?;
        Self::reply(resp).await
    }

    /// `POST /v1/operations/{id}/cancel`.
    pub async fn cancel(&self, id: &str) -> Result<Reply, String> {
        let resp = self
            .http
            .post(format!("{}/v1/operations/{id}/cancel", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("POST /v1/operations/{id}/cancel: {e}"))?;
        Self::reply(resp).await
    }

    /// `GET /v1/operations` with a query string (`limit=10&key_prefix=...`).
    pub async fn list(&self, query: &[(&str, &str)]) -> Result<Reply, String> {
        let url = reqwest::Url::parse_with_params(&format!("{}/v1/operations", self.base), query)
            .map_err(|e| format!("GET /v1/operations: {e}"))?;
        let resp = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("GET /v1/operations: {e}"))?;
        Self::reply(resp).await
    }

    /// Reads the operation until `done` holds for its view, or fails after `within`.
    pub async fn wait_for(
        &self,
        id: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let start = Instant::now();
        let mut last = Value::Null;
        while start.elapsed() < within {
            let r = self.get(id).await?;
            if r.status == StatusCode::OK {
                if done(&r.body) {
                    return Ok(r.body);
                }
                last = r.body;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(format!(
            "{what}: not reached within {}s; last view: phase={} delivery_state={} case={}",
            within.as_secs(),
            last["phase"],
            last["delivery_state"],
            last["reconciliation_case"]
        ))
    }
}
