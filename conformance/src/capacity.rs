//! `capacity-burst`: twelve intents at once against a Genace account that
//! renders two jobs at a time and answers 429 past that. Every operation
//! must be delivered from exactly one job, with no reconciliation case: a
//! full account is something to wait for, not a failure.
//!
//! The stand-in's account counts only this scenario's jobs, so other
//! scenarios running at the same time neither fill it nor are refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::api;
use crate::context::{Context, Outcome};
use crate::genace::PromptMarker;

/// Jobs the stand-in renders at once.
const ACCOUNT_JOBS: usize = 2;
/// Intents in the burst.
const BURST: usize = 12;
/// How long the stand-in renders each job.
const RENDER: Duration = Duration::from_secs(3);

/// The stand-in's account: every job it created, by id, with when it
/// started and which operation asked for it.
#[derive(Default)]
struct Account {
    jobs: BTreeMap<String, (Instant, String)>,
    refused: usize,
    peak: usize,
}

impl Account {
    fn rendering(&self) -> usize {
        self.jobs.values().filter(|(at, _)| at.elapsed() < RENDER).count()
    }
}

struct Jobs {
    account: Arc<Mutex<Account>>,
    prefix: String,
    output_url: String,
}

impl Respond for Jobs {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut account = self.account.lock().unwrap_or_else(|p| p.into_inner());
        if request.method.as_str() == "POST" {
            if account.rendering() >= ACCOUNT_JOBS {
                account.refused += 1;
                return ResponseTemplate::new(429)
                    .insert_header("Retry-After", "1")
                    .set_body_json(json!({"error": {"code": "rate_limited", "message": "too many jobs in flight"}}));
            }
            let reference = request
                .body_json::<Value>()
                .ok()
                .and_then(|b| b["client_reference"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let id = format!("{}{}", self.prefix, account.jobs.len());
            account.jobs.insert(id.clone(), (Instant::now(), reference));
            account.peak = account.peak.max(account.rendering());
            return ResponseTemplate::new(202).set_body_json(json!({
                "job_id": id, "state": "running", "model": "genace-video-2", "held_credits": 10
            }));
        }
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        match account.jobs.get(id) {
            Some((at, _)) if at.elapsed() < RENDER => {
                ResponseTemplate::new(200).set_body_json(json!({"id": id, "state": "running", "outputs": null}))
            }
            Some(_) => ResponseTemplate::new(200).set_body_json(json!({
                "id": id, "state": "completed",
                "outputs": [{"url": self.output_url, "content_type": "video/mp4"}]
            })),
            None => ResponseTemplate::new(404).set_body_json(json!({"error": {"code": "not_found"}})),
        }
    }
}

/// Mounts the stand-in's account for this scenario's marker; returns it.
async fn stand_in(ctx: &Context, marker: &str) -> Arc<Mutex<Account>> {
    let prefix = format!("conf-{}-burst-", ctx.run_id);
    let file = format!("/files/{prefix}out.mp4");
    let bytes: Vec<u8> = (0..16 * 1024).map(|i| (i % 251) as u8).collect();
    Mock::given(method("GET"))
        .and(path(file.clone()))
        .respond_with(ResponseTemplate::new(200).set_body_raw(bytes, "video/mp4"))
        .mount(&ctx.genace.mock)
        .await;
    let account = Arc::new(Mutex::new(Account::default()));
    let jobs = || Jobs {
        account: account.clone(),
        prefix: prefix.clone(),
        output_url: format!("{}{file}", ctx.genace.base_url()),
    };
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .and(PromptMarker(marker.to_owned()))
        .respond_with(jobs())
        .mount(&ctx.genace.mock)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(format!("^/v1/jobs/{prefix}[0-9]+$")))
        .respond_with(jobs())
        .mount(&ctx.genace.mock)
        .await;
    account
}

pub async fn burst(ctx: &Context) -> Outcome {
    let marker = format!("[conformance:capacity-burst:{}]", ctx.run_id);
    let account = stand_in(ctx, &marker).await;
    let creates = (0..BURST).map(|i| {
        let body = json!({
            "operation_key": format!("conformance/{}/capacity-burst/{i}", ctx.run_id),
            "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": format!("harbour, take {i} {marker}")}
        });
        async move { api::create(&ctx.api, &body).await }
    });
    let mut ids = Vec::new();
    let mut traces = Vec::new();
    for reply in futures::future::join_all(creates).await {
        let reply = reply?;
        let id = reply.body["operation_id"].as_str().map(str::to_owned);
        ids.push(id.ok_or_else(|| format!("create answered {} {}", reply.status, reply.body))?);
    }
    // Twelve jobs two at a time take six renders; give the slower deployments room.
    let patience = ctx.patience.max(RENDER * (BURST / ACCOUNT_JOBS) as u32 * 4);
    for id in &ids {
        let v = api::wait_for(&ctx.api, id, patience, "delivered", |v| {
            v["delivery_state"] == "delivered" || !v["reconciliation_case"].is_null()
        })
        .await?;
        if !v["reconciliation_case"].is_null() {
            return Err(format!("{id}: a case opened: {}", v["reconciliation_case"]));
        }
        traces.push(v["trace_id"].as_str().unwrap_or_default().to_owned());
    }
    let refused = one_job_each(&account, &ids)?;
    match &ctx.traces {
        Some(file) => traced(file, &ids, &traces, refused).await,
        None => Ok(()),
    }
}

/// Each operation got exactly one job, and the account never rendered
/// more than it can; how many POSTs it refused.
fn one_job_each(account: &Mutex<Account>, ids: &[String]) -> Result<usize, String> {
    let account = account.lock().unwrap_or_else(|p| p.into_inner());
    let mut per_operation: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reference) in account.jobs.values() {
        *per_operation.entry(reference.as_str()).or_default() += 1;
    }
    for id in ids {
        let jobs = per_operation.get(id.as_str()).copied().unwrap_or(0);
        if jobs != 1 {
            return Err(format!("{id}: {jobs} jobs created at Genace, expected exactly 1"));
        }
    }
    if account.peak > ACCOUNT_JOBS {
        return Err(format!("the stand-in rendered {} jobs at once", account.peak));
    }
    println!(
        "capacity-burst: {BURST} delivered from {} jobs; {} POSTs answered 429 while the account was full",
        account.jobs.len(),
        account.refused
    );
    Ok(account.refused)
}

/// The burst's traces, as the receiver kept them: one per operation, its
/// stages in causal order and its one 202; the account refused at least
/// one POST, and every refusal is a 429 span in its operation's trace; and
/// at least one operation's trace holds both a 429 and a wait for a slot.
async fn traced(file: &std::path::Path, ids: &[String], traces: &[String], refused: usize) -> Outcome {
    let spans = crate::traces::wait_for(file, traces, crate::traces::every_stage, Duration::from_secs(30)).await;
    let (mut waits, mut rate_limited, mut both) = (0, 0, 0);
    for ((id, trace), spans) in ids.iter().zip(traces).zip(&spans) {
        crate::traces::one_trace(file, trace, id)?;
        crate::traces::one_delivered_operation(id, spans)?;
        let waited = spans.iter().filter(|s| s.name() == "wait.capacity").count();
        let refusals = crate::traces::posts(spans).iter().filter(|c| *c == "429").count();
        waits += waited;
        rate_limited += refusals;
        both += usize::from(waited > 0 && refusals > 0);
    }
    if refused == 0 {
        return Err("the account refused no POST: the burst never met a 429".into());
    }
    if rate_limited != refused {
        return Err(format!(
            "the traces hold {rate_limited} POSTs answered 429; the account refused {refused}"
        ));
    }
    if both == 0 {
        return Err("no operation's trace holds both a 429 and a wait for a slot (wait.capacity)".into());
    }
    println!(
        "capacity-burst: {} traces, {waits} waits for a slot, {rate_limited} 429s in them, {both} with both",
        ids.len()
    );
    Ok(())
}
