//! Webhook POSTs over HTTP, behind the `genace_stages::ports::webhooks::WebhookSender`
//! port. Tenants name the URLs, so every POST passes the same URL guard as
//! output downloads: https only, public addresses only (literal and after
//! DNS), the configured ports. Redirects are not followed, and a POST gets
//! ten seconds in all.

use std::time::Duration;

use genace_core::urlguard::UrlPolicy;
use genace_stages::ports::webhooks::{PostError, WebhookSender};
use reqwest::Url;

use crate::download::{check_url, guarded_client, transport};

/// How long one webhook POST may take, connection included.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct HttpWebhooks {
    client: reqwest::Client,
    policy: UrlPolicy,
}

impl HttpWebhooks {
    pub fn new(policy: &UrlPolicy) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client: guarded_client(policy)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(POST_TIMEOUT)
                .build()?,
            policy: policy.clone(),
        })
    }
}

impl WebhookSender for HttpWebhooks {
    async fn post(&self, url: &str, headers: Vec<(String, String)>, body: String) -> Result<u16, PostError> {
        let url = Url::parse(url).map_err(|e| PostError::Refused(format!("bad webhook URL: {e}")))?;
        check_url(&url, &self.policy).map_err(PostError::Refused)?;
        let mut request = self.client.post(url).body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| match transport(e) {
            // Every address the name resolves to is refused.
            (text, true) => PostError::Refused(text),
            (text, false) => PostError::Failed(text),
        })?;
        Ok(response.status().as_u16())
    }
}
