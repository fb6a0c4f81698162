//! Webhooks in memory: secrets, receivers and the webhook queue
//! (`senders`), and a tenant's settings, endpoints, attempt logs and kept
//! events in the same table as the records (`table`).

mod senders;
mod table;

pub use senders::*;
