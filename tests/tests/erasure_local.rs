//! Erasure on the local stack: a delivery refused part way (its second
//! output is larger than the stack takes) leaves its first output in the
//! bucket (moto's S3) and on no record. The tenant's DELETE deletes it,
//! answers 200 with the key, and nothing is left under the operation's
//! prefix; no delivery stores anything after it.

use std::time::Duration;

use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use genace_stages::ports::outputs::ObjectStore;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_erasure_deletes_what_a_refused_delivery_left() {
    let env = LocalAws::fresh().await;
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": "job-part", "state": "queued"})))
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/jobs/job-part"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "job-part", "state": "completed", "error": null,
            "outputs": [
                {"url": format!("{}/outputs/small.png", genace.uri()), "content_type": "image/png"},
                {"url": format!("{}/outputs/large.png", genace.uri()), "content_type": "image/png"}
            ]
        })))
        .mount(&genace)
        .await;
    for (file, bytes) in [("small.png", 512), ("large.png", 8192)] {
        Mock::given(method("GET"))
            .and(path(format!("/outputs/{file}")))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![7u8; bytes]))
            .mount(&genace)
            .await;
    }
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    config.max_output_bytes = 4096;
    let mut gconf = GenaceConfig::new(genace.uri(), "erase-test-key");
    gconf.timeout = Duration::from_secs(3);
    let settings = runner::RunnerSettings::for_tests();
    let api = format!("http://{}", settings.intake_addr);
    let running = runner::start(&env.sdk, config.clone(), gconf, settings).await.unwrap();
    // Unique per run: the table and bucket may outlive one test run.
    let tenant = format!("erase-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let user = e2e::client(&api, &devauth::issue("tenant_id", &tenant, 600).unwrap());
    let created = e2e::create(
        &user,
        json!({"operation_key": "part-1", "media_type": "image",
               "specification": {"model": "genace-image-1", "prompt": "a pier"}}),
    )
    .await;
    let id = created["operation_id"].as_str().unwrap().to_owned();
    let op = e2e::until_delivery(&user, &id, "delivery_failed", Duration::from_secs(90)).await;
    assert_eq!(op["reconciliation_case"]["reason"], "output_too_large", "{op}");
    let prefix = format!("{}/{tenant}/{id}/", config.output_prefix);
    let objects = env.objects();
    let left = objects.list(&prefix, 10).await.unwrap();
    assert_eq!(left.len(), 1, "the first output was stored: {left:?}");

    let erased = user.erase_outputs(&id).await.expect("erased, 200").view;
    assert_eq!(erased["erased_objects"], json!(left), "{erased}");
    assert_eq!(erased["erased_object_count"], left.len(), "{erased}");
    assert!(objects.list(&prefix, 10).await.unwrap().is_empty(), "nothing is left");
    // The sweep and the queues run on: nothing is stored after it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    running.shutdown().await;
    assert!(objects.list(&prefix, 10).await.unwrap().is_empty());
}
