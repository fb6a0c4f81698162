//! Genace operations on AWS: the adapters behind the stages' ports.
//!
//! - [`dynamodb`]: the operation table (`OperationStore`), every change a
//!   conditional write.
//! - [`sqs`]: the work queues and the recovery channel.
//! - [`s3`]: the output bucket (`ObjectStore`).
//! - [`secrets`]: Secrets Manager (`SecretStore`), for webhook secrets.
//! - [`clients`]: SDK configuration, timeouts and retries.
//! - [`stream`]: the table's change stream, decoded into lifecycle events.
//! - [`schema`]: the table's keys, indexes and key prefixes, named once.
//! - [`provision`]: creating the table, queues and bucket (local runs, tests).
//!
//! Test helpers against the local endpoint live in `genace-localaws`.
//!
//! Depends on `genace-core` and `genace-stages`; must not import the Genace
//! HTTP adapter, the edge or Lambda crates.

pub mod clients;
pub mod dynamodb;
pub mod provision;
pub mod s3;
pub mod schema;
pub mod secrets;
pub mod sqs;
pub mod stream;

pub use dynamodb::DynamoStore;
pub use s3::S3Store;
pub use secrets::SecretsManager;
pub use sqs::{SqsQueue, SqsReceiptDeferral, SqsWebhookQueue};
