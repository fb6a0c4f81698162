//! The operation table's schema, named once: the secondary indexes that
//! the store reads and that provisioning creates (the SAM template declares
//! the same names, checked by the template test).

/// Name of the sparse due-time index the sweep reads.
pub const DUE_INDEX: &str = "due-index";
/// Name of the sparse index of open reconciliation cases.
pub const CASE_INDEX: &str = "case-index";
/// Name of the sparse index of every open case in the order it opened,
/// with its reason: the console's list and the counts by reason.
pub const CASE_AGE_INDEX: &str = "case-age-index";
/// Name of the sparse index from a saved remote job id to its operation.
pub const JOB_INDEX: &str = "job-index";
/// Name of the sparse index of each tenant's operations waiting for a slot.
pub const WAIT_INDEX: &str = "wait-index";
/// Name of the index of each tenant's operations, newest first.
pub const LIST_INDEX: &str = "list-index";
/// Name of the index of every tenant's operations, in shards, newest first.
pub const LIST_ALL_INDEX: &str = "list-all-index";
/// Name of the index of each endpoint's delivery log.
pub const LOG_INDEX: &str = "log-index";
