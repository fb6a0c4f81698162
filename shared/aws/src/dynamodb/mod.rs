//! The operation table in DynamoDB: the [`OperationStore`] port as
//! conditional writes. A create is a put conditional on absence (or an
//! expired record); a change is an `UpdateItem` of the attributes that
//! changed, conditional on the version read, returning the current item when
//! the condition fails.
//!
//! A change that moves the operation's share of its tenant's credits is one
//! `TransactWriteItems` of the record's update and the tenant ledger item's
//! `ADD`s, so the counters cannot drift from the records. Ledger items
//! (`TENANT#<tenant>`) sit in the due-time index under `LEDGER#<shard>`
//! partitions, which the sweep never reads, so operators can list them
//! without a scan; their counter updates touch no projected attribute and
//! cost the index nothing. A tenant with operations waiting is also in the
//! waiting set (`wait-index` under `WAITING#<shard>`), which wake-ups read
//! instead of every ledger (`ledger_reads.rs`).

use aws_sdk_dynamodb::Client;
use genace_stages::ports::metrics::Metrics;

mod account;
mod account_clauses;
mod account_limits;
mod account_parts;
mod cases;
mod item;
mod ledger_reads;
mod ledgers;
mod listing;
mod position;
mod records;
mod render_times;
mod transact;
mod update;
mod webhooks;

#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Where phase changes are counted (off unless given one).
    metrics: Metrics,
    /// `GENACE_MAX_IN_FLIGHT`: a claim is admitted while the account's jobs
    /// in flight are fewer. None: no limit.
    account_limit: Option<u32>,
    /// `GENACE_ACCOUNT_SHARDS`: the items the account's counters are split
    /// into ([`genace_core::shard`]).
    shards: genace_core::shard::AccountShards,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            metrics: Metrics::off(),
            account_limit: None,
            shards: genace_core::shard::AccountShards::ONE,
        }
    }

    /// The same store, admitting dispatch claims while the Genace account
    /// has fewer than `max_in_flight` jobs of ours in flight.
    #[must_use]
    pub fn with_account_limit(self, max_in_flight: Option<u32>) -> Self {
        Self {
            account_limit: max_in_flight,
            ..self
        }
    }

    /// The same store, with the account's counters split into `shards`.
    #[must_use]
    pub fn with_account_shards(self, shards: genace_core::shard::AccountShards) -> Self {
        Self { shards, ..self }
    }

    /// The same store, counting phase changes into `metrics`.
    #[must_use]
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        Self { metrics, ..self }
    }
}
