//! `simulate N [--first SEED] [--bug NAME] [--steps K] [--spend-limit CREDITS]`: runs N seeds
//! and prints seeds per second; on a violation, prints the seed and the
//! trace of its steps and exits 1.
//! `simulate --replay SEED [--bug ...]`: prints the trace of one seed.

use std::process::ExitCode;
use std::time::Instant;

use genace_core::machine::planted;
use genace_dst::{Options, quiet_panics, run};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let mut opts = Options::default();
    if let Some(bug) = value("--bug") {
        opts.bugs = match planted::ALL.iter().find(|(name, _)| name == bug) {
            Some((_, bit)) => *bit,
            None => {
                let names: Vec<&str> = planted::ALL.iter().map(|(n, _)| *n).collect();
                eprintln!("simulate: unknown bug {bug:?} ({})", names.join(" | "));
                return ExitCode::from(2);
            }
        };
    }
    if let Some(steps) = value("--steps").and_then(|s| s.parse().ok()) {
        opts.steps = steps;
    }
    if let Some(limit) = value("--spend-limit") {
        match limit.parse::<f64>() {
            Ok(l) if l >= 0.0 => opts.spend_limit = Some(l),
            _ => {
                eprintln!("simulate: --spend-limit takes a number of credits, got {limit:?}");
                return ExitCode::from(2);
            }
        }
    }
    quiet_panics();
    if let Some(seed) = value("--replay").and_then(|s| s.parse::<u64>().ok()) {
        let outcome = run(seed, &opts);
        outcome.trace.iter().for_each(|line| println!("{line}"));
        return if outcome.violation.is_some() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let Some(count) = args.first().and_then(|n| n.parse::<u64>().ok()) else {
        eprintln!(
            "usage: simulate N [--first SEED] [--bug NAME] [--steps K] [--spend-limit CREDITS] | simulate --replay SEED"
        );
        return ExitCode::from(2);
    };
    let first = value("--first").and_then(|s| s.parse().ok()).unwrap_or(0u64);
    let started = Instant::now();
    for seed in first..first + count {
        let outcome = run(seed, &opts);
        if let Some(violation) = &outcome.violation {
            println!("seed {seed}: {violation}");
            println!("trace (replay with: scripts/simulate.sh --replay {seed}):");
            outcome.trace.iter().for_each(|line| println!("  {line}"));
            println!("seeds run: {}", seed - first + 1);
            return ExitCode::FAILURE;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulation: {count} seeds ({first}..{}), 0 violations, {:.1} s, {:.0} seeds/s",
        first + count,
        secs,
        count as f64 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}
