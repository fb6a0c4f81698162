//! `capacity`: the Genace account's capacity report, and the account's and
//! a tenant's limit of jobs in flight.

use genace_client::Client;

use crate::api::Failure;
use crate::cli::CapacityAction;
use crate::print::{emit, print_capacity, s};

pub(crate) async fn capacity(api: &Client, json: bool, action: Option<CapacityAction>) -> Result<(), Failure> {
    match action {
        None => {
            let report = api.capacity().await?;
            emit(json, &report, print_capacity);
        }
        Some(CapacityAction::Account { limit }) => {
            let answer = api.set_account_limit(limit.0).await?;
            emit(json, &answer, print_capacity);
        }
        Some(CapacityAction::Limit { tenant, limit }) => {
            let answer = api.set_max_in_flight(&tenant, limit.0).await?;
            emit(json, &answer, |a| {
                println!(
                    "{}: at most {} in flight ({} now, {} waiting)",
                    s(&a["tenant_id"]),
                    s(&a["max_in_flight"]),
                    s(&a["in_flight"]),
                    s(&a["waiting"])
                );
            });
        }
    }
    Ok(())
}
