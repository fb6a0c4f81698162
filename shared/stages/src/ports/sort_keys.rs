//! The sort keys of the operation table's indexes that the stores build
//! alike: a tenant's cases, the cases by age, and a tenant's waiting order.

use chrono::{DateTime, Utc};
use genace_core::domain::OperationId;
use genace_core::record::OperationRecord;

/// `<tenant>#<opened_at>#<operation_id>`: a tenant's cases are one key
/// prefix. The tenant is escaped (`%` and `#`), so the prefix of `acme`
/// never matches the cases of `acme#x`.
pub fn case_sort_key(tenant: &str, opened_at: DateTime<Utc>, id: &OperationId) -> String {
    format!(
        "{}#{}#{id}",
        escape_tenant(tenant),
        opened_at.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    )
}

/// `<opened_at>#<operation_id>`: the age index's sort key, every open case
/// in the order it opened.
pub fn case_age_key(opened_at: DateTime<Utc>, id: &OperationId) -> String {
    format!("{}#{id}", opened_at.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

/// The time a [`case_age_key`] starts with.
pub fn case_age_key_opened(key: &str) -> Option<DateTime<Utc>> {
    let (at, _) = key.split_once('#')?;
    DateTime::parse_from_rfc3339(at).ok().map(|t| t.with_timezone(&Utc))
}

/// The waiting index's partition for a tenant's operations.
pub fn wait_partition(tenant: &str) -> String {
    genace_core::keys::wait_partition(tenant)
}

/// Where an operation waiting for a slot or for credits
/// ([`OperationRecord::waits_in_order`]) sorts in its tenant's order:
/// since when it waits, then its id. A `batch` operation sorts as if it
/// had waited [`Priority::BATCH_YIELDS_SECONDS`] less, so interactive ones
/// that came up to that much later go first, and none can pass it after
/// that (a bounded wait, never starvation). None when it does not wait.
///
/// [`Priority::BATCH_YIELDS_SECONDS`]: genace_core::domain::Priority::BATCH_YIELDS_SECONDS
pub fn wait_sort_key(rec: &OperationRecord) -> Option<String> {
    use genace_core::domain::Priority;
    let yields = match rec.priority {
        Priority::Interactive => chrono::Duration::zero(),
        Priority::Batch => chrono::Duration::seconds(Priority::BATCH_YIELDS_SECONDS),
    };
    rec.waits_in_order().map(|since| {
        let place = since + yields;
        format!("{}#{}", place.format("%Y-%m-%dT%H:%M:%S%.3fZ"), rec.operation_id)
    })
}

/// The key prefix of one tenant's cases.
pub fn case_tenant_prefix(tenant: &str) -> String {
    format!("{}#", escape_tenant(tenant))
}

fn escape_tenant(tenant: &str) -> String {
    tenant.replace('%', "%25").replace('#', "%23")
}
