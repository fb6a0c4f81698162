//! Webhooks, the API's side.
//!
//! - [`endpoints`]: a tenant's webhook endpoints, managed by the tenant
//!   (create, list, read, update, delete, rotate the secret, the attempt
//!   log, replay and recovery).
//! - [`settings`]: a tenant's single webhook, set by operators.

pub mod endpoints;
pub mod settings;
