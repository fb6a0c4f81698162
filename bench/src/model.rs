//! The `scale` benchmark's second half: the same burst in the simulator's
//! virtual time (`genace_dst::burst`), where tenants are cheap, so 10,000
//! can stand beside the bursting one. Every request takes the latency
//! model's time. It prints the requests per operation and per wake-up, the
//! busiest item's write units per admitted job (with the ceiling that puts
//! on admitted jobs a second) and the drain against the ideal; and it
//! fails when either request count grows with the tenants by more than
//! 10 %, or an operation is not delivered or opens a case. Last, the sweep
//! meets `--model-due` due items (50,000) and a lost wake-up: it fails
//! unless every run reads the account before its first due item and the
//! first run repairs the wake-up.

use genace_dst::{BurstFigures, BurstOptions, burst, sweep_backlog};

use crate::cli::ScaleArgs;

pub(crate) fn run(args: &ScaleArgs) -> Result<(), String> {
    bursts(args)?;
    ceiling(args)?;
    backlog(args)
}

/// How much of the ceiling's growth with the shards a run must show: the
/// busiest shard takes a little more than its even share (operations are
/// spread by a hash of their ids, and a woken claim may move).
const SHARD_GROWTH_KEPT: f64 = 0.6;

/// The account's ceiling with each shard count: a burst from many tenants
/// at once, and the busiest shard item's write units per admitted job.
fn ceiling(args: &ScaleArgs) -> Result<(), String> {
    if args.model_shards.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::new();
    for &n in &args.model_shards {
        let shards = genace_core::shard::AccountShards::new(n).ok_or(format!("{n} shards: 1 to 32"))?;
        let opts = BurstOptions {
            tenants: args.ceiling_senders,
            intents: args.ceiling_intents,
            limit: args.ceiling_limit,
            render_seconds: i64::try_from(args.render_seconds).unwrap_or(i64::MAX),
            latency_ms: args.model_latency_ms,
            senders: args.ceiling_senders,
            shards,
        };
        rows.push((n, burst(&opts)));
    }
    println!();
    println!(
        "The account's ceiling in virtual time: {} intents from {} tenants at once, an account of {} slots, {} s \
         renders:",
        args.ceiling_intents, args.ceiling_senders, args.ceiling_limit, args.render_seconds
    );
    println!();
    println!(
        "| account shards | busiest shard: write units per admitted job | ceiling: admitted jobs a second | \
         requests per operation | drain against the ideal | cases |"
    );
    println!("|---|---|---|---|---|---|");
    for (n, f) in &rows {
        println!(
            "| {n} | {:.2} | {:.0} | {:.1} | {:.0} s, {:.2}× | {} |",
            f.writes.account_units_per_admitted_job(),
            f.writes.ceiling_jobs_per_second(),
            f.requests_per_operation(),
            f.drain_seconds,
            f.drain_seconds / f.ideal_seconds.max(1e-9),
            f.cases
        );
    }
    for (n, f) in &rows {
        if f.delivered < f.operations || f.cases > 0 {
            return Err(format!(
                "with {n} account shards, {} of {} delivered, {} cases",
                f.delivered, f.operations, f.cases
            ));
        }
    }
    let (few, first) = (&rows[0].0, &rows[0].1);
    for (n, f) in &rows[1..] {
        let grown = f.writes.ceiling_jobs_per_second() / first.writes.ceiling_jobs_per_second().max(1e-9);
        let even = f64::from(*n) / f64::from(*few);
        if grown < even * SHARD_GROWTH_KEPT {
            return Err(format!(
                "the ceiling grew {grown:.2}× from {few} to {n} account shards, less than {:.0} % of {even:.0}×",
                SHARD_GROWTH_KEPT * 100.0
            ));
        }
    }
    Ok(())
}

fn backlog(args: &ScaleArgs) -> Result<(), String> {
    if args.model_due == 0 {
        return Ok(());
    }
    let f = sweep_backlog(args.model_due, args.model_latency_ms);
    println!();
    println!(
        "The sweep under {} due items and one lost wake-up, {} ms a request: {} runs; {} of them read the \
         account before their first due item; the first examined {} items in {:.1} s and {} the lost wake-up.",
        f.due,
        args.model_latency_ms,
        f.runs,
        f.looked_first,
        f.first_run_examined,
        f.first_run_seconds,
        if f.repaired_in_first_run {
            "repaired"
        } else {
            "did not repair"
        }
    );
    if f.looked_first < f.runs || !f.repaired_in_first_run {
        return Err("the sweep skipped its capacity look under the backlog".into());
    }
    Ok(())
}

fn bursts(args: &ScaleArgs) -> Result<(), String> {
    if args.model_tenants.is_empty() {
        return Ok(());
    }
    let rows: Vec<(usize, BurstFigures)> = args
        .model_tenants
        .iter()
        .map(|&tenants| {
            let opts = BurstOptions {
                tenants,
                intents: args.intents,
                limit: args.limit,
                render_seconds: i64::try_from(args.render_seconds).unwrap_or(i64::MAX),
                latency_ms: args.model_latency_ms,
                ..BurstOptions::default()
            };
            (tenants, burst(&opts))
        })
        .collect();
    print(args, &rows);
    for (tenants, f) in &rows {
        if f.delivered < f.operations || f.cases > 0 {
            return Err(format!(
                "in virtual time with {tenants} tenants, {} of {} delivered, {} cases",
                f.delivered, f.operations, f.cases
            ));
        }
    }
    let (first, last) = (&rows[0].1, &rows[rows.len() - 1].1);
    if last.requests_per_operation() > first.requests_per_operation() * 1.10
        || last.requests_per_wake_up() > first.requests_per_wake_up() * 1.10
    {
        return Err(format!(
            "in virtual time, requests grew with the tenants: {:.1} per operation and {:.1} per wake-up \
             with {}, {:.1} and {:.1} with {}",
            first.requests_per_operation(),
            first.requests_per_wake_up(),
            rows[0].0,
            last.requests_per_operation(),
            last.requests_per_wake_up(),
            rows[rows.len() - 1].0
        ));
    }
    Ok(())
}

fn print(args: &ScaleArgs, rows: &[(usize, BurstFigures)]) {
    println!();
    println!(
        "The same burst in the simulator's virtual time, {} ms a request, {} s renders:",
        args.model_latency_ms, args.render_seconds
    );
    println!();
    println!(
        "| tenants | requests per operation | requests per wake-up | account item: write units per admitted job \
         | busiest item: units per admitted job | its units a second over the drain | drain against the ideal | cases |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (tenants, f) in rows {
        println!(
            "| {tenants} | {:.1} | {:.1} ({} wake-ups) | {:.2} | {}: {:.2} | {:.1} | {:.0} s, {:.2}× | {} |",
            f.requests_per_operation(),
            f.requests_per_wake_up(),
            f.wake_ups,
            f.writes.account_units_per_admitted_job(),
            f.writes.busiest_item,
            f.writes.units_per_admitted_job(),
            f.busiest_units_per_second(),
            f.drain_seconds,
            f.drain_seconds / f.ideal_seconds.max(1e-9),
            f.cases
        );
    }
    if let Some((_, f)) = rows.last() {
        println!();
        println!(
            "At {:.2} write units per admitted job on the account item, its 1,000 units a second admit at most {:.0} \
             jobs a second to one Genace account, whatever the tenants. One tenant's own ledger item takes at least \
             as many (every slot-moving write moves its counters too): a single tenant's burst meets the same \
             ceiling there.",
            f.writes.account_units_per_admitted_job(),
            f.writes.ceiling_jobs_per_second()
        );
    }
}
