//! The simulator as a test: seeded schedules of the real stages, with
//! crashes, redeliveries, races and every Genace answer, and no promise
//! broken. `scripts/simulate.sh N` runs more seeds.

use genace_core::planted;
use genace_dst::{Options, Outcome, run};

/// Whether the trace shows an operation held by `hold` (a state line's
/// `hold=...`), and whether one such operation was later claimed.
fn waited_and_resumed(trace: &[String], hold: &str) -> (bool, bool) {
    // State lines name the operation (`op_` and 8 hex digits) and its state.
    let op_of = |l: &str| l.find("op_").map(|p| l[p..(p + 11).min(l.len())].to_owned());
    let mut holding = std::collections::BTreeSet::new();
    let mut came_back = false;
    for line in trace {
        let Some(op) = op_of(line) else { continue };
        if line.contains(hold) {
            holding.insert(op);
        } else if line.contains(" submitting ") && holding.contains(&op) {
            came_back = true;
        }
    }
    (!holding.is_empty(), came_back)
}

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
            1,
            "Genace jobs created, 1 allowed",
        ),
        (
            planted::CASE_WITHOUT_PHASE_CHECK,
            "open_case without a phase check",
            121,
            "case on a rendered",
        ),
        // The ledger against Genace's own books, and the slots it holds
        // against the records that hold one.
        (
            planted::ABANDON_ERASES_CREDITS,
            "an abandon erases what Genace charged",
            6,
            "jobs in flight, the records hold",
        ),
        (
            planted::TRUST_NEGATIVE_CREDITS,
            "a negative held_credits is believed",
            7,
            "counter is negative",
        ),
        (
            planted::RENDER_FAILED_SPENT,
            "a failed render counts as spent",
            6,
            "spent, but Genace completed jobs worth",
        ),
        (
            planted::ACCEPTED_HOLDS_NOTHING,
            "the hold ends at the 202",
            0,
            "jobs in flight, the records hold",
        ),
        // What clients are answered.
        (
            planted::REPLAY_CHANGED_SPEC,
            "a changed specification answered as a replay",
            3,
            "replay carried another",
        ),
        (
            planted::CHANGED_SPEC_ANSWERED_NEW,
            "a changed specification answered as new",
            3,
            "answered as a new operation, not 409",
        ),
        (
            planted::OPERATION_ID_PER_SUBMIT,
            "an answer names an id minted per request",
            4,
            "same key and specification were answered with operation",
        ),
        // Genace's capacity, counted apart from the ledger's share function.
        (
            planted::RENDER_FAILED_KEEPS_SLOT,
            "a failed render keeps its slot",
            6,
            "jobs in flight, the records hold",
        ),
        // What a cancel promises: no POST after it wins.
        (
            planted::CANCEL_AFTER_CLAIM,
            "a cancel wins after the claim",
            36,
            "0 millicredits held, but Genace runs jobs worth",
        ),
        (
            planted::DEADLINE_IGNORED,
            "dispatch deadlines are not enforced",
            1,
            "at or after its dispatch deadline",
        ),
        (
            planted::POLL_AFTER_END,
            "a poll reads Genace after the end was seen",
            0,
            "after its job was seen to end",
        ),
        // One live chain of looks per job.
        (
            planted::DEADLINE_UNMOVED,
            "a look that read nothing leaves the deadline",
            502,
            "started a second chain of polls",
        ),
        (
            planted::SWEEP_START_UNSAVED,
            "a sweep cut short does not save where it stopped",
            0,
            "not at a shard it left",
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

/// Under a spend limit with room for one video, or up to ten images, at a
/// time (10.5 credits), videos and images wait for each other: dispatch waits
/// instead of passing it, resumes when credits are free, and the counters
/// never drift from the records, through every crash and race.
#[test]
fn the_spend_limit_is_never_passed_and_waiting_operations_resume() {
    genace_dst::quiet_panics();
    let limited = Options {
        spend_limit: Some(10.5),
        ..Options::default()
    };
    let (mut waited, mut resumed) = (0, 0);
    for seed in 0..300 {
        let outcome = run(seed, &limited);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
        let (w, r) = waited_and_resumed(&outcome.trace, "hold=spend_limit");
        waited += usize::from(w);
        resumed += usize::from(r);
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

/// Against a Genace that renders one or two jobs at once (and answers 429
/// past it) and an account limit to match: the slots counted always equal
/// the records that hold one and never pass the limit, every waiting
/// operation is claimed once a slot is free, and the account being full
/// never opens a case by itself (a `rate_limited` case needs 429s with
/// nothing else of ours in flight).
#[test]
fn a_small_account_drains_with_waits_and_no_capacity_cases() {
    genace_dst::quiet_panics();
    let (mut waited, mut resumed) = (0, 0);
    for (jobs, seeds) in [(1, 0..200), (2, 200..400)] {
        let limited = Options {
            max_in_flight: Some(jobs),
            ..Options::default()
        };
        for seed in seeds {
            let outcome = run(seed, &limited);
            assert!(outcome.violation.is_none(), "{}", report(&outcome));
            assert!(
                !outcome.trace.iter().any(|l| l.contains("case=rate_limited")),
                "seed {seed}: a full account opened a rate_limited case"
            );
            let (w, r) = waited_and_resumed(&outcome.trace, "hold=capacity");
            waited += usize::from(w);
            resumed += usize::from(r);
        }
    }
    println!("{waited} of 400 seeds made dispatch wait for a slot; {resumed} resumed a waiting operation");
    assert!(waited >= 40, "only {waited} of 400 seeds made dispatch wait for a slot");
    assert!(resumed >= 20, "only {resumed} seeds resumed a waiting operation");
}

/// Genace renders two at once while our limit says four: dispatch meets
/// 429s and learns the lower limit. Every invariant holds, the seed's own
/// 429s are off, so any `rate_limited` case would be capacity's alone and
/// fails the run, and the slots never pass the limit in force.
#[test]
fn a_genace_limit_below_ours_is_learned_without_cases() {
    genace_dst::quiet_panics();
    let learning = Options {
        max_in_flight: Some(4),
        genace_limit: Some(2),
        intents: 16,
        ..Options::default()
    };
    let mut refused = 0;
    for seed in 0..300 {
        let outcome = run(seed, &learning);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
        refused += usize::from(outcome.trace.iter().any(|l| l.contains("RateLimited")));
    }
    println!("{refused} of 300 seeds met a 429 from a full Genace account");
    assert!(refused >= 10, "only {refused} of 300 seeds met Genace's limit");
}

/// Real DynamoDB cancels a transaction that meets another on one item
/// (`TransactionConflict`). With 60 % of the store's transaction tries
/// cancelled so, over a small account, every run keeps every promise: a
/// conflict is tried again, and never costs a job id, a second POST or a
/// case of its own.
#[test]
fn transactions_cancelled_for_conflicts_break_no_promise() {
    genace_dst::quiet_panics();
    let busy = Options {
        transaction_conflicts: 60,
        max_in_flight: Some(3),
        ..Options::default()
    };
    let (mut met, mut contended) = (0, 0);
    for seed in 0..200 {
        let outcome = run(seed, &busy);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
        met += usize::from(outcome.trace.iter().any(|l| l.contains("cancelled for a conflict")));
        contended += usize::from(
            outcome
                .trace
                .iter()
                .any(|l| l.contains("cancelled on every try:") && !l.ends_with("every try: 0")),
        );
    }
    assert!(met >= 150, "only {met} of 200 seeds met a conflict");
    // Some runs reach the store's answer that the table is busy, so the
    // paths past the store's own retries are part of what is checked.
    assert!(
        contended >= 5,
        "only {contended} of 200 seeds had a transaction fail every try"
    );
}

/// Transactions that meet: each stays open for a step, and one that
/// reaches an item an open one holds (the account, a tenant's ledger, the
/// record) is cancelled as DynamoDB cancels it. Many runs meet so, and
/// every run keeps every promise. The store's write meter charges the
/// account item a few write units per admitted job.
#[test]
fn transactions_that_meet_in_one_step_break_no_promise() {
    genace_dst::quiet_panics();
    let meeting = Options {
        transactions_meet: true,
        max_in_flight: Some(2),
        intents: 12,
        ..Options::default()
    };
    let (mut met, mut units, mut admitted) = (0, 0, 0);
    for seed in 0..200 {
        let outcome = run(seed, &meeting);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
        met += usize::from(outcome.writes.met_open > 0);
        units += outcome.writes.account_units;
        admitted += outcome.writes.admitted;
    }
    assert!(met >= 30, "only {met} of 200 seeds met an open transaction");
    let per_job = units as f64 / admitted.max(1) as f64;
    assert!(
        (3.0..=12.0).contains(&per_job),
        "{per_job:.2} write units per admitted job on the account item"
    );
}

/// A spend limit and a small account together: videos (10 credits) and
/// images (1) of tenant-a wait for credits and for slots at once. A freed
/// slot passes over a head short of credits to an operation that fits, so
/// no slot stays free while something that fits waits with nothing on its
/// way to wake it (checked in the quiet phase, before each sweep). The
/// wake-up that stopped at such a head, planted again, is found.
#[test]
fn a_freed_slot_passes_over_a_head_short_of_credits() {
    genace_dst::quiet_panics();
    // Twelve intents: with fewer, the look after a wait for credits and
    // the sweep's look at the parked set repair every slot the planted
    // wake-up leaves idle before the check.
    let both = Options {
        spend_limit: Some(10.5),
        max_in_flight: Some(3),
        intents: 12,
        ..Options::default()
    };
    for seed in 0..300 {
        let outcome = run(seed, &both);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
    }
    let planted = Options {
        bugs: planted::WAKE_STOPS_AT_SHORT_HEAD,
        ..both.clone()
    };
    let found = (0..10_000).find(|seed| run(*seed, &planted).violation.is_some());
    assert_eq!(found, Some(1614), "the first seed that finds it");
    let violation = run(1614, &planted).violation.unwrap_or_default();
    assert!(violation.contains("waits with nothing to wake it"), "{violation}");
    let fixed = run(1614, &both);
    assert!(fixed.violation.is_none(), "{}", report(&fixed));
}

/// The timed burst of the scale benchmark: one tenant's burst against an
/// account of three, beside few or many idle tenants, in virtual time.
/// Everything is delivered with no case, and what an operation and a
/// wake-up cost does not grow with the tenants: the figures the benchmark
/// prints, held here only as far as they must not drift.
#[test]
fn a_burst_costs_the_same_beside_many_idle_tenants() {
    use genace_dst::{BurstOptions, burst};
    let small = BurstOptions {
        tenants: 3,
        intents: 12,
        ..BurstOptions::default()
    };
    let few = burst(&small);
    let many = burst(&BurstOptions {
        tenants: 2_000,
        ..small.clone()
    });
    for figures in [&few, &many] {
        assert_eq!(figures.delivered, figures.operations, "{figures:?}");
        assert_eq!(figures.cases, 0, "{figures:?}");
        assert!(figures.wake_ups > 0, "{figures:?}");
    }
    let grown = many.requests_per_operation() / few.requests_per_operation();
    assert!(
        grown <= 1.10,
        "requests per operation grew {grown:.2}x: {few:?} {many:?}"
    );
    assert!(
        many.requests_per_wake_up() <= few.requests_per_wake_up() * 1.10,
        "{few:?} {many:?}"
    );
    println!("{few:?}\n{many:?}");
}

/// The sweep under a due backlog longer than one run, in virtual time (5
/// ms a request): every run reads the account before its first due item,
/// the first run repairs a lost wake-up, and the backlog is worked off over
/// several runs within each run's budget.
#[test]
fn the_sweep_looks_first_on_every_run_under_a_long_backlog() {
    let figures = genace_dst::sweep_backlog(4_000, 5);
    println!("{figures:?}");
    assert!(figures.repaired_in_first_run, "{figures:?}");
    assert_eq!(figures.looked_first, figures.runs, "{figures:?}");
    assert!(figures.runs >= 2, "one run took the whole backlog: {figures:?}");
    assert!(
        figures.first_run_examined > 0 && figures.first_run_examined < 4_000,
        "{figures:?}"
    );
    assert!(figures.first_run_seconds <= 45.0, "{figures:?}");
}

/// The account split into shards spreads its writes: the same burst from
/// many tenants, every operation delivered and no case, with the busiest
/// shard item taking about a quarter of the one item's write units per
/// admitted job when there are four shards. The figures themselves are the
/// benchmark's to print.
#[test]
fn account_shards_spread_the_account_items_writes() {
    use genace_dst::{BurstOptions, burst};
    let opts = BurstOptions {
        tenants: 24,
        senders: 24,
        intents: 120,
        limit: 16,
        ..BurstOptions::default()
    };
    let one = burst(&opts);
    let four = burst(&BurstOptions {
        shards: genace_core::shard::AccountShards::new(4).unwrap(),
        ..opts.clone()
    });
    for figures in [&one, &four] {
        assert_eq!(figures.delivered, figures.operations, "{figures:?}");
        assert_eq!(figures.cases, 0, "{figures:?}");
    }
    let spread = four.writes.account_units as f64 / one.writes.account_units as f64;
    assert!(
        spread < 0.4,
        "the busiest of four shards took {:.0} % of the one item's units: {one:?} {four:?}",
        spread * 100.0
    );
    println!(
        "one shard: {:.2} units per job, ceiling {:.0}/s; four: {:.2}, {:.0}/s",
        one.writes.account_units_per_admitted_job(),
        one.writes.ceiling_jobs_per_second(),
        four.writes.account_units_per_admitted_job(),
        four.writes.ceiling_jobs_per_second()
    );
}

/// Renders drawn around 10, 60 and 300 s: once a class's render times are
/// learned, its jobs are looked at far less often than on the age-based
/// schedule, every job is delivered and none opens a case, whether the
/// limit is configured or learned from 429s. The figures themselves are
/// the latency benchmark's to print.
#[test]
fn learned_render_times_cut_the_looks_at_a_job() {
    use genace_dst::{LatencyOptions, latency};
    let small = LatencyOptions {
        warmup: 10,
        jobs: 6,
        ..LatencyOptions::default()
    };
    let planned = latency(&small);
    let by_age = latency(&LatencyOptions {
        warmup: 0,
        ..small.clone()
    });
    let learned = latency(&LatencyOptions {
        configured: false,
        ..small.clone()
    });
    for f in [&planned, &by_age, &learned] {
        assert_eq!(f.violation, None);
        assert_eq!((f.delivered, f.cases), (f.jobs, 0), "{f:?}");
        assert_eq!(f.lags.len(), f.jobs, "every end seen and recorded: {f:?}");
    }
    assert!(
        planned.gets_per_job() < by_age.gets_per_job() * 0.6,
        "{:.1} GETs a job with the plan, {:.1} by age",
        planned.gets_per_job(),
        by_age.gets_per_job()
    );
    assert!(learned.refused > 0, "the limit was learned from 429s");
    // A raise Genace refuses at once doubles the wait for the next one:
    // over two bursts, fewer 429s than the account has slots in each, and
    // the limit within a slot of the account's from the first 429 on.
    assert!(
        learned.refused <= 2 * u64::from(small.slots),
        "{} 429s over two bursts on {} slots: {:?}",
        learned.refused,
        small.slots,
        learned.learned
    );
    assert!(
        learned.steady_after().is_some_and(|s| s < learned.median_render),
        "{:?}",
        learned.learned
    );
}

/// Render times drawn log-normal, a poll plan that never gives way to the
/// age-based schedule (a job looked at every second however long it runs)
/// is caught by the look bound; with the plan as built, no job is looked
/// at more than its bound allows, nor after its end was seen.
#[test]
fn the_looks_at_a_job_stay_within_their_bound() {
    use genace_dst::{LatencyOptions, latency};
    let small = LatencyOptions {
        warmup: 10,
        jobs: 6,
        ..LatencyOptions::default()
    };
    assert_eq!(latency(&small).violation, None);
    // A class so long its first planned look would come after the sweep's
    // deadline: the look comes before it, and no second chain starts.
    let long = LatencyOptions {
        medians: vec![900.0],
        spread: 0.05,
        warmup: 10,
        jobs: 4,
        ..small.clone()
    };
    let figures = latency(&long);
    assert_eq!(figures.violation, None);
    assert_eq!(figures.delivered, figures.jobs);
    genace_core::planted::set(planted::LOOKS_UNBOUNDED);
    let unbounded = latency(&small);
    genace_core::planted::set(0);
    let violation = unbounded.violation.unwrap_or_default();
    assert!(violation.contains("over the bound"), "{violation:?}");
}

/// Genace's status reads in a 429 storm with a long Retry-After, on renders
/// of 30 minutes that leave every plan: every job's GETs are the looks of
/// the one chain that saw its end, within the look bound, and everything is
/// delivered. The look that left the sweep's deadline behind, planted
/// again, starts a second chain, and the run finds it.
#[test]
fn a_429_storm_on_long_renders_keeps_one_chain_of_looks() {
    use genace_dst::{LatencyOptions, latency};
    let storm = LatencyOptions {
        medians: vec![1800.0],
        spread: 0.2,
        warmup: 0,
        jobs: 4,
        status_storm: Some((60, 600)),
        ..LatencyOptions::default()
    };
    let figures = latency(&storm);
    assert_eq!(figures.violation, None);
    assert_eq!((figures.delivered, figures.cases), (figures.jobs, 0), "{figures:?}");
    println!(
        "30-minute renders in a 429 storm: {:.1} GETs a job, lag p50 {:.0} s",
        figures.gets_per_job(),
        figures.lag_quantile(0.5)
    );
    genace_core::planted::set(planted::DEADLINE_UNMOVED);
    let unmoved = latency(&storm);
    genace_core::planted::set(0);
    let violation = unmoved.violation.unwrap_or_default();
    assert!(violation.contains("looks in the chain"), "{violation:?}");
}

/// A look that came late, past the sweep's deadline, while the sweep
/// restarted its chain (seed 3544: the sweep moved the deadline and sent
/// a look between the late look's read and its write), sent its own next
/// look too: two chains polled the job until it ended. Such a look now
/// records what it saw and ends its chain.
#[test]
fn a_late_look_beside_a_restarted_chain_ends_its_chain() {
    genace_dst::quiet_panics();
    let outcome = run(3544, &Options::default());
    assert!(outcome.violation.is_none(), "{}", report(&outcome));
    // A case opened between two chains, and a person's attach: the record
    // names the chain that looks on (docs/decisions/0039).
    let timed = Options {
        calls_take_time: true,
        transaction_conflicts: 60,
        max_in_flight: Some(3),
        ..Options::default()
    };
    let outcome = run(5569, &timed);
    assert!(outcome.violation.is_none(), "{}", report(&outcome));
}

/// Genace's status reads in storms: 429s with a Retry-After of up to 15
/// minutes, 5xx storms, and renders of 20 to 60 minutes that leave every
/// plan. Every look that waits longer than its plan moves the sweep's
/// deadline past it, so the sweep never starts a second chain beside a
/// live one. A deadline that covers the plan's delay but not a 429's
/// Retry-After, planted, is found by this model and missed without it
/// (the simulator's status reads answer no 429 otherwise).
#[test]
fn status_storms_keep_one_live_chain_of_looks() {
    let stormy = Options {
        status_storms: true,
        ..Options::default()
    };
    model_finds(
        &stormy,
        0..300,
        planted::RETRY_AFTER_UNCOVERED,
        278,
        "started a second chain of polls",
        Options {
            status_storms: false,
            ..stormy.clone()
        },
        300,
    );
}

/// A backlog longer than a page: the sweep reads one item a page and one
/// or two pages of a shard a run, so due items fill more than a page of
/// each shard. Every sweep that ends within its budget has reached every
/// shard that held due items. A page bound that counts the items of all
/// shards together, planted, stops runs before the later shards and is
/// found by this model; with pages of 100 it never binds.
#[test]
fn a_sweep_reaches_every_shard_under_a_backlog_longer_than_a_page() {
    let backlog = Options {
        backlog_pages: true,
        intents: 16,
        ..Options::default()
    };
    model_finds(
        &backlog,
        0..300,
        planted::PAGE_BOUND_ACROSS_SHARDS,
        0,
        "without reaching shard",
        Options {
            backlog_pages: false,
            ..backlog.clone()
        },
        300,
    );
}

/// Every job id Genace's answers gave a handler that ends on its own
/// (not killed) is on a record, on the recovery queue or in a case's
/// evidence when it ends: never only in its log. With 95 % of transaction
/// tries cancelled, acceptances often cannot be saved and go to the
/// recovery queue; a dispatch that logs such an id without sending it
/// there, planted, is found.
#[test]
fn a_job_id_genace_returned_never_lives_only_in_a_log() {
    genace_dst::quiet_panics();
    let unsavable = Options {
        transaction_conflicts: 95,
        max_in_flight: Some(3),
        ..Options::default()
    };
    for seed in 0..200 {
        let outcome = run(seed, &unsavable);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
    }
    let planted = Options {
        bugs: planted::RECOVERY_SKIPPED,
        ..unsavable
    };
    let found = (0..10_000).find(|seed| run(*seed, &planted).violation.is_some());
    assert_eq!(found, Some(296), "the first seed that finds it");
    let violation = run(296, &planted).violation.unwrap_or_default();
    assert!(violation.contains("only in a log"), "{violation}");
}

/// Calls that take time: every call takes a drawn time, AWS calls up to
/// 5 s in brownouts (where four writes of a record in five time out), a
/// tenth of Genace's answers up to 30 s; each handler is told its
/// deadline and killed when its own time passes it. Every job id Genace
/// returned is kept before the kill. A dispatch that never reads its
/// deadline, planted, POSTs with too little time left and is killed with
/// the id in its log alone: found by this model, and by no run without it
/// (nothing sets a deadline there).
#[test]
fn calls_that_take_time_keep_every_job_id_before_the_kill() {
    let timed = Options {
        calls_take_time: true,
        ..Options::default()
    };
    model_finds(
        &timed,
        0..300,
        planted::DEADLINE_UNREAD,
        418,
        "only in a log",
        Options {
            calls_take_time: false,
            ..timed.clone()
        },
        300,
    );
}

/// The reconfiguration model as CI runs it.
fn reconfigured() -> Options {
    Options {
        reconfigure: true,
        max_in_flight: Some(4),
        intents: 16,
        ..Options::default()
    }
}

/// Reconfiguration while work runs: deployments change the account's shard
/// count (1 to 4) and operators set or remove its limit. The account's
/// jobs, and each shard's, never rise past the limit or their part of it,
/// nor at all while over it. An even split of the limit for a new count,
/// planted (as before splits were over the jobs each shard counts), lets
/// the new shards admit beside a full one: found by this model, missed by
/// the same runs without it (nothing changes the count or the limit
/// there). The model also found parts of the learned limit split evenly
/// beside parts of the operator's split over counts, whose minimum left a
/// slot no shard admitted (seed 354, a waiter at rest beside a free slot).
#[test]
fn reconfiguration_admits_nothing_past_the_limit() {
    let reconfigured = reconfigured();
    model_finds(
        &reconfigured,
        (0..100).chain([354]),
        planted::SPLIT_EVEN,
        4,
        "past the limit",
        Options {
            reconfigure: false,
            ..reconfigured.clone()
        },
        300,
    );
}

/// Lowered to one shard while the shards a larger count used still count
/// jobs: shard 0 admits the limit less those jobs until they end. Planted,
/// the limits written whole on one shard (as before this was mended) let
/// it admit the whole limit beside them: found by the reconfiguration
/// model, which lowers the count to one, and missed without it.
#[test]
fn lowered_to_one_shard_the_account_charges_the_others_jobs() {
    let reconfigured = reconfigured();
    model_finds(
        &reconfigured,
        std::iter::empty(),
        planted::ONE_SHARD_WHOLE,
        9,
        "past the limit",
        Options {
            reconfigure: false,
            ..reconfigured.clone()
        },
        300,
    );
}

/// A model's proof: `model` keeps every promise over `clean` seeds; with
/// `bug` planted, its first violation is at `first_seed` and names
/// `broken`; and the runs `without` the model miss the bug over their
/// first `missed_over` seeds.
fn model_finds(
    model: &Options,
    clean: impl Iterator<Item = u64>,
    bug: u32,
    first_seed: u64,
    broken: &str,
    without: Options,
    missed_over: u64,
) {
    genace_dst::quiet_panics();
    for seed in clean {
        let outcome = run(seed, model);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
    }
    let planted = Options {
        bugs: bug,
        ..model.clone()
    };
    let found = (0..10_000).find(|seed| run(*seed, &planted).violation.is_some());
    assert_eq!(found, Some(first_seed), "the first seed that finds it");
    let violation = run(first_seed, &planted).violation.unwrap_or_default();
    assert!(violation.contains(broken), "{violation}");
    let without = Options { bugs: bug, ..without };
    let missed = (0..missed_over).find(|seed| run(*seed, &without).violation.is_some());
    assert_eq!(missed, None, "the runs without the model find it too");
}

/// Intents sent again under one key that differ from its first in exactly
/// one member the fingerprint covers: each is a changed intent (409),
/// never a replay. A fingerprint that leaves out the media type, planted,
/// is found at once by this model; the runs without it change the media
/// type only with the model, and miss it.
#[test]
fn an_intent_that_differs_in_one_member_is_never_a_replay() {
    let varied = Options {
        vary_members: true,
        ..Options::default()
    };
    model_finds(
        &varied,
        0..300,
        planted::FINGERPRINT_SKIPS_MEDIA_TYPE,
        43,
        "a replay carried another intent",
        Options::default(),
        300,
    );
}

/// Contention on every write: a share of plain-write tries refused as if a
/// transaction held the item, under a Genace limit learned from 429s. A
/// lesson that could not be saved left the refused operation waiting for a
/// job's end while the account showed a free slot (seed 107 with meeting
/// transactions); such a 429 now counts as a full account's, retried after
/// its Retry-After. A raise that could not be saved failing its wake-up,
/// planted, is found by this model and missed without it.
#[test]
fn plain_writes_refused_under_contention_lose_no_wake_up() {
    let busy = Options {
        plain_write_conflicts: 70,
        max_in_flight: Some(3),
        genace_limit: Some(1),
        intents: 16,
        ..Options::default()
    };
    let meeting = Options {
        transactions_meet: true,
        max_in_flight: Some(4),
        genace_limit: Some(2),
        ..busy.clone()
    };
    for seed in (0..100).chain([107]) {
        let outcome = run(seed, &meeting);
        assert!(outcome.violation.is_none(), "{}", report(&outcome));
    }
    model_finds(
        &busy,
        0..100,
        planted::RAISE_FAILURE_ABORTS_WAKE,
        969,
        "waits with nothing to wake it",
        Options {
            plain_write_conflicts: 0,
            ..busy.clone()
        },
        300,
    );
}

/// Index lag: the wait indexes see each write up to 2 s late. A wait for a
/// slot begun moments before one was freed was missed by the freeing
/// write's wake-up (seeds 7 and 63), and an operation claimed moments
/// before still showed in its tenant's order and took a freed slot's
/// wake-up (seed 178). Each wait for a slot begun now gets one look once
/// the indexes show it, and a wake-up reads the record of each operation
/// it wakes. The look after a wait that never wakes the waiter by its id,
/// planted, is found by this model and missed without it. A wait for
/// credits begun while its tenant's jobs run gets such a look too: the end
/// of one of them just after the wait missed it (seed 12 of the run
/// below).
#[test]
fn waits_are_woken_through_index_lag() {
    let lagging = Options {
        index_lag_ms: 2000,
        max_in_flight: Some(2),
        intents: 12,
        ..Options::default()
    };
    model_finds(
        &lagging,
        (0..200).chain([7, 63, 178]),
        planted::LOOK_AFTER_WAIT_BY_INDEX,
        20,
        "waits with nothing to wake it",
        Options {
            index_lag_ms: 0,
            ..lagging.clone()
        },
        300,
    );
}

/// Index lag and a spend limit: a wait for credits begun while its
/// tenant's jobs run, and a job's end just after it, whose wake-up read
/// indexes that did not show the wait yet: the waiter sat beside a free
/// slot and credits until the sweep. Planted, the look once the indexes
/// show the wait left out, found at seed 12; missed without the lag.
#[test]
fn a_wait_for_credits_is_woken_through_index_lag() {
    let lagging = Options {
        index_lag_ms: 2000,
        max_in_flight: Some(3),
        spend_limit: Some(10.5),
        intents: 12,
        ..Options::default()
    };
    model_finds(
        &lagging,
        (0..100).chain([12]),
        planted::CREDIT_WAIT_UNSETTLED,
        12,
        "waits with nothing to wake it",
        Options {
            index_lag_ms: 0,
            ..lagging.clone()
        },
        300,
    );
}
