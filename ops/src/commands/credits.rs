//! `credits`: tenants' credits and spend limits.

use genace_client::Client;

use crate::api::{Failure, page_json, query};
use crate::cli::Credits;
use crate::print::{emit, print_credits, print_next};

pub(crate) async fn credits(api: &Client, json: bool, command: Credits) -> Result<(), Failure> {
    match command {
        Credits::List { page } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[("limit", limit.as_deref())]);
            let answer = page_json("tenants", api.credits_page(&q, page.cursor.as_deref()).await?);
            emit(json, &answer, |page| {
                print_credits(page["tenants"].as_array().map(Vec::as_slice).unwrap_or_default());
                print_next(page);
            });
        }
        Credits::Limit { tenant, limit } => {
            let ledger = api.set_spend_limit(&tenant, limit.0).await?;
            emit(json, &ledger, |l| print_credits(std::slice::from_ref(l)));
        }
    }
    Ok(())
}
