//! The stages of Genace operations and the ports they use.
//!
//! - Stages: [`intake`] (and [`admin`], the operators' resolutions),
//!   [`dispatch`], [`poll`], [`deliver`], [`recovery`] and [`sweep`]; the
//!   queue-driven ones share the [`stage::Stage`] shape.
//! - Ports: [`table`] (the operation table), [`queue`] (work queues and the
//!   recovery channel), [`outputs`] (the output bucket), [`genace`],
//!   [`downloads`] and [`clock`].
//! - [`app::App`]: every port in one place, and each stage made from it.
//! - [`config`], [`metrics`]: settings (given as values), the metrics port.
//! - [`urlguard`]: which URLs a policy allows, checked before any request
//!   (pure; the `url` parser is its one outside dependency).
//! - `memory` (feature `testkit`): in-memory adapters and a manual clock.
//!
//! Depends on `genace-core` only among this workspace's crates. It must not
//! import AWS, HTTP or Lambda crates: adapters implement its ports from
//! above (`genace-aws`, `genace-http`), and the edge drives it
//! (`genace-edge`).

pub mod admin;
pub mod app;
pub mod cancel;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod credits;
pub mod cursor;
pub mod deliver;
pub mod dispatch;
pub mod downloads;
pub mod erase;
pub mod events;
pub mod genace;
pub mod intake;
pub mod listing;
#[cfg(feature = "testkit")]
pub mod memory;
pub mod metrics;
pub mod outputs;
pub mod poll;
pub mod queue;
pub mod recovery;
pub mod stage;
pub mod sweep;
pub mod table;
pub mod urlguard;
pub mod webhook_admin;
pub mod webhook_endpoints;
pub mod webhooks;
