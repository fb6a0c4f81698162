//! Conformance suite (scenarios arrive with the dispatch and delivery work).
