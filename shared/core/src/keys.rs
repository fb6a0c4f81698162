//! Every key prefix of the operations table, spelt once. The store's
//! schema (`genace-aws`'s `schema.rs`) re-exports them with the index
//! names; core, the ports and the in-memory store read them here, since
//! they cannot import the AWS crate. A test in `tests/tests/layout.rs`
//! fails when a production file other than this one spells a prefix.

/// Key prefix of an operation's item: `OP#<operation id>`.
pub const OPERATION_PREFIX: &str = "OP#";
/// Key prefix of the due index's shards: `DUE#<shard>`.
pub const DUE_PREFIX: &str = "DUE#";
/// Key prefix of a tenant's waiting partition: `WAIT#<tenant>`.
pub const WAIT_PREFIX: &str = "WAIT#";
/// Key prefix of the tenant ledger items: `TENANT#<tenant>`.
pub const LEDGER_PREFIX: &str = "TENANT#";
/// Key prefix of the tenant webhook items: `WEBHOOK#<tenant>`.
pub const WEBHOOK_PREFIX: &str = "WEBHOOK#";
/// Key prefix of a tenant's set of webhook endpoints: `ENDPOINTS#<tenant>`.
pub const ENDPOINTS_PREFIX: &str = "ENDPOINTS#";
/// Key prefix of an event kept for replay: `WHEVENT#<tenant>#<event id>`.
pub const KEPT_EVENT_PREFIX: &str = "WHEVENT#";
/// Key prefix of an endpoint's attempt log: `WHLOG#<tenant>#<endpoint>`.
pub const ATTEMPT_LOG_PREFIX: &str = "WHLOG#";
/// Key prefix of a tenant's list partition: `LIST#<tenant>`.
pub const LIST_PREFIX: &str = "LIST#";
/// Key prefix of the across-tenants list shards: `ALL#<shard>`.
pub const LIST_ALL_PREFIX: &str = "ALL#";
/// Key prefix of the sets of tenants with operations waiting: `WAITING#<shard>`.
pub const WAITING_SET_PREFIX: &str = "WAITING#";
/// Key prefix of the sets of tenants whose waiters cannot take a slot for
/// their tenant's own limits (credits, jobs in flight): `PARKED#<shard>`.
/// Wake-ups do not read them; the write that frees the tenant's room moves
/// it back to the waiting set.
pub const PARKED_SET_PREFIX: &str = "PARKED#";
/// Key prefix of the shards that list every ledger: `LEDGER#<shard>`.
pub const LEDGER_LIST_PREFIX: &str = "LEDGER#";
/// The one partition every ledger was listed in before the shards; still
/// read, so that a ledger not written since is listed.
pub const LEGACY_LEDGER_PARTITION: &str = "LEDGER";

/// Shards of the waiting set: no one partition takes every waiting tenant.
pub const WAITING_SET_SHARDS: u32 = 4;
/// Shards of the ledger listing: no one partition takes every tenant.
pub const LEDGER_LIST_SHARDS: u32 = 16;
/// The key of the item that counts the Genace account's jobs in flight.
pub const ACCOUNT_ITEM: &str = "ACCOUNT#genace";

/// The key of the account's shard `shard` ([`crate::shard`]): shard 0 is
/// [`ACCOUNT_ITEM`], as before shards.
pub fn account_shard_key(shard: u16) -> String {
    match shard {
        0 => ACCOUNT_ITEM.to_owned(),
        k => format!("{ACCOUNT_ITEM}#{k}"),
    }
}
/// The key of the item that says which due shard the next sweep run takes
/// first.
pub const SWEEP_START_ITEM: &str = "SWEEP#start";

/// Partition of the sparse open-case index; cases are rare, so one suffices.
pub const CASE_PK: &str = "CASE";

/// The key of the item holding the render times of a class of job
/// ([`crate::render::RenderClass`]); `v2`: buckets 1.1 times wider than
/// the last (the 1.3 of the first histograms is left unread).
pub fn render_times_key(class: &str) -> String {
    format!("RENDERTIME#v2#{class}")
}

/// The key of operation `id`'s item.
pub fn operation_key(id: &str) -> String {
    format!("{OPERATION_PREFIX}{id}")
}

/// The due index's partition `shard`.
pub fn due_partition(shard: u32) -> String {
    format!("{DUE_PREFIX}{shard}")
}

/// The waiting index's partition for a tenant's operations.
pub fn wait_partition(tenant: &str) -> String {
    format!("{WAIT_PREFIX}{tenant}")
}

/// The key of a tenant's ledger item.
pub fn ledger_key(tenant: &str) -> String {
    format!("{LEDGER_PREFIX}{tenant}")
}

/// The key of a tenant's webhook settings item.
pub fn webhook_key(tenant: &str) -> String {
    format!("{WEBHOOK_PREFIX}{tenant}")
}

/// The key of a tenant's set of webhook endpoints.
pub fn endpoints_key(tenant: &str) -> String {
    format!("{ENDPOINTS_PREFIX}{tenant}")
}

/// The key of an event kept for replay.
pub fn kept_event_key(tenant: &str, event_id: &str) -> String {
    format!("{KEPT_EVENT_PREFIX}{tenant}#{event_id}")
}

/// The partition of an endpoint's attempt log.
pub fn attempt_log_partition(tenant: &str, endpoint_id: &str) -> String {
    format!("{ATTEMPT_LOG_PREFIX}{tenant}#{endpoint_id}")
}

/// The list index's partition of a tenant's operations.
pub fn list_partition(tenant: &str) -> String {
    format!("{LIST_PREFIX}{tenant}")
}

/// The across-tenants list index's partition `shard`.
pub fn list_all_partition(shard: u32) -> String {
    format!("{LIST_ALL_PREFIX}{shard}")
}

/// The waiting set's partition `shard`.
pub fn waiting_set_key(shard: u32) -> String {
    format!("{WAITING_SET_PREFIX}{shard}")
}

/// The parked set's partition `shard`.
pub fn parked_set_key(shard: u32) -> String {
    format!("{PARKED_SET_PREFIX}{shard}")
}

/// The ledger listing's partition `shard`.
pub fn ledger_list_partition(shard: u32) -> String {
    format!("{LEDGER_LIST_PREFIX}{shard}")
}

/// A tenant's shard of `shards`: FNV-1a of its id, stable across builds.
pub fn tenant_shard(tenant: &str, shards: u32) -> u32 {
    let hash = tenant
        .bytes()
        .fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    hash % shards.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No prefix is the start of another, so a key's kind is read from its
    /// prefix alone.
    #[test]
    fn no_prefix_starts_another() {
        let all = [
            OPERATION_PREFIX,
            DUE_PREFIX,
            WAIT_PREFIX,
            LEDGER_PREFIX,
            WEBHOOK_PREFIX,
            ENDPOINTS_PREFIX,
            KEPT_EVENT_PREFIX,
            ATTEMPT_LOG_PREFIX,
            LIST_PREFIX,
            LIST_ALL_PREFIX,
            WAITING_SET_PREFIX,
            PARKED_SET_PREFIX,
            LEDGER_LIST_PREFIX,
        ];
        for a in all {
            for b in all {
                assert!(a == b || !b.starts_with(a), "{a} starts {b}");
            }
        }
        assert_eq!(operation_key("op_1"), "OP#op_1");
        assert_eq!(kept_event_key("t", "e"), "WHEVENT#t#e");
        // Tenants spread over the shards, and each stays in its own.
        let shards: std::collections::BTreeSet<u32> = (0..64)
            .map(|i| tenant_shard(&format!("tenant-{i}"), LEDGER_LIST_SHARDS))
            .collect();
        assert!(shards.len() > 8, "{shards:?}");
        assert_eq!(tenant_shard("a", 16), tenant_shard("a", 16));
    }
}
