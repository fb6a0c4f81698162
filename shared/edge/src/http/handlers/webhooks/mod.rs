//! The webhook routes: a tenant's endpoints ([`endpoints`], managed by
//! the tenant) and its single webhook ([`settings`], set by operators).

pub mod endpoints;
pub mod settings;
