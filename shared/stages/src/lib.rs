//! The stages of Genace operations and the ports they use, in three rooms
//! by role, each importing only from the rooms below it:
//!
//! - [`ports`]: what the stages need from the world: the operation table
//!   (records, ledgers, webhook settings, list and case filters, the
//!   commit loop), the work queues, the output bucket, Genace, downloads,
//!   webhook secrets and sending, the clock, metrics and list cursors.
//!   Imports nothing of this crate above it.
//! - [`pipeline`]: the queue-driven stages (dispatch, poll, deliver,
//!   recovery, the sweep, webhook sending), their shared shape and the
//!   wake-up of waiting operations. Imports the ports only.
//! - [`api`]: what tenants and operators ask of the service: intake,
//!   cancel, erasure, listing, credits, webhook endpoints and settings,
//!   cases and the capacity report. Imports the ports, and from the
//!   pipeline only the wake-up.
//!
//! Beside them: [`app::App`] (every port in one place, and each stage made
//! from it) and [`config`] (settings, given as values). The in-memory
//! adapters of every port live on the adapter floor beside the AWS ones,
//! in `genace-memory`.
//! `tests/tests/layout.rs` keeps the rule.
//!
//! Depends on `genace-core` only among this workspace's crates. It must not
//! import AWS, HTTP or Lambda crates: adapters implement its ports from
//! above (`genace-aws`, `genace-outbound`), and the edge drives it
//! (`genace-edge`).

pub mod api;
pub mod app;
pub mod config;
pub mod pipeline;
pub mod ports;
