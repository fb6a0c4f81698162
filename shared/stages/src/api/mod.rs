//! What tenants and operators ask of the service, answered from the
//! table. Imports the ports and, from the pipeline, only the wake-up that
//! a freed slot sends.
//!
//! - [`intake`]: recording an intent once, and reading it back.
//! - [`errors`]: one error per family of these operations (submitting,
//!   one operation, lists, settings, webhook endpoints).
//! - Tenant features: [`cancel`], [`erase`], [`listing`], [`credits`],
//!   [`progress`] (an operation's queue place, expected start and end,
//!   and next look).
//! - Operator features: [`operator`] (cases and their resolutions),
//!   [`capacity`] (the account's report and limits).
//! - [`webhooks`]: a tenant's webhook endpoints (managed by the tenant)
//!   and its single webhook (set by operators).

pub mod cancel;
pub mod capacity;
pub mod context;
pub mod credits;
pub mod erase;
pub mod errors;
pub mod intake;
pub mod listing;
pub mod operator;
pub mod progress;
pub mod trace;
pub mod webhooks;
