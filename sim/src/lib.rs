//! Deterministic simulation of Genace operations.
//!
//! One seed drives one run of the real stage code (intake, dispatch, poll,
//! deliver, recovery, the sweep and operators' resolutions) on the in-memory
//! adapters and a manual clock:
//!
//! - every port call is an await point where the scheduler may switch to
//!   another handler, and where a handler may crash, before or after the
//!   call's effect (the handler is dropped, as a killed Lambda; its message
//!   comes back after the visibility timeout);
//! - the scheduler picks each step from the seed: a new intent (duplicates
//!   and changed specifications included), a message received from a queue,
//!   one more step of a running handler, the clock moving (handlers past
//!   their function's timeout are killed), the sweep, Genace moving a job
//!   on, a duplicated message, an operator resolving a case;
//! - Genace answers each POST with one of the outcome classes of its
//!   documentation (202 queued or running, 502 with or without a job id,
//!   5xx, a timeout before or after the job is created, a reset, a
//!   malformed 202, 429, 401/403), and status reads with moving states, null
//!   outputs, 404s and answers for another job.
//!
//! After every step the run checks the safety invariants; after a quiet
//! phase (no crashes, everything drained) it checks the ones that hold at
//! rest. The same seed gives the same trace, byte for byte.

mod chaos;
mod common;
mod rng;
mod world;

pub use chaos::{Chaos, Chaotic};
pub use rng::Rng;
use world::World;
pub use world::backlog::{BacklogFigures, sweep_backlog};
pub use world::burst::{BurstFigures, BurstOptions, burst};
pub use world::latency::{LatencyFigures, LatencyOptions, latency};
pub use world::{Options, Outcome};

/// One run of `seed`.
pub fn run(seed: u64, opts: &Options) -> Outcome {
    genace_core::planted::set(opts.bugs);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let mut world = World::new(seed, opts);
    let violation = runtime.block_on(async {
        for _ in 0..opts.steps {
            if let Err(v) = world.step().and_then(|_| world.check_step()) {
                return Some(v);
            }
        }
        world.quiesce().err()
    });
    let (conflicts, contended) = world.transaction_conflicts();
    if conflicts > 0 {
        world.trace.push(format!(
            "transaction tries cancelled for a conflict: {conflicts}; transactions cancelled on every try: {contended}"
        ));
    }
    let writes = world.writes();
    if writes.admitted > 0 {
        world.trace.push(format!(
            "write units: the account item {} for {} admitted jobs ({:.1} a job); the busiest item {} {}; {} tries met an open transaction",
            writes.account_units,
            writes.admitted,
            writes.account_units_per_admitted_job(),
            writes.busiest_item,
            writes.busiest_units,
            writes.met_open
        ));
    }
    if let Some(v) = &violation {
        world.trace.push(format!("VIOLATION: {v}"));
    }
    Outcome {
        seed,
        violation,
        wake_max: world.wake_max,
        trace: world.trace,
        writes,
    }
}

/// Keeps panics inside handlers quiet: they are reported as violations.
pub fn quiet_panics() {
    // A failed assertion of a test itself (in the crate's `tests/`) still
    // says what failed.
    std::panic::set_hook(Box::new(|info| {
        if info.location().is_some_and(|l| l.file().contains("tests/")) {
            eprintln!("{info}");
        }
    }));
}
