//! The acceptance scenarios of the Genace docs, driven through the public
//! API, asserted through its answers and through what Genace received.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::api::Api;
use crate::genace::{GenaceDouble, PromptMarker, RESET_MARKER};

pub struct Context {
    pub api: Api,
    /// A second tenant, for the isolation scenario.
    pub api_other_tenant: Option<Api>,
    pub genace: GenaceDouble,
    /// Longest wait for an asynchronous outcome.
    pub patience: Duration,
    /// How long a "lost" 202 is held back; longer than the deployment's Genace timeout.
    pub lost_delay: Duration,
    /// Distinguishes this run's keys and markers from earlier runs.
    pub run_id: String,
    /// Where the target's lifecycle events can be read: a JSON-lines file of
    /// events as the bus carries them. Without one, the event scenarios
    /// have nothing to observe and pass vacuously (the summary says so).
    pub events: Option<std::path::PathBuf>,
}

pub type Outcome = Result<(), String>;

/// Every scenario, by name, in the order of the docs.
pub const SCENARIOS: [&str; 20] = [
    "concurrent-duplicates",
    "retry-after-acceptance",
    "changed-spec-conflicts",
    "reordered-keys",
    "lost-202",
    "502-with-job-id",
    "connection-reset",
    "crash-after-202",
    "crash-after-commit",
    "running-at-202",
    "failed-job-read",
    "upload-fails-once",
    "tenant-isolation",
    "null-outputs-until-completion",
    "events-happy-path",
    "events-lost-202",
    "cancel-while-held",
    "deadline-while-held",
    "list-pages",
    "capacity-burst",
];

pub async fn run(name: &str, ctx: &Context) -> Outcome {
    let s = Scenario::new(name, ctx);
    match name {
        "concurrent-duplicates" => s.concurrent_duplicates().await,
        "retry-after-acceptance" => s.retry_after_acceptance().await,
        "changed-spec-conflicts" => s.changed_spec_conflicts().await,
        "reordered-keys" => s.reordered_keys().await,
        "lost-202" => s.lost_202().await,
        "502-with-job-id" => s.failed_with_job().await,
        "connection-reset" => s.connection_reset().await,
        "crash-after-202" => s.crash_after_202().await,
        "crash-after-commit" => s.crash_after_commit().await,
        "running-at-202" => s.running_at_202().await,
        "failed-job-read" => s.failed_job_read().await,
        "upload-fails-once" => s.upload_fails_once().await,
        "tenant-isolation" => s.tenant_isolation().await,
        "null-outputs-until-completion" => s.null_outputs().await,
        "events-happy-path" => s.events_happy_path().await,
        "events-lost-202" => s.events_lost_202().await,
        "cancel-while-held" => s.cancel_while_held().await,
        "deadline-while-held" => s.deadline_while_held().await,
        "list-pages" => s.list_pages().await,
        "capacity-burst" => crate::capacity::burst(ctx).await,
        other => Err(format!("unknown scenario {other:?}")),
    }
}

fn check(cond: bool, what: impl Into<String>) -> Outcome {
    if cond { Ok(()) } else { Err(what.into()) }
}

struct Scenario<'a> {
    ctx: &'a Context,
    marker: String,
    key: String,
    job_id: String,
}

impl<'a> Scenario<'a> {
    fn new(name: &str, ctx: &'a Context) -> Self {
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
        let r = self.ctx.api.create(&self.body(fault)).await?;
        check(
            r.status == StatusCode::ACCEPTED,
            format!("create answered {} {}", r.status, r.body),
        )?;
        r.body["operation_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no operation_id in {}", r.body))
    }

    async fn wait_phase(&self, id: &str, phase: &str) -> Result<Value, String> {
        self.ctx
            .api
            .wait_for(id, self.ctx.patience, &format!("phase {phase}"), |v| {
                v["phase"] == phase
            })
            .await
    }

    async fn wait_delivered(&self, id: &str) -> Result<Value, String> {
        let v = self
            .ctx
            .api
            .wait_for(id, self.ctx.patience, "delivered", |v| {
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

    async fn concurrent_duplicates(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let body = self.body(None);
        let replies = futures::future::join_all((0..20).map(|_| self.ctx.api.create(&body))).await;
        let replies: Vec<_> = replies.into_iter().collect::<Result<_, _>>()?;
        let created = replies.iter().filter(|r| r.status == StatusCode::ACCEPTED).count();
        let replayed = replies
            .iter()
            .filter(|r| r.status == StatusCode::OK && r.replayed)
            .count();
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

    async fn retry_after_acceptance(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        self.wait_phase(&id, "accepted").await?;
        let again = self.ctx.api.create(&self.body(None)).await?;
        check(
            again.status == StatusCode::OK && again.replayed,
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

    async fn changed_spec_conflicts(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let before = self.ctx.api.get(&id).await?.body;
        let mut changed = self.body(None);
        changed["specification"]["prompt"] = json!(format!("a lighthouse at dawn {}", self.marker));
        let r = self.ctx.api.create(&changed).await?;
        check(
            r.status == StatusCode::CONFLICT,
            format!("a changed spec answered {}", r.status),
        )?;
        check(
            r.content_type.starts_with("application/problem+json"),
            "409 must be problem+json",
        )?;
        let after = self.ctx.api.get(&id).await?.body;
        check(
            after["specification"] == before["specification"],
            "the original specification changed",
        )?;
        check(
            after["specification_hash"] == before["specification_hash"],
            "the original fingerprint changed",
        )
    }

    async fn reordered_keys(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let reordered = format!(
            r#"{{"specification":{{"parameters":{{"camera":{{"speed":0.50,"move":"dolly"}},"seed":42.0}},"aspect_ratio":"16:9","duration":5.0,"prompt":"a lighthouse at dusk {}","model":"genace-video-2"}},"media_type":"video","operation_key":"{}"}}"#,
            self.marker, self.key
        );
        let r = self.ctx.api.create_raw(&reordered).await?;
        check(
            r.status == StatusCode::OK,
            format!("reordered JSON answered {} {}", r.status, r.body),
        )?;
        check(
            r.body["operation_id"] == id.as_str(),
            "reordered JSON made another operation",
        )
    }

    async fn lost_202(&self) -> Outcome {
        self.on_post(self.accepted("queued").set_delay(self.ctx.lost_delay))
            .await;
        let id = self.create_new(None).await?;
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "uncertain without a visible case")?;
        // Redeliveries and sweeps must not POST again.
        tokio::time::sleep(Duration::from_secs(8)).await;
        self.expect_posts(1).await?;
        let v = self.ctx.api.get(&id).await?.body;
        check(
            v["phase"] == "uncertain",
            format!("left uncertain by itself: {}", v["phase"]),
        )
    }

    async fn failed_with_job(&self) -> Outcome {
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

    async fn connection_reset(&self) -> Outcome {
        // The front drops the connection: Genace received the POST, nobody got an answer.
        let marker_body = {
            let mut b = self.body(None);
            b["specification"]["prompt"] = json!(format!("a lighthouse at dusk {} {RESET_MARKER}", self.marker));
            b
        };
        let r = self.ctx.api.create(&marker_body).await?;
        check(
            r.status == StatusCode::ACCEPTED,
            format!("create answered {}", r.status),
        )?;
        let id = r.body["operation_id"].as_str().unwrap_or_default().to_owned();
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "uncertain without a visible case")?;
        let resets = self.ctx.genace.resets();
        check(
            resets == 1,
            format!("{resets} POST attempts reached the dropped connection, expected exactly 1"),
        )
    }

    async fn crash_after_202(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let id = self.create_new(Some("dispatch.after_response")).await?;
        let v = self.wait_phase(&id, "uncertain").await?;
        check(v["reconciliation_case"].is_object(), "no visible reconciliation case")?;
        self.expect_posts(1).await
    }

    async fn crash_after_commit(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(Some("dispatch.after_commit")).await?;
        let v = self.wait_delivered(&id).await?;
        check(v["remote_job_id"] == self.job_id.as_str(), "resumed another job")?;
        self.expect_posts(1).await
    }

    async fn running_at_202(&self) -> Outcome {
        self.on_post(self.accepted("running")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(None).await?;
        self.wait_delivered(&id).await?;
        self.expect_posts(1).await
    }

    async fn failed_job_read(&self) -> Outcome {
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

    async fn upload_fails_once(&self) -> Outcome {
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(Some("deliver.upload_fails")).await?;
        self.wait_delivered(&id).await?;
        self.expect_posts(1).await
    }

    async fn tenant_isolation(&self) -> Outcome {
        let Some(other) = &self.ctx.api_other_tenant else {
            return Err("needs a second tenant's token (--token-b)".into());
        };
        self.on_post(self.accepted("queued")).await;
        self.on_status(None, self.snapshot("running", Value::Null)).await;
        let id = self.create_new(None).await?;
        let peek = other.get(&id).await?;
        check(
            peek.status == StatusCode::NOT_FOUND,
            format!("another tenant read the operation: {}", peek.status),
        )?;
        let unknown = other.get("op_0123456789abcdef0123456789abcdef").await?;
        check(
            peek.body["detail"] == unknown.body["detail"],
            "another tenant's operation must look unknown",
        )?;
        let theirs = other.create(&self.body(None)).await?;
        check(
            theirs.status == StatusCode::ACCEPTED,
            format!("the same key for another tenant answered {}", theirs.status),
        )?;
        check(theirs.body["operation_id"] != id.as_str(), "tenants share an operation")
    }

    async fn null_outputs(&self) -> Outcome {
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
    /// The operation's events from the target's events file, deduplicated
    /// on the event id, once `done` holds for them (or the patience ends).
    async fn events_of(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Result<Vec<Value>, String> {
        let Some(file) = &self.ctx.events else {
            return Ok(Vec::new());
        };
        let deadline = std::time::Instant::now() + self.ctx.patience;
        loop {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let mut seen = std::collections::HashSet::new();
            let events: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e["detail"]["operation_id"] == id)
                // A wait for capacity or credits depends on what else the
                // deployment is doing (other scenarios, a limit learned from
                // another's 429s), not on the path a scenario checks.
                .filter(|e| e["detail"]["type"] != "operation.queued")
                .filter(|e| seen.insert(e["detail"]["id"].as_str().unwrap_or_default().to_owned()))
                .collect();
            if done(&events) || std::time::Instant::now() > deadline {
                return Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every event is a well-formed bus event about this operation, and
    /// versions only grow.
    fn check_envelopes(&self, events: &[Value]) -> Outcome {
        let mut last = 0;
        for e in events {
            let d = &e["detail"];
            check(e["source"] == "genace.operations", format!("source of {e}"))?;
            check(
                e["detail-type"] == d["type"],
                format!("detail-type is not the type: {e}"),
            )?;
            check(d["operation_key"] == self.key.as_str(), format!("operation key of {d}"))?;
            for field in ["tenant_id", "phase", "delivery_state", "time"] {
                check(d[field].is_string(), format!("{field} missing in {d}"))?;
            }
            let v = d["version"].as_u64().unwrap_or(0);
            check(v >= last && v > 0, format!("version went from {last} to {v}"))?;
            // `<operation_id>:<incarnation>:<version>:<type>`.
            let id: Vec<&str> = d["id"].as_str().unwrap_or("").split(':').collect();
            check(
                id.len() == 4
                    && Some(id[0]) == d["operation_id"].as_str()
                    && id[1].parse::<i64>().is_ok()
                    && id[2] == v.to_string()
                    && Some(id[3]) == d["type"].as_str(),
                format!("event id of {d}"),
            )?;
            last = v;
        }
        Ok(())
    }

    fn types(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(|e| e["detail"]["type"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    async fn events_happy_path(&self) -> Outcome {
        if self.ctx.events.is_none() {
            return Ok(());
        }
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(None).await?;
        let view = self.wait_delivered(&id).await?;
        let events = self
            .events_of(&id, |e| Self::types(e).iter().any(|t| t == "operation.delivered"))
            .await?;
        let types = Self::types(&events);
        check(
            types == ["operation.accepted", "operation.rendered", "operation.delivered"],
            format!("events {types:?}, expected accepted, rendered, delivered"),
        )?;
        self.check_envelopes(&events)?;
        check(
            events[0]["detail"]["data"]["remote_job_id"] == self.job_id.as_str(),
            "accepted names another job",
        )?;
        let delivered = &events[2]["detail"];
        check(delivered["delivery_state"] == "delivered", "delivered event's state")?;
        let objects = delivered["data"]["objects"].as_array().cloned().unwrap_or_default();
        let shown = view["delivered_objects"].as_array().cloned().unwrap_or_default();
        check(
            objects.len() == shown.len()
                && objects
                    .iter()
                    .zip(&shown)
                    .all(|(o, s)| o["sha256"] == s["sha256"] && o["key"] == s["key"]),
            format!("delivered event objects {objects:?} differ from the view's"),
        )?;
        self.expect_posts(1).await
    }

    /// Genace refuses the account (401): the operation is held for a person,
    /// with no job. Creates it and waits until the hold shows.
    async fn create_held(&self, body: &Value) -> Result<String, String> {
        self.on_post(
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"code": "unauthorized", "message": "invalid API key"}})),
        )
        .await;
        let r = self.ctx.api.create(body).await?;
        check(
            r.status == StatusCode::ACCEPTED,
            format!("create answered {} {}", r.status, r.body),
        )?;
        let id = r.body["operation_id"].as_str().unwrap_or_default().to_owned();
        self.ctx
            .api
            .wait_for(&id, self.ctx.patience, "held for the account", |v| {
                v["reconciliation_case"]["reason"] == "account_problem"
            })
            .await?;
        Ok(id)
    }

    /// A cancel while the operation is held wins: it ends `cancelled`, a
    /// repeat answers the same, and Genace sees no POST after it.
    async fn cancel_while_held(&self) -> Outcome {
        let id = self.create_held(&self.body(None)).await?;
        let posts = self.posts().await;
        for attempt in ["cancel", "repeated cancel"] {
            let r = self.ctx.api.cancel(&id).await?;
            check(
                r.status == StatusCode::OK && r.body["phase"] == "cancelled",
                format!("{attempt} answered {} {}", r.status, r.body),
            )?;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let view = self.ctx.api.get(&id).await?.body;
        check(
            view["phase"] == "cancelled" && view["reconciliation_case"].is_null(),
            format!(
                "after the cancel: phase {} case {}",
                view["phase"], view["reconciliation_case"]
            ),
        )?;
        self.expect_posts(posts).await
    }

    /// A dispatch deadline that passes while the operation is held cancels
    /// it with reason `deadline`, and Genace sees no POST after the hold's.
    async fn deadline_while_held(&self) -> Outcome {
        let mut body = self.body(None);
        body["dispatch_within_seconds"] = json!(10);
        let id = self.create_held(&body).await?;
        let posts = self.posts().await;
        let view = self
            .ctx
            .api
            .wait_for(&id, self.ctx.patience, "cancelled at its deadline", |v| {
                v["phase"] == "cancelled"
            })
            .await?;
        check(
            view["cancellation"]["reason"] == "deadline",
            format!("cancelled for {}", view["cancellation"]),
        )?;
        self.expect_posts(posts).await
    }

    /// Records `n` intents under this scenario's key prefix (`<key>/<i>`),
    /// through `api`; returns their ids, oldest first.
    async fn create_family(&self, api: &crate::api::Api, n: usize) -> Result<Vec<String>, String> {
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let mut body = self.body(None);
            body["operation_key"] = json!(format!("{}/{i:02}", self.key));
            let r = api.create(&body).await?;
            check(
                r.status == StatusCode::ACCEPTED,
                format!("create {i} answered {} {}", r.status, r.body),
            )?;
            ids.push(r.body["operation_id"].as_str().unwrap_or_default().to_owned());
            // Creation times apart, so newest first is one order.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(ids)
    }

    /// Every page of `api`'s listing of this scenario's keys, 10 at a time:
    /// the ids in order and the first page's cursor.
    async fn list_family(&self, api: &crate::api::Api) -> Result<(Vec<String>, Option<String>), String> {
        let prefix = format!("{}/", self.key);
        let (mut ids, mut cursor, mut first_cursor) = (Vec::new(), None::<String>, None);
        for page in 0..20 {
            let mut query = vec![("limit", "10"), ("key_prefix", prefix.as_str())];
            if let Some(c) = &cursor {
                query.push(("cursor", c.as_str()));
            }
            let r = api.list(&query).await?;
            check(
                r.status == StatusCode::OK,
                format!("page {page} answered {} {}", r.status, r.body),
            )?;
            let listed = r.body["operations"].as_array().cloned().unwrap_or_default();
            check(
                listed.len() <= 10,
                format!("page {page} held {} operations", listed.len()),
            )?;
            ids.extend(
                listed
                    .iter()
                    .map(|v| v["operation_id"].as_str().unwrap_or_default().to_owned()),
            );
            cursor = r.body["next_cursor"].as_str().map(str::to_owned);
            if page == 0 {
                first_cursor.clone_from(&cursor);
            }
            if cursor.is_none() {
                return Ok((ids, first_cursor));
            }
        }
        Err("the listing did not end within 20 pages".into())
    }

    /// A listing pages through 25 operations of one tenant, newest first,
    /// and none of another tenant's with the same keys; a cursor is not
    /// accepted from another tenant. Genace refuses the jobs, so nothing
    /// of this scenario stays in flight.
    async fn list_pages(&self) -> Outcome {
        let Some(other) = &self.ctx.api_other_tenant else {
            return Err("needs a second tenant's token (--token-b)".into());
        };
        self.on_post(
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"code": "invalid_request", "message": "refused for a listing test"}})),
        )
        .await;
        let mut mine = self.create_family(&self.ctx.api, 25).await?;
        let theirs = self.create_family(other, 3).await?;
        mine.reverse();
        // The list indexes are eventually consistent: a deployment may show
        // the newest create a moment late.
        let mut listing = self.list_family(&self.ctx.api).await?;
        for _ in 0..10 {
            if listing.0 == mine {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            listing = self.list_family(&self.ctx.api).await?;
        }
        let (listed, cursor) = listing;
        check(
            listed == mine,
            format!(
                "listed {} operations, expected the 25 newest first: {listed:?}",
                listed.len()
            ),
        )?;
        let mut their_list = self.list_family(other).await?.0;
        for _ in 0..10 {
            if their_list.len() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            their_list = self.list_family(other).await?.0;
        }
        check(
            their_list.len() == 3 && their_list.iter().all(|id| theirs.contains(id)),
            format!("the other tenant listed {their_list:?}"),
        )?;
        let cursor = cursor.ok_or("25 operations fit one page of 10")?;
        let foreign = other.list(&[("limit", "10"), ("cursor", cursor.as_str())]).await?;
        check(
            foreign.status == StatusCode::BAD_REQUEST && foreign.body["field"] == "cursor",
            format!("another tenant's cursor answered {} {}", foreign.status, foreign.body),
        )
    }

    async fn events_lost_202(&self) -> Outcome {
        if self.ctx.events.is_none() {
            return Ok(());
        }
        self.on_post(self.accepted("queued").set_delay(self.ctx.lost_delay))
            .await;
        let id = self.create_new(None).await?;
        self.wait_phase(&id, "uncertain").await?;
        let events = self.events_of(&id, |e| !e.is_empty()).await?;
        // Redeliveries and sweeps must announce nothing more.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let events_later = self.events_of(&id, |_| true).await?;
        check(
            events.len() == events_later.len(),
            format!("more events followed: {:?}", Self::types(&events_later)),
        )?;
        let types = Self::types(&events_later);
        check(
            types == ["operation.case_opened"],
            format!("events {types:?}, expected one case_opened"),
        )?;
        self.check_envelopes(&events_later)?;
        let d = &events_later[0]["detail"];
        check(
            d["data"]["reason"] == "unknown_submit_outcome" && d["phase"] == "uncertain",
            format!("case event {d}"),
        )?;
        self.expect_posts(1).await
    }
}
