//! The queue-driven stages: each takes one message, moves one operation
//! through the state machine with a conditional write, and hands it on.
//! Imports the ports only.
//!
//! - [`stage`]: the shape they share (a message in, an outcome out, and
//!   what a failure means for the message).
//! - [`dispatch`], [`poll`], [`deliver`], [`recovery`]: the lifecycle of
//!   one operation; [`sweep`]: the periodic repair of what a crash left.
//! - [`wake`]: waking operations that wait for a slot or for credits.
//! - [`webhooks`]: which lifecycle changes become webhook events, the
//!   events pipe's seal, and the signed POSTs with their retries and log.
//! - [`outcomes`]: each stage's outcome in words, for its span.

pub mod deliver;
pub mod dispatch;
pub mod outcomes;
pub mod poll;
pub mod recovery;
pub mod stage;
pub mod sweep;
pub mod wake;
pub mod webhooks;
