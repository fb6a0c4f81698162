//! Webhooks, the pipeline's side: one room for what tenants' receivers
//! are sent.
//!
//! - [`filter`]: which lifecycle changes the events pipe marks for the
//!   webhook queue.
//! - [`seal`]: the events pipe's MAC over each event, checked before any
//!   send.
//! - [`send`]: the webhook stage: signed POSTs, their retries and log,
//!   each event checked first against what the table committed
//!   (`verify`), and signed by [`signature`] (Standard Webhooks).

pub mod filter;
pub mod seal;
pub mod send;
pub mod signature;
mod verify;
