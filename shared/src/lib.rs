//! Genace operations: the library every function uses.
//!
//! - [`domain`]: parsed inputs (tenant, operation key, specification) and the canonical fingerprint.
//! - [`record`] and [`machine`]: the operation record and the pure lifecycle rules.
//! - [`store`]: DynamoDB, every change a conditional write.
//! - [`queue`]: SQS work hints carrying only an operation id.
//! - [`intake`] and [`api`]: recording intents, and the HTTP edge with problem+json errors.
//! - [`config`], [`aws`], [`provision`], [`telemetry`]: settings, clients, local resources, logs.

pub mod admin;
pub mod api;
pub mod app;
pub mod aws;
pub mod clock;
pub mod config;
pub mod deliver;
pub mod dispatch;
pub mod domain;
pub mod genace;
pub mod intake;
pub mod machine;
#[cfg(feature = "testkit")]
pub mod memory;
pub mod metrics;
pub mod poll;
pub mod provision;
pub mod queue;
pub mod record;
pub mod recovery;
pub mod stage;
pub mod storage;
pub mod store;
pub mod sweep;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
