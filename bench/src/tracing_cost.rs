//! `pipeline --compare-tracing`: the pipeline without and with every
//! operation traced, in alternating rounds, each run a process of its own
//! (a process installs its spans' exporter once), and what tracing adds:
//! Lambda compute per operation over all handlers, each stage's median
//! invocation, and the in-process intake handler. Fails when tracing adds
//! more than [`BUDGET`] to the compute.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cli::PipelineArgs;
use crate::report::summary;

/// The most tracing may add to handler time (the compute per operation).
const BUDGET: f64 = 0.10;

/// The marker of the line a `--summary` run ends with.
pub(crate) const MARK: &str = "PIPELINE-SUMMARY ";

/// What one pipeline run measured, as `--summary` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// Lambda compute per operation, all handlers (GB-seconds).
    pub(crate) gb_seconds: f64,
    /// Each stage's median invocation (ms).
    pub(crate) stage_ms: BTreeMap<String, f64>,
    /// The in-process intake handler's median, a new intent and a duplicate (ms).
    pub(crate) intake_new_ms: f64,
    pub(crate) intake_duplicate_ms: f64,
    /// AWS requests per operation.
    pub(crate) requests: f64,
    /// Spans per operation (traced runs).
    pub(crate) spans: Option<f64>,
}

impl Summary {
    /// A pipeline run's figures for `n` operations.
    pub(crate) fn of(
        gb_seconds: f64,
        invocations: &BTreeMap<String, Vec<Duration>>,
        intake_new: &[Duration],
        intake_duplicate: &[Duration],
        requests: &BTreeMap<(String, String), u64>,
        n: usize,
        spans: Option<f64>,
    ) -> Self {
        let median_ms = |d: &[Duration]| summary(d.to_vec()).1.as_secs_f64() * 1000.0;
        Self {
            gb_seconds,
            stage_ms: invocations
                .iter()
                .map(|(stage, d)| (stage.clone(), median_ms(d)))
                .collect(),
            intake_new_ms: median_ms(intake_new),
            intake_duplicate_ms: median_ms(intake_duplicate),
            requests: requests.values().sum::<u64>() as f64 / n.max(1) as f64,
            spans,
        }
    }
}

pub(crate) async fn run(endpoint: &str, args: &PipelineArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut runs: [Vec<Summary>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=args.rounds.max(1) {
        for (traced, into) in [false, true].into_iter().zip(runs.iter_mut()) {
            eprintln!("round {round}: {}", if traced { "traced" } else { "without tracing" });
            into.push(one(&exe, endpoint, args, traced).await?);
        }
    }
    // What tracing adds: the median of each round's ratio, so a slow round
    // weighs on both of its runs alike.
    let mut ratios: Vec<f64> = runs[0]
        .iter()
        .zip(&runs[1])
        .map(|(w, t)| t.gb_seconds / w.gb_seconds)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let added = ratios[ratios.len() / 2] - 1.0;
    let [without, traced] = runs.map(|r| median_of(&r));
    print(&without, &traced, args);
    println!(
        "Tracing adds {:+.1} % to the compute per operation (the median round's ratio).",
        added * 100.0
    );
    if !added.is_finite() {
        return Err("no compute was measured".into());
    }
    if added > BUDGET {
        return Err(format!(
            "tracing adds {:.1} % to handler time, over the {:.0} % budget",
            added * 100.0,
            BUDGET * 100.0
        ));
    }
    Ok(())
}

/// One pipeline run in a process of its own.
async fn one(exe: &std::path::Path, endpoint: &str, args: &PipelineArgs, traced: bool) -> Result<Summary, String> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .args(["pipeline", "--summary"])
        .args(["--intents", &args.intents.to_string()])
        .args(["--output-bytes", &args.output_bytes.to_string()])
        .args(["--prices", &args.prices]);
    if traced {
        cmd.arg("--traced");
    }
    let out = cmd.output().await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "a pipeline run failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(MARK))
        .ok_or("a pipeline run printed no summary")?;
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// The median of each figure over the rounds.
fn median_of(runs: &[Summary]) -> Summary {
    let median = |f: &dyn Fn(&Summary) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        if v.len().is_multiple_of(2) {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        }
    };
    // A stage every run measured (the sweep's timer may miss a short run).
    let stages: Vec<String> = runs
        .first()
        .map(|r| {
            r.stage_ms
                .keys()
                .filter(|s| runs.iter().all(|o| o.stage_ms.contains_key(*s)))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    Summary {
        gb_seconds: median(&|r| r.gb_seconds),
        stage_ms: stages
            .into_iter()
            .map(|s| {
                let m = median(&|r| r.stage_ms.get(&s).copied().unwrap_or_default());
                (s, m)
            })
            .collect(),
        intake_new_ms: median(&|r| r.intake_new_ms),
        intake_duplicate_ms: median(&|r| r.intake_duplicate_ms),
        requests: median(&|r| r.requests),
        spans: runs
            .iter()
            .any(|r| r.spans.is_some())
            .then(|| median(&|r| r.spans.unwrap_or_default())),
    }
}

fn print(without: &Summary, traced: &Summary, args: &PipelineArgs) {
    // One row: its label, both figures with `places` decimals, the change.
    let row = |label: &str, a: f64, b: f64, places: usize| {
        println!(
            "| {label} | {a:.places$} | {b:.places$} | {:+.1} % |",
            (b / a - 1.0) * 100.0
        );
    };
    println!("# genace-bench pipeline --compare-tracing");
    println!();
    println!(
        "{} intents a run, {} rounds of each, alternating; medians over the rounds. \
         Traced: every operation's spans exported to a local OTLP receiver.",
        args.intents,
        args.rounds.max(1)
    );
    println!();
    println!("| | without | traced | change |");
    println!("|---|---|---|---|");
    let compute = "Lambda compute per operation (GB-seconds, all handlers)";
    row(compute, without.gb_seconds, traced.gb_seconds, 4);
    row("AWS requests per operation", without.requests, traced.requests, 2);
    for (stage, ms) in &without.stage_ms {
        let t = traced.stage_ms.get(stage).copied().unwrap_or_default();
        row(&format!("{stage} invocation, median ms"), *ms, t, 1);
    }
    let new = "intake handler in process, new intent, median ms";
    row(new, without.intake_new_ms, traced.intake_new_ms, 1);
    let duplicate = "intake handler in process, duplicate, median ms";
    row(duplicate, without.intake_duplicate_ms, traced.intake_duplicate_ms, 1);
    if let Some(spans) = traced.spans {
        println!("| spans per operation | | {spans:.1} | |");
    }
    println!();
    println!(
        "Budget: tracing may add {:.0} % to handler time (the compute per operation).",
        BUDGET * 100.0
    );
}
