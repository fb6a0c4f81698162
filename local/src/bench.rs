//! `genace-bench`: what one operation costs and how fast the stack is, on the
//! local stack (moto for DynamoDB, SQS and S3; the in-process runner hosting
//! the real handlers; the Genace simulator in-process).
//!
//! - `pipeline` (default): N intents through to `delivered`; every AWS request
//!   by service and operation (an SDK interceptor on every client), handler
//!   invocations per stage with their durations, intake latency in-process
//!   and over HTTP, and dollars per million operations at the list prices of
//!   `docs/prices.json`.
//! - `delivery`: one large output served by a local HTTP server, delivered
//!   into S3 through the real deliver stage; throughput and peak RSS, beside a
//!   raw download of the same URL and a raw multipart upload of as many bytes.
//! - `load`: intents at a fixed offered rate with a share of duplicates;
//!   checks one Genace POST per distinct intent and empty DLQs.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use genace_aws::DynamoStore;
use genace_aws::clients as aws;
use genace_aws::provision;
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::machine;
use genace_core::record::DeliveryState;
use genace_core::record::OperationRecord;
use genace_http::GenaceConfig;
use genace_stages::config::Config;
use genace_stages::config::ResourceNames;
use genace_stages::deliver::DeliverResult;
use genace_stages::table::prelude::*;
use serde_json::{Value, json};

use crate::{devauth, meter, runner, serve, standin};

const TENANT: &str = "bench-tenant";

/// Parsed command line.
#[derive(Debug, Clone)]
pub struct Args {
    pub mode: String,
    pub intents: usize,
    pub rate: f64,
    pub duplicate_percent: u32,
    pub bytes: u64,
    pub output_bytes: usize,
    pub prices: String,
}

impl Args {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut a = Args {
            mode: "pipeline".into(),
            intents: 200,
            rate: 50.0,
            duplicate_percent: 30,
            bytes: 1 << 30,
            output_bytes: 256 * 1024,
            prices: "docs/prices.json".into(),
        };
        let mut it = args.iter();
        let mut intents_set = false;
        while let Some(arg) = it.next() {
            let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "pipeline" | "delivery" | "load" => a.mode = arg.clone(),
                "--intents" => {
                    a.intents = value("--intents")?.parse().map_err(|_| "--intents must be a number")?;
                    intents_set = true;
                }
                "--rate" => a.rate = value("--rate")?.parse().map_err(|_| "--rate must be a number")?,
                "--duplicates" => {
                    a.duplicate_percent = value("--duplicates")?
                        .trim_end_matches('%')
                        .parse()
                        .map_err(|_| "--duplicates must be a percentage")?
                }
                "--bytes" => a.bytes = parse_bytes(&value("--bytes")?)?,
                "--output-bytes" => a.output_bytes = parse_bytes(&value("--output-bytes")?)? as usize,
                "--prices" => a.prices = value("--prices")?,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if a.mode == "load" && !intents_set {
            a.intents = 2000;
        }
        Ok(a)
    }
}

/// `1GiB`, `64MiB`, `300KiB`, or plain bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().map_err(|_| format!("bad size {s:?}"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}")),
    };
    Ok(n * scale)
}

pub async fn run(args: Args) -> Result<(), String> {
    std::env::var("AWS_ENDPOINT_URL").map_err(|_| "AWS_ENDPOINT_URL must point at local AWS (use scripts/bench.sh)")?;
    match args.mode.as_str() {
        "pipeline" => pipeline(&args).await,
        "delivery" => delivery(&args).await,
        "load" => load(&args).await,
        other => Err(format!("unknown mode {other}")),
    }
}

// ------------------------------------------------------------------ helpers

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn summary(mut v: Vec<Duration>) -> (usize, Duration, Duration) {
    v.sort();
    (v.len(), percentile(&v, 50.0), percentile(&v, 99.0))
}

/// A stack on fresh local resources, with the meter on for its clients.
struct Stack {
    sdk: aws_config::SdkConfig,
    names: ResourceNames,
    config: Config,
    /// Reads for the benchmark itself, built before the meter: not counted.
    observer: DynamoStore,
    observer_sqs: aws_sdk_sqs::Client,
    meter: Arc<meter::Meter>,
}

impl Stack {
    async fn fresh() -> Result<Self, String> {
        let sdk = aws::load().await;
        let prefix = format!("b{}-", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let names = ResourceNames::with_prefix(&prefix);
        let queues = provision::ensure_all(&sdk, &names).await.map_err(|e| e.to_string())?;
        let mut config = Config::for_resources(&names, queues);
        config.url_policy.allow_http = true;
        config.url_policy.allow_private = true;
        let observer = DynamoStore::new(aws::dynamodb(&sdk), &names.table);
        let observer_sqs = aws::sqs(&sdk);
        let meter = meter::enable();
        Ok(Stack {
            sdk,
            names,
            config,
            observer,
            observer_sqs,
            meter,
        })
    }

    async fn start_runner(
        &self,
        genace_base: &str,
        concurrency: usize,
    ) -> Result<(runner::Running, SocketAddr), String> {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        let settings = runner::RunnerSettings {
            intake_addr: addr,
            batch_size: 1,
            visibility_seconds: 30,
            concurrency,
            sweep_every: Duration::from_secs(60),
            phase_log: false,
            events_file: None,
        };
        let gconf = GenaceConfig::new(genace_base, "bench-key");
        let running = runner::start(&self.sdk, self.config.clone(), gconf, settings).await?;
        Ok((running, addr))
    }

    /// Waits until every id is delivered (or finished otherwise); returns how many were delivered.
    async fn wait_delivered(&self, ids: &[OperationId], limit: Duration) -> Result<usize, String> {
        let started = Instant::now();
        let mut pending: Vec<OperationId> = ids.to_vec();
        let mut delivered = 0;
        while !pending.is_empty() {
            if started.elapsed() > limit {
                return Err(format!("{} operations not delivered after {limit:?}", pending.len()));
            }
            let mut still = Vec::new();
            for id in pending {
                match self
                    .observer
                    .get(&id, chrono::Utc::now())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Some(r) if r.delivery_state == DeliveryState::Delivered => delivered += 1,
                    Some(r) if r.expires_at_s.is_some() || r.case.is_some() => {
                        eprintln!(
                            "bench: {id} ended {} / {:?} (case {:?})",
                            r.phase.as_str(),
                            r.delivery_state,
                            r.case.map(|c| c.reason)
                        );
                    }
                    _ => still.push(id),
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Ok(delivered)
    }

    /// Messages left on the dead-letter queues.
    async fn dead_letters(&self) -> Result<u64, String> {
        let mut total = 0;
        for q in self.names.queues() {
            let url = format!(
                "{}/{}/{q}-dlq",
                std::env::var("AWS_ENDPOINT_URL")
                    .unwrap_or_default()
                    .trim_end_matches('/'),
                genace_stages::config::LOCAL_ACCOUNT
            );
            let attrs = self
                .observer_sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            total += attrs
                .attributes
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                        .cloned()
                })
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Ok(total)
    }

    /// Average stored item size in bytes (DynamoDB's rule: names plus values), for capacity estimates.
    async fn average_item_bytes(&self) -> Result<f64, String> {
        let mut start = None;
        let (mut total, mut count) = (0usize, 0usize);
        let client = aws::dynamodb(&self.sdk);
        loop {
            let page = client
                .scan()
                .table_name(&self.names.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
            for item in page.items.unwrap_or_default() {
                total += item.iter().map(|(k, v)| k.len() + attribute_bytes(v)).sum::<usize>();
                count += 1;
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        Ok(if count == 0 { 0.0 } else { total as f64 / count as f64 })
    }
}

fn attribute_bytes(v: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    match v {
        A::S(s) => s.len(),
        A::N(n) => n.len().div_ceil(2) + 1,
        A::Bool(_) | A::Null(_) => 1,
        A::M(m) => 3 + m.iter().map(|(k, v)| k.len() + attribute_bytes(v) + 1).sum::<usize>(),
        A::L(l) => 3 + l.iter().map(|v| attribute_bytes(v) + 1).sum::<usize>(),
        A::B(b) => b.as_ref().len(),
        _ => 8,
    }
}

fn intent_body(key: &str, prompt: &str) -> String {
    json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": prompt, "duration": 5}})
    .to_string()
}

fn operation_id(key: &str) -> OperationId {
    let intent = Intent::parse(&serde_json::from_str(&intent_body(key, "x")).expect("json"), None).expect("intent");
    OperationId::derive(&TenantId::parse(TENANT).expect("tenant"), &intent.operation_key)
}

/// POSTs an intent over HTTP; returns its status and latency.
async fn post_http(client: &reqwest::Client, api: &str, token: &str, key: &str) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let resp = client
        .post(format!("{api}/v1/operations"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(intent_body(key, &format!("a lighthouse, take {key}")))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let _ = resp.bytes().await;
    Ok((status, started.elapsed()))
}

/// Starts the simulator with quick jobs: `running` at the first poll (5 s),
/// `completed` at the second.
async fn start_standin(output_bytes: usize) -> Result<(Arc<standin::StandIn>, String), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let settings = standin::Settings {
        queued: Duration::from_secs(2),
        running: Duration::from_secs(4),
        output_bytes,
        pct_502: 0,
        pct_lost: 0,
        pct_failed: 0,
        lost_delay: Duration::from_secs(1),
        base: base.clone(),
        verbose: false,
    };
    let (sim, _task) = standin::serve(listener, settings);
    Ok((sim, base))
}

// ----------------------------------------------------------------- pricing

/// List prices, from `docs/prices.json`.
#[derive(Debug, Clone)]
struct Prices {
    source: String,
    api_per_million: f64,
    lambda_gb_second: f64,
    lambda_per_million: f64,
    wru_per_million: f64,
    rru_per_million: f64,
    sqs_per_million: f64,
    s3_write_per_thousand: f64,
    s3_read_per_thousand: f64,
    memory_mb: BTreeMap<String, f64>,
}

fn load_prices(path: &str) -> Result<Prices, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let num = |k: &str| v[k]["usd"].as_f64().ok_or(format!("{path}: {k}.usd is missing"));
    // Memory sizes come from the template's prod stage, so the cost follows it.
    let template: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string("infra/template.yaml").map_err(|e| format!("reading infra/template.yaml: {e}"))?,
    )
    .map_err(|e| e.to_string())?;
    let sizes = &template["Mappings"]["StageSizes"]["prod"];
    let size = |k: &str| sizes[k].as_f64().ok_or(format!("template: StageSizes.prod.{k}"));
    let (intake, stage, deliver) = (size("IntakeMemory")?, size("StageMemory")?, size("DeliverMemory")?);
    let memory_mb = BTreeMap::from([
        ("intake".to_owned(), intake),
        ("dispatch".to_owned(), stage),
        ("poll".to_owned(), stage),
        ("deliver".to_owned(), deliver),
        ("recovery".to_owned(), stage),
        ("sweep".to_owned(), stage),
    ]);
    Ok(Prices {
        source: v["source"].as_str().unwrap_or(path).to_owned(),
        api_per_million: num("api_gateway_http_requests_per_million")?,
        lambda_gb_second: num("lambda_arm64_gb_second")?,
        lambda_per_million: num("lambda_requests_per_million")?,
        wru_per_million: num("dynamodb_write_request_units_per_million")?,
        rru_per_million: num("dynamodb_read_request_units_per_million")?,
        sqs_per_million: num("sqs_requests_per_million")?,
        s3_write_per_thousand: num("s3_write_class_requests_per_thousand")?,
        s3_read_per_thousand: num("s3_read_class_requests_per_thousand")?,
        memory_mb,
    })
}

const DDB_WRITES: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
];
const DDB_READS: [&str; 4] = ["GetItem", "Query", "Scan", "BatchGetItem"];
const S3_WRITES: [&str; 6] = [
    "PutObject",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "CopyObject",
    "ListObjectsV2",
];
const S3_READS: [&str; 2] = ["GetObject", "HeadObject"];

fn count_of(requests: &BTreeMap<(String, String), u64>, service: &str, ops: &[&str]) -> u64 {
    requests
        .iter()
        .filter(|((s, o), _)| s.eq_ignore_ascii_case(service) && ops.contains(&o.as_str()))
        .map(|(_, n)| *n)
        .sum()
}

// ---------------------------------------------------------------- pipeline

#[allow(
    clippy::too_many_lines,
    reason = "bench.rs is to be split into its own crate by workload (issue 23, item 1)"
)]
async fn pipeline(args: &Args) -> Result<(), String> {
    let prices = load_prices(&args.prices)?;
    let n = args.intents.max(1);
    let stack = Stack::fresh().await?;
    let (sim, base) = start_standin(args.output_bytes).await?;
    let (running, addr) = stack.start_runner(&base, 4).await?;
    let api = format!("http://{addr}");
    let token = devauth::issue("tenant_id", TENANT, 3600)?;
    let client = reqwest::Client::new();
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let keys: Vec<String> = (0..n).map(|i| format!("bench-{run_id}-{i}")).collect();

    let started = Instant::now();
    let mut http_new = Vec::new();
    let results: Vec<_> = futures::stream::iter(keys.iter())
        .map(|k| post_http(&client, &api, &token, k))
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        let (status, took) = r?;
        if status != 202 {
            return Err(format!("intake answered {status} to a new intent"));
        }
        http_new.push(took);
    }
    let ids: Vec<OperationId> = keys.iter().map(|k| operation_id(k)).collect();
    let delivered = stack.wait_delivered(&ids, Duration::from_secs(120 + n as u64)).await?;
    let pipeline_time = started.elapsed();
    let requests = stack.meter.requests();
    let invocations = stack.meter.invocations();

    let posts = sim.counters.posts.load(Ordering::SeqCst);
    let gets = sim.counters.status_gets.load(Ordering::SeqCst);

    // Over HTTP on the idle stack, one at a time: duplicates (their AWS
    // requests counted apart), then new intents (their later stages run on,
    // outside every count above).
    stack.meter.reset();
    let mut http_dup = Vec::new();
    for k in keys.iter().take(n.min(100)) {
        let (status, took) = post_http(&client, &api, &token, k).await?;
        if status != 200 {
            return Err(format!("intake answered {status} to a duplicate"));
        }
        http_dup.push(took);
    }
    let dup_requests = stack.meter.requests();
    let mut http_idle_new = Vec::new();
    for i in 0..n.min(100) {
        let (status, took) = post_http(&client, &api, &token, &format!("idle-{run_id}-{i}")).await?;
        if status != 202 {
            return Err(format!("intake answered {status} to a new intent"));
        }
        http_idle_new.push(took);
    }
    running.shutdown().await;

    // In-process intake latency: the handler alone, no HTTP, no JWT check.
    let (inproc_new, inproc_dup) = in_process_intake(&stack, n.min(100), run_id).await?;
    let item_bytes = stack.average_item_bytes().await?;

    println!("# genace-bench pipeline");
    println!();
    println!(
        "{n} intents -> {delivered} delivered in {:.1} s on the local stack (moto, in-process runner, simulator: \
         running at the first poll, completed at the second, one {} KiB output each).",
        pipeline_time.as_secs_f64(),
        args.output_bytes / 1024
    );
    println!();
    println!("## Requests per operation");
    println!();
    println!("| service | operation | per operation |");
    println!("|---|---|---|");
    for ((service, op), count) in &requests {
        println!("| {service} | {op} | {:.2} |", *count as f64 / n as f64);
    }
    let per = |x: u64| x as f64 / n as f64;
    let ddb_writes = per(count_of(&requests, "dynamodb", &DDB_WRITES));
    let ddb_reads = per(count_of(&requests, "dynamodb", &DDB_READS));
    let s3_writes = per(count_of(&requests, "s3", &S3_WRITES));
    let s3_reads = per(count_of(&requests, "s3", &S3_READS));
    let sqs_sends = per(count_of(&requests, "sqs", &["SendMessage", "SendMessageBatch"]));
    let sqs_deletes = per(count_of(&requests, "sqs", &["DeleteMessage", "DeleteMessageBatch"]));
    let stage_invocations: usize = ["dispatch", "poll", "deliver", "recovery"]
        .iter()
        .map(|s| invocations.get(*s).map_or(0, Vec::len))
        .sum();
    // The event source's receives that returned messages: one per invocation
    // (the local pollers' empty long polls are not per-operation costs).
    let sqs_receives = stage_invocations as f64 / n as f64;
    let sqs = sqs_sends + sqs_deletes + sqs_receives;
    println!();
    println!(
        "Totals per operation: DynamoDB {ddb_writes:.2} writes, {ddb_reads:.2} reads; S3 {s3_writes:.2} write-class, \
         {s3_reads:.2} read-class; SQS {sqs:.2} billable ({sqs_sends:.2} sends, {sqs_receives:.2} receives with \
         messages, {sqs_deletes:.2} deletes); Genace {:.2} POST, {:.2} GET.",
        per(posts),
        per(gets)
    );
    let dup_writes = count_of(&dup_requests, "dynamodb", &DDB_WRITES) as f64 / http_dup.len().max(1) as f64;
    let dup_total: u64 = dup_requests.values().sum();
    println!(
        "A duplicate intent costs {:.2} AWS requests ({dup_writes:.2} DynamoDB conditional writes, answered with the stored item).",
        dup_total as f64 / http_dup.len().max(1) as f64
    );

    println!();
    println!("## Handler invocations");
    println!();
    println!("| stage | invocations per operation | median ms | p99 ms |");
    println!("|---|---|---|---|");
    let mut gb_seconds = 0.0;
    let mut lambda_requests = 0.0;
    for stage in ["intake", "dispatch", "poll", "deliver", "recovery", "sweep"] {
        let durations = invocations.get(stage).cloned().unwrap_or_default();
        if durations.is_empty() {
            continue;
        }
        let billed: f64 = durations
            .iter()
            .map(|d| (d.as_secs_f64() * 1000.0).ceil() / 1000.0)
            .sum();
        let (count, p50, p99) = summary(durations);
        if stage != "sweep" {
            gb_seconds += billed * prices.memory_mb[stage] / 1024.0 / n as f64;
            lambda_requests += count as f64 / n as f64;
        }
        println!(
            "| {stage} | {:.2} | {} | {} |",
            count as f64 / n as f64,
            ms(p50),
            ms(p99)
        );
    }
    println!();
    println!("(The sweep runs once a minute whatever the volume; it is not a per-operation cost.)");

    println!();
    println!("## Intake latency");
    println!();
    println!("| path | intent | n | median ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for (path, kind, v) in [
        ("in-process handler", "new", inproc_new),
        ("in-process handler", "duplicate", inproc_dup),
        ("HTTP + JWT, idle, one at a time", "new", http_idle_new),
        ("HTTP + JWT, idle, one at a time", "duplicate", http_dup),
        ("HTTP + JWT, 8 at a time while the pipeline runs", "new", http_new),
    ] {
        let (count, p50, p99) = summary(v);
        println!("| {path} | {kind} | {count} | {} | {} |", ms(p50), ms(p99));
    }

    // Capacity: a write costs ceil(item/1 KB) write units on the table. Every
    // lifecycle write moves `due_at`, the due index's sort key, which costs
    // the index a delete and a put (2 units); the first write only puts and
    // the last only deletes. The job index is written once. A consistent read
    // of an item under 4 KB costs 1 unit.
    let wru_per_write = (item_bytes / 1024.0).ceil().max(1.0);
    // A write that moves credits is a transaction of the record and the
    // tenant's ledger item: each item is written at twice the unit cost
    // (the ledger item is small, one unit), so the transaction adds three
    // units to the record's own.
    let transactions = per(count_of(&requests, "dynamodb", &["TransactWriteItems"]));
    let wru =
        ddb_writes * wru_per_write + transactions * (wru_per_write + 2.0) + (2.0 * ddb_writes - 2.0).max(0.0) + 1.0;
    let rru = ddb_reads;
    let lines = [
        ("API Gateway HTTP API", 1.0, "requests", prices.api_per_million / 1e6),
        (
            "Lambda requests",
            lambda_requests,
            "invocations",
            prices.lambda_per_million / 1e6,
        ),
        (
            "Lambda arm64 compute",
            gb_seconds,
            "GB-seconds",
            prices.lambda_gb_second,
        ),
        (
            "DynamoDB writes",
            wru,
            "write units (estimated)",
            prices.wru_per_million / 1e6,
        ),
        ("DynamoDB reads", rru, "read units", prices.rru_per_million / 1e6),
        ("SQS", sqs, "requests", prices.sqs_per_million / 1e6),
        (
            "S3 write-class",
            s3_writes,
            "requests",
            prices.s3_write_per_thousand / 1e3,
        ),
        ("S3 read-class", s3_reads, "requests", prices.s3_read_per_thousand / 1e3),
    ];
    println!();
    println!("## Dollars per million operations");
    println!();
    println!(
        "Prices: {} (`{}`). Items average {item_bytes:.0} bytes.",
        prices.source, args.prices
    );
    println!();
    println!("| item | per operation | unit | $ per million operations |");
    println!("|---|---|---|---|");
    let mut total = 0.0;
    for (name, qty, unit, price) in lines {
        let dollars = qty * price * 1e6;
        total += dollars;
        println!("| {name} | {qty:.3} | {unit} | {dollars:.2} |");
    }
    println!("| **total** | | | **{total:.2}** |");
    println!();
    println!(
        "Excluded: output storage and transfer, CloudWatch logs and metrics, and the sweep's fixed \
         once-a-minute cost. Lambda time is the handlers' time here, against moto and the simulator; \
         a real Genace answers more slowly, which raises dispatch and poll compute."
    );
    if posts != n as u64 {
        return Err(format!("{posts} Genace POSTs for {n} intents"));
    }
    if delivered != n {
        return Err(format!("only {delivered} of {n} delivered"));
    }
    Ok(())
}

/// Calls the intake handler directly with API Gateway v2 requests.
async fn in_process_intake(stack: &Stack, m: usize, run_id: &str) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let intake = genace_app::from_sdk(&stack.sdk, stack.config.clone()).intake();
    let claims: HashMap<String, String> =
        HashMap::from([("sub".into(), "bench".into()), ("tenant_id".into(), TENANT.into())]);
    let request = |key: &str| {
        let (parts, ()) = lambda_http::http::Request::builder()
            .method("POST")
            .uri("/v1/operations")
            .header("content-type", "application/json")
            .body(())
            .expect("a valid request")
            .into_parts();
        serve::apigw_v2(parts, intent_body(key, "in-process").into_bytes(), claims.clone())
    };
    let (mut new, mut dup) = (Vec::new(), Vec::new());
    for pass in 0..2 {
        for i in 0..m {
            let req = request(&format!("inproc-{run_id}-{i}"));
            let started = Instant::now();
            let resp = genace_edge::http::handle(&intake, req).await;
            let took = started.elapsed();
            let expected = if pass == 0 { 202 } else { 200 };
            if resp.status().as_u16() != expected {
                return Err(format!("in-process intake answered {}", resp.status()));
            }
            if pass == 0 { new.push(took) } else { dup.push(took) }
        }
    }
    Ok((new, dup))
}

// ---------------------------------------------------------------- delivery

/// Serves `GET /blob` as `bytes` generated on the fly, in 64 KiB chunks.
async fn blob_server(bytes: u64) -> Result<String, String> {
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| async move {
                    let chunk = Bytes::from((0..65536u32).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>());
                    let chunks = bytes.div_ceil(65536);
                    let stream = futures::stream::iter((0..chunks).map(move |i| {
                        let len = (bytes - i * 65536).min(65536) as usize;
                        Ok::<_, std::convert::Infallible>(Frame::data(chunk.slice(..len)))
                    }));
                    hyper::Response::builder()
                        .header("content-type", "video/mp4")
                        .header("content-length", bytes.to_string())
                        .body(StreamBody::new(stream))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(format!("http://{addr}/blob"))
}

/// Peak resident memory of this process in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak so the next reading covers only what follows (Linux `clear_refs` 5).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[allow(
    clippy::too_many_lines,
    reason = "bench.rs is to be split into its own crate by workload (issue 23, item 1)"
)]
async fn delivery(args: &Args) -> Result<(), String> {
    let bytes = args.bytes;
    let stack = Stack::fresh().await?;
    let url = blob_server(bytes).await?;
    let mib = bytes as f64 / (1 << 20) as f64;

    // The ratio to beat: the same URL downloaded to nowhere.
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
    let mut seen = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        seen += chunk.len() as u64;
    }
    let raw = started.elapsed();
    if seen != bytes {
        return Err(format!("raw download read {seen} of {bytes} bytes"));
    }

    let store = DynamoStore::new(aws::dynamodb(&stack.sdk), &stack.names.table);
    let id = rendered_operation(&store, &stack.config, "delivery-bench", &url).await?;
    let mut config = stack.config.clone();
    config.max_output_bytes = bytes.max(config.max_output_bytes);
    let app = genace_app::from_sdk(&stack.sdk, config.clone()).with_downloads(genace_app::downloads(&config)?);
    let deliverer = app.deliverer();
    let baseline = peak_rss_kib();
    let reset = reset_peak_rss();
    let started = Instant::now();
    let result = deliverer.deliver(&id).await.map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let peak = peak_rss_kib();
    if result != (DeliverResult::Delivered { objects: 1 }) {
        return Err(format!("delivery ended {result:?}"));
    }
    let stored = store
        .get(&id, chrono::Utc::now())
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the record vanished")?;
    if stored.delivered_objects.first().map(|o| o.bytes) != Some(bytes) {
        return Err("the delivered object has the wrong size".into());
    }

    // The stage's own pipeline, with a store that discards the bytes.
    let discard_id = rendered_operation(&store, &config, "delivery-bench-discard", &url).await?;
    let discarding = app.with_objects(DiscardStore::default()).deliverer();
    let started = Instant::now();
    let discarded = discarding.deliver(&discard_id).await.map_err(|e| e.to_string())?;
    let pipeline_only = started.elapsed();
    if discarded != (DeliverResult::Delivered { objects: 1 }) {
        return Err(format!("delivery into the discarding store ended {discarded:?}"));
    }

    // What the local object store accepts on its own: the same bytes as a multipart upload, no download.
    let s3 = aws::s3(&stack.sdk);
    let key = "bench/upload-only.bin";
    let part = config.part_size;
    let started = Instant::now();
    let upload = s3
        .create_multipart_upload()
        .bucket(&stack.names.bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())?;
    let upload_id = upload.upload_id.unwrap_or_default();
    let data: Vec<u8> = (0..part).map(|i| (i * 31 % 251) as u8).collect();
    let mut parts = Vec::new();
    let mut sent = 0u64;
    let mut number = 1;
    while sent < bytes {
        let len = (bytes - sent).min(part as u64) as usize;
        let out = s3
            .upload_part()
            .bucket(&stack.names.bucket)
            .key(key)
            .upload_id(&upload_id)
            .part_number(number)
            .body(aws_sdk_s3::primitives::ByteStream::from(data[..len].to_vec()))
            .send()
            .await
            .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())?;
        parts.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag)
                .build(),
        );
        sent += len as u64;
        number += 1;
    }
    s3.complete_multipart_upload()
        .bucket(&stack.names.bucket)
        .key(key)
        .upload_id(&upload_id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())?;
    let upload_only = started.elapsed();

    let rate = |d: Duration| mib / d.as_secs_f64();
    println!("# genace-bench delivery");
    println!();
    println!("One {mib:.0} MiB output, parts of {} MiB, local S3 (moto).", part >> 20);
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| raw download to nowhere | {:.0} MiB/s ({:.1} s) |",
        rate(raw),
        raw.as_secs_f64()
    );
    println!(
        "| deliver stage: download, hash, upload, verify | {:.0} MiB/s ({:.1} s) |",
        rate(took),
        took.as_secs_f64()
    );
    println!(
        "| ratio to the raw download | {:.2} (goal 0.8) |",
        raw.as_secs_f64() / took.as_secs_f64()
    );
    println!(
        "| multipart upload alone, no download | {:.0} MiB/s ({:.1} s) |",
        rate(upload_only),
        upload_only.as_secs_f64()
    );
    println!(
        "| deliver stage into a discarding store | {:.0} MiB/s ({:.1} s), ratio {:.2} |",
        rate(pipeline_only),
        pipeline_only.as_secs_f64(),
        raw.as_secs_f64() / pipeline_only.as_secs_f64()
    );
    println!(
        "| peak RSS of the delivering process | {:.1} MiB{} (goal 64 MiB; before the delivery: {:.1} MiB) |",
        peak as f64 / 1024.0,
        if reset { "" } else { " (peak not reset: includes setup)" },
        baseline as f64 / 1024.0
    );
    Ok(())
}

/// An object store that keeps only sizes: measures the deliver stage's own
/// pipeline (download, hash, parts) without the local store's speed.
#[derive(Debug, Default, Clone)]
struct DiscardStore {
    sizes: std::sync::Arc<std::sync::Mutex<HashMap<String, u64>>>,
}

impl genace_stages::outputs::ObjectStore for DiscardStore {
    async fn put(
        &self,
        key: &str,
        _: &str,
        data: Vec<u8>,
        _: &str,
    ) -> Result<(), genace_stages::outputs::StorageError> {
        self.sizes
            .lock()
            .expect("sizes")
            .insert(key.to_owned(), data.len() as u64);
        Ok(())
    }
    async fn begin(&self, key: &str, _: &str) -> Result<String, genace_stages::outputs::StorageError> {
        self.sizes.lock().expect("sizes").insert(key.to_owned(), 0);
        Ok("discard".into())
    }
    async fn put_part(
        &self,
        key: &str,
        _: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<genace_stages::outputs::PartReceipt, genace_stages::outputs::StorageError> {
        *self.sizes.lock().expect("sizes").entry(key.to_owned()).or_default() += data.len() as u64;
        Ok(genace_stages::outputs::PartReceipt {
            number,
            etag: String::new(),
            sha256: String::new(),
        })
    }
    async fn complete(
        &self,
        _: &str,
        _: &str,
        _: &[genace_stages::outputs::PartReceipt],
    ) -> Result<(), genace_stages::outputs::StorageError> {
        Ok(())
    }
    async fn abort(&self, _: &str, _: &str) -> Result<(), genace_stages::outputs::StorageError> {
        Ok(())
    }
    async fn head(
        &self,
        key: &str,
    ) -> Result<Option<genace_stages::outputs::ObjectHead>, genace_stages::outputs::StorageError> {
        Ok(self
            .sizes
            .lock()
            .expect("sizes")
            .get(key)
            .map(|b| genace_stages::outputs::ObjectHead {
                bytes: *b,
                content_type: None,
                checksum_sha256: None,
            }))
    }
    async fn presign_get(&self, key: &str, _: Duration) -> Result<String, genace_stages::outputs::StorageError> {
        Ok(key.to_owned())
    }
}

/// A record rendered with one output at `url`, stored.
async fn rendered_operation(store: &DynamoStore, config: &Config, key: &str, url: &str) -> Result<OperationId, String> {
    let now = chrono::Utc::now();
    let body: Value = serde_json::from_str(&intent_body(key, "one large output")).expect("json");
    let intent = Intent::parse(&body, None).map_err(|e| e.to_string())?;
    let tenant = TenantId::parse(TENANT).expect("tenant");
    let rec = OperationRecord::new_intent(&tenant, &intent, None, now, chrono::Duration::seconds(60));
    store.create(&rec, now).await.map_err(|e| e.to_string())?;
    let policy = config.policy;
    let claimed = machine::transition(&rec, machine::Event::ClaimDispatch { token: "t" }, now, &policy)
        .map_err(|e| e.to_string())?;
    let job = machine::AcceptedJob {
        job_id: format!("bench-job-{key}"),
        state: None,
        model: None,
        created_at: None,
        held_credits: None,
    };
    let accepted = machine::transition(
        &claimed,
        machine::Event::Accepted { token: "t", job: &job },
        now,
        &policy,
    )
    .map_err(|e| e.to_string())?;
    let snap =
        genace_core::remote::normalize_snapshot(&json!({"id": job.job_id, "state": "completed", "outputs": [url]}))
            .ok_or("snapshot")?;
    let rendered = machine::transition(
        &accepted,
        machine::Event::Observed {
            snapshot: &snap,
            next_check: now,
            stalled: None,
        },
        now,
        &policy,
    )
    .map_err(|e| e.to_string())?;
    for (a, b) in [(&rec, &claimed), (&claimed, &accepted), (&accepted, &rendered)] {
        store.apply(a, b).await.map_err(|e| e.to_string())?;
    }
    Ok(rec.operation_id)
}

// -------------------------------------------------------------------- load

#[allow(
    clippy::too_many_lines,
    reason = "bench.rs is to be split into its own crate by workload (issue 23, item 1)"
)]
async fn load(args: &Args) -> Result<(), String> {
    let total = args.intents.max(1);
    let stack = Stack::fresh().await?;
    let (sim, base) = start_standin(args.output_bytes).await?;
    let (running, addr) = stack.start_runner(&base, 6).await?;
    let api = format!("http://{addr}");
    let token = devauth::issue("tenant_id", TENANT, 3600)?;
    let client = reqwest::Client::new();
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    // Every k-th intent repeats an earlier key: `duplicate_percent` of them.
    let mut keys = Vec::with_capacity(total);
    let mut distinct = Vec::new();
    for i in 0..total {
        let dup = !distinct.is_empty() && (i as u64 * 37 % 100) < args.duplicate_percent as u64;
        if dup {
            let earlier: &String = &distinct[(i * 7919) % distinct.len()];
            keys.push(earlier.clone());
        } else {
            let k = format!("load-{run_id}-{i}");
            distinct.push(k.clone());
            keys.push(k);
        }
    }
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(0.1));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, key) in keys.into_iter().enumerate() {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let (client, api, token) = (client.clone(), api.clone(), token.clone());
        tasks.spawn(async move { post_http(&client, &api, &token, &key).await });
    }
    let mut latencies = Vec::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (status, took) = done.map_err(|e| e.to_string())??;
        *statuses.entry(status).or_default() += 1;
        latencies.push(took);
    }
    let offered = started.elapsed();
    let ids: Vec<OperationId> = distinct.iter().map(|k| operation_id(k)).collect();
    let delivered = stack.wait_delivered(&ids, Duration::from_secs(600)).await?;
    let elapsed = started.elapsed();
    running.shutdown().await;
    let posts = sim.counters.posts.load(Ordering::SeqCst);
    let dead = stack.dead_letters().await?;
    let (count, p50, p99) = summary(latencies);
    let invocations = stack.meter.invocations();
    let requests = stack.meter.requests();
    let ddb: u64 = requests
        .iter()
        .filter(|((s, _), _)| s.eq_ignore_ascii_case("dynamodb"))
        .map(|(_, n)| *n)
        .sum();

    println!("# genace-bench load");
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| intents offered | {count} at {:.0}/s over {:.1} s ({} % duplicates) |",
        args.rate,
        offered.as_secs_f64(),
        args.duplicate_percent
    );
    println!("| answers | {statuses:?} |");
    println!("| distinct intents | {} |", distinct.len());
    println!("| Genace POSTs | {posts} |");
    println!(
        "| delivered | {delivered} in {:.1} s: {:.1} operations/s end to end |",
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64()
    );
    println!("| intake over HTTP | median {} ms, p99 {} ms |", ms(p50), ms(p99));
    println!("| messages on dead-letter queues | {dead} |");
    println!(
        "| DynamoDB requests | {ddb} ({:.0}/s) |",
        ddb as f64 / elapsed.as_secs_f64()
    );
    for (stage, d) in &invocations {
        let (n, p50, p99) = summary(d.clone());
        println!(
            "| {stage} invocations | {n}, median {} ms, p99 {} ms |",
            ms(p50),
            ms(p99)
        );
    }
    if posts as usize != distinct.len() {
        return Err(format!("{posts} POSTs for {} distinct intents", distinct.len()));
    }
    if dead != 0 {
        return Err(format!("{dead} messages on dead-letter queues"));
    }
    if delivered != distinct.len() {
        return Err(format!("{delivered} of {} delivered", distinct.len()));
    }
    Ok(())
}
