//! What tenants and operators ask of the service, answered from the
//! table. Imports the ports and, from the pipeline, only the wake-up that
//! a freed slot sends.
//!
//! - [`intake`]: recording an intent once, and reading it back.
//! - [`errors`]: one error per family of these operations (submitting,
//!   one operation, lists, settings, webhook endpoints).
//! - Tenant features: [`cancel`], [`erase`], [`listing`], [`credits`],
//!   [`webhook_endpoints`].
//! - Operator features: [`operator`] (cases and their resolutions),
//!   [`capacity`] (the account's report and limits), [`tenant_webhook`]
//!   (a tenant's single webhook).

pub mod cancel;
pub mod capacity;
pub mod context;
pub mod credits;
pub mod erase;
pub mod errors;
pub mod intake;
pub mod listing;
pub mod operator;
pub mod tenant_webhook;
pub mod trace;
pub mod webhook_endpoints;
