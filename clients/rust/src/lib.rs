//! The Rust client of the Genace operations API: the one way this
//! repository's own tools talk to it, and the one applications can use.
//!
//! - [`Client`]: a base URL, a bearer token and a [`RetryPolicy`]. Every
//!   route has a typed method, tenant ([`Client::submit`],
//!   [`Client::operation`], [`Client::operations`], [`Client::cancel`],
//!   [`Client::erase_outputs`], [`Client::wait`], ...) and operator
//!   ([`Client::cases`], [`Client::resolve`], [`Client::capacity`], ...).
//! - [`Intent`]: an operation key and a body fixed once, so every retry of
//!   a submit resends exactly them, and the service's replay makes the
//!   retry safe: one intent is at most one paid job.
//! - [`Submitted`]: what a submit came to, typed: created, replayed, a key
//!   reused for another intent (with the existing operation), or refused.
//! - [`webhooks`]: Standard Webhooks verification of a delivery, against
//!   every secret of a rotation, and the typed lifecycle event.
//!
//! A request that fails in transport, or is answered 5xx or 429, is sent
//! again with backoff that honours `Retry-After` when it is safe to: reads,
//! idempotent writes and submits (whose replay makes them idempotent). Other
//! POSTs are sent once.

mod client;
mod endpoints;
mod error;
mod operations;
mod operator;
mod retry;
mod submit;
pub mod webhooks;

pub use client::{Client, Reply, Request, TraceSource};
pub use error::{Error, Problem};
pub use operations::{ListQuery, NEXT_LOOK_HEADER, Operation, Page, WaitFor};
pub use retry::RetryPolicy;
pub use submit::{Intent, Submitted};
