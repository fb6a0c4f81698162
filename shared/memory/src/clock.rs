//! A clock that moves only when told.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// A clock that moves only when told. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(start)))
    }

    pub fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl genace_stages::ports::clock::Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn pause(&self, pause: std::time::Duration) {
        self.advance(chrono::Duration::from_std(pause).unwrap_or(chrono::Duration::MAX));
    }
}
