//! Every request body of the HTTP API but the intent's (which is the
//! domain's own, [`crate::domain::Intent`]), parsed in one place: the edge
//! reads the bytes and the query, hands the JSON here, and passes the
//! parsed value down to the stages. Every parser refuses unknown members
//! through the one check, [`crate::domain::members`].

mod limits;
mod resolution;
mod webhooks;

pub use limits::{InFlightLimit, MAX_SPEND_LIMIT, SpendLimit};
pub use resolution::{MAX_REASON_CHARS, ResolutionRequest};
pub use webhooks::{EndpointChange, MAX_DESCRIPTION, ReplayRequest, WebhookRequest};
