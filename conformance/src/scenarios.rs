//! The acceptance scenarios of the Genace docs, driven through the public
//! API, asserted through its answers and through what Genace received.
//! The shared [`Scenario`] and the scenarios of the job's own lifecycle;
//! the event, hold and listing scenarios are in the modules below.

mod events;
mod held;
mod listing;

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::api;
use crate::context::{Context, Outcome, check};
use crate::genace::{PromptMarker, RESET_MARKER};

pub(crate) struct Scenario<'a> {
    ctx: &'a Context,
    marker: String,
    key: String,
    job_id: String,
}

impl<'a> Scenario<'a> {
    pub(crate) fn new(name: &str, ctx: &'a Context) -> Self {
        Self {
            ctx,
            marker: format!("[conformance:{name}:{}]", ctx.run_id),
            key: format!("conformance/{}/{name}", ctx.run_id),
            job_id: format!("conf-{}-{name}", ctx.run_id),
        }
    }

    fn body(&self, fault: Option<&str>) -> Value {
        let mut b = json!({
            "operation_key": self.key,
            "media_type": "video",
            "specification": {
                "model": "genace-video-2",
                "prompt": format!("a lighthouse at dusk {}", self.marker),
                "duration": 5,
                "aspect_ratio": "16:9",
                "parameters": {"seed": 42, "camera": {"move": "dolly", "speed": 0.5}}
            }
        });
        if let Some(f) = fault {
            b["fault"] = json!(f);
        }
        b
    }

    fn accepted(&self, state: &str) -> ResponseTemplate {
        ResponseTemplate::new(202).set_body_json(json!({
            "job_id": self.job_id, "state": state, "model": "genace-video-2",
            "created_at": "2026-11-30T12:00:00Z", "held_credits": 25
        }))
    }

    async fn on_post(&self, response: ResponseTemplate) {
        Mock::given(method("POST"))
            .and(path("/v1/jobs"))
            .and(PromptMarker(self.marker.clone()))
            .respond_with(response)
            .mount(&self.ctx.genace.mock)
            .await;
    }

    /// Status reads: `first` for the first `times` reads, then `then`.
    async fn on_status(&self, first: Option<(ResponseTemplate, u64)>, then: ResponseTemplate) {
        let p = format!("/v1/jobs/{}", self.job_id);
        if let Some((resp, times)) = first {
            Mock::given(method("GET"))
                .and(path(p.clone()))
                .respond_with(resp)
                .up_to_n_times(times)
                .with_priority(1)
                .mount(&self.ctx.genace.mock)
                .await;
        }
        Mock::given(method("GET"))
            .and(path(p))
            .respond_with(then)
            .with_priority(2)
            .mount(&self.ctx.genace.mock)
            .await;
    }

    fn snapshot(&self, state: &str, outputs: Value) -> ResponseTemplate {
        ResponseTemplate::new(200)
            .set_body_json(json!({"id": self.job_id, "state": state, "outputs": outputs, "error": null}))
    }

    /// A completed snapshot whose output this server also serves.
    async fn completes_with_output(&self) -> ResponseTemplate {
        let file = format!("/files/{}.mp4", self.job_id);
        let bytes: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        Mock::given(method("GET"))
            .and(path(file.clone()))
            .respond_with(ResponseTemplate::new(200).set_body_raw(bytes, "video/mp4"))
            .mount(&self.ctx.genace.mock)
            .await;
        let url = format!("{}{file}", self.ctx.genace.base_url());
        self.snapshot("completed", json!([{"url": url, "content_type": "video/mp4"}]))
    }

    async fn posts(&self) -> usize {
        self.ctx.genace.posts_with(&self.marker).await
    }

    async fn expect_posts(&self, n: usize) -> Outcome {
        let got = self.posts().await;
        check(
            got == n,
            format!("Genace received {got} POSTs for this intent, expected {n}"),
        )
    }

    async fn create_new(&self, fault: Option<&str>) -> Result<String, String> {
        let r = api::create(&self.ctx.api, &self.body(fault)).await?;
        check(r.status == 202, format!("create answered {} {}", r.status, r.body))?;
        r.body["operation_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no operation_id in {}", r.body))
    }

    async fn wait_phase(&self, id: &str, phase: &str) -> Result<Value, String> {
        api::wait_for(&self.ctx.api, id, self.ctx.patience, &format!("phase {phase}"), |v| {
            v["phase"] == phase
        })
        .await
    }

    async fn wait_delivered(&self, id: &str) -> Result<Value, String> {
        let v = api::wait_for(&self.ctx.api, id, self.ctx.patience, "delivered", |v| {
            v["delivery_state"] == "delivered"
        })
        .await?;
        let objects = v["delivered_objects"].as_array().cloned().unwrap_or_default();
        check(!objects.is_empty(), "delivered without objects")?;
        check(
            objects.iter().all(|o| o["url"].is_string() && o["sha256"].is_string()),
            "objects need a link and a sha256",
        )?;
        Ok(v)
    }

    // ------------------------------------------------------------ scenarios

    pub(crate) async fn concurrent_duplicates(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let body = self.body(None);
        let replies = futures::future::join_all((0..20).map(|_| api::create(&self.ctx.api, &body))).await;
        let replies: Vec<_> = replies.into_iter().collect::<Result<_, _>>()?;
        let created = replies.iter().filter(|r| r.status == 202).count();
        let replayed = replies.iter().filter(|r| r.status == 200 && api::replayed(r)).count();
        check(
            (created, replayed) == (1, 19),
            format!("{created} created and {replayed} replayed, expected 1 and 19"),
        )?;
        let ids: std::collections::HashSet<String> = replies
            .iter()
            .filter_map(|r| r.body["operation_id"].as_str().map(str::to_owned))
            .collect();
        check(ids.len() == 1, format!("{} different operation ids", ids.len()))?;
        let id = ids.into_iter().next().unwrap_or_default();
        self.wait_phase(&id, "accepted").await?;
        self.expect_posts(1).await
    }

    pub(crate) async fn retry_after_acceptance(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        self.wait_phase(&id, "accepted").await?;
        let again = api::create(&self.ctx.api, &self.body(None)).await?;
        check(
            again.status == 200 && api::replayed(&again),
            format!("retry answered {}", again.status),
        )?;
        check(
            again.body["operation_id"] == id.as_str(),
            "retry returned another operation",
        )?;
        check(
            again.body["remote_job_id"] == self.job_id.as_str(),
            "retry does not show the saved job id",
        )?;
        self.expect_posts(1).await
    }

    pub(crate) async fn changed_spec_conflicts(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let before = api::view(&self.ctx.api, &id).await?;
        let mut changed = self.body(None);
        changed["specification"]["prompt"] = json!(format!("a lighthouse at dawn {}", self.marker));
        let r = api::create(&self.ctx.api, &changed).await?;
        check(r.status == 409, format!("a changed spec answered {}", r.status))?;
        check(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("application/problem+json")),
            "409 must be problem+json",
        )?;
        let after = api::view(&self.ctx.api, &id).await?;
        check(
            after["specification"] == before["specification"],
            "the original specification changed",
        )?;
        check(
            after["specification_hash"] == before["specification_hash"],
            "the original fingerprint changed",
        )
    }

    pub(crate) async fn reordered_keys(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let reordered = format!(
            r#"{{"specification":{{"parameters":{{"camera":{{"speed":0.50,"move":"dolly"}},"seed":42.0}},"aspect_ratio":"16:9","duration":5.0,"prompt":"a lighthouse at dusk {}","model":"genace-video-2"}},"media_type":"video","operation_key":"{}"}}"#,
            self.marker, self.key
        );
        let r = api::create_raw(&self.ctx.api, &reordered).await?;
        check(
            r.status == 200,
            format!("reordered JSON answered {} {}", r.status, r.body),
        )?;
        check(
            r.body["operation_id"] == id.as_str(),
            "reordered JSON made another operation",
        )
    }

    pub(crate) async fn lost_202(&self) -> Outcome {
        self.on_post(self.accepted("queued").set_delay(self.ctx.lost_delay))
            .await;
        let id = self.create_new(None).await?;
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "uncertain without a visible case")?;
        // Redeliveries and sweeps must not POST again.
        tokio::time::sleep(Duration::from_secs(8)).await;
        self.expect_posts(1).await?;
        let v = api::view(&self.ctx.api, &id).await?;
        check(
            v["phase"] == "uncertain",
            format!("left uncertain by itself: {}", v["phase"]),
        )
    }

    pub(crate) async fn failed_with_job(&self) -> Outcome {
        self.on_post(ResponseTemplate::new(502).set_body_json(json!({
            "error": {"code": "provider_failed", "message": "provider error", "job_id": self.job_id}
        })))
        .await;
        let id = self.create_new(None).await?;
        let v = self.wait_phase(&id, "submit_failed").await?;
        check(
            v["remote_job_id"] == self.job_id.as_str(),
            "the failed job id was not saved",
        )?;
        self.expect_posts(1).await
    }

    pub(crate) async fn connection_reset(&self) -> Outcome {
        // The front drops the connection: Genace received the POST, nobody got an answer.
        let marker_body = {
            let mut b = self.body(None);
            b["specification"]["prompt"] = json!(format!("a lighthouse at dusk {} {RESET_MARKER}", self.marker));
            b
        };
        let r = api::create(&self.ctx.api, &marker_body).await?;
        check(r.status == 202, format!("create answered {}", r.status))?;
        let id = r.body["operation_id"].as_str().unwrap_or_default().to_owned();
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "uncertain without a visible case")?;
        let resets = self.ctx.genace.resets();
        check(
            resets == 1,
            format!("{resets} POST attempts reached the dropped connection, expected exactly 1"),
        )
    }

    pub(crate) async fn crash_after_202(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let id = self.create_new(Some("dispatch.after_response")).await?;
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "no visible reconciliation case")?;
        self.expect_posts(1).await
    }

    pub(crate) async fn crash_after_commit(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(Some("dispatch.after_commit")).await?;
        let v = self.wait_delivered(&id).await?;
        check(v["remote_job_id"] == self.job_id.as_str(), "resumed another job")?;
        self.expect_posts(1).await?;
        match &self.ctx.traces {
            Some(file) => redelivered_in_one_trace(file, &id, v["trace_id"].as_str().unwrap_or_default()).await,
            None => Ok(()),
        }
    }

    pub(crate) async fn running_at_202(&self) -> Outcome {
        self.on_post(self.accepted("running")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(None).await?;
        self.wait_delivered(&id).await?;
        self.expect_posts(1).await
    }

    pub(crate) async fn failed_job_read(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(
            None,
            ResponseTemplate::new(200).set_body_json(json!({
                "id": self.job_id, "state": "failed", "outputs": null,
                "error": {"code": "generation_failed", "message": "could not render"}
            })),
        )
        .await;
        let id = self.create_new(None).await?;
        let v = self.wait_phase(&id, "render_failed").await?;
        check(
            v["delivery_state"] == "not_collected",
            "a failed render must deliver nothing",
        )?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.expect_posts(1).await
    }

    pub(crate) async fn upload_fails_once(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(Some("deliver.upload_fails")).await?;
        self.wait_delivered(&id).await?;
        self.expect_posts(1).await
    }

    pub(crate) async fn tenant_isolation(&self) -> Outcome {
        let Some(other) = &self.ctx.api_other_tenant else {
            return Err("needs a second tenant's token (--token-b)".into());
        };
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let peek = match api::answer(other.operation(&id).await)? {
            Err(p) if p.status == 404 => p,
            Err(p) => return Err(format!("another tenant read the operation: {}", p.status)),
            Ok(_) => return Err("another tenant read the operation: 200".into()),
        };
        let unknown = api::answer(other.operation("op_0123456789abcdef0123456789abcdef").await)?
            .err()
            .map(|p| p.body)
            .unwrap_or_default();
        check(
            peek.body["detail"] == unknown["detail"],
            "another tenant's operation must look unknown",
        )?;
        let theirs = api::create(other, &self.body(None)).await?;
        check(
            theirs.status == 202,
            format!("the same key for another tenant answered {}", theirs.status),
        )?;
        check(theirs.body["operation_id"] != id.as_str(), "tenants share an operation")
    }

    pub(crate) async fn null_outputs(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(Some((self.snapshot("running", Value::Null), 2)), done)
            .await;
        let id = self.create_new(None).await?;
        self.wait_delivered(&id).await?;
        let reads = self.ctx.genace.gets_of(&self.job_id).await;
        check(
            reads >= 3,
            format!("expected polling through null outputs, saw {reads} status reads"),
        )?;
        self.expect_posts(1).await
    }
}

/// The crashed dispatch and the redelivered one that resumed it are in the
/// operation's one trace, the crash first, with the rest of the stages.
async fn redelivered_in_one_trace(file: &std::path::Path, id: &str, trace: &str) -> Outcome {
    // Complete once every stage is in, with the crashed dispatch and the
    // redelivered one.
    let ready = |spans: &[crate::traces::Span]| {
        crate::traces::every_stage(spans) && spans.iter().filter(|s| s.name() == "dispatch").count() >= 2
    };
    let spans = crate::traces::wait_for(file, &[trace.to_owned()], ready, Duration::from_secs(30))
        .await
        .pop()
        .unwrap_or_default();
    crate::traces::one_trace(file, trace, id)?;
    crate::traces::one_delivered_operation(id, &spans)?;
    let mut dispatches: Vec<&crate::traces::Span> = spans.iter().filter(|s| s.name() == "dispatch").collect();
    dispatches.sort_by_key(|s| s.start());
    let outcomes: Vec<String> = dispatches
        .iter()
        .map(|s| s.attribute("outcome").unwrap_or_default())
        .collect();
    let crashed = outcomes.iter().position(|o| o.starts_with("error: injected crash"));
    check(
        crashed.is_some_and(|c| c + 1 < outcomes.len()),
        format!("the crashed dispatch, then the redelivered one, in one trace: {outcomes:?}"),
    )
}
