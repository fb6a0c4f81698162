//! `latency`: how soon a finished render is seen, in the simulator's
//! virtual time (`genace_dst::latency`): renders drawn log-normal around
//! each class's median, a warm-up that teaches the render times, then a
//! measured burst, with the limit configured and with it learned from
//! Genace's 429s. It prints the detection lag, the GETs per job, the slot
//! time against the render time and the drain against the ideal, beside
//! the goals; it fails on an undelivered job or a case, and with
//! `--max-drain` on a drain slower than that against the ideal (the other
//! figures are the benchmark's to print, not to assert).

use genace_dst::{LatencyFigures, LatencyOptions, latency};

use crate::cli::LatencyArgs;

pub(crate) fn run(args: &LatencyArgs) -> Result<(), String> {
    let base = LatencyOptions {
        medians: args.medians.clone(),
        spread: args.spread,
        warmup: args.warmup,
        jobs: args.jobs,
        slots: args.slots,
        latency_ms: args.latency_ms,
        ..LatencyOptions::default()
    };
    // The model builds its own runtime, so it runs on a thread of its own.
    let learned = LatencyOptions {
        configured: false,
        ..base.clone()
    };
    let storm = LatencyOptions {
        medians: vec![STORM_RENDER_SECONDS],
        spread: 0.2,
        warmup: 0,
        jobs: args.storm_jobs,
        status_storm: Some(STORM),
        ..base.clone()
    };
    let storm_jobs = args.storm_jobs;
    let modelled = std::thread::spawn(move || {
        let stormy = (storm_jobs > 0).then(|| latency(&storm));
        ([latency(&base), latency(&learned)], stormy)
    })
    .join()
    .map_err(|_| "the virtual-time latency run panicked".to_owned())?;
    let ([configured, learned], stormy) = modelled;
    let mut runs = vec![("configured", configured), ("learned from 429s", learned)];
    print(args, &runs);
    // The bursts' drains, before the storm joins: its renders are past
    // every plan by design.
    for (name, f) in runs.iter().filter(|_| args.max_drain.is_some()) {
        let drain = f.drain_seconds / f.ideal_seconds.max(1e-9);
        let max = args.max_drain.unwrap_or(f64::INFINITY);
        if drain > max {
            return Err(format!(
                "with the limit {name}: the burst drained in {drain:.2}× the ideal (at most {max:.2}×)"
            ));
        }
    }
    if let Some(f) = stormy {
        print_storm(&f);
        runs.push(("configured, in a 429 storm on status reads", f));
    }
    for (name, f) in &runs {
        if let Some(v) = &f.violation {
            return Err(format!("with the limit {name}: {v}"));
        }
        if f.delivered < f.jobs || f.cases > 0 {
            return Err(format!(
                "with the limit {name}: {} of {} delivered, {} cases",
                f.delivered, f.jobs, f.cases
            ));
        }
    }
    Ok(())
}

/// The storm's renders (30 minutes, past every plan) and its status reads:
/// this share (percent) answered 429 with this Retry-After (seconds).
const STORM_RENDER_SECONDS: f64 = 1800.0;
const STORM: (u64, u32) = (60, 600);

fn print_storm(f: &LatencyFigures) {
    println!();
    println!(
        "A 429 storm on status reads ({} % answered 429, Retry-After {} s), {} renders of about {:.0} min:",
        STORM.0,
        STORM.1,
        f.jobs,
        STORM_RENDER_SECONDS / 60.0
    );
    println!();
    println!(
        "| GETs per job | every job's GETs the looks of one chain, within its bound | detection lag p50 | delivered | cases |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} | {} | {:.0} s | {} of {} | {} |",
        f.gets_per_job(),
        if f.violation.is_none() { "yes" } else { "no" },
        f.lag_quantile(0.5),
        f.delivered,
        f.jobs,
        f.cases
    );
}

fn print(args: &LatencyArgs, runs: &[(&str, LatencyFigures)]) {
    println!("# genace-bench latency (virtual time)");
    println!();
    println!(
        "Renders log-normal around {:?} s (±{:.0} %), {} warm-up and {} measured jobs per class, an account of {} \
         slots, {} ms a request.",
        args.medians,
        args.spread * 100.0,
        args.warmup,
        args.jobs,
        args.slots,
        args.latency_ms
    );
    println!();
    println!(
        "| limit | detection lag p50 | p99 | p50 of the render | p99 of the render | GETs per job | slot time / render \
         time | drain against zero-lag scheduling | 429s | cases |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, f) in runs {
        println!(
            "| {name} | {:.2} s | {:.2} s | {:.1} % | {:.1} % | {:.1} | {:.2} | {:.0} s, {:.2}× | {} | {} |",
            f.lag_quantile(0.5),
            f.lag_quantile(0.99),
            f.relative_lag_quantile(0.5) * 100.0,
            f.relative_lag_quantile(0.99) * 100.0,
            f.gets_per_job(),
            f.slot_over_render,
            f.drain_seconds,
            f.drain_seconds / f.ideal_seconds.max(1e-9),
            f.refused,
            f.cases
        );
    }
    println!();
    println!(
        "| limit | jobs seen within 1 s + 2 % (goal: half) | within 3 s + 5 % (goal: 99 %) | 429s in the warm-up burst | \
         in the measured burst | learned limit steady after | in median renders |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, f) in runs {
        let steady = f.steady_after();
        println!(
            "| {name} | {:.0} % | {:.0} % | {} | {} | {} | {} |",
            f.within(1.0, 0.02) * 100.0,
            f.within(3.0, 0.05) * 100.0,
            f.refused_warmup,
            f.refused - f.refused_warmup,
            match (f.refused, steady) {
                (0, _) => "- (configured)".into(),
                (_, None) => "never".into(),
                (_, Some(s)) => format!("{s:.0} s"),
            },
            steady
                .filter(|_| f.refused > 0)
                .map_or("-".into(), |s| format!("{:.2}", s / f.median_render.max(1e-9))),
        );
    }
    print_progress(runs);
    println!();
    println!(
        "Goals: lag p50 at most 1 s + 2 % of the render, p99 at most 3 s + 5 %; at most 8 GETs a job; drain at most \
         1.05× the ideal configured, 1.15× learned; 0 cases. The ideal: the same renders in the same order, \
         each on the first free slot and seen the moment it ends."
    );
}

/// What clients are told: the expected end's calibration, the expected
/// start's error, and a client that reads when told against one that reads
/// every 2 s.
fn print_progress(runs: &[(&str, LatencyFigures)]) {
    println!();
    println!(
        "| limit | jobs ended by the p50 first given (goal: 50 % ± 5) | by the p90 (goal: 90 % ± 5) | given no \
         estimate | expected start, error p50 | p90 | claimed inside the window | waits estimated |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, f) in runs {
        let (by50, by90) = f.calibration();
        let (e50, e90, inside) = f.start_error();
        println!(
            "| {name} | {:.1} % of {} | {:.1} % | {} | {e50:.1} s | {e90:.1} s | {:.0} % | {} |",
            by50 * 100.0,
            f.eta.len(),
            by90 * 100.0,
            f.eta_unlearned,
            inside * 100.0,
            f.starts.len()
        );
    }
    println!();
    println!(
        "| limit | client reading at next_look_at: lag p50 | p90 | reads per job | client reading every 2 s: lag p50 | \
         p90 | reads per job |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, f) in runs {
        let (f50, f90, freads) = LatencyFigures::client(&f.follower);
        let (p50, p90, preads) = LatencyFigures::client(&f.poller);
        println!("| {name} | {f50:.2} s | {f90:.2} s | {freads:.1} | {p50:.2} s | {p90:.2} s | {preads:.1} |");
    }
}
