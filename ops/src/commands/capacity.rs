//! `capacity`: the Genace account's capacity report, and the account's and
//! a tenant's limit of jobs in flight.

use serde_json::json;

use crate::api::{Api, Failure, enc};
use crate::cli::CapacityAction;
use crate::print::{emit, print_capacity, s};

pub(crate) async fn capacity(api: &Api, json: bool, action: Option<CapacityAction>) -> Result<(), Failure> {
    match action {
        None => {
            let report = api.get("/v1/capacity").await?;
            emit(json, &report, print_capacity);
        }
        Some(CapacityAction::Account { limit }) => {
            let answer = api
                .call(
                    reqwest::Method::PUT,
                    "/v1/capacity",
                    Some(json!({"max_in_flight": limit.0})),
                )
                .await?;
            emit(json, &answer, print_capacity);
        }
        Some(CapacityAction::Limit { tenant, limit }) => {
            let path = format!("/v1/tenants/{}/max-in-flight", enc(&tenant));
            let answer = api
                .call(reqwest::Method::PUT, &path, Some(json!({"max_in_flight": limit.0})))
                .await?;
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
