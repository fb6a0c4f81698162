//! Poll, deliver and sweep against moto (DynamoDB, SQS, S3) with wiremock as
//! Genace and as the CDN that serves outputs.

use genace_stages::ports::Parts;
use genace_stages::ports::Unused;
use std::time::Duration;

use chrono::Utc;
use genace_app::AwsApp;
use genace_aws::DynamoStore;
use genace_aws::S3Store;
use genace_aws::SqsQueue;
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::record::CaseReason;
use genace_core::record::DeliveryState;
use genace_core::record::OperationRecord;
use genace_core::record::Phase;
use genace_localaws::LocalAws;
use genace_outbound::GenaceClient;
use genace_outbound::GenaceConfig;
use genace_outbound::HttpDownloads;
use genace_stages::api::context::Api;
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::deliver::DeliverResult;
use genace_stages::pipeline::deliver::Deliverer;
use genace_stages::pipeline::dispatch::Dispatched;
use genace_stages::pipeline::dispatch::PostResult;
use genace_stages::pipeline::poll::Polled;
use genace_stages::pipeline::poll::Poller;
use genace_stages::pipeline::stage::StageError;
use genace_stages::ports::table::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const JOB: &str = "job-77";

struct Rig {
    env: LocalAws,
    genace: MockServer,
    config: genace_stages::config::Config,
}

fn bytes_of(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn snapshot(state: &str, outputs: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"id": JOB, "state": state, "outputs": outputs, "error": null}))
}

impl Rig {
    async fn new() -> Self {
        let env = LocalAws::fresh().await;
        let genace = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/jobs"))
            .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": JOB, "state": "queued"})))
            .mount(&genace)
            .await;
        let mut config = env.config.clone();
        config.fault_injection = true;
        config.url_policy.allow_http = true;
        config.url_policy.allow_private = true;
        config.part_size = 5 * 1024 * 1024;
        Rig { env, genace, config }
    }

    fn genace_client(&self) -> GenaceClient {
        let mut conf = GenaceConfig::new(self.genace.uri(), "key");
        conf.timeout = Duration::from_secs(1);
        GenaceClient::new(conf).unwrap()
    }

    fn app(&self) -> AwsApp {
        genace_app::from_sdk(&self.env.sdk, self.config.clone())
            .with_genace(self.genace_client())
            .with_downloads(genace_app::downloads(&self.config).unwrap())
    }

    fn poller(&self) -> Poller<Parts<DynamoStore, SqsQueue, S3Store, GenaceClient>> {
        self.app().poller()
    }

    fn deliverer(&self) -> Deliverer<Parts<DynamoStore, SqsQueue, S3Store, Unused, HttpDownloads>> {
        self.app().deliverer()
    }

    fn api(&self) -> Api<Parts<DynamoStore, SqsQueue, S3Store>> {
        self.app().api()
    }

    async fn prepared(&self, fault: Option<&str>) -> OperationId {
        let mut body = json!({"operation_key": "k", "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": "a lighthouse", "duration": 5}});
        if let Some(f) = fault {
            body["fault"] = json!(f);
        }
        let intent = Intent::parse(&body, None).unwrap();
        let Submitted::New(rec) = self
            .api()
            .submit(&TenantId::parse("tenant-a").unwrap(), &intent, Utc::now())
            .await
            .unwrap()
        else {
            panic!()
        };
        rec.operation_id
    }

    /// An operation Genace has accepted as `JOB`.
    async fn accepted(&self, fault: Option<&str>) -> OperationId {
        let id = self.prepared(fault).await;
        let dispatcher = self.app().dispatcher();
        assert_eq!(
            dispatcher.dispatch(&id).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
        id
    }

    async fn record(&self, id: &OperationId) -> OperationRecord {
        self.env.store().get(id, Utc::now()).await.unwrap().unwrap()
    }

    async fn requests(&self, verb: &str) -> Vec<String> {
        self.genace
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.method.as_str() == verb)
            .map(|r| r.url.path().to_owned())
            .collect()
    }

    async fn serve_file(&self, name: &str, body: Vec<u8>, content_type: &str) -> String {
        Mock::given(method("GET"))
            .and(path(format!("/files/{name}")))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, content_type))
            .mount(&self.genace)
            .await;
        format!("{}/files/{name}", self.genace.uri())
    }

    async fn status_sequence(&self, first: ResponseTemplate, then: ResponseTemplate) {
        Mock::given(method("GET"))
            .and(path(format!("/v1/jobs/{JOB}")))
            .respond_with(first)
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&self.genace)
            .await;
        Mock::given(method("GET"))
            .and(path(format!("/v1/jobs/{JOB}")))
            .respond_with(then)
            .with_priority(2)
            .mount(&self.genace)
            .await;
    }

    /// An object as stored in S3: its content type and bytes.
    async fn stored_object(&self, key: &str) -> (Option<String>, Vec<u8>) {
        let got = genace_aws::clients::s3(&self.env.sdk)
            .get_object()
            .bucket(&self.env.names.bucket)
            .key(key)
            .send()
            .await
            .unwrap();
        let content_type = got.content_type.clone();
        (content_type, got.body.collect().await.unwrap().into_bytes().to_vec())
    }

    async fn pending_uploads(&self) -> usize {
        genace_aws::clients::s3(&self.env.sdk)
            .list_multipart_uploads()
            .bucket(&self.env.names.bucket)
            .send()
            .await
            .unwrap()
            .uploads
            .unwrap_or_default()
            .len()
    }

    async fn queued(&self, url: &str) -> usize {
        self.env.drain(url).await.len()
    }
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn a_job_is_observed_by_its_saved_id_then_delivered_and_verified() {
    let rig = Rig::new().await;
    let video = bytes_of(12 * 1024 * 1024 + 123);
    let url = rig.serve_file("render.mp4", video.clone(), "video/mp4").await;
    rig.status_sequence(
        snapshot("running", Value::Null),
        snapshot("completed", json!([{"url": url, "content_type": "video/mp4"}])),
    )
    .await;
    let id = rig.accepted(None).await;

    // Null outputs while running are fine; the poll is re-enqueued with a
    // delay, and nothing is written while the sweep's deadline covers it.
    let before = rig.record(&id).await;
    let first = rig.poller().poll(&id).await.unwrap();
    assert!(matches!(first, Polled::Running { next_poll_seconds } if (5..=900).contains(&next_poll_seconds)));
    let rec = rig.record(&id).await;
    assert_eq!(
        rec, before,
        "a non-terminal observation within the deadline costs no write"
    );
    assert_eq!(rec.outputs, None);

    assert_eq!(rig.poller().poll(&id).await.unwrap(), Polled::Rendered);
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Rendered);
    assert_eq!(rec.outputs.as_ref().unwrap().len(), 1);
    assert_eq!(rig.queued(&rig.env.queues.deliver).await, 1);
    // Status reads used the saved remote id, never the operation id.
    assert_eq!(
        rig.requests("GET")
            .await
            .iter()
            .filter(|p| p.starts_with("/v1/jobs/"))
            .count(),
        2
    );
    assert!(rig.requests("GET").await.iter().all(|p| !p.contains(id.as_str())));

    assert_eq!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::Delivered { objects: 1 }
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.delivery_state, DeliveryState::Delivered);
    assert!(rec.expires_at_seconds.is_some(), "finished operations get their TTL");
    let obj = &rec.delivered_objects[0];
    assert_eq!(obj.key, format!("outputs/tenant-a/{id}/output-0.mp4"));
    assert_eq!(obj.bytes, video.len() as u64);
    assert_eq!(obj.content_type, "video/mp4");
    let digest = hex_sha256(&video);
    assert_eq!(obj.sha256, digest);

    // The stored bytes are the served bytes, uploaded in parts.
    let (content_type, stored) = rig.stored_object(&obj.key).await;
    assert_eq!(content_type.as_deref(), Some("video/mp4"));
    assert_eq!(stored, video);

    // The view links to it with a presigned URL that works.
    let view_rec = rig
        .api()
        .get(&TenantId::parse("tenant-a").unwrap(), &id, Utc::now())
        .await
        .unwrap();
    let links = rig.api().links(&view_rec).await;
    let view = genace_edge::http::views::view_with_links(&view_rec, &links);
    let link = view["delivered_objects"][0]["url"].as_str().unwrap().to_owned();
    assert!(
        link.contains("response-content-disposition=attachment"),
        "the link makes browsers download: {link}"
    );
    let response = reqwest::get(&link).await.unwrap();
    let disposition = response
        .headers()
        .get("content-disposition")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(disposition.as_deref(), Some("attachment; filename=\"output-0.mp4\""));
    let fetched = response.bytes().await.unwrap();
    assert_eq!(fetched.len(), video.len());

    // Later messages change nothing; there was exactly one POST.
    assert!(matches!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::NotDeliverable(..)
    ));
    assert_eq!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::NotObservable(Phase::Rendered)
    );
    assert_eq!(rig.requests("POST").await.len(), 1);
}

#[tokio::test]
async fn a_failed_job_read_is_render_failed_and_nothing_is_recreated() {
    let rig = Rig::new().await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"id": JOB, "state": "failed", "outputs": null, "error": {"code": "content_policy"}}),
            ),
        )
        .mount(&rig.genace)
        .await;
    let id = rig.accepted(None).await;
    assert_eq!(rig.poller().poll(&id).await.unwrap(), Polled::RenderFailed);
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::RenderFailed);
    assert!(rec.last_error.unwrap().detail.contains("content_policy"));
    assert_eq!(rig.queued(&rig.env.queues.deliver).await, 0);
    assert_eq!(
        rig.queued(&rig.env.queues.dispatch).await,
        1,
        "only the intake's own message"
    );
    assert_eq!(rig.requests("POST").await.len(), 1);
}

#[tokio::test]
async fn a_job_created_for_another_operation_opens_a_case_on_the_first_poll() {
    let rig = Rig::new().await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"id": JOB, "state": "running", "client_reference": "op_00000000000000000000000000000000"}),
        ))
        .mount(&rig.genace)
        .await;
    let id = rig.accepted(None).await;
    assert_eq!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::CaseOpened(CaseReason::RemoteJobMissing)
    );
    let case = rig.record(&id).await.case.unwrap();
    assert!(case.evidence.contains("client_reference"), "{}", case.evidence);

    // Our own reference is fine.
    let rig = Rig::new().await;
    let id = rig.prepared(None).await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": JOB, "state": "running", "client_reference": id})),
        )
        .mount(&rig.genace)
        .await;
    let dispatcher = rig.app().dispatcher();
    dispatcher.dispatch(&id).await.unwrap();
    assert!(matches!(rig.poller().poll(&id).await.unwrap(), Polled::Running { .. }));
}

#[tokio::test]
async fn an_unknown_or_mismatched_job_opens_a_case() {
    let rig = Rig::new().await;
    rig.status_sequence(
        ResponseTemplate::new(404),
        ResponseTemplate::new(200).set_body_json(json!({"id": "someone-else", "state": "running"})),
    )
    .await;
    let id = rig.accepted(None).await;
    assert_eq!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::CaseOpened(CaseReason::RemoteJobMissing)
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.phase, Phase::Accepted);
    assert_eq!(rec.case.as_ref().unwrap().reason, CaseReason::RemoteJobMissing);
    assert_eq!(rec.due_at_ms, None, "a person decides now");
    assert_eq!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::NotObservable(Phase::Accepted)
    );

    let rig = Rig::new().await;
    rig.status_sequence(
        ResponseTemplate::new(200).set_body_json(json!({"id": "someone-else", "state": "running"})),
        ResponseTemplate::new(404),
    )
    .await;
    let id = rig.accepted(None).await;
    assert_eq!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::CaseOpened(CaseReason::RemoteJobMissing)
    );
}

#[tokio::test]
async fn transient_reads_back_off_and_a_silent_job_opens_a_stall_case() {
    let mut rig = Rig::new().await;
    rig.status_sequence(ResponseTemplate::new(503), snapshot("running", Value::Null))
        .await;
    let id = rig.accepted(None).await;
    assert!(matches!(
        rig.poller().poll(&id).await.unwrap(),
        Polled::BackedOff { .. }
    ));
    assert_eq!(rig.record(&id).await.case, None);

    rig.config.stall_after = chrono::Duration::zero();
    assert!(matches!(rig.poller().poll(&id).await.unwrap(), Polled::Running { .. }));
    let rec = rig.record(&id).await;
    assert_eq!(rec.case.as_ref().unwrap().reason, CaseReason::RenderStalled);
    assert!(rec.due_at_ms.is_some(), "polling goes on");
    // Later polls of the stalled job write nothing while its case is open.
    assert!(matches!(rig.poller().poll(&id).await.unwrap(), Polled::Running { .. }));
    assert_eq!(
        rig.record(&id).await.version,
        rec.version,
        "no write per poll of a stalled job"
    );
}

#[tokio::test]
async fn a_crash_after_an_observation_resumes_on_redelivery() {
    let rig = Rig::new().await;
    rig.status_sequence(snapshot("running", Value::Null), snapshot("running", Value::Null))
        .await;
    let id = rig.accepted(Some("poll.after_observe")).await;
    assert!(matches!(
        rig.poller().poll(&id).await,
        Err(StageError::Crashed("poll.after_observe"))
    ));
    let rec = rig.record(&id).await;
    assert_eq!(rec.fault, None, "the write before the crash consumed the directive");
    assert!(matches!(rig.poller().poll(&id).await.unwrap(), Polled::Running { .. }));
}

async fn rendered_with_output(rig: &Rig, fault: Option<&str>, output_url: &str) -> OperationId {
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(snapshot("succeeded", json!([output_url])))
        .mount(&rig.genace)
        .await;
    let id = rig.accepted(fault).await;
    assert_eq!(rig.poller().poll(&id).await.unwrap(), Polled::Rendered);
    id
}

#[tokio::test]
async fn a_failed_upload_is_aborted_and_retried_for_the_same_output() {
    let rig = Rig::new().await;
    let image = bytes_of(300_000);
    let url = rig.serve_file("still.png", image.clone(), "image/png").await;
    let id = rendered_with_output(&rig, Some("deliver.upload_fails"), &url).await;

    let first = rig.deliverer().deliver(&id).await.unwrap();
    assert!(
        matches!(first, DeliverResult::Retrying { attempts: 1, .. }),
        "{first:?}"
    );
    let rec = rig.record(&id).await;
    assert_eq!(
        (rec.phase, rec.delivery_state),
        (Phase::Rendered, DeliveryState::Collecting)
    );
    assert_eq!(rig.pending_uploads().await, 0, "the failed upload was aborted");

    assert_eq!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::Delivered { objects: 1 }
    );
    let rec = rig.record(&id).await;
    assert_eq!(
        rec.delivered_objects[0].key,
        format!("outputs/tenant-a/{id}/output-0.png")
    );
    assert_eq!(rec.delivered_objects[0].bytes, image.len() as u64);
    assert_eq!(
        rig.requests("POST").await.len(),
        1,
        "one POST: delivery never re-renders"
    );
}

#[tokio::test]
async fn an_output_that_fits_in_one_part_is_one_put_and_is_verified() {
    let rig = Rig::new().await;
    let image = bytes_of(300_000);
    let url = rig.serve_file("one.png", image.clone(), "image/png").await;
    let id = rendered_with_output(&rig, None, &url).await;
    let (objects, requests) = rig.env.counted_objects();
    let deliverer = Deliverer {
        objects,
        ..rig.deliverer()
    };
    assert_eq!(
        deliverer.deliver(&id).await.unwrap(),
        DeliverResult::Delivered { objects: 1 }
    );
    assert_eq!(requests.get(), 2, "one PutObject and one HeadObject");
    assert_eq!(rig.pending_uploads().await, 0);
    let rec = rig.record(&id).await;
    let obj = &rec.delivered_objects[0];
    assert_eq!(obj.sha256, hex_sha256(&image));
    let (content_type, stored) = rig.stored_object(&obj.key).await;
    assert_eq!(content_type.as_deref(), Some("image/png"));
    assert_eq!(stored, image);
}

fn hex_sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_crash_after_upload_is_redelivered_once_the_lease_expires() {
    let mut rig = Rig::new().await;
    rig.config.policy.delivery_lease = chrono::Duration::seconds(3);
    let url = rig.serve_file("a.mp4", bytes_of(1000), "video/mp4").await;
    let id = rendered_with_output(&rig, Some("deliver.after_upload"), &url).await;
    assert!(matches!(
        rig.deliverer().deliver(&id).await,
        Err(StageError::Crashed("deliver.after_upload"))
    ));
    assert_eq!(rig.record(&id).await.delivery_state, DeliveryState::Collecting);
    assert_eq!(rig.deliverer().deliver(&id).await.unwrap(), DeliverResult::Duplicate);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::Delivered { objects: 1 }
    );
}

#[tokio::test]
async fn delivery_gives_up_after_the_bound_with_a_case() {
    let mut rig = Rig::new().await;
    rig.config.policy.delivery_max_attempts = 2;
    Mock::given(method("GET"))
        .and(path("/files/broken.mp4"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&rig.genace)
        .await;
    let url = format!("{}/files/broken.mp4", rig.genace.uri());
    let id = rendered_with_output(&rig, None, &url).await;
    assert!(matches!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::Retrying { attempts: 1, .. }
    ));
    assert_eq!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::GaveUp { attempts: 2 }
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(rec.case.unwrap().reason, CaseReason::DeliveryFailed);
    assert_eq!(rec.phase, Phase::Rendered);
    assert_eq!(rig.requests("POST").await.len(), 1);
}

#[tokio::test]
async fn a_refused_output_url_opens_a_case_at_the_first_attempt_without_retrying() {
    for (output, expected) in [
        ("http://169.254.169.254/latest/meta-data/?token=secret", "not allowed"),
        ("https://169.254.169.254/latest/meta-data/?token=secret", "not public"),
        ("https://127.0.0.1/x.mp4?sig=secret", "not public"),
        ("https://cdn.genace.example:8443/x.mp4?sig=secret", "port 8443"),
    ] {
        let mut rig = Rig::new().await;
        rig.config.url_policy = genace_core::urlguard::UrlPolicy::default();
        let id = rendered_with_output(&rig, None, output).await;
        rig.env.drain(&rig.env.queues.deliver).await;
        assert_eq!(
            rig.deliverer().deliver(&id).await.unwrap(),
            DeliverResult::Refused {
                reason: CaseReason::OutputUrlRefused
            },
            "{output}"
        );
        let rec = rig.record(&id).await;
        assert_eq!(rec.delivery_state, DeliveryState::DeliveryFailed);
        assert_eq!(rec.delivery_attempts, 1);
        assert_eq!(rec.due_at_ms, None);
        let case = rec.case.unwrap();
        assert_eq!(case.reason, CaseReason::OutputUrlRefused);
        assert!(
            case.evidence.starts_with("output 0:"),
            "names the output: {}",
            case.evidence
        );
        assert!(case.evidence.contains(expected), "{output}: {}", case.evidence);
        assert!(!case.evidence.contains("secret"), "no query string: {}", case.evidence);
        assert_eq!(rig.queued(&rig.env.queues.deliver).await, 0, "no retry is scheduled");
    }
}

/// Receives deliver messages as Lambda's event source would (waiting out
/// their delays) and hands each to the deliver stage, until `done` or `rounds`.
async fn run_deliver_queue(rig: &Rig, id: &OperationId, rounds: usize) -> Vec<DeliverResult> {
    let sqs = genace_aws::clients::sqs_receiver(&rig.env.sdk);
    let mut results = Vec::new();
    for _ in 0..rounds {
        let out = sqs
            .receive_message()
            .queue_url(&rig.env.queues.deliver)
            .max_number_of_messages(10)
            .wait_time_seconds(5)
            .send()
            .await
            .unwrap();
        for m in out.messages.unwrap_or_default() {
            results.push(
                genace_stages::pipeline::stage::handle_body(&rig.deliverer(), m.body.as_deref().unwrap())
                    .await
                    .unwrap(),
            );
            sqs.delete_message()
                .queue_url(&rig.env.queues.deliver)
                .receipt_handle(m.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
        }
        let rec = rig.record(id).await;
        if matches!(
            rec.delivery_state,
            DeliveryState::Delivered | DeliveryState::DeliveryFailed
        ) {
            break;
        }
    }
    results
}

#[tokio::test]
async fn a_download_that_fails_twice_is_delivered_by_the_third_queued_attempt() {
    let mut rig = Rig::new().await;
    rig.config.delivery_backoff_seconds = 1;
    let body = bytes_of(4000);
    Mock::given(method("GET"))
        .and(path("/files/flaky.mp4"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&rig.genace)
        .await;
    let url = rig.serve_file("flaky.mp4", body.clone(), "video/mp4").await;
    let id = rendered_with_output(&rig, None, &url).await;
    let results = run_deliver_queue(&rig, &id, 8).await;
    assert_eq!(
        results,
        vec![
            DeliverResult::Retrying {
                attempts: 1,
                next_attempt_seconds: 1
            },
            DeliverResult::Retrying {
                attempts: 2,
                next_attempt_seconds: 2
            },
            DeliverResult::Delivered { objects: 1 },
        ]
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.delivery_attempts, 3, "each attempt is counted");
    assert_eq!(rec.delivered_objects[0].bytes, body.len() as u64);
    assert_eq!(rec.case, None);
}

/// An HTTP server that answers with headers, then drips one byte every
/// `every`, forever. It counts the connections it served.
async fn dripping_server(every: Duration) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = [0u8; 2048];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: video/mp4\r\ncontent-length: 100000\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(every).await;
                    if socket.write_all(b"x").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/drip.mp4"), served)
}

#[tokio::test]
async fn a_dripping_download_is_bounded_per_attempt_and_ends_in_a_case() {
    let mut rig = Rig::new().await;
    rig.config.delivery_backoff_seconds = 1;
    rig.config.delivery_attempt_deadline = Duration::from_millis(1500);
    rig.config.policy.delivery_max_attempts = 2;
    let (url, served) = dripping_server(Duration::from_millis(400)).await;
    let id = rendered_with_output(&rig, None, &url).await;
    let results = run_deliver_queue(&rig, &id, 8).await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        matches!(results[0], DeliverResult::Retrying { attempts: 1, .. }),
        "{results:?}"
    );
    assert_eq!(results[1], DeliverResult::GaveUp { attempts: 2 });
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
    let rec = rig.record(&id).await;
    assert_eq!(rec.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(rec.case.as_ref().unwrap().reason, CaseReason::DeliveryFailed);
    assert!(rec.last_error.unwrap().detail.contains("deadline"));
    assert_eq!(rig.pending_uploads().await, 0, "every attempt's upload was aborted");
}

#[tokio::test]
async fn an_output_over_the_byte_cap_opens_a_case_without_retrying() {
    let mut rig = Rig::new().await;
    rig.config.max_output_bytes = 1000;
    let url = rig.serve_file("big.mp4", bytes_of(1001), "video/mp4").await;
    let id = rendered_with_output(&rig, None, &url).await;
    assert_eq!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::Refused {
            reason: CaseReason::OutputTooLarge
        }
    );
    let rec = rig.record(&id).await;
    assert_eq!(rec.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(rec.case.unwrap().reason, CaseReason::OutputTooLarge);
}

#[tokio::test]
async fn a_completed_job_with_null_outputs_opens_a_case_and_is_never_delivered() {
    let rig = Rig::new().await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(snapshot("completed", Value::Null))
        .mount(&rig.genace)
        .await;
    let id = rig.accepted(None).await;
    rig.env.drain(&rig.env.queues.deliver).await;
    assert_eq!(rig.poller().poll(&id).await.unwrap(), Polled::Rendered);
    let rec = rig.record(&id).await;
    assert_eq!(rec.case.as_ref().unwrap().reason, CaseReason::OutputsMissing);
    assert_eq!(rec.due_at_ms, None);
    assert!(matches!(
        rig.deliverer().deliver(&id).await.unwrap(),
        DeliverResult::NotDeliverable(Phase::Rendered, DeliveryState::NotCollected)
    ));
    assert_eq!(rig.record(&id).await.delivery_state, DeliveryState::NotCollected);
    assert_eq!(
        rig.queued(&rig.env.queues.deliver).await,
        0,
        "nothing to deliver is enqueued"
    );
}

#[tokio::test]
async fn the_sweep_re_enqueues_due_work_and_interrupts_expired_claims() {
    let mut rig = Rig::new().await;
    rig.config.dispatch_grace = chrono::Duration::zero();
    rig.config.policy.observe_grace = chrono::Duration::zero();
    rig.config.policy.dispatch_lease = chrono::Duration::seconds(1);
    let sweeper = || rig.app().sweeper();

    // A prepared operation whose dispatch message was lost.
    let id = rig.prepared(None).await;
    rig.env.drain(&rig.env.queues.dispatch).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = sweeper().run().await.unwrap();
    assert_eq!((report.examined, report.dispatch), (1, 1));
    let bodies = rig.env.drain(&rig.env.queues.dispatch).await;
    assert_eq!(bodies.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&bodies[0]).unwrap(),
        json!({"operation_id": id})
    );
    // Its due time moved, so the next run does not send a second copy.
    assert_eq!(sweeper().run().await.unwrap().dispatch, 0);

    // A dispatcher that stopped after claiming: uncertain with a case, no POST.
    let mut claimed = rig.record(&id).await;
    let next = genace_core::machine::transition(
        &claimed,
        genace_core::machine::Input::ClaimDispatch { token: "tok", shard: 0 },
        Utc::now(),
        &rig.config.policy,
    )
    .unwrap();
    rig.env.store().apply(&claimed, &next).await.unwrap();
    claimed = next;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(sweeper().run().await.unwrap().interrupted, 1);
    let rec = rig.record(&claimed.operation_id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert_eq!(rec.case.unwrap().reason, CaseReason::InterruptedDispatch);
    assert_eq!(rig.requests("POST").await.len(), 0);
}

#[tokio::test]
async fn the_sweep_resumes_observation_and_delivery() {
    let mut rig = Rig::new().await;
    rig.config.policy.observe_grace = chrono::Duration::zero();
    let url = rig.serve_file("s.png", bytes_of(10), "image/png").await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/jobs/{JOB}")))
        .respond_with(snapshot("completed", json!([url])))
        .mount(&rig.genace)
        .await;
    let id = rig.accepted(None).await;
    rig.env.drain(&rig.env.queues.poll).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let sweeper = rig.app().sweeper();
    assert_eq!(sweeper.run().await.unwrap().poll, 1, "an accepted job nobody observed");
    assert_eq!(rig.poller().poll(&id).await.unwrap(), Polled::Rendered);
    rig.env.drain(&rig.env.queues.deliver).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        sweeper.run().await.unwrap().deliver,
        1,
        "a rendered job nobody delivered"
    );
    assert_eq!(rig.queued(&rig.env.queues.deliver).await, 1);
}
