//! Every call this service makes out over HTTP (the inbound API is
//! `genace-edge`'s): Genace itself, output downloads, webhook POSTs and spans.
//!
//! - [`client`]: the Genace client behind the `genace_stages::ports::genace::Genace`
//!   port: never retried, never redirected, bounded bodies, a redacted key.
//! - [`download`]: the output URL guard and the download client behind the
//!   `genace_stages::ports::downloads::Downloads` port.
//! - [`webhook`]: tenants' webhook POSTs, through the same URL guard.
//! - [`otlp`]: spans to an OTLP/HTTP receiver (OTLP JSON).
//!
//! Depends on `genace-core` and `genace-stages` (for the ports); must not
//! import the AWS adapters, the HTTP edge or Lambda crates.

pub mod client;
pub mod download;
pub mod otlp;
pub mod webhook;

pub use client::{GenaceClient, GenaceConfig};
pub use download::HttpDownloads;
pub use webhook::HttpWebhooks;
