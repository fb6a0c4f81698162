//! `pipeline`: N intents through to `delivered`, every AWS request and
//! handler invocation counted, and dollars per million operations.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use genace_client::Client;
use genace_core::domain::OperationId;
use genace_local::serve;

use crate::cli::PipelineArgs;
use crate::pricing::{DDB_WRITES, PerOperation, Prices, count_of, load_prices};
use crate::report::{ms, summary};
use crate::stack::{Stack, TENANT, intent_body, operation_id, post_http, start_standin, tenant_client};

/// AWS requests by (service, operation).
type Requests = BTreeMap<(String, String), u64>;

/// What the pipeline's burst measured.
struct Burst {
    took: Duration,
    http_new: Vec<Duration>,
    requests: Requests,
    invocations: BTreeMap<String, Vec<Duration>>,
    posts: u64,
    gets: u64,
}

/// Intake one at a time on the idle stack.
struct Idle {
    http_dup: Vec<Duration>,
    dup_requests: Requests,
    http_new: Vec<Duration>,
}

pub(crate) async fn run(endpoint: &str, args: &PipelineArgs) -> Result<(), String> {
    let prices = load_prices(&args.prices)?;
    let n = args.intents.max(1);
    let receiver = if args.traced { Some(traced().await?) } else { None };
    let stack = Stack::fresh(endpoint).await?;
    let (sim, base) = start_standin(args.output_bytes).await?;
    let (running, addr) = stack.start_runner(&base, 4).await?;
    let client = tenant_client(&format!("http://{addr}"))?;
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let keys: Vec<String> = (0..n).map(|i| format!("bench-{run_id}-{i}")).collect();

    let started = Instant::now();
    let http_new = burst(&client, &keys).await?;
    let ids: Vec<OperationId> = keys.iter().map(|k| operation_id(k)).collect();
    let delivered = stack.wait_delivered(&ids, Duration::from_secs(120 + n as u64)).await?;
    let burst = Burst {
        took: started.elapsed(),
        http_new,
        requests: stack.meter.requests(),
        invocations: stack.meter.invocations(),
        posts: sim.counters.posts.load(Ordering::SeqCst),
        gets: sim.counters.status_gets.load(Ordering::SeqCst),
    };
    let idle = idle(&stack, &client, &keys, run_id).await?;
    running.shutdown().await;
    let spans = receiver.map(|receiver| spans_counted(&receiver, n));

    // In-process intake latency: the handler alone, no HTTP, no JWT check.
    let (inproc_new, inproc_dup) = in_process_intake(&stack, n.min(100), run_id).await?;
    let item_bytes = stack.average_item_bytes().await?;

    println!("# genace-bench pipeline");
    println!();
    println!(
        "{n} intents -> {delivered} delivered in {:.1} s on the local stack (moto, in-process runner, simulator: \
         running at the first poll, completed at the second, one {} KiB output each).",
        burst.took.as_secs_f64(),
        args.output_bytes / 1024
    );
    let per = print_requests(n, &burst, &idle, &prices);
    print_invocations(n, &burst.invocations);
    if args.summary {
        print_summary(&per, &burst, [&inproc_new, &inproc_dup], n, spans)?;
    }
    print_latency([
        ("in-process handler", "new", inproc_new),
        ("in-process handler", "duplicate", inproc_dup),
        ("HTTP + JWT, idle, one at a time", "new", idle.http_new),
        ("HTTP + JWT, idle, one at a time", "duplicate", idle.http_dup),
        ("HTTP + JWT, 8 at a time while the pipeline runs", "new", burst.http_new),
    ]);
    per.print_dollars(&prices, &args.prices, item_bytes);
    if burst.posts != n as u64 {
        return Err(format!("{} Genace POSTs for {n} intents", burst.posts));
    }
    if delivered != n {
        return Err(format!("only {delivered} of {n} delivered"));
    }
    Ok(())
}

/// The run's figures as one JSON line, for `--compare-tracing`.
fn print_summary(
    per: &PerOperation,
    burst: &Burst,
    [new, duplicate]: [&[Duration]; 2],
    n: usize,
    spans: Option<f64>,
) -> Result<(), String> {
    let figures = crate::tracing_cost::Summary::of(
        per.gb_seconds,
        &burst.invocations,
        new,
        duplicate,
        &burst.requests,
        n,
        spans,
    );
    let line = serde_json::to_string(&figures).map_err(|e| e.to_string())?;
    println!("{}{line}", crate::tracing_cost::MARK);
    Ok(())
}

/// Every key POSTed, 8 at a time; each must be answered 202.
async fn burst(client: &Client, keys: &[String]) -> Result<Vec<Duration>, String> {
    let results: Vec<_> = futures::stream::iter(keys.iter())
        .map(|k| post_http(client, k))
        .buffer_unordered(8)
        .collect()
        .await;
    let mut latencies = Vec::new();
    for r in results {
        let (status, took) = r?;
        if status != 202 {
            return Err(format!("intake answered {status} to a new intent"));
        }
        latencies.push(took);
    }
    Ok(latencies)
}

/// Over HTTP on the idle stack, one at a time: duplicates (their AWS
/// requests counted apart), then new intents (their later stages run on,
/// outside every count of the burst).
async fn idle(stack: &Stack, client: &Client, keys: &[String], run_id: &str) -> Result<Idle, String> {
    stack.meter.reset();
    let mut http_dup = Vec::new();
    for k in keys.iter().take(100) {
        let (status, took) = post_http(client, k).await?;
        if status != 200 {
            return Err(format!("intake answered {status} to a duplicate"));
        }
        http_dup.push(took);
    }
    let dup_requests = stack.meter.requests();
    let mut http_new = Vec::new();
    for i in 0..keys.len().min(100) {
        let (status, took) = post_http(client, &format!("idle-{run_id}-{i}")).await?;
        if status != 202 {
            return Err(format!("intake answered {status} to a new intent"));
        }
        http_new.push(took);
    }
    Ok(Idle {
        http_dup,
        dup_requests,
        http_new,
    })
}

/// The requests table and totals; returns the per-operation quantities.
fn print_requests(n: usize, burst: &Burst, idle: &Idle, prices: &Prices) -> PerOperation {
    let requests = &burst.requests;
    println!();
    println!("## Requests per operation");
    println!();
    println!("| service | operation | per operation |");
    println!("|---|---|---|");
    for ((service, op), count) in requests {
        println!("| {service} | {op} | {:.2} |", *count as f64 / n as f64);
    }
    let per = |x: u64| x as f64 / n as f64;
    let sqs_sends = per(count_of(requests, "sqs", &["SendMessage", "SendMessageBatch"]));
    let sqs_deletes = per(count_of(requests, "sqs", &["DeleteMessage", "DeleteMessageBatch"]));
    let out = PerOperation::measured(requests, &burst.invocations, n, prices);
    let sqs_receives = out.sqs - sqs_sends - sqs_deletes;
    println!();
    println!(
        "Totals per operation: DynamoDB {:.2} writes, {:.2} reads; S3 {:.2} write-class, \
         {:.2} read-class; SQS {:.2} billable ({sqs_sends:.2} sends, {sqs_receives:.2} receives with \
         messages, {sqs_deletes:.2} deletes); Genace {:.2} POST, {:.2} GET.",
        out.ddb_writes,
        out.ddb_reads,
        out.s3_writes,
        out.s3_reads,
        out.sqs,
        per(burst.posts),
        per(burst.gets)
    );
    let dups = idle.http_dup.len().max(1) as f64;
    let dup_writes = count_of(&idle.dup_requests, "dynamodb", &DDB_WRITES) as f64 / dups;
    let dup_total: u64 = idle.dup_requests.values().sum();
    println!(
        "A duplicate intent costs {:.2} AWS requests ({dup_writes:.2} DynamoDB conditional writes, answered with the stored item).",
        dup_total as f64 / dups
    );
    out
}

/// Every operation traced: a local OTLP receiver, and this process's spans
/// sent to it, every trace kept.
async fn traced() -> Result<genace_local::traces::Receiver, String> {
    let file = std::env::temp_dir().join(format!("genace-bench-spans-{}.jsonl", std::process::id()));
    genace_local::traces::Receiver::for_this_process(&file, "genace-bench")
        .await
        .map_err(|e| e.to_string())
}

/// Prints the spans the receiver got per operation, and removes its file;
/// returns that figure.
fn spans_counted(receiver: &genace_local::traces::Receiver, n: usize) -> f64 {
    let spans = std::fs::read_to_string(&receiver.file).map_or(0, |t| t.lines().count());
    let per = spans as f64 / n as f64;
    println!("Traced: every operation's spans exported to a local OTLP receiver, {per:.1} spans per operation.");
    let _ = std::fs::remove_file(&receiver.file);
    per
}

/// The invocations table.
fn print_invocations(n: usize, invocations: &BTreeMap<String, Vec<Duration>>) {
    println!();
    println!("## Handler invocations");
    println!();
    println!("| stage | invocations per operation | median ms | p99 ms |");
    println!("|---|---|---|---|");
    for stage in ["intake", "dispatch", "wake", "poll", "deliver", "recovery", "sweep"] {
        let durations = invocations.get(stage).cloned().unwrap_or_default();
        if durations.is_empty() {
            continue;
        }
        let (count, p50, p99) = summary(durations);
        println!(
            "| {stage} | {:.2} | {} | {} |",
            count as f64 / n as f64,
            ms(p50),
            ms(p99)
        );
    }
    println!();
    println!("(The sweep runs once a minute whatever the volume; it is not a per-operation cost.)");
}

fn print_latency(rows: [(&str, &str, Vec<Duration>); 5]) {
    println!();
    println!("## Intake latency");
    println!();
    println!("| path | intent | n | median ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for (path, kind, v) in rows {
        let (count, p50, p99) = summary(v);
        println!("| {path} | {kind} | {count} | {} | {} |", ms(p50), ms(p99));
    }
}

/// Calls the intake handler directly with API Gateway v2 requests.
pub(crate) async fn in_process_intake(
    stack: &Stack,
    m: usize,
    run_id: &str,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let api = genace_app::from_sdk(&stack.sdk, stack.config.clone()).api();
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
            let resp = genace_edge::http::handle(&api, req).await;
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
