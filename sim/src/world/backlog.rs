//! The sweep under a long due backlog, in virtual time, for the scale
//! benchmark: tens of thousands of intents nobody dispatched (their
//! messages lost), past their grace, and one operation waiting for a slot
//! whose wake-up was lost. Each run of the sweep must make its capacity
//! look (one read of the account item, the lost wake-up repaired) before
//! it touches a due item, and then work through the backlog within its
//! time budget, every request taking the latency model's time.

use super::burst::run_to_end;
#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

/// What the sweep did with the backlog.
#[derive(Debug, Clone, Default)]
pub struct BacklogFigures {
    /// Due items at the start.
    pub due: usize,
    /// Runs until as many items were examined as were due at the start
    /// (an item handled comes due again five minutes later, so some are
    /// examined twice by then).
    pub runs: usize,
    /// Runs that read the account item before the due index.
    pub looked_first: usize,
    /// Items the first run examined, and virtual seconds it took.
    pub first_run_examined: usize,
    pub first_run_seconds: f64,
    /// Whether the first run woke the operation whose wake-up was lost.
    pub repaired_in_first_run: bool,
}

/// Runs of the sweep a backlog may take at most before it is given up.
const MAX_RUNS: usize = 200;

/// The sweep over `due` due items, each request taking `latency_ms`.
pub fn sweep_backlog(due: usize, latency_ms: i64) -> BacklogFigures {
    let world_opts = Options {
        crash_per_mille: 0,
        intents: 0,
        max_in_flight: Some(1),
        ..Options::default()
    };
    let (mut world, runtime) = super::burst::calm_world(0, &world_opts, None);
    let _context = runtime.enter();
    world.sweep_backlog(due, latency_ms)
}

impl World {
    fn sweep_backlog(&mut self, due: usize, latency_ms: i64) -> BacklogFigures {
        // One job runs and one operation waits; then the account grows by
        // one without waking it: a lost wake-up.
        let running = self.image_intent(TENANTS[0], "running");
        let waiting = self.image_intent(TENANTS[0], "waiting");
        for id in [&running, &waiting] {
            let dispatcher = self.app.dispatcher();
            let id = OperationId::parse(id).expect("an operation id");
            let _ = run_to_end(Box::pin(async move {
                dispatcher
                    .dispatch(&id)
                    .await
                    .map(|d| format!("{d:?}"))
                    .map_err(|e| e.to_string())
            }));
        }
        let _ = self.store.clone().with_account_limit(Some(2));
        for i in 0..due {
            self.image_intent(TENANTS[0], &format!("backlog-{i}"));
        }
        self.clock.advance(Duration::minutes(10));
        self.chaos.lock().latency = Some((self.clock.clone(), Duration::milliseconds(latency_ms)));
        let mut figures = BacklogFigures {
            due,
            ..BacklogFigures::default()
        };
        let mut examined = 0;
        for run in 1..=MAX_RUNS {
            let reads_before = {
                let mut chaos = self.chaos.lock();
                chaos.reads_at_first_due_page = None;
                chaos.account_reads
            };
            let sweeper = self.app.sweeper();
            let began = self.now();
            let report = run_to_end(Box::pin(async move {
                sweeper
                    .run()
                    .await
                    .map(|r| serde_json::to_string(&r).unwrap_or_default())
                    .map_err(|e| e.to_string())
            }));
            let report: serde_json::Value = report
                .ok()
                .and_then(|r| serde_json::from_str(&r).ok())
                .unwrap_or_default();
            figures.runs = run;
            let looked = self
                .chaos
                .lock()
                .reads_at_first_due_page
                .is_some_and(|r| r > reads_before);
            figures.looked_first += usize::from(looked);
            let this_run = report["examined"].as_u64().unwrap_or(0) as usize;
            examined += this_run;
            if run == 1 {
                figures.first_run_examined = this_run;
                figures.first_run_seconds = (self.now() - began).num_milliseconds() as f64 / 1000.0;
                figures.repaired_in_first_run = self
                    .queue
                    .messages()
                    .iter()
                    .any(|m| m.queue == Queue::Wake && m.body.contains(&waiting));
            }
            if examined >= due || report["truncated"] == serde_json::Value::Bool(false) {
                break;
            }
            // The next run is a minute after this one began.
            let next = began + Duration::seconds(60);
            if next > self.now() {
                self.clock.set(next);
            }
        }
        figures
    }
}
