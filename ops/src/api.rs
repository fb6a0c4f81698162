//! The operator API, called with the operator's token: one request per call,
//! a problem answer kept whole for printing.

use serde_json::{Value, json};

pub(crate) enum Failure {
    Api(Value),
    Transport(String),
}

/// The operator API, with the operator's token.
pub(crate) struct Api {
    pub url: String,
    pub token: String,
}

impl Api {
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        self.call_if_match(method, path, body, None).await
    }

    pub(crate) async fn call_if_match(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        version: Option<u64>,
    ) -> Result<Value, Failure> {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method, format!("{}{path}", self.url.trim_end_matches('/')))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        if let Some(v) = version {
            req = req.header("if-match", format!("\"{v}\""));
        }
        let resp = req.send().await.map_err(|e| Failure::Transport(e.to_string()))?;
        let ok = resp.status().is_success();
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| Failure::Transport(e.to_string()))?;
        let value = serde_json::from_str(&text).unwrap_or_else(|_| json!({"status": status, "detail": text}));
        if ok { Ok(value) } else { Err(Failure::Api(value)) }
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call(reqwest::Method::GET, path, None).await
    }
}

/// Everything but RFC 3986's unreserved characters is percent-encoded.
pub(crate) const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes everything but the unreserved characters.
pub(crate) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

pub(crate) fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}
