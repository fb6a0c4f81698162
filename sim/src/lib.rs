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

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use chrono::{DateTime, Duration, TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::ledger::{self, Millicredits, TenantLedger};
use genace_core::machine::{self, Resolution};
use genace_core::messages::{Queue, RecoveryMessage};
use genace_core::record::{CaseReason, DeliveryState, OperationRecord, Phase, Settlement};
use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status};
use genace_core::webhook::{AttemptStatus, DeliveryAttempt, EndpointSet, WebhookConfig};
use genace_stages::api::admin::Operator;
use genace_stages::app::App;
use genace_stages::memory::{
    ManualClock, MemoryBody, MemoryDownloads, MemoryGenace, MemoryObjects, MemoryQueue, MemoryStore, SubmitPlan,
};
use genace_stages::pipeline::stage::{Stage, handle_body};
use genace_stages::ports::downloads::{Download, DownloadError, Downloads};
use genace_stages::ports::genace::Genace;
use genace_stages::ports::outputs::{ObjectHead, ObjectStore, PartReceipt, StorageError};
use genace_stages::ports::queue::{QueueError, RecoveryChannel, WorkQueue};
use genace_stages::ports::table::{
    Applied, CasePage, Created, DueCursor, DuePage, LedgerPage, OperationRecords, StoreError, TenantLedgers,
    WebhookEndpoints, WebhookSettings,
};

mod chaos;
mod rng;
mod world;

pub use chaos::{Chaos, Chaotic};
pub use rng::Rng;
use world::World;
pub use world::{Options, Outcome};

fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest;
    genace_core::domain::hex(&sha2::Sha256::digest(data))
}

/// Where every run's clock starts.
fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

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
    if let Some(v) = &violation {
        world.trace.push(format!("VIOLATION: {v}"));
    }
    Outcome {
        seed,
        violation,
        trace: world.trace,
    }
}

/// Keeps panics inside handlers quiet: they are reported as violations.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}
