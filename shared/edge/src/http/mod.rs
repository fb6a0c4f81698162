//! The HTTP API of intake and of the operators.
//!
//! - [`router`]: routes, request bodies and responses; [`handle`] is the entry.
//! - [`request`]: the one JSON body reader, page limits, query parameters.
//! - [`webhook_endpoints`]: the webhook endpoints' routes.
//! - [`auth`]: [`Principal`], the one reader of the authorizer's claims.
//! - [`views`]: the JSON of an operation and of a case.
//! - [`problem`]: every error as an RFC 9457 problem document.

pub mod auth;
pub mod problem;
pub mod request;
pub mod router;
pub mod views;
pub mod webhook_endpoints;

pub use auth::Principal;
pub use problem::{PROBLEM_JSON, Problem};
pub use router::handle;
