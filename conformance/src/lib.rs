//! Conformance suite for Genace operations deployments.
//!
//! It stands in for Genace with wiremock, drives the deployment only through
//! its public HTTP API, and asserts the acceptance scenarios of the Genace
//! docs through the API's answers and the requests Genace received. It does
//! not share types with the implementation, so it catches contract drift.

pub mod api;
pub mod capacity;
pub mod catalog;
pub mod context;
pub mod genace;
pub mod scenarios;
pub mod traces;

use std::time::{Duration, Instant};

pub use catalog::SCENARIOS;
pub use context::Context;

#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub name: String,
    pub outcome: Result<(), String>,
    pub elapsed: Duration,
}

/// Runs the named scenarios (all when `only` is empty) concurrently.
pub async fn run_scenarios(ctx: &Context, only: &[String]) -> Vec<ScenarioResult> {
    run_scenarios_reporting(ctx, only, |_| {}).await
}

/// [`run_scenarios`], calling `done` as each scenario ends (for a progress bar).
pub async fn run_scenarios_reporting(
    ctx: &Context,
    only: &[String],
    done: impl Fn(&ScenarioResult),
) -> Vec<ScenarioResult> {
    let done = &done;
    let names: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|n| only.is_empty() || only.iter().any(|o| o == n))
        .collect();
    let run = |name: &'static str| async move {
        let start = Instant::now();
        let outcome = catalog::run(name, ctx).await;
        let result = ScenarioResult {
            name: name.to_owned(),
            outcome,
            elapsed: start.elapsed(),
        };
        done(&result);
        result
    };
    // A scenario that fills the Genace account teaches the deployment a
    // lower limit of jobs in flight, which holds back every other scenario
    // for a while: it runs alone, after the rest.
    let (alone, together): (Vec<&str>, Vec<&str>) = names.into_iter().partition(|n| FILLS_THE_ACCOUNT.contains(n));
    let mut results = futures::future::join_all(together.into_iter().map(run)).await;
    for name in alone {
        results.push(run(name).await);
    }
    results
}

/// Scenarios that run alone, after the others.
const FILLS_THE_ACCOUNT: [&str; 1] = ["capacity-burst"];

/// A readable summary, ending with the `N passed, N failed` line.
pub fn summary(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    for r in results {
        let (mark, note) = match &r.outcome {
            Ok(()) => ("PASS", String::new()),
            Err(e) => ("FAIL", format!("  {e}")),
        };
        out.push_str(&format!(
            "{mark}  {:<32} {:>5.1}s{note}\n",
            r.name,
            r.elapsed.as_secs_f64()
        ));
    }
    let passed = results.iter().filter(|r| r.outcome.is_ok()).count();
    out.push_str(&format!(
        "conformance: {passed} passed, {} failed\n",
        results.len() - passed
    ));
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JUnit XML, for CI systems.
pub fn junit(results: &[ScenarioResult]) -> String {
    let failures = results.iter().filter(|r| r.outcome.is_err()).count();
    let total: f64 = results.iter().map(|r| r.elapsed.as_secs_f64()).sum();
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"genace-conformance\" tests=\"{}\" failures=\"{failures}\" time=\"{total:.3}\">\n",
        results.len()
    );
    for r in results {
        xml.push_str(&format!(
            "  <testcase classname=\"conformance\" name=\"{}\" time=\"{:.3}\"",
            xml_escape(&r.name),
            r.elapsed.as_secs_f64()
        ));
        match &r.outcome {
            Ok(()) => xml.push_str("/>\n"),
            Err(e) => xml.push_str(&format!(
                ">\n    <failure message=\"{}\"/>\n  </testcase>\n",
                xml_escape(e)
            )),
        }
    }
    xml.push_str("</testsuite>\n");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_count_and_escape() {
        let results = vec![
            ScenarioResult {
                name: "a".into(),
                outcome: Ok(()),
                elapsed: Duration::from_millis(1500),
            },
            ScenarioResult {
                name: "b".into(),
                outcome: Err("expected <1> & got \"2\"".into()),
                elapsed: Duration::from_secs(2),
            },
        ];
        assert!(summary(&results).ends_with("conformance: 1 passed, 1 failed\n"));
        let xml = junit(&results);
        assert!(xml.contains("tests=\"2\" failures=\"1\""));
        assert!(xml.contains("expected &lt;1&gt; &amp; got &quot;2&quot;"));
    }
}
