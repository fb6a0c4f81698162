//! Webhooks in the table: a tenant's webhook settings (`settings`) and
//! its endpoints, attempt logs and kept events (`endpoints`).

mod endpoints;
mod settings;
