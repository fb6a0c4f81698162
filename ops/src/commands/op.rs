//! `op`: one operation, or a page of them; cancel and erase.

use crate::api::{Api, Failure, enc, query};
use crate::cli::Op;
use crate::print::{emit, print_operations, print_timeline};

pub(crate) async fn op(api: &Api, json: bool, command: Op) -> Result<(), Failure> {
    match command {
        Op::List { filter, page } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", filter.tenant.as_deref()),
                ("phase", filter.phase.as_deref()),
                ("delivery_state", filter.delivery_state.as_deref()),
                ("created_after", filter.created_after.as_deref()),
                ("created_before", filter.created_before.as_deref()),
                ("key_prefix", filter.key_prefix.as_deref()),
                ("limit", limit.as_deref()),
                ("cursor", page.cursor.as_deref()),
            ]);
            let page = api.get(&format!("/v1/operations{q}")).await?;
            emit(json, &page, print_operations);
        }
        Op::Cancel { operation_id } => {
            let path = format!("/v1/operations/{}/cancel", enc(&operation_id));
            let op = api.call(reqwest::Method::POST, &path, None).await?;
            emit(json, &op, print_timeline);
        }
        Op::Erase { operation_id } => {
            let path = format!("/v1/operations/{}/outputs", enc(&operation_id));
            let op = api.call(reqwest::Method::DELETE, &path, None).await?;
            emit(json, &op, print_timeline);
        }
        Op::Show { operation_id } => {
            let op = api.get(&format!("/v1/operations/{}", enc(&operation_id))).await?;
            emit(json, &op, print_timeline);
        }
    }
    Ok(())
}
