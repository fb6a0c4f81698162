//! `cases`: the open reconciliation cases, one of them, and their counts.

use genace_client::Client;

use crate::api::{Failure, page_json, query};
use crate::cli::Cases;
use crate::print::{emit, print_cases, print_counts, print_timeline};

pub(crate) async fn cases(api: &Client, json: bool, command: Cases) -> Result<(), Failure> {
    match command {
        Cases::List {
            tenant,
            reason,
            opened_before,
            page,
        } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", tenant.as_deref()),
                ("reason", reason.as_deref()),
                ("opened_before", opened_before.as_deref()),
                ("limit", limit.as_deref()),
            ]);
            let page = page_json("cases", api.cases_page(&q, page.cursor.as_deref()).await?);
            emit(json, &page, print_cases);
        }
        Cases::Counts { tenant } => {
            let counts = api.case_counts(tenant.as_deref()).await?;
            emit(json, &counts, print_counts);
        }
        Cases::Show { operation_id } => {
            let op = api.operation(&operation_id).await?.view;
            emit(json, &op, print_timeline);
        }
    }
    Ok(())
}
