//! End-to-end tests live in this crate's `tests/` folder.
