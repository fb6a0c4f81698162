//! The time port: stages ask a [`Clock`] for the time instead of reading
//! the system clock, so that tests and the simulator can run them on
//! simulated time.

use chrono::{DateTime, Utc};

/// Where a stage reads the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;

    /// Waits `pause`: before a stage tries again, or for a look's planned
    /// time. On the system clock, a sleep; a simulated clock moves on by
    /// it instead, so that a test or a simulation never waits in real time.
    fn pause(&self, pause: std::time::Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(pause)
    }
}

/// The system clock, as deployed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> DateTime<Utc> {
        self.as_ref().now()
    }

    fn pause(&self, pause: std::time::Duration) -> impl Future<Output = ()> + Send {
        self.as_ref().pause(pause)
    }
}
