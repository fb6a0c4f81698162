//! `load`: intents at a fixed offered rate with a share of duplicates;
//! checks one Genace POST per distinct intent and empty dead-letter queues.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use genace_core::domain::OperationId;

use crate::cli::LoadArgs;
use crate::report::{ms, progress, summary};
use crate::stack::{Stack, operation_id, post_http, start_standin, tenant_client};

/// The keys to offer, in order, and the distinct ones among them: every
/// k-th intent repeats an earlier key, `duplicate_percent` of them.
fn keys(total: usize, duplicate_percent: u32, run_id: &str) -> (Vec<String>, Vec<String>) {
    let mut keys = Vec::with_capacity(total);
    let mut distinct: Vec<String> = Vec::new();
    for i in 0..total {
        let dup = !distinct.is_empty() && (i as u64 * 37 % 100) < u64::from(duplicate_percent);
        if dup {
            keys.push(distinct[(i * 7919) % distinct.len()].clone());
        } else {
            let k = format!("load-{run_id}-{i}");
            distinct.push(k.clone());
            keys.push(k);
        }
    }
    (keys, distinct)
}

/// The intake answers to the offered intents.
struct Offered {
    latencies: Vec<Duration>,
    statuses: BTreeMap<u16, usize>,
    took: Duration,
}

/// POSTs each key at its due time, `rate` a second, without waiting for answers.
async fn offer(api: &str, keys: Vec<String>, rate: f64) -> Result<Offered, String> {
    let client = tenant_client(api)?;
    let bar = progress(keys.len() as u64, "intents offered");
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.1));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, key) in keys.into_iter().enumerate() {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let client = client.clone();
        tasks.spawn(async move { post_http(&client, &key).await });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut latencies = Vec::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (status, took) = done.map_err(|e| e.to_string())??;
        *statuses.entry(status).or_default() += 1;
        latencies.push(took);
    }
    Ok(Offered {
        latencies,
        statuses,
        took: started.elapsed(),
    })
}

pub(crate) async fn run(endpoint: &str, args: &LoadArgs) -> Result<(), String> {
    let stack = Stack::fresh(endpoint).await?;
    let (sim, base) = start_standin(args.output_bytes).await?;
    let (running, addr) = stack.start_runner(&base, 6).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let (keys, distinct) = keys(args.intents.max(1), args.duplicate_percent, &run_id);
    let started = Instant::now();
    let offered = offer(&format!("http://{addr}"), keys, args.rate).await?;
    let ids: Vec<OperationId> = distinct.iter().map(|k| operation_id(k)).collect();
    let delivered = stack.wait_delivered(&ids, Duration::from_secs(600)).await?;
    let elapsed = started.elapsed();
    running.shutdown().await;
    let posts = sim.counters.posts.load(Ordering::SeqCst);
    let dead = stack.dead_letters().await?;
    let secs = elapsed.as_secs_f64();
    let (count, p50, p99) = summary(offered.latencies);
    let ddb: u64 = stack
        .meter
        .requests()
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
        offered.took.as_secs_f64(),
        args.duplicate_percent
    );
    println!("| answers | {:?} |", offered.statuses);
    println!("| distinct intents | {} |", distinct.len());
    println!("| Genace POSTs | {posts} |");
    println!(
        "| delivered | {delivered} in {secs:.1} s: {:.1} operations/s end to end |",
        delivered as f64 / secs
    );
    println!("| intake over HTTP | median {} ms, p99 {} ms |", ms(p50), ms(p99));
    println!("| messages on dead-letter queues | {dead} |");
    println!("| DynamoDB requests | {ddb} ({:.0}/s) |", ddb as f64 / secs);
    for (stage, d) in &stack.meter.invocations() {
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
