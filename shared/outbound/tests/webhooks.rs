//! Webhook POSTs over HTTP against wiremock, and the URL guard in front.

use genace_core::urlguard::UrlPolicy;
use genace_outbound::HttpWebhooks;
use genace_stages::ports::webhooks::{PostError, WebhookSender};
use wiremock::matchers::{body_string, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn local() -> UrlPolicy {
    UrlPolicy {
        allow_http: true,
        allow_private: true,
        ..UrlPolicy::default()
    }
}

#[tokio::test]
async fn the_post_carries_the_body_and_headers_and_reports_the_status() {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/hooks/genace"))
        .and(header("webhook-signature", "sig-value"))
        .and(body_string("{\"type\":\"operation.delivered\"}"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&receiver)
        .await;
    Mock::given(method("POST"))
        .and(path("/down"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&receiver)
        .await;
    let sender = HttpWebhooks::new(&local()).unwrap();
    let headers = vec![("webhook-signature".to_owned(), "sig-value".to_owned())];
    let status = sender
        .post(
            &format!("{}/hooks/genace", receiver.uri()),
            headers,
            "{\"type\":\"operation.delivered\"}".into(),
        )
        .await
        .unwrap();
    assert_eq!(status, 204);
    let down = sender
        .post(&format!("{}/down", receiver.uri()), vec![], "{}".into())
        .await
        .unwrap();
    assert_eq!(down, 503);
}

#[tokio::test]
async fn a_redirect_is_an_answer_not_followed() {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(307).insert_header("location", "http://169.254.169.254/latest"))
        .mount(&receiver)
        .await;
    let sender = HttpWebhooks::new(&local()).unwrap();
    assert_eq!(sender.post(&receiver.uri(), vec![], "{}".into()).await.unwrap(), 307);
    assert_eq!(receiver.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_guard_refuses_internal_and_plain_http_urls_without_connecting() {
    let receiver = MockServer::start().await;
    let sender = HttpWebhooks::new(&UrlPolicy::default()).unwrap();
    for url in [
        receiver.uri(),
        "https://127.0.0.1/hook".to_owned(),
        "https://10.1.2.3/hook".to_owned(),
        "https://169.254.169.254/latest".to_owned(),
        "https://localhost/hook".to_owned(),
        "not a url".to_owned(),
    ] {
        assert!(
            matches!(sender.post(&url, vec![], "{}".into()).await, Err(PostError::Refused(_))),
            "{url}: a refusal, which no retry changes"
        );
    }
    assert!(receiver.received_requests().await.unwrap().is_empty());
}
