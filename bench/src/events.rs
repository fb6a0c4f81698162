//! `events`: what lifecycle events cost a tenant without webhook receivers,
//! before and after the events pipe marks events for the webhook rule.
//!
//! The same burst runs twice, each on fresh local resources with the events
//! pipe on: once with every event queued for the webhook function, as the
//! rule took them before the mark (`RunnerSettings::webhook_rule_unfiltered`),
//! and once as deployed, where only events a receiver of the tenant takes
//! are queued. Every AWS request and handler invocation is counted, as in
//! `pipeline`, and the difference is what the mark saves.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use genace_core::domain::OperationId;
use serde_json::Value;

use crate::cli::EventsArgs;
use crate::pricing::{DDB_READS, Prices, count_of, load_prices};
use crate::stack::{Stack, operation_id, post_http, start_standin, tenant_client};

/// What one run counted, per operation.
struct Run {
    bus_events: f64,
    marked: f64,
    requests: BTreeMap<(String, String), u64>,
    invocations: BTreeMap<String, usize>,
    n: f64,
}

impl Run {
    fn per(&self, x: u64) -> f64 {
        x as f64 / self.n
    }

    fn invoked(&self, stage: &str) -> f64 {
        *self.invocations.get(stage).unwrap_or(&0) as f64 / self.n
    }

    fn reads(&self) -> f64 {
        self.per(count_of(&self.requests, "dynamodb", &DDB_READS))
    }

    /// Billable SQS requests: sends and deletes, and one receive per
    /// invocation that got messages (the local pollers' empty long polls
    /// are not per-operation costs).
    fn sqs(&self) -> f64 {
        let sends = count_of(&self.requests, "sqs", &["SendMessage", "SendMessageBatch"]);
        let deletes = count_of(&self.requests, "sqs", &["DeleteMessage", "DeleteMessageBatch"]);
        let receives: usize = ["dispatch", "wake", "poll", "deliver", "recovery", "webhooks"]
            .iter()
            .map(|s| self.invocations.get(*s).copied().unwrap_or(0))
            .sum();
        self.per(sends + deletes) + receives as f64 / self.n
    }

    fn lambda_requests(&self) -> f64 {
        ["dispatch", "wake", "poll", "deliver", "recovery", "webhooks"]
            .iter()
            .map(|s| self.invoked(s))
            .sum()
    }

    /// Dollars per million operations of the requests the mark changes:
    /// SQS, Lambda requests and DynamoDB reads (each read taken as one unit).
    fn dollars(&self, prices: &Prices) -> f64 {
        self.sqs() * prices.sqs_per_million
            + self.lambda_requests() * prices.lambda_per_million
            + self.reads() * prices.rru_per_million
    }
}

pub(crate) async fn run(endpoint: &str, args: &EventsArgs) -> Result<(), String> {
    let prices = load_prices(&args.prices)?;
    let n = args.intents.max(1);
    let before = once(endpoint, n, true).await?;
    let after = once(endpoint, n, false).await?;

    println!("# genace-bench events");
    println!();
    println!(
        "{n} intents of one tenant without webhook receivers, through to delivered and their events through \
         the local events pipe, twice on fresh resources: every event queued for the webhook function (before) \
         and only events a receiver takes (after)."
    );
    println!();
    println!("| per operation | before | after |");
    println!("|---|---|---|");
    let row = |what: &str, b: f64, a: f64| println!("| {what} | {b:.2} | {a:.2} |");
    row("lifecycle events on the bus", before.bus_events, after.bus_events);
    row("events queued for the webhook function", before.marked, after.marked);
    row(
        "webhook function invocations",
        before.invoked("webhooks"),
        after.invoked("webhooks"),
    );
    row("DynamoDB reads, all stages", before.reads(), after.reads());
    row(
        "of which the pipe's look at receivers (BatchGetItem)",
        before.per(count_of(&before.requests, "dynamodb", &["BatchGetItem"])),
        after.per(count_of(&after.requests, "dynamodb", &["BatchGetItem"])),
    );
    row("SQS billable requests, all queues", before.sqs(), after.sqs());
    row(
        "Lambda requests of the queue consumers",
        before.lambda_requests(),
        after.lambda_requests(),
    );
    let keys: std::collections::BTreeSet<&(String, String)> =
        before.requests.keys().chain(after.requests.keys()).collect();
    for key in keys {
        let count = |r: &Run| r.per(r.requests.get(key).copied().unwrap_or(0));
        row(&format!("{} {}", key.0, key.1), count(&before), count(&after));
    }
    let (b, a) = (before.dollars(&prices), after.dollars(&prices));
    println!("| **$ per million operations: SQS, Lambda requests and DynamoDB reads** | **{b:.2}** | **{a:.2}** |");
    println!();
    println!(
        "Every request by operation is listed too (ReceiveMessage there counts the local pollers' empty long polls, \
         which the billable line leaves out). The runner hands each consumer one message at a time, so every \
         event is its own webhook invocation: the high end of what the mark saves; Lambda's batches of up to 5 \
         share receives and invocations."
    );
    println!();
    println!(
        "The mark saves ${:.2} per million operations for a tenant without receivers (prices: {}).",
        b - a,
        prices.source
    );
    if after.marked > 0.0 {
        return Err(format!(
            "{:.2} events per operation queued for a tenant without receivers",
            after.marked
        ));
    }
    if before.marked < before.bus_events {
        return Err("the unfiltered run did not queue every event".into());
    }
    Ok(())
}

/// One burst on fresh resources; `unfiltered` queues every event.
async fn once(endpoint: &str, n: usize, unfiltered: bool) -> Result<Run, String> {
    let stack = Stack::fresh(endpoint).await?;
    let (_sim, base) = start_standin(64 * 1024).await?;
    let events = std::env::temp_dir().join(format!("genace-bench-events-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let file = events.clone();
    let (running, addr) = stack
        .start_runner_with(&base, 4, move |s| {
            s.events_file = Some(file);
            s.webhook_rule_unfiltered = unfiltered;
        })
        .await?;
    stack.meter.reset();
    let client = tenant_client(&format!("http://{addr}"))?;
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let keys: Vec<String> = (0..n).map(|i| format!("events-{run_id}-{i}")).collect();
    let answers: Vec<_> = futures::stream::iter(keys.iter())
        .map(|k| post_http(&client, k))
        .buffer_unordered(8)
        .collect()
        .await;
    for a in answers {
        let (status, _) = a?;
        if status != 202 {
            return Err(format!("intake answered {status} to a new intent"));
        }
    }
    let ids: Vec<OperationId> = keys.iter().map(|k| operation_id(k)).collect();
    stack.wait_delivered(&ids, Duration::from_secs(120 + n as u64)).await?;
    // Every operation announces accepted, rendered and delivered; wait for
    // them on the bus and for the webhook queue to be empty.
    let started = Instant::now();
    loop {
        let (bus, _) = carried(&events);
        if bus >= 3 * n && stack.webhook_queue_empty().await? {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("{bus} of {} events reached the bus", 3 * n));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (bus, marked) = carried(&events);
    let run = Run {
        bus_events: bus as f64 / n as f64,
        marked: marked as f64 / n as f64,
        requests: stack.meter.requests(),
        invocations: stack
            .meter
            .invocations()
            .into_iter()
            .map(|(stage, d)| (stage, d.len()))
            .collect(),
        n: n as f64,
    };
    running.shutdown().await;
    let _ = std::fs::remove_file(&events);
    Ok(run)
}

/// Events in the pipe's file, and how many of them the webhook rule takes.
fn carried(file: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let marked = lines
        .iter()
        .filter(|l| genace_local::events::webhook_rule_takes(l))
        .count();
    (lines.len(), marked)
}
