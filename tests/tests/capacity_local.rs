//! Capacity on the local stack: under a spend limit, a freed slot goes past
//! a tenant's head that its credits cannot cover (a video) to a smaller
//! operation behind it that fits (an image), and the head keeps its place
//! until credits free. moto over HTTP, the real queues' runner, and a
//! Genace stand-in whose jobs end when the test says.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Genace: a POST's job id is `job-<prompt>`; a job renders until the test
/// marks it done, then completes to one small image.
#[derive(Clone, Default)]
struct Jobs {
    done: Arc<Mutex<HashSet<String>>>,
    base: String,
}

impl Jobs {
    fn finish(&self, prompt: &str) {
        self.done.lock().unwrap().insert(format!("job-{prompt}"));
    }
}

struct Post;

impl Respond for Post {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let prompt = body["prompt"].as_str().unwrap_or("unknown");
        ResponseTemplate::new(202).set_body_json(json!({"job_id": format!("job-{prompt}"), "state": "queued"}))
    }
}

impl Respond for Jobs {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let id = request.url.path().trim_start_matches("/v1/jobs/").to_owned();
        if !self.done.lock().unwrap().contains(&id) {
            return ResponseTemplate::new(200).set_body_json(json!({"id": id, "state": "running", "error": null}));
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "id": id, "state": "completed", "error": null,
            "outputs": [{"url": format!("{}/outputs/{id}.png", self.base), "content_type": "image/png"}]
        }))
    }
}

/// The prompts Genace was sent, in order.
async fn posted(genace: &MockServer) -> Vec<String> {
    let requests = genace.received_requests().await.unwrap_or_default();
    requests
        .iter()
        .filter(|r| r.method == wiremock::http::Method::POST)
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            body["prompt"].as_str().unwrap_or("").to_owned()
        })
        .collect()
}

/// Waits up to 60 s for `done` to hold of the prompts posted so far.
async fn until_posted(genace: &MockServer, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sent = posted(genace).await;
        if done(&sent) {
            return sent;
        }
        assert!(Instant::now() < deadline, "{what}: posted {sent:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn a_freed_slot_goes_past_a_video_short_of_credits_to_an_image_that_fits() {
    let env = LocalAws::fresh().await;
    let genace = MockServer::start().await;
    let jobs = Jobs {
        base: genace.uri(),
        ..Jobs::default()
    };
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(Post)
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/v1/jobs/[^/]+$"))
        .respond_with(jobs.clone())
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/outputs/"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"rendered".to_vec()))
        .mount(&genace)
        .await;
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    config.max_in_flight = Some(2);
    let mut gconf = GenaceConfig::new(genace.uri(), "capacity-test-key");
    gconf.timeout = Duration::from_secs(3);
    let settings = runner::RunnerSettings::for_tests();
    let api = format!("http://{}", settings.intake_addr);
    let running = runner::start(&env.sdk, config.clone(), gconf, settings).await.unwrap();
    // Unique per run: the table may outlive one test run.
    let run = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let mixed = format!("mixed-{run}");
    let other = format!("other-{run}");
    let operator = e2e::client(&api, &devauth::issue_operator("ops-1", "tenant_id", None, 600).unwrap());
    let limit = operator.set_spend_limit(&mixed, Some(12.0)).await;
    assert!(limit.is_ok(), "{limit:?}");
    let submit = |tenant: String, prompt: &'static str, media: &'static str| {
        let api = api.clone();
        async move {
            let user = e2e::client(&api, &devauth::issue("tenant_id", &tenant, 600).unwrap());
            let model = if media == "video" {
                "genace-video-2"
            } else {
                "genace-image-1"
            };
            e2e::create(
                &user,
                json!({"operation_key": prompt, "media_type": media,
                       "specification": {"model": model, "prompt": prompt}}),
            )
            .await;
        }
    };

    // mixed's video (10 of its 12 credits) and other's image take both
    // slots.
    submit(mixed.clone(), "v1", "video").await;
    until_posted(&genace, "v1", |s| s.len() == 1).await;
    submit(other.clone(), "o1", "image").await;
    until_posted(&genace, "o1", |s| s.len() == 2).await;
    // A second video, short of credits, then an image that fits but finds
    // the account full, wait in mixed's order.
    submit(mixed.clone(), "v2", "video").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    submit(mixed.clone(), "i1", "image").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted(&genace).await, ["v1", "o1"], "both wait");

    // other's image ends: the freed slot goes to i1, not to the head v2,
    // while v1 still renders.
    jobs.finish("o1");
    let sent = until_posted(&genace, "i1 after o1 ended", |s| s.len() >= 3).await;
    assert_eq!(sent, ["v1", "o1", "i1"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted(&genace).await, ["v1", "o1", "i1"], "v2 still waits for credits");

    // v1 ends: its slot and its 10 credits free, and the head is admitted.
    jobs.finish("v1");
    jobs.finish("i1");
    let sent = until_posted(&genace, "v2 after v1 ended", |s| s.len() >= 4).await;
    assert_eq!(sent, ["v1", "o1", "i1", "v2"], "one POST each");
    jobs.finish("v2");
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.shutdown().await;
    assert_eq!(posted(&genace).await.len(), 4, "no second POST");
}
