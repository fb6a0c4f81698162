//! The queue-driven stages: each takes one message, moves one operation
//! through the state machine with a conditional write, and hands it on.
//! Imports the ports only.
//!
//! - [`stage`]: the shape they share (a message in, an outcome out, and
//!   what a failure means for the message).
//! - [`dispatch`], [`poll`], [`deliver`], [`recovery`]: the lifecycle of
//!   one operation; [`sweep`]: the periodic repair of what a crash left.
//! - [`wake`]: waking operations that wait for a slot or for credits.
//! - [`webhook_send`]: signed webhook POSTs, their retries and log, each
//!   signed by [`signature`], each checked first against what the table
//!   committed (`webhook_verify`);
//!   [`events`]: which lifecycle changes become webhook events.
//! - [`outcomes`]: each stage's outcome in words, for its span.

pub mod deliver;
pub mod dispatch;
pub mod event_seal;
pub mod events;
pub mod outcomes;
pub mod poll;
pub mod recovery;
pub mod signature;
pub mod stage;
pub mod sweep;
pub mod wake;
pub mod webhook_send;
mod webhook_verify;
