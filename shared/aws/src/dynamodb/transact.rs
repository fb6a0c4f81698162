//! One `TransactWriteItems`, tried again while DynamoDB cancels it for
//! contention, and what a cancellation means: which item refused, or a busy
//! table.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::TransactWriteItem;
use genace_stages::ports::table::{CONFLICT_TRIES, StoreError, conflict_backoff};

use super::DynamoStore;
use super::item::{conflict, service_error};
use super::ledger_reads::ledger_from_item;

/// Which items of a transaction may refuse it for a limit: with `reserves`
/// (a claim), the tenant's counters (item 1) and the account shard at
/// `admits`, when the claim takes a slot.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Refusals {
    pub(super) reserves: bool,
    pub(super) admits: Option<usize>,
    /// A write of the account's parts: a condition that failed on any of
    /// its items (a rival's limit, a claim past a part) is a conflict, and
    /// the writer reads again.
    pub(super) parts: bool,
    /// The tenant's counters (item 1) keep its place in its set only while
    /// it waits: a failed condition there, on a write that is not a claim,
    /// says the place is stale ([`StoreError::Conflict`] with no record),
    /// and the writer places it anew.
    pub(super) places: bool,
}

impl Refusals {
    /// For a write of the account's parts over its shard items.
    pub(super) const PARTS: Self = Self {
        reserves: false,
        admits: None,
        parts: true,
        places: false,
    };
}

impl DynamoStore {
    /// One transaction, tried again while DynamoDB cancels it only for
    /// meeting another transaction on one of its items: contention is
    /// retried here (an item throttled is the same), counted
    /// (`TransactionConflicts`, `TransactionsThrottled`), and answered as
    /// [`StoreError::Contention`] only when every try met one.
    pub(super) async fn transact(&self, items: Vec<TransactWriteItem>, refusals: Refusals) -> Result<(), StoreError> {
        for attempt in 1..=CONFLICT_TRIES {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .send()
                .await;
            let mut throttled = false;
            let refused = match sent {
                Ok(_) => return Ok(()),
                Err(SdkError::ServiceError(ctx)) => match ctx.into_err() {
                    TransactWriteItemsError::TransactionCanceledException(e) => {
                        throttled = e
                            .cancellation_reasons()
                            .iter()
                            .any(|r| r.code() == Some("ThrottlingError"));
                        cancelled(&e, refusals)
                    }
                    other => StoreError::Service(aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string()),
                },
                Err(e) => service_error(e),
            };
            if !matches!(refused, StoreError::Contention) {
                return Err(refused);
            }
            // A hot item past its throughput, apart from two transactions
            // meeting: the first says the account needs sharding.
            let metric = if throttled {
                "TransactionsThrottled"
            } else {
                "TransactionConflicts"
            };
            self.metrics.count(metric, &[]);
            if attempt < CONFLICT_TRIES {
                tokio::time::sleep(conflict_backoff(attempt)).await;
            }
        }
        Err(StoreError::Contention)
    }
}

/// Which item of a cancelled transaction refused: the first (the record's
/// version, or the account's learned limit: a conflict), the tenant's
/// counters (the spend limit) or the account shard a claim takes a slot on
/// (no free slot). Only a claim can be refused by the last two.
fn cancelled(e: &aws_sdk_dynamodb::types::error::TransactionCanceledException, refusals: Refusals) -> StoreError {
    let reserves = refusals.reserves;
    let reasons = e.cancellation_reasons();
    let failed = |i: usize| {
        reasons
            .get(i)
            .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
    };
    if refusals.parts && (0..reasons.len()).any(failed) {
        StoreError::Conflict(None)
    } else if failed(0) {
        conflict(reasons[0].item())
    } else if failed(1) && refusals.places && !reserves {
        StoreError::Conflict(None)
    } else if failed(1) && reserves {
        // Which of the tenant's limits: its counters as they were say.
        let ledger = reasons[1].item().and_then(|item| ledger_from_item("", item).ok());
        match ledger {
            Some(l) if !l.has_a_slot() => StoreError::TenantFull,
            _ => StoreError::SpendLimit,
        }
    } else if refusals.admits.is_some_and(failed) && reserves {
        StoreError::AccountFull
    } else if reasons
        .iter()
        .any(|r| matches!(r.code(), Some("TransactionConflict" | "ThrottlingError")))
    {
        // Another transaction on one of its items, or an item past its
        // share of throughput (a hot item such as the account's takes
        // about 1,000 write units a second): nothing written, and nothing
        // refused; the table is busy, and the same transaction may be sent
        // again.
        StoreError::Contention
    } else {
        StoreError::Service(format!(
            "transaction cancelled: {:?}",
            reasons.iter().map(|r| r.code()).collect::<Vec<_>>()
        ))
    }
}

impl DynamoStore {
    /// One plain write (`PutItem`, `UpdateItem`, `DeleteItem`) to an item
    /// that transactions also write, sent again while DynamoDB refuses it
    /// because a transaction holds the item (`TransactionConflictException`,
    /// [`StoreError::Contention`]): nothing was written, and the caller's
    /// job is to retry it. Counted (`PlainWriteConflicts`); answered as
    /// contention only when every one of [`CONFLICT_TRIES`] tries met one.
    /// `send` builds and sends the write afresh each try.
    pub(super) async fn plain_write<T, F, Fut>(&self, mut send: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        for attempt in 1..=CONFLICT_TRIES {
            match send().await {
                Err(StoreError::Contention) => {
                    self.metrics.count("PlainWriteConflicts", &[]);
                    if attempt < CONFLICT_TRIES {
                        tokio::time::sleep(conflict_backoff(attempt)).await;
                    }
                }
                done => return done,
            }
        }
        Err(StoreError::Contention)
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;

    use super::*;

    fn cancelled_for(codes: &[&str], reserves: bool) -> StoreError {
        let e = TransactionCanceledException::builder()
            .set_cancellation_reasons(Some(
                codes
                    .iter()
                    .map(|c| CancellationReason::builder().code(*c).build())
                    .collect(),
            ))
            .build();
        cancelled(
            &e,
            Refusals {
                reserves,
                admits: Some(2),
                parts: false,
                places: false,
            },
        )
    }

    /// A conflict and a throttled item are contention, tried again; a
    /// failed condition is a refusal, and anything else a service failure.
    #[test]
    fn a_busy_table_is_contention_and_a_refusal_is_not() {
        for codes in [
            ["None", "TransactionConflict", "None"],
            ["None", "None", "ThrottlingError"],
        ] {
            assert!(
                matches!(cancelled_for(&codes, true), StoreError::Contention),
                "{codes:?}"
            );
        }
        assert!(matches!(
            cancelled_for(&["None", "None", "ConditionalCheckFailed"], true),
            StoreError::AccountFull
        ));
        assert!(matches!(
            cancelled_for(&["None", "ValidationError", "None"], false),
            StoreError::Service(_)
        ));
    }
}
