//! The operation table's schema, named once: its key, every secondary
//! index with its keys and projection, the key prefixes of the items that
//! are not operations, and the attributes the store computes for the
//! indexes. The store reads these names, provisioning builds the table from
//! [`KEY_ATTRIBUTES`] and [`INDEXES`], and `tests/tests/resources.rs` holds
//! the table so built to `infra/template.yaml`'s, field by field. The key
//! prefixes are core's ([`genace_core::keys`]), re-exported here.

pub use genace_core::keys::*;

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
/// Name of the index of each endpoint's attempt log.
pub const LOG_INDEX: &str = "log-index";

/// Attributes the store adds to an operation's item for its indexes; never
/// part of the record.
pub const COMPUTED_ATTRIBUTES: [&str; 9] = [
    "case_pk",
    "case_sk",
    "case_age_sk",
    "case_reason",
    "wait_pk",
    "wait_sk",
    "list_pk",
    "list_all_pk",
    "list_sk",
];

/// Partitions of the list order across tenants: no one partition takes
/// every create.
pub const LIST_ACROSS_SHARDS: u32 = 8;

/// The table's partition key.
pub const TABLE_KEY: &str = "pk";

/// A key attribute's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    String,
    Number,
}

/// Every attribute that is a key of the table or of an index, with its type.
pub const KEY_ATTRIBUTES: [(&str, KeyType); 14] = [
    (TABLE_KEY, KeyType::String),
    ("due_pk", KeyType::String),
    ("due_at", KeyType::Number),
    ("case_pk", KeyType::String),
    ("case_sk", KeyType::String),
    ("case_age_sk", KeyType::String),
    ("remote_job_id", KeyType::String),
    ("wait_pk", KeyType::String),
    ("wait_sk", KeyType::String),
    ("list_pk", KeyType::String),
    ("list_all_pk", KeyType::String),
    ("list_sk", KeyType::String),
    ("log_pk", KeyType::String),
    ("log_sk", KeyType::String),
];

/// What an index copies of each item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projection {
    KeysOnly,
    All,
    Include(&'static [&'static str]),
}

/// One global secondary index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Index {
    pub name: &'static str,
    pub hash: &'static str,
    pub range: Option<&'static str>,
    pub projection: Projection,
}

/// Every secondary index of the table.
pub const INDEXES: [Index; 8] = [
    Index {
        name: DUE_INDEX,
        hash: "due_pk",
        range: Some("due_at"),
        projection: Projection::Include(&["operation_id", "phase", "delivery_state"]),
    },
    Index {
        name: CASE_INDEX,
        hash: "case_pk",
        range: Some("case_sk"),
        projection: Projection::All,
    },
    Index {
        name: CASE_AGE_INDEX,
        hash: "case_pk",
        range: Some("case_age_sk"),
        projection: Projection::Include(&["case_reason"]),
    },
    Index {
        name: JOB_INDEX,
        hash: "remote_job_id",
        range: None,
        projection: Projection::KeysOnly,
    },
    Index {
        name: WAIT_INDEX,
        hash: "wait_pk",
        range: Some("wait_sk"),
        projection: Projection::KeysOnly,
    },
    Index {
        name: LIST_INDEX,
        hash: "list_pk",
        range: Some("list_sk"),
        projection: Projection::Include(&["operation_key"]),
    },
    Index {
        name: LIST_ALL_INDEX,
        hash: "list_all_pk",
        range: Some("list_sk"),
        projection: Projection::Include(&["operation_key"]),
    },
    // Webhook attempt logs: small items, read whole.
    Index {
        name: LOG_INDEX,
        hash: "log_pk",
        range: Some("log_sk"),
        projection: Projection::All,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_key_is_a_declared_attribute_and_every_attribute_a_key() {
        let declared: Vec<&str> = KEY_ATTRIBUTES.iter().map(|(name, _)| *name).collect();
        let mut used = vec![TABLE_KEY];
        for index in INDEXES {
            used.push(index.hash);
            used.extend(index.range);
        }
        for name in &used {
            assert!(declared.contains(name), "{name} is a key but not declared");
        }
        for name in &declared {
            assert!(used.contains(name), "{name} is declared but keys nothing");
        }
        let mut names: Vec<&str> = INDEXES.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), INDEXES.len(), "an index name is used twice");
    }
}
