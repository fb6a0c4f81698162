//! Calls that take time ([`crate::Options::calls_take_time`]): every port
//! call takes a time drawn from the seed, a few milliseconds, or in a
//! brownout (a share of two-minute windows of the run) up to the 5 s the
//! AWS clients wait for one call; a POST or status read to Genace takes a
//! fifth of a second to 3 s, and one in ten up to the HTTP client's 30 s. Each handler's time is its own: what it has
//! spent in its calls is added to the run's clock when it reads the time
//! ([`SimClock`]), so handlers that run side by side do not spend each
//! other's. A handler whose own time passes its function's timeout is
//! killed mid-flight.

use chrono::{DateTime, Duration, Utc};
use genace_memory::ManualClock;
use genace_stages::ports::clock::Clock;

use super::Chaos;
use super::timing::{Call, brownout};

impl Chaos {
    /// Calls take time from now on, on `clock`; `share` percent of the
    /// run's two-minute windows are brownouts.
    pub(crate) fn take_time(&self, clock: ManualClock, seed: u64, share: u64) {
        self.lock().time.model = Some((clock, seed, share));
    }

    pub(crate) fn takes_time(&self) -> bool {
        self.lock().time.model.is_some()
    }

    /// The handler being polled makes a call of `kind`: it spends the
    /// call's time.
    pub(crate) fn spend(&self, kind: Call) {
        let mut s = self.lock();
        let Some((clock, seed, share)) = s.time.model.clone() else {
            return;
        };
        let Some((actor, _)) = s.polling else {
            return;
        };
        let slow = brownout(seed, share, clock.now());
        let ms = match kind {
            Call::Aws if slow => 500 + s.rng.below(4501),
            Call::Aws => 5 + s.rng.below(56),
            // A tenth of Genace's answers come slowly, up to the HTTP
            // client's 30 s bound.
            Call::Genace if s.rng.chance(100) => 5_000 + s.rng.below(25_001),
            Call::Genace => 200 + s.rng.below(2801),
        };
        *s.time.spent.entry(actor).or_insert(Duration::zero()) += Duration::milliseconds(ms as i64);
    }

    /// In a brownout, four writes of a record in five run into the AWS
    /// client's 5 s bound and fail as a request that timed out: the time
    /// is spent and the write did not happen.
    pub(crate) fn timed_out_write(&self) -> bool {
        let mut s = self.lock();
        let Some((clock, seed, share)) = s.time.model.clone() else {
            return false;
        };
        let Some((actor, _)) = s.polling else {
            return false;
        };
        if !brownout(seed, share, clock.now()) || s.rng.chance(200) {
            return false;
        }
        *s.time.spent.entry(actor).or_insert(Duration::zero()) += Duration::seconds(5);
        true
    }

    /// When calls take time, the handler being polled spends `pause` (true);
    /// otherwise nothing is spent (false).
    pub(crate) fn spend_pause(&self, pause: std::time::Duration) -> bool {
        let mut s = self.lock();
        match (s.time.model.is_some(), s.polling) {
            (true, Some((actor, _))) => {
                let by = Duration::from_std(pause).unwrap_or(Duration::MAX);
                *s.time.spent.entry(actor).or_insert(Duration::zero()) += by;
                true
            }
            _ => false,
        }
    }

    /// No more brownouts (the quiet phase).
    pub(crate) fn calm_time(&self) {
        if let Some(model) = self.lock().time.model.as_mut() {
            model.2 = 0;
        }
    }

    /// What the handler being polled has spent (zero outside a handler).
    fn own(&self) -> Duration {
        let s = self.lock();
        s.polling
            .and_then(|(actor, _)| s.time.spent.get(&actor).copied())
            .unwrap_or_else(Duration::zero)
    }

    /// What actor `id` has spent in its calls.
    pub(crate) fn spent_by(&self, id: usize) -> Duration {
        self.lock().time.spent.get(&id).copied().unwrap_or_else(Duration::zero)
    }

    /// Actor `id` ended: its time is forgotten.
    pub(crate) fn forget_time(&self, id: usize) {
        self.lock().time.spent.remove(&id);
    }
}

/// The clock the stages read: the run's, plus what the handler reading it
/// has spent in its calls. Its pauses are the handler's own too when calls
/// take time; otherwise they move the run's clock, as before the model.
#[derive(Debug, Clone)]
pub struct SimClock {
    pub(crate) run: ManualClock,
    pub(crate) chaos: Chaos,
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        self.run.now() + self.chaos.own()
    }

    async fn pause(&self, pause: std::time::Duration) {
        if !self.chaos.spend_pause(pause) {
            self.run.advance(Duration::from_std(pause).unwrap_or(Duration::MAX));
        }
    }
}
