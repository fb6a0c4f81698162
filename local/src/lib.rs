//! Genace operations on one machine: local resource provisioning, the
//! development JWT authorizer, the intake HTTP server and the runner that
//! hosts every stage's handler.

pub mod artifacts;
pub mod devauth;
pub mod events;
pub mod meter;
pub mod runner;
pub mod serve;
pub mod standin;
pub mod template;
