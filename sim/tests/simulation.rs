//! The simulator as a test: seeded schedules of the real stages, with
//! crashes, redeliveries, races and every Genace answer, and no promise
//! broken. `scripts/simulate.sh N` runs more seeds.

use genace_core::machine::planted;
use genace_dst::{Options, Outcome, run};

fn report(outcome: &Outcome) -> String {
    format!(
        "seed {} broke a promise: {}\n{}",
        outcome.seed,
        outcome.violation.as_deref().unwrap_or(""),
        outcome.trace.join("\n")
    )
}

/// The runs of one test binary share the process-wide bug switch, so every
/// run sets it (`run` does) and the tests that plant bugs run in one test.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn a_thousand_seeds_keep_every_promise_and_planted_bugs_are_found() {
    genace_dst::quiet_panics();
    let clean = Options::default();
    for seed in 0..1000 {
        let outcome = run(seed, &clean);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
    }

    // Known bugs, planted again: each is found within the CI budget (10,000
    // seeds) by the promise it breaks, and the first seed that finds it
    // stays a regression test.
    for (bug, name, first_seed, broken) in [
        (
            planted::REPOST_AFTER_LEASE,
            "re-POST after lease expiry",
            17,
            "Genace jobs created",
        ),
        (
            planted::CASE_WITHOUT_PHASE_CHECK,
            "open_case without a phase check",
            14,
            "case on a rendered",
        ),
        // The ledger against Genace's own books.
        (
            planted::ABANDON_ERASES_CREDITS,
            "an abandon erases what Genace charged",
            17,
            "Genace holds or charged",
        ),
        (
            planted::TRUST_NEGATIVE_CREDITS,
            "a negative held_credits is believed",
            0,
            "counter is negative",
        ),
        (
            planted::RENDER_FAILED_SPENT,
            "a failed render counts as spent",
            0,
            "spent, but Genace completed jobs worth",
        ),
        (
            planted::ACCEPTED_HOLDS_NOTHING,
            "the hold ends at the 202",
            0,
            "held, but Genace runs jobs worth",
        ),
        // What clients are answered.
        (
            planted::REPLAY_CHANGED_SPEC,
            "a changed specification answered as a replay",
            2,
            "replay carried another specification",
        ),
        (
            planted::CHANGED_SPEC_ANSWERED_NEW,
            "a changed specification answered as new",
            2,
            "answered as a new operation, not 409",
        ),
        (
            planted::OPERATION_ID_PER_SUBMIT,
            "an answer names an id minted per request",
            1,
            "same key and specification were answered with operation",
        ),
    ] {
        let planted = Options {
            bugs: bug,
            ..Options::default()
        };
        let found = (0..10_000).find(|seed| run(*seed, &planted).violation.is_some());
        assert_eq!(found, Some(first_seed), "{name}: the first seed that finds it");
        let outcome = run(first_seed, &planted);
        let violation = outcome.violation.clone().unwrap_or_default();
        assert!(violation.contains(broken), "{name}: {violation}");
        // Without the bug the same schedule keeps every promise.
        let fixed = run(first_seed, &clean);
        assert!(fixed.violation.is_none(), "{}", report(&fixed));
    }
}

/// Under a spend limit with room for one video at a time, dispatch waits
/// instead of passing it, resumes when credits are free, and the counters
/// never drift from the records, through every crash and race.
#[test]
fn the_spend_limit_is_never_passed_and_waiting_operations_resume() {
    genace_dst::quiet_panics();
    let limited = Options {
        spend_limit: Some(15.0),
        ..Options::default()
    };
    let (mut waited, mut resumed) = (0, 0);
    for seed in 0..300 {
        let outcome = run(seed, &limited);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
        // State lines name the operation (`op_` and 8 hex digits) and its state.
        let op_of = |l: &str| l.find("op_").map(|p| l[p..(p + 11).min(l.len())].to_owned());
        let mut holding = std::collections::BTreeSet::new();
        let mut came_back = false;
        for line in &outcome.trace {
            let Some(op) = op_of(line) else { continue };
            if line.contains("hold=spend_limit") {
                holding.insert(op);
            } else if line.contains(" submitting ") && holding.contains(&op) {
                came_back = true;
            }
        }
        waited += usize::from(!holding.is_empty());
        resumed += usize::from(came_back);
    }
    println!("{waited} of 300 seeds made dispatch wait for credits; {resumed} resumed a waiting operation");
    assert!(
        waited >= 30,
        "only {waited} of 300 seeds made dispatch wait for credits"
    );
    assert!(resumed >= 10, "only {resumed} seeds resumed a waiting operation");
}

#[test]
fn the_same_seed_replays_the_same_trace() {
    genace_dst::quiet_panics();
    for seed in [0, 7, 4242] {
        let first = run(seed, &Options::default());
        let again = run(seed, &Options::default());
        assert_eq!(first.trace, again.trace, "seed {seed}");
        assert!(
            first.trace.len() > 100,
            "a run does something: {} lines",
            first.trace.len()
        );
    }
}
