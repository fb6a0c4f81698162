//! The Genace client over real HTTP, with wiremock as Genace.

use std::time::Duration;

use genace_core::remote::SubmitOutcome;
use genace_outbound::{GenaceClient, GenaceConfig};
use genace_stages::ports::genace::Genace;
use serde_json::json;
use tokio::io::AsyncReadExt;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn client(base: &str) -> GenaceClient {
    let mut conf = GenaceConfig::new(base, "test-key");
    conf.timeout = Duration::from_millis(500);
    GenaceClient::new(conf).unwrap()
}

async fn submit_against(response: ResponseTemplate) -> (SubmitOutcome, usize) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .and(header("authorization", "Bearer test-key"))
        .respond_with(response)
        .mount(&server)
        .await;
    let outcome = client(&server.uri())
        .submit(&json!({"model": "m", "prompt": "p"}))
        .await;
    let posts = server.received_requests().await.unwrap().len();
    (outcome, posts)
}

#[tokio::test]
async fn accepted_with_any_state_and_unknown_fields() {
    let (outcome, posts) = submit_against(ResponseTemplate::new(202).set_body_json(json!({
        "job_id": "job-1", "state": "running", "model": "genace-video-2",
        "created_at": "2026-11-30T10:00:00Z", "held_credits": 40, "links": {"self": "/v1/jobs/job-1"}
    })))
    .await;
    assert_eq!(posts, 1);
    match outcome {
        SubmitOutcome::Accepted { job, raw } => {
            assert_eq!(job.job_id, "job-1");
            assert_eq!(job.state.as_deref(), Some("running"));
            assert_eq!(job.model.as_deref(), Some("genace-video-2"));
            assert_eq!(job.created_at.as_deref(), Some("2026-11-30T10:00:00Z"));
            assert_eq!(job.held_credits, Some(40.0));
            assert!(raw.contains("job-1"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_malformed_202_is_unknown() {
    for body in [json!({"state": "queued"}), json!({"job_id": ""}), json!({"job_id": 7})] {
        let (outcome, _) = submit_against(ResponseTemplate::new(202).set_body_json(body.clone())).await;
        assert!(matches!(outcome, SubmitOutcome::Unknown { .. }), "{body}");
    }
    let (outcome, _) = submit_against(ResponseTemplate::new(202).set_body_string("ok")).await;
    assert!(matches!(outcome, SubmitOutcome::Unknown { .. }));
}

#[tokio::test]
async fn a_502_with_error_job_id_names_the_failed_job() {
    let (outcome, posts) = submit_against(
        ResponseTemplate::new(502).set_body_json(json!({"error": {"code": "provider_error", "job_id": "job-9"}})),
    )
    .await;
    assert_eq!(posts, 1);
    assert!(matches!(outcome, SubmitOutcome::FailedWithJob { ref job_id, .. } if job_id == "job-9"));
}

#[tokio::test]
async fn a_5xx_without_job_id_is_unknown() {
    for status in [500, 502, 503] {
        let (outcome, posts) = submit_against(ResponseTemplate::new(status).set_body_string("upstream trouble")).await;
        assert_eq!(posts, 1, "never retried");
        match outcome {
            SubmitOutcome::Unknown { evidence } => assert!(evidence.contains(&status.to_string())),
            other => panic!("{status}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_4xx_is_rejected_and_429_rate_limited() {
    let (outcome, _) = submit_against(ResponseTemplate::new(422).set_body_string("bad aspect ratio")).await;
    assert!(matches!(outcome, SubmitOutcome::Rejected { status: 422, ref detail } if detail.contains("aspect")));
    let (outcome, posts) = submit_against(ResponseTemplate::new(429).insert_header("retry-after", "12")).await;
    assert_eq!(posts, 1);
    assert_eq!(
        outcome,
        SubmitOutcome::RateLimited {
            retry_after: Some(Duration::from_secs(12))
        }
    );
}

#[tokio::test]
async fn a_lost_response_is_unknown_after_exactly_one_post() {
    let (outcome, posts) = submit_against(
        ResponseTemplate::new(202)
            .set_body_json(json!({"job_id": "late"}))
            .set_delay(Duration::from_secs(3)),
    )
    .await;
    assert_eq!(posts, 1);
    match outcome {
        SubmitOutcome::Unknown { evidence } => {
            assert!(evidence.contains("timed out"), "{evidence}");
            assert!(!evidence.contains("http://"), "evidence names no URL: {evidence}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_connection_reset_is_unknown_and_not_retried() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepts = tokio::spawn(async move {
        let mut count = 0;
        while let Ok(Ok((mut sock, _))) = tokio::time::timeout(Duration::from_secs(2), listener.accept()).await {
            count += 1;
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            // Reset the connection without answering.
            let _ = sock.set_zero_linger();
            drop(sock);
        }
        count
    });
    let outcome = client(&format!("http://{addr}")).submit(&json!({})).await;
    assert!(matches!(outcome, SubmitOutcome::Unknown { .. }), "{outcome:?}");
    assert_eq!(accepts.await.unwrap(), 1, "exactly one connection, no retry");
}
