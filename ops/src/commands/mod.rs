//! One file per command: each reads its arguments, calls the API and prints
//! the answer.

mod capacity;
mod cases;
mod credits;
mod endpoint;
mod op;
mod resolve;
mod trace;
mod webhook;
mod whoami;

pub(crate) use capacity::capacity;
pub(crate) use cases::cases;
pub(crate) use credits::credits;
pub(crate) use endpoint::endpoint;
pub(crate) use op::op;
pub(crate) use resolve::resolve;
pub(crate) use trace::trace;
pub(crate) use webhook::webhook;
pub(crate) use whoami::{ClaimNames, whoami};
