//! `capacity`: a burst larger than Genace's account limit, from three
//! tenants (80 %, 15 % and 5 % of it, interleaved), against the stand-in
//! rendering `--limit` jobs at once (429 past it) for `--render-seconds`
//! each, with `GENACE_MAX_IN_FLIGHT` set to the same limit. It prints the
//! cases opened, the 429s per POST, the drain time against the ideal
//! `intents × render ÷ limit`, each tenant's wait for admission and when
//! its last operation was delivered against its fair share, and the AWS
//! requests per operation.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use genace_client::{Client, RetryPolicy, Submitted};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::record::{DeliveryState, OperationRecord};
use genace_local::devauth;
use genace_stages::ports::table::prelude::*;

use crate::cli::CapacityArgs;
use crate::report::{ms, percentile};
use crate::stack::{Stack, intent_body, start_standin_with};

const TENANTS: [&str; 3] = ["bench-heavy", "bench-mid", "bench-light"];

/// Whose turn intent `i` is: 16 of every 20 heavy, 3 mid, 1 light.
fn tenant_of(i: usize) -> usize {
    match i % 20 {
        0..=15 => 0,
        16..=18 => 1,
        _ => 2,
    }
}

pub(crate) async fn run(endpoint: &str, args: &CapacityArgs) -> Result<(), String> {
    let render = Duration::from_secs(args.render_seconds);
    let prices = crate::pricing::load_prices(&args.prices)?;
    let mut stack = Stack::fresh(endpoint).await?;
    stack.config.max_in_flight = Some(args.limit);
    // Queued for a second, then running: `render` in all.
    let queued = Duration::from_secs(1).min(render);
    let (sim, base) = start_standin_with(16 * 1024, queued, render - queued, Some(args.real_limit() as usize)).await?;
    // The stack as `scripts/run-local.sh` runs it (`genace-local run`'s
    // defaults): what someone measuring from outside would run.
    let (running, addr) = stack
        .start_runner_with(&base, 3, |s| {
            s.batch_size = 5;
            s.visibility_seconds = 10;
            s.sweep_every = Duration::from_secs(15);
        })
        .await?;
    let api = format!("http://{addr}");
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let intents: Vec<(usize, String)> = (0..args.intents)
        .map(|i| (tenant_of(i), format!("cap-{run_id}-{i}")))
        .collect();
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let ids = burst(&api, &TENANTS, &intents).await?;
    let records = wait_drained(&stack, &ids, started, render, args).await?;
    let drain = last_delivery(&records, started_at);
    running.shutdown().await;
    let by_call = stack.meter.requests();
    let requests: u64 = by_call.values().sum();
    // The stages' long polls ask the queues on a clock, loaded or idle (on
    // AWS, the event source mappings' pollers): counted apart.
    let receives: u64 = by_call
        .iter()
        .filter(|((service, call), _)| service == "SQS" && call == "ReceiveMessage")
        .map(|(_, count)| count)
        .sum();
    let posts = sim.counters.posts.load(Ordering::SeqCst);
    let refused = sim.counters.rate_limited.load(Ordering::SeqCst);
    print(
        args,
        render,
        drain,
        &records,
        posts,
        refused,
        (requests, receives),
        sim.counters.peak_in_flight.load(Ordering::SeqCst),
    );
    println!();
    crate::idle::print(&crate::idle::slot_idle(&sim.timeline(), args.real_limit() as usize));
    print_calls(&by_call, records.len());
    // What an operation costs when the burst is larger than the account:
    // the same table as the pipeline's happy path, every wait included.
    let per = crate::pricing::PerOperation::measured(&by_call, &stack.meter.invocations(), records.len(), &prices);
    per.print_dollars(&prices, &args.prices, stack.average_item_bytes().await?);
    let cases = records.iter().filter(|(_, r)| r.case.is_some()).count();
    if cases > 0 {
        return Err(format!("{cases} operations opened a case"));
    }
    // One job per operation: every POST Genace did not refuse made one.
    if posts - refused != records.len() as u64 {
        return Err(format!(
            "{} Genace jobs for {} operations",
            posts - refused,
            records.len()
        ));
    }
    // With our limit at Genace's own, a 429 means we sent past it.
    if args.genace_limit.is_none() && refused * 100 > posts {
        return Err(format!(
            "{refused} of {posts} POSTs were refused with 429 (goal: at most 1 %)"
        ));
    }
    Ok(())
}

/// From the first submit to the last delivery, by the records' own clock
/// (the observer's rounds of reads would add their period).
fn last_delivery(records: &[(usize, OperationRecord)], started_at: chrono::DateTime<chrono::Utc>) -> Duration {
    records
        .iter()
        .map(|(_, r)| {
            (r.delivered_at.unwrap_or(r.updated_at) - started_at)
                .to_std()
                .unwrap_or_default()
        })
        .max()
        .unwrap_or_default()
}

/// How often one intent is retried after a 503 (or a 429) before the run fails.
const MAX_INTAKE_RETRIES: u32 = 5;

/// Every intent POSTed, 16 at a time, each as `tenants[its tenant]`;
/// returns (tenant, operation id).
pub(crate) async fn burst(
    api: &str,
    tenants: &[&str],
    intents: &[(usize, String)],
) -> Result<Vec<(usize, OperationId)>, String> {
    let tokens: Vec<String> = tenants
        .iter()
        .map(|t| devauth::issue("tenant_id", t, 7200))
        .collect::<Result<_, _>>()?;
    // As the API asks of every client: a 503 is retried with the same key
    // after its Retry-After (a retry never makes a second operation); a
    // retried create may answer 200, a replay.
    let retry = RetryPolicy {
        attempts: MAX_INTAKE_RETRIES + 1,
        ..RetryPolicy::default()
    };
    let clients: Vec<Client> = tokens.iter().map(|t| Client::new(api, t).with_retry(retry)).collect();
    let answers: Vec<Result<(usize, OperationId), String>> = futures::stream::iter(intents.iter())
        .map(|(tenant, key)| {
            let client = &clients[*tenant];
            async move {
                let body = serde_json::from_str(&intent_body(key, &format!("a harbour, take {key}"))).expect("json");
                match client.submit(&genace_client::Intent::from_body(key, body)).await {
                    Ok(Submitted::Created(_) | Submitted::Replayed(_)) => {}
                    Ok(Submitted::KeyReused { problem, .. } | Submitted::Refused(problem)) => {
                        return Err(format!("intake answered {problem}"));
                    }
                    Err(e) => return Err(format!("intake answered {e}")),
                }
                let intent = Intent::parse(&serde_json::from_str(&intent_body(key, "x")).expect("json"), None)
                    .map_err(|e| e.to_string())?;
                let tenant_id = TenantId::parse(tenants[*tenant]).map_err(|e| e.to_string())?;
                Ok((*tenant, OperationId::derive(&tenant_id, &intent.operation_key)))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    answers.into_iter().collect()
}

/// Waits until no tenant has a job in flight or an operation waiting, then
/// for every delivery; returns each operation's final record.
async fn wait_drained(
    stack: &Stack,
    ids: &[(usize, OperationId)],
    started: Instant,
    render: Duration,
    args: &CapacityArgs,
) -> Result<Vec<(usize, OperationRecord)>, String> {
    let ideal = render * u32::try_from(args.intents).unwrap_or(u32::MAX) / args.real_limit();
    let limit = ideal * 4 + Duration::from_secs(300);
    let tenants: Vec<TenantId> = TENANTS.iter().map(|t| TenantId::parse(t).expect("tenant")).collect();
    loop {
        if started.elapsed() > limit {
            return Err(format!("not drained after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The observer measures; a read it loses to the loaded endpoint is
        // read again on the next round rather than ending the run.
        let mut busy = 0;
        for t in &tenants {
            match stack.observer.ledger(t).await {
                Ok(l) => busy += l.totals.in_flight + l.totals.waiting,
                Err(e) => {
                    eprintln!("genace-bench: a ledger read failed ({e}); reading again");
                    busy += 1;
                }
            }
        }
        if busy == 0 {
            break;
        }
    }
    let only: Vec<OperationId> = ids.iter().map(|(_, id)| id.clone()).collect();
    stack.wait_delivered(&only, Duration::from_secs(120)).await?;
    let mut records = Vec::new();
    for (tenant, id) in ids {
        let rec = stack
            .observer
            .get(id, chrono::Utc::now())
            .await
            .map_err(|e| e.to_string())?
            .ok_or("a record vanished")?;
        records.push((*tenant, rec));
    }
    Ok(records)
}

#[allow(clippy::too_many_arguments, reason = "the figures one report prints")]
fn print(
    args: &CapacityArgs,
    render: Duration,
    drain: Duration,
    records: &[(usize, OperationRecord)],
    posts: u64,
    refused: u64,
    (requests, receives): (u64, u64),
    peak: u64,
) {
    let n = records.len().max(1);
    let ideal = render.as_secs_f64() * n as f64 / f64::from(args.real_limit());
    let delivered = records
        .iter()
        .filter(|(_, r)| r.delivery_state == DeliveryState::Delivered)
        .count();
    let cases = records.iter().filter(|(_, r)| r.case.is_some()).count();
    println!("# genace-bench capacity");
    println!();
    println!(
        "{n} intents at once from three tenants (80 %, 15 %, 5 %, interleaved); the stand-in renders {} at once \
         for {} s each and answers 429 past that; GENACE_MAX_IN_FLIGHT={}.",
        args.real_limit(),
        render.as_secs(),
        args.limit
    );
    println!();
    println!("| measure | value | goal |");
    println!("|---|---|---|");
    println!("| delivered | {delivered} of {n} | all |");
    println!("| operator cases | {cases} | 0 |");
    println!(
        "| Genace 429 answers per POST | {:.2} % ({refused} of {posts}) | ≤ 1 % |",
        100.0 * refused as f64 / posts.max(1) as f64
    );
    println!("| most jobs rendering at once | {peak} | ≤ {} |", args.real_limit());
    println!(
        "| drain time | {:.0} s, {:.2}× the ideal {ideal:.0} s | ≤ 1.15× |",
        drain.as_secs_f64(),
        drain.as_secs_f64() / ideal
    );
    println!(
        "| AWS requests per operation | {:.1}, of which {:.1} the queues' long-poll receives | constant, however long it waited |",
        requests as f64 / n as f64,
        receives as f64 / n as f64
    );
    println!();
    println!("| tenant | intents | wait for admission p50 | p95 | last delivered | its fair share |");
    println!("|---|---|---|---|---|---|");
    for (t, name) in TENANTS.iter().enumerate() {
        let mine: Vec<&OperationRecord> = records.iter().filter(|(x, _)| *x == t).map(|(_, r)| r).collect();
        let mut waits: Vec<Duration> = mine
            .iter()
            .filter_map(|r| (r.accepted_at? - r.created_at).to_std().ok())
            .collect();
        waits.sort();
        let first = records.iter().map(|(_, r)| r.created_at).min().unwrap_or_default();
        let last = mine
            .iter()
            .map(|r| (r.updated_at - first).num_milliseconds() as f64 / 1000.0)
            .fold(0.0, f64::max);
        // With three tenants sharing, each gets a third of the slots.
        let fair = render.as_secs_f64() * mine.len() as f64 / (f64::from(args.real_limit()) / 3.0);
        println!(
            "| {name} | {} | {} ms | {} ms | {last:.0} s | {fair:.0} s |",
            mine.len(),
            ms(percentile(&waits, 50.0)),
            ms(percentile(&waits, 95.0))
        );
    }
}

/// The AWS requests per operation by service and call, most first.
fn print_calls(by_call: &std::collections::BTreeMap<(String, String), u64>, n: usize) {
    let mut calls: Vec<_> = by_call.iter().collect();
    calls.sort_by(|a, b| b.1.cmp(a.1));
    println!();
    println!("| AWS call | per operation |");
    println!("|---|---|");
    for ((service, call), count) in calls {
        println!("| {service} {call} | {:.2} |", *count as f64 / n.max(1) as f64);
    }
}
