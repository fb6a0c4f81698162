//! `credits`: tenants' credits and spend limits.

use serde_json::json;

use crate::api::{Api, Failure, enc, query};
use crate::cli::Credits;
use crate::print::{emit, print_credits, print_next};

pub(crate) async fn credits(api: &Api, json: bool, command: Credits) -> Result<(), Failure> {
    match command {
        Credits::List { page } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[("limit", limit.as_deref()), ("cursor", page.cursor.as_deref())]);
            let answer = api.get(&format!("/v1/credits{q}")).await?;
            emit(json, &answer, |page| {
                print_credits(page["tenants"].as_array().map(Vec::as_slice).unwrap_or_default());
                print_next(page);
            });
        }
        Credits::Limit { tenant, limit } => {
            let path = format!("/v1/tenants/{}/spend-limit", enc(&tenant));
            let ledger = api
                .call(reqwest::Method::PUT, &path, Some(json!({"spend_limit": limit.0})))
                .await?;
            emit(json, &ledger, |l| print_credits(std::slice::from_ref(l)));
        }
    }
    Ok(())
}
