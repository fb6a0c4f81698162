//! `simulate`: runs seeds of the deterministic simulation and prints seeds
//! per second; on a violation, prints the seed and the trace of its steps
//! and exits 1. `simulate --replay SEED` prints the trace of one seed.
//! `--help` lists every option; usage errors exit 2.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use genace_core::planted;
use genace_dst::{Options, Outcome, quiet_panics, run};

/// Runs the real stages on in-memory adapters, one world per seed, and
/// checks every invariant after every step.
#[derive(Parser)]
#[command(name = "simulate", version)]
struct Cli {
    /// How many seeds to run.
    #[arg(required_unless_present = "replay")]
    count: Option<u64>,
    /// The first seed.
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    first: u64,
    /// Print the trace of this one seed instead.
    #[arg(long, value_name = "SEED", conflicts_with = "count")]
    replay: Option<u64>,
    /// Plant this bug (the simulation must find it).
    #[arg(long, value_name = "NAME", value_parser = planted_bug)]
    bug: Option<u32>,
    /// Intents the clients send in a run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(usize))]
    intents: Option<usize>,
    /// Scheduler steps before the quiet phase.
    #[arg(long, value_name = "K")]
    steps: Option<usize>,
    /// A spend limit on tenant-a, in credits.
    #[arg(long, value_name = "CREDITS", value_parser = credits)]
    spend_limit: Option<f64>,
    /// Genace renders at most this many jobs at once, and the account limit is the same.
    #[arg(long, value_name = "JOBS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_in_flight: Option<u32>,
    /// Genace renders at most this many jobs at once, fewer than
    /// --max-in-flight: dispatch must learn the lower limit from 429s.
    #[arg(long, value_name = "JOBS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    genace_limit: Option<u32>,
    /// Percent of transaction tries cancelled for a conflict, as DynamoDB
    /// cancels those that meet another on one item.
    #[arg(long, value_name = "PERCENT", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    transaction_conflicts: u32,
    /// Percent of plain-write tries refused as if a transaction held the
    /// item (DynamoDB's `TransactionConflictException`); with
    /// --transactions-meet, a plain write to an item an open transaction
    /// holds is refused too.
    #[arg(long, value_name = "PERCENT", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    plain_write_conflicts: u32,
    /// Transactions stay open for a step and cancel the later of two that
    /// meet on an item, as DynamoDB does.
    #[arg(long)]
    transactions_meet: bool,
    /// The waiting order and waiting set (DynamoDB's global secondary
    /// indexes) see each write up to this many milliseconds late, drawn per
    /// write, as eventually consistent indexes do.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=600_000))]
    index_lag_ms: u32,
    /// Shards the account's counters are split into (GENACE_ACCOUNT_SHARDS).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=32))]
    account_shards: u16,
    /// While work runs, deployments change the account's shard count (2
    /// to 4) and operators set or remove the account's limit (at most
    /// --max-in-flight, else 4).
    #[arg(long)]
    reconfigure: bool,
    /// Intents sent again under one key differ from its first in exactly
    /// one member the fingerprint covers, the media type among them.
    #[arg(long)]
    vary_members: bool,
    /// Genace's status reads meet storms of 429s with long Retry-After and
    /// of 5xx, and renders last long enough to leave every poll plan.
    #[arg(long)]
    status_storms: bool,
    /// The sweep reads one item a page and one or two pages of a shard a
    /// run, so its due items fill more than a page of each shard.
    #[arg(long)]
    backlog_pages: bool,
    /// Every call takes time, with brownouts where AWS calls take up to
    /// 5 s; a handler is killed when its own time passes its timeout.
    #[arg(long)]
    calls_take_time: bool,
    /// Tenants in the run, each with a ledger; intents come from all.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    tenants: u64,
}

fn planted_bug(name: &str) -> Result<u32, String> {
    planted::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bit)| *bit)
        .ok_or_else(|| {
            let names: Vec<&str> = planted::ALL.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(" | "))
        })
}

fn credits(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && *c >= 0.0)
        .ok_or_else(|| "a number of credits, at least 0".into())
}

/// A bar on a terminal; nothing otherwise, so CI keeps its plain lines.
fn progress(count: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(count);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{elapsed_precise} {wide_bar} {pos}/{len} seeds, {per_sec}")
    {
        bar.set_style(style);
    }
    bar
}

/// Runs seeds `first..first + count` on one thread per core and returns
/// the outcome of the lowest seed with a violation, if any: the same seed a
/// run on one thread would stop at. Seeds are handed out in order, and a
/// worker stops only past the lowest violation found so far, so every lower
/// seed has been run when the workers end.
fn first_violation(
    first: u64,
    count: u64,
    opts: &Options,
    bar: &indicatif::ProgressBar,
    totals: &Totals,
) -> Option<Outcome> {
    let end = first + count;
    let next = AtomicU64::new(first);
    let lowest = AtomicU64::new(u64::MAX);
    let found: Mutex<Option<Outcome>> = Mutex::new(None);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count.max(1) as usize);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end || seed > lowest.load(Ordering::Acquire) {
                        return;
                    }
                    let outcome = run(seed, opts);
                    totals.add(&outcome.writes);
                    totals.wake_max.fetch_max(outcome.wake_max, Ordering::Relaxed);
                    bar.inc(1);
                    if outcome.violation.is_some() {
                        let mut slot = found.lock().unwrap_or_else(|e| e.into_inner());
                        if slot.as_ref().is_none_or(|o| o.seed > seed) {
                            lowest.fetch_min(seed, Ordering::Release);
                            *slot = Some(outcome);
                        }
                    }
                }
            });
        }
    });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// What the store's write meter saw over every seed run.
#[derive(Default)]
struct Totals {
    /// Seeds where a transaction met an open one, and such tries.
    seeds_met: AtomicU64,
    met_open: AtomicU64,
    /// The account item's write units and the jobs admitted.
    account_units: AtomicU64,
    admitted: AtomicU64,
    /// The most requests a handler that woke operations made.
    wake_max: AtomicU64,
}

impl Totals {
    fn add(&self, w: &genace_memory::WriteReport) {
        self.seeds_met.fetch_add(u64::from(w.met_open > 0), Ordering::Relaxed);
        self.met_open.fetch_add(w.met_open, Ordering::Relaxed);
        self.account_units.fetch_add(w.account_units, Ordering::Relaxed);
        self.admitted.fetch_add(w.admitted, Ordering::Relaxed);
    }

    /// One line: how often transactions met, and the busiest account
    /// shard's cost per admitted job (the account item's, with one shard)
    /// with the ceiling it sets.
    fn line(&self) -> String {
        let admitted = self.admitted.load(Ordering::Relaxed);
        let mut line = format!(
            "transactions met an open one in {} seeds ({} tries cancelled)",
            self.seeds_met.load(Ordering::Relaxed),
            self.met_open.load(Ordering::Relaxed)
        );
        line.push_str(&format!(
            "; a wake-up's handler made at most {} store requests",
            self.wake_max.load(Ordering::Relaxed)
        ));
        if admitted > 0 {
            let per_job = self.account_units.load(Ordering::Relaxed) as f64 / admitted as f64;
            line.push_str(&format!(
                "; busiest account shard: {per_job:.2} write units per admitted job, a ceiling of {:.0} admitted jobs/s",
                genace_memory::ITEM_WRITE_UNITS_PER_SECOND as f64 / per_job
            ));
        }
        line
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let defaults = Options::default();
    let opts = Options {
        bugs: cli.bug.unwrap_or(0),
        spend_limit: cli.spend_limit,
        max_in_flight: cli.max_in_flight,
        genace_limit: cli.genace_limit,
        transaction_conflicts: cli.transaction_conflicts,
        transactions_meet: cli.transactions_meet,
        plain_write_conflicts: cli.plain_write_conflicts,
        index_lag_ms: cli.index_lag_ms,
        vary_members: cli.vary_members,
        status_storms: cli.status_storms,
        backlog_pages: cli.backlog_pages,
        calls_take_time: cli.calls_take_time,
        account_shards: genace_core::shard::AccountShards::new(cli.account_shards).unwrap_or_default(),
        reconfigure: cli.reconfigure,
        tenants: usize::try_from(cli.tenants).unwrap_or(usize::MAX),
        steps: cli.steps.unwrap_or(defaults.steps),
        intents: cli.intents.unwrap_or(defaults.intents),
        ..defaults
    };
    quiet_panics();
    if let Some(seed) = cli.replay {
        let outcome = run(seed, &opts);
        outcome.trace.iter().for_each(|line| println!("{line}"));
        return if outcome.violation.is_some() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let (first, count) = (cli.first, cli.count.unwrap_or(0));
    let bar = progress(count);
    let started = Instant::now();
    let totals = Totals::default();
    if let Some(outcome) = first_violation(first, count, &opts, &bar, &totals) {
        bar.finish_and_clear();
        let seed = outcome.seed;
        if let Some(violation) = &outcome.violation {
            println!("seed {seed}: {violation}");
        }
        println!("trace (replay with: scripts/simulate.sh --replay {seed}):");
        outcome.trace.iter().for_each(|line| println!("  {line}"));
        println!("seeds run: {}", seed - first + 1);
        return ExitCode::FAILURE;
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulation: {count} seeds ({first}..{}), 0 violations, {:.1} s, {:.0} seeds/s",
        first + count,
        secs,
        count as f64 / secs.max(1e-9)
    );
    println!("{}", totals.line());
    ExitCode::SUCCESS
}
