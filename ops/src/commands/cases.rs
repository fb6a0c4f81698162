//! `cases`: the open reconciliation cases, one of them, and their counts.

use crate::api::{Api, Failure, enc, query};
use crate::cli::Cases;
use crate::print::{emit, print_cases, print_counts, print_timeline};

pub(crate) async fn cases(api: &Api, json: bool, command: Cases) -> Result<(), Failure> {
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
                ("cursor", page.cursor.as_deref()),
            ]);
            let page = api.get(&format!("/v1/reconciliation-cases{q}")).await?;
            emit(json, &page, print_cases);
        }
        Cases::Counts { tenant } => {
            let q = query(&[("tenant", tenant.as_deref())]);
            let counts = api.get(&format!("/v1/reconciliation-cases/counts{q}")).await?;
            emit(json, &counts, print_counts);
        }
        Cases::Show { operation_id } => {
            let op = api.get(&format!("/v1/operations/{}", enc(&operation_id))).await?;
            emit(json, &op, print_timeline);
        }
    }
    Ok(())
}
