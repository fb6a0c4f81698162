//! End-to-end tests live in this crate's `tests/` folder: the whole stack,
//! hosted in-process by the local runner against the local AWS endpoint,
//! checked by the conformance suite.
