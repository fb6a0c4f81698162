//! The commit loop every state change goes through: decide on the record
//! as read, write it conditionally, and on a lost race decide again on the
//! record as it now is. Each commit is a span (`dynamodb.commit`, with its
//! tries and the conflicts it met) under the stage's, and the phases it
//! moved the operation between are recorded on the stage's span.

use tracing::Instrument;

use crate::ports::table::{OperationStore, StoreError};
use genace_core::record::OperationRecord;

/// Why [`commit`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The rules refuse the change on the record as it now is.
    #[error("{refusal}")]
    Refused {
        refusal: genace_core::machine::Refusal,
        current: Box<OperationRecord>,
    },
    /// The store kept failing.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Decides a transition on `rec` and writes it, re-deciding on the current
/// record when the write loses a race (the losing response carries it), and
/// retrying transient store failures with backoff, `attempts` times at most.
/// Returns the record as written. Claims use it as every other write does.
pub async fn commit<S, F>(
    store: &S,
    rec: OperationRecord,
    attempts: u32,
    decide: F,
) -> Result<OperationRecord, CommitError>
where
    S: OperationStore,
    F: Fn(&OperationRecord) -> Result<OperationRecord, genace_core::machine::Refusal>,
{
    commit_with(store, rec, attempts, |r| decide(r).map(|next| (next, ())))
        .await
        .map(|(written, ())| written)
}

/// [`commit`] for a decision that also says something to its caller (which
/// fault directive the claimed record carried, which way it went): `T` from
/// the decision that was written.
pub async fn commit_with<S, T, F>(
    store: &S,
    rec: OperationRecord,
    attempts: u32,
    decide: F,
) -> Result<(OperationRecord, T), CommitError>
where
    S: OperationStore,
    F: Fn(&OperationRecord) -> Result<(OperationRecord, T), genace_core::machine::Refusal>,
{
    commit_while(store, rec, attempts, decide, || true).await
}

/// [`commit_with`], trying again after a failed write only while
/// `time_left` says there is time for one more (a caller with a deadline:
/// the last error is answered when there is not).
pub async fn commit_while<S, T, F, L>(
    store: &S,
    rec: OperationRecord,
    attempts: u32,
    decide: F,
    time_left: L,
) -> Result<(OperationRecord, T), CommitError>
where
    S: OperationStore,
    F: Fn(&OperationRecord) -> Result<(OperationRecord, T), genace_core::machine::Refusal>,
    L: Fn() -> bool + Sync,
{
    let stage = tracing::Span::current();
    let before = rec.phase;
    // A decision that closes a case is still of an operation that had one.
    let had_case = rec.case.is_some();
    let span = tracing::info_span!(
        "commit",
        otel.name = "dynamodb.commit",
        otel.kind = "client",
        tries = tracing::field::Empty,
        conflicts = tracing::field::Empty
    );
    let written = decide_and_write(store, rec, attempts, decide, &time_left, &span)
        .instrument(span.clone())
        .await;
    if let Ok((next, _)) = &written {
        genace_trace::record_phases(
            &stage,
            next.tenant_id.as_str(),
            before.as_str(),
            next.phase.as_str(),
            had_case || next.case.is_some(),
        );
    }
    written
}

/// [`commit_with`]'s tries, counted on `span`.
async fn decide_and_write<S, T, F>(
    store: &S,
    mut rec: OperationRecord,
    attempts: u32,
    decide: F,
    time_left: &(dyn Fn() -> bool + Sync),
    span: &tracing::Span,
) -> Result<(OperationRecord, T), CommitError>
where
    S: OperationStore,
    F: Fn(&OperationRecord) -> Result<(OperationRecord, T), genace_core::machine::Refusal>,
{
    let mut conflicts = 0u32;
    let mut last = None;
    let mut backoff = std::time::Duration::from_millis(50);
    let attempts = attempts.max(1);
    for attempt in 1..=attempts {
        if attempt > 1 && last.is_some() && !time_left() {
            break;
        }
        span.record("tries", attempt);
        let (next, said) = match decide(&rec) {
            Ok(decided) => decided,
            Err(refusal) => {
                return Err(CommitError::Refused {
                    refusal,
                    current: Box::new(rec),
                });
            }
        };
        // Each write moves the version by exactly one; a decision that
        // changes nothing returns the record as it was.
        assert!(
            next == rec || next.version == rec.version + 1,
            "{}: a decision on version {} would write version {}",
            rec.operation_id,
            rec.version,
            next.version
        );
        match store.apply(&rec, &next).await {
            Ok(_) => return Ok((next, said)),
            // Our own write landed, and a retry of it (by the SDK) reported the
            // conflict with itself: the stored record is exactly ours.
            Err(StoreError::Conflict(Some(current))) if *current == next => return Ok((next, said)),
            Err(StoreError::Conflict(Some(current))) => {
                conflicts += 1;
                span.record("conflicts", conflicts);
                rec = *current;
            }
            // A conflict that did not say what the record now is (a
            // cancelled transaction): read it.
            Err(StoreError::Conflict(None)) => {
                conflicts += 1;
                span.record("conflicts", conflicts);
                match store.get(&rec.operation_id, next.updated_at).await? {
                    Some(current) if current == next => return Ok((next, said)),
                    Some(current) => rec = current,
                    None => return Err(CommitError::Store(StoreError::Conflict(None))),
                }
            }
            // No room is an answer, not a fault: the caller waits.
            Err(e @ (StoreError::SpendLimit | StoreError::AccountFull | StoreError::TenantFull)) => {
                return Err(CommitError::Store(e));
            }
            // The store paused between its own tries already: again at once.
            Err(StoreError::Contention) => last = Some(StoreError::Contention),
            Err(e) => {
                last = Some(e);
                if attempt < attempts {
                    store.pause_before_retry(backoff).await;
                    backoff *= 4;
                }
            }
        }
    }
    Err(CommitError::Store(last.unwrap_or(StoreError::Conflict(None))))
}

/// How many times a state write is tried before giving up.
pub fn write_attempts() -> u32 {
    4
}
