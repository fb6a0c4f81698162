//! `scale`: the same burst beside more and more idle tenants. One tenant
//! sends `--intents` at once against an account of `--limit` slots
//! (`GENACE_MAX_IN_FLIGHT`, and the stand-in renders as many), with 3,
//! 100 and 1,000 tenants in the table (`--tenants`): the others idle, each
//! with a ledger of its own (a limit an operator set), waiting for nothing.
//! It prints, for each count, the AWS requests per operation (without the
//! queues' long-poll receives), the DynamoDB reads among them, and the drain
//! against the ideal `intents × render ÷ limit`; and it fails when the
//! requests per operation at the most tenants are more than 10 % above the
//! fewest: what a wake-up reads must not grow with the tenants. A last row
//! adds `--short-of-credits` tenants beside the most, each with one intent
//! waiting for credits under a spend limit below its estimate; it fails
//! when that row's requests per operation are more than 10 % above the
//! row without them: what a wake-up reads must not grow with the tenants
//! short of credits either. Then the
//! same burst runs in the simulator's virtual time with up to 10,000
//! tenants (`crate::model`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use genace_core::domain::TenantId;
use genace_stages::ports::table::prelude::*;

use crate::capacity::burst;
use crate::cli::ScaleArgs;
use crate::stack::{Stack, start_standin_with};

/// The tenant that bursts.
const BURSTING: &str = "bench-burst";

/// One count's figures.
struct Figures {
    tenants: usize,
    short: usize,
    per_operation: f64,
    reads: BTreeMap<String, f64>,
    drain: Duration,
    ideal: Duration,
    cases: usize,
}

pub(crate) async fn run(endpoint: &str, args: &ScaleArgs) -> Result<(), String> {
    if args.tenants.is_empty() {
        return Err("--tenants names no count".into());
    }
    let mut rows = Vec::new();
    for &tenants in &args.tenants {
        rows.push(one(endpoint, args, tenants, 0).await?);
    }
    let most = args.tenants[args.tenants.len() - 1];
    if args.short_of_credits > 0 {
        rows.push(one(endpoint, args, most, args.short_of_credits).await?);
    }
    print(args, &rows);
    // The model's rows are printed whatever the stack's gate says. It
    // builds its own runtime, so it runs on a thread of its own.
    let model_args = args.clone();
    let modelled = std::thread::spawn(move || crate::model::run(&model_args))
        .join()
        .map_err(|_| "the virtual-time burst panicked".to_owned())?;
    let cases: usize = rows.iter().map(|r| r.cases).sum();
    if cases > 0 {
        return Err(format!("{cases} operations opened a case"));
    }
    let plain: Vec<&Figures> = rows.iter().filter(|r| r.short == 0).collect();
    let (first, last) = (plain[0], plain[plain.len() - 1]);
    if last.per_operation > first.per_operation * 1.10 {
        return Err(format!(
            "requests per operation grew with the tenants: {:.1} with {}, {:.1} with {}",
            first.per_operation, first.tenants, last.per_operation, last.tenants
        ));
    }
    if let Some(short) = rows.iter().find(|r| r.short > 0)
        && short.per_operation > last.per_operation * 1.10
    {
        return Err(format!(
            "requests per operation grew with tenants short of credits: {:.1} without, {:.1} beside {}",
            last.per_operation, short.per_operation, short.short
        ));
    }
    modelled
}

/// The burst beside `tenants - 1` idle tenants and `short` tenants short
/// of credits, on a fresh stack.
async fn one(endpoint: &str, args: &ScaleArgs, tenants: usize, short: usize) -> Result<Figures, String> {
    let render = Duration::from_secs(args.render_seconds);
    let mut stack = Stack::fresh(endpoint).await?;
    stack.config.max_in_flight = Some(args.limit);
    idle_tenants(&stack, tenants.saturating_sub(1)).await?;
    let queued = Duration::from_secs(1).min(render);
    let (_sim, base) = start_standin_with(4 * 1024, queued, render - queued, Some(args.limit as usize)).await?;
    let (running, addr) = stack.start_runner(&base, 8).await?;
    let api = format!("http://{addr}");
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    short_of_credits(&stack, &api, short, &run_id).await?;
    let intents: Vec<(usize, String)> = (0..args.intents).map(|i| (0, format!("scale-{run_id}-{i}"))).collect();
    let before = stack.meter.requests();
    let started = Instant::now();
    let ids = burst(&api, &[BURSTING], &intents).await?;
    let ids: Vec<_> = ids.into_iter().map(|(_, id)| id).collect();
    stack
        .wait_delivered(
            &ids,
            render * 4 * u32::try_from(args.intents).unwrap_or(1) + Duration::from_secs(120),
        )
        .await?;
    let drain = started.elapsed();
    running.shutdown().await;
    let after = stack.meter.requests();
    let mut calls: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (call, count) in after {
        let was = before.get(&call).copied().unwrap_or(0);
        calls.insert(call, count - was);
    }
    let n = ids.len().max(1) as f64;
    let counted: u64 = calls
        .iter()
        .filter(|((service, call), _)| !(service == "SQS" && call == "ReceiveMessage"))
        .map(|(_, c)| c)
        .sum();
    let reads = calls
        .iter()
        .filter(|((service, call), _)| {
            service == "DynamoDB" && matches!(call.as_str(), "GetItem" | "BatchGetItem" | "Query")
        })
        .map(|((_, call), c)| (call.clone(), *c as f64 / n))
        .collect();
    let mut cases = 0;
    for id in &ids {
        let rec = stack
            .observer
            .get(id, chrono::Utc::now())
            .await
            .map_err(|e| e.to_string())?;
        cases += usize::from(rec.is_some_and(|r| r.case.is_some()));
    }
    Ok(Figures {
        tenants,
        short,
        per_operation: counted as f64 / n,
        reads,
        drain,
        ideal: render * u32::try_from(args.intents).unwrap_or(1) / args.limit,
        cases,
    })
}

/// `count` tenants with a ledger each (an operator's limit of 8 jobs), 16
/// written at a time, through the benchmark's own client: not counted.
async fn idle_tenants(stack: &Stack, count: usize) -> Result<(), String> {
    let results: Vec<Result<(), String>> = futures::stream::iter(0..count)
        .map(|i| async move {
            let tenant = TenantId::parse(&format!("idle-{i:05}")).map_err(|e| e.to_string())?;
            stack
                .observer
                .set_max_in_flight(&tenant, Some(8))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// `count` tenants, each under a spend limit of half a credit (below one
/// video's estimate), with one intent through the API that waits for
/// credits; returns once all of them wait. Not counted.
async fn short_of_credits(stack: &Stack, api: &str, count: usize, run_id: &str) -> Result<(), String> {
    if count == 0 {
        return Ok(());
    }
    let names: Vec<String> = (0..count).map(|i| format!("short-{i:05}")).collect();
    for name in &names {
        let tenant = TenantId::parse(name).map_err(|e| e.to_string())?;
        let limit = genace_core::ledger::millis(0.5);
        stack
            .observer
            .set_spend_limit(&tenant, Some(limit))
            .await
            .map_err(|e| e.to_string())?;
    }
    let tenants: Vec<&str> = names.iter().map(String::as_str).collect();
    let intents: Vec<(usize, String)> = (0..count).map(|i| (i, format!("short-{run_id}-{i}"))).collect();
    burst(api, &tenants, &intents).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let account = stack.observer.account().await.map_err(|e| e.to_string())?;
        if usize::try_from(account.waiting).unwrap_or(0) >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{} of {count} intents short of credits wait", account.waiting));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn print(args: &ScaleArgs, rows: &[Figures]) {
    println!("# genace-bench scale");
    println!();
    println!(
        "{} intents at once from one tenant against an account of {} ({} s renders), beside idle tenants \
         that each hold a ledger and wait for nothing.",
        args.intents, args.limit, args.render_seconds
    );
    println!();
    println!(
        "| tenants | AWS requests per operation | DynamoDB reads per operation | drain against the ideal | cases |"
    );
    println!("|---|---|---|---|---|");
    for r in rows {
        let reads: Vec<String> = r.reads.iter().map(|(call, v)| format!("{call} {v:.2}")).collect();
        let tenants = match r.short {
            0 => r.tenants.to_string(),
            short => format!("{} + {short} short of credits", r.tenants),
        };
        println!(
            "| {} | {:.1} | {} | {:.0} s, {:.2}× | {} |",
            tenants,
            r.per_operation,
            reads.join(", "),
            r.drain.as_secs_f64(),
            r.drain.as_secs_f64() / r.ideal.as_secs_f64().max(0.001),
            r.cases
        );
    }
}
