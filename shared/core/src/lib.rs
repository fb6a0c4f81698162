//! The core of Genace operations: what an operation is and the rules it
//! lives by.
//!
//! - [`domain`]: parsed inputs (tenant, operation key, specification, remote
//!   job id, fault directives) and the canonical fingerprint.
//! - [`record`]: the operation record as stored.
//! - [`machine`]: the pure lifecycle rules; every record change is decided here.
//! - [`remote`]: Genace's protocol as data: outcomes of a POST and of a
//!   status read, and the submission body.
//! - [`keys`]: every key prefix of the operations table, spelt once.
//! - [`ledger`]: each operation's share of its tenant's credits.
//! - [`capacity`]: the Genace account's capacity and its limits.
//! - [`shard`]: the Genace account's counters split over shards.
//! - [`render`]: learned render times and the poll plan drawn from them.
//! - [`progress`]: what a client is shown of an unfinished operation: its
//!   place in the queue, its expected start and end, when to look again.
//! - [`events`]: the lifecycle events a committed change announces.
//! - [`messages`]: what the stages send each other.
//! - [`webhook`]: a tenant's webhook settings and its secret folder.
//! - [`requests`]: every HTTP request body but the intent's, parsed in one
//!   place (webhook settings and endpoints, resolutions, limits).
//! - [`urlguard`]: which URLs a policy allows before any request; pure.
//! - [`planted`]: known bugs the simulator can plant again (feature
//!   `planted-bugs`; off in every other build).
//!
//! This crate does no I/O. It must not import AWS, HTTP or Lambda crates, nor
//! any other crate of this workspace: every other crate depends on it.

pub mod capacity;
pub mod domain;
pub mod events;
pub mod keys;
pub mod ledger;
pub mod machine;
pub mod messages;
pub mod planted;
pub mod progress;
pub mod record;
pub mod remote;
pub mod render;
pub mod requests;
pub mod shard;
pub mod trace;
pub mod urlguard;
pub mod webhook;
