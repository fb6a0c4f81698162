//! The ports: what the stages need from the world, as small traits that
//! the AWS, HTTP and in-memory adapters implement, and the plain types
//! they exchange. Nothing here imports the pipeline or the API.
//!
//! - [`table`]: the operation table (records, ledgers, webhook settings,
//!   the case filters) and the commit loop every state change goes through;
//!   [`list`]: what a listing selects and its order.
//! - [`queue`]: the work queues and the recovery channel.
//! - [`outputs`]: the output bucket and its key layout.
//! - [`genace`] and [`downloads`]: Genace's API and its output files.
//! - [`webhooks`]: webhook secrets, the sender and the copy queue.
//! - [`clock`], [`metrics`], [`cursor`] (sealed list cursors).

pub mod clock;
pub mod cursor;
pub mod downloads;
pub mod genace;
pub mod list;
pub mod metrics;
pub mod outputs;
pub mod queue;
pub mod table;
pub mod webhooks;
