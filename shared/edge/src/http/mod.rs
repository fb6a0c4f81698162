//! The HTTP API: its tenants' routes and its operators'.
//!
//! - [`routes`]: the one route table (method, path, who may call, handler).
//! - [`router`]: [`handle`], the entry: finds the route and calls its handler.
//! - [`handlers`]: one file per resource.
//! - [`request`]: the one JSON body reader, page limits, `If-Match`, query parameters.
//! - [`auth`]: [`Principal`], the one reader of the authorizer's claims.
//! - [`views`]: the JSON of an operation and of a case.
//! - [`problem`]: every error as an RFC 9457 problem document.

pub mod auth;
pub mod handlers;
pub mod problem;
pub mod request;
pub mod router;
pub mod routes;
pub mod views;

pub use auth::Principal;
pub use problem::{PROBLEM_JSON, Problem};
pub use router::handle;
