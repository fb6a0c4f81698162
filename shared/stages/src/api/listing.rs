//! Listing operations: a tenant's own, or (for operators) every tenant's,
//! newest first, filtered, and paged with a cursor that is bound to who
//! listed and with which filter.
//!
//! The store keeps a list order per tenant and one across tenants, both
//! keyed by [`list_sort_key`] (creation time, then id). Neither key ever
//! changes after the create, so the orders cost one index write per
//! operation, not one per transition (docs/decisions/0032-listing-operations.md).

use crate::ports::Ports;
use chrono::{DateTime, Utc};

use crate::api::context::Api;
use crate::api::errors::ListError;
use crate::api::operator::OperatorApi;
use crate::ports::clock::Clock;
use crate::ports::list::{ListFilter, ListPosition};
use crate::ports::table::{OperationStore, StoreError};
use genace_core::domain::TenantId;
use genace_core::record::{DeliveryState, OperationRecord, Phase};

/// What a cursor is bound to: the listing's scope and its filter.
fn binding(filter: &ListFilter, scope: Option<&TenantId>) -> String {
    crate::ports::cursor::binding(
        "operations",
        &[
            scope.map_or("*", TenantId::as_str),
            filter.phase.map_or("", Phase::as_str),
            filter.delivery_state.map_or("", DeliveryState::as_str),
            &filter.created_after.map(|t| t.to_rfc3339()).unwrap_or_default(),
            &filter.created_before.map(|t| t.to_rfc3339()).unwrap_or_default(),
            filter.key_prefix.as_deref().unwrap_or(""),
        ],
    )
}

/// The cursor handed to a client: the position and what it is bound to.
fn encode_cursor(position: &ListPosition, binding: &str) -> String {
    crate::ports::cursor::seal(&position.0, binding)
}

/// The position in a cursor; [`StoreError::Cursor`] for one this API did not
/// make, or made for another tenant or another filter.
fn decode_cursor(cursor: &str, binding: &str) -> Result<ListPosition, StoreError> {
    let position = crate::ports::cursor::open(cursor, binding)?;
    if is_list_key(&position) {
        Ok(ListPosition(position))
    } else {
        Err(StoreError::Cursor)
    }
}

fn is_list_key(key: &str) -> bool {
    key.split_once('#').is_some_and(|(ms, id)| {
        ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()) && genace_core::domain::OperationId::parse(id).is_ok()
    })
}

/// A page for a client: the records and the cursor of the next page.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub records: Vec<OperationRecord>,
    pub next_cursor: Option<String>,
}

async fn list_in<S: OperationStore>(
    store: &S,
    scope: Option<&TenantId>,
    filter: &ListFilter,
    limit: i32,
    cursor: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Listed, ListError> {
    let binding = binding(filter, scope);
    let after = cursor.map(|c| decode_cursor(c, &binding)).transpose()?;
    let page = store.list(scope, filter, limit, after.as_ref(), now).await?;
    Ok(Listed {
        records: page.records,
        next_cursor: page.next.map(|p| encode_cursor(&p, &binding)),
    })
}

impl<P: Ports> Api<P> {
    /// One page of `tenant`'s operations, newest first.
    pub async fn list(
        &self,
        tenant: &TenantId,
        filter: &ListFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Listed, ListError> {
        list_in(&self.store, Some(tenant), filter, limit, cursor, self.clock.now()).await
    }
}

impl<P: Ports> OperatorApi<'_, P> {
    /// One page of operations, newest first: of `tenant` if given, else of
    /// every tenant. An operator limited to a tenant lists only that
    /// tenant's, whatever it asks for.
    pub async fn list(
        &self,
        tenant: Option<TenantId>,
        filter: &ListFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Listed, ListError> {
        let Some(scope) = self.scope(tenant) else {
            return Ok(Listed {
                records: Vec::new(),
                next_cursor: None,
            });
        };
        list_in(
            &self.api.store,
            scope.as_ref(),
            filter,
            limit,
            cursor,
            self.api.clock.now(),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_bound_to_its_scope_and_filter() {
        let acme = TenantId::parse("acme").unwrap();
        let other = TenantId::parse("other").unwrap();
        let filter = ListFilter::default();
        let position = ListPosition(format!("{:013}#op_{}", 1_700_000_000_000_i64, "0".repeat(32)));
        let cursor = encode_cursor(&position, &binding(&filter, Some(&acme)));
        assert_eq!(
            decode_cursor(&cursor, &binding(&filter, Some(&acme))).unwrap(),
            position
        );
        assert!(decode_cursor(&cursor, &binding(&filter, Some(&other))).is_err());
        assert!(decode_cursor(&cursor, &binding(&filter, None)).is_err());
        let phased = ListFilter {
            phase: Some(Phase::Prepared),
            ..ListFilter::default()
        };
        assert!(decode_cursor(&cursor, &binding(&phased, Some(&acme))).is_err());
        for junk in ["", "not a cursor", "e30", "eyJwIjoxfQ"] {
            assert!(decode_cursor(junk, &binding(&filter, Some(&acme))).is_err(), "{junk}");
        }
    }

    #[test]
    fn the_key_range_holds_every_key_created_within_the_bounds() {
        let at = |ms: i64| DateTime::<Utc>::from_timestamp_millis(ms).unwrap();
        let filter = ListFilter {
            created_after: Some(at(1_000)),
            created_before: Some(at(2_000)),
            ..ListFilter::default()
        };
        let (low, high) = filter.key_range();
        let id = format!("op_{}", "f".repeat(32));
        for ms in [1_000, 1_001, 1_999, 2_000] {
            let key = format!("{ms:013}#{id}");
            assert!(low <= key && key <= high, "{ms}");
        }
        for ms in [999, 2_001] {
            let key = format!("{ms:013}#{id}");
            assert!(!(low <= key && key <= high), "{ms}");
        }
    }
}
