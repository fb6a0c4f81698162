//! The edges of Genace operations: where requests and events come in.
//!
//! - [`http`]: the HTTP API (router, [`http::Principal`], views, problems),
//!   behind API Gateway's JWT authorizer.
//! - [`sqs`]: the runner that feeds SQS batches to a stage and reports
//!   partial batch failures.
//! - [`pipe`]: the runner of an EventBridge Pipes enrichment step.
//!
//! Depends on `genace-core` and `genace-stages`; must not import the AWS or
//! Genace adapters (the composition root, `genace-app`, wires those).

pub mod http;
pub mod pipe;
pub mod sqs;
