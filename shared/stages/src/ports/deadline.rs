//! The invocation's deadline: when the function running a stage is
//! stopped (a Lambda's timeout, read from its invocation context; the
//! simulator's kill time). The runner sets it around each invocation with
//! [`until`]; a stage reads it with [`current`] and compares it with its
//! clock, so that work which must not be cut in half (a POST and the save
//! of the job id it names) starts only when it can end in time, and what
//! is left goes to a safe place before the stop. None where no runner set
//! one (tests, the local runner's in-process stack): no bound.

use std::future::Future;

use chrono::{DateTime, Utc};

tokio::task_local! {
    static DEADLINE: DateTime<Utc>;
}

/// Runs `work` with `deadline` as the invocation's (none: as it is).
pub async fn until<F: Future>(deadline: Option<DateTime<Utc>>, work: F) -> F::Output {
    match deadline {
        Some(at) => DEADLINE.scope(at, work).await,
        None => work.await,
    }
}

/// The deadline of the invocation running this task, if its runner set one.
pub fn current() -> Option<DateTime<Utc>> {
    if genace_core::planted::on(genace_core::planted::DEADLINE_UNREAD) {
        return None;
    }
    DEADLINE.try_with(|at| *at).ok()
}

/// What is left of the invocation at `now`: none without a deadline, zero
/// once it has passed.
pub fn left(now: DateTime<Utc>) -> Option<std::time::Duration> {
    current().map(|at| (at - now).to_std().unwrap_or_default())
}
