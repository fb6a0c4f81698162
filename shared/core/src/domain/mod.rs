//! Domain types that can only exist in a valid form.
//!
//! Everything an application sends us is parsed here, once. After parsing, the
//! rest of the library never re-checks a key, a tenant or a specification.
//!
//! - `input`: why an input was refused, and the checks the parsers share.
//! - `ids`: tenants, operation keys and ids, Genace job ids.
//! - `spec`: media type, specification, priority.
//! - `canonical`: the canonical bytes and their fingerprint.
//! - `deadline`: an intent's dispatch deadline.
//! - `intent`: the whole request and its fault directive.

mod canonical;
mod deadline;
mod ids;
mod input;
mod intent;
mod spec;

pub use canonical::{CanonicalSpec, SpecHash};
pub use deadline::DispatchDeadline;
pub use ids::{OperationId, OperationKey, RemoteJobId, TenantId};
pub use input::{InvalidInput, MAX_SAFE_INTEGER, hex, is_blank, members};
pub use intent::{Fault, Intent};
pub use spec::{MediaType, Priority, PromptRevision, Specification};

#[cfg(test)]
mod tests;
