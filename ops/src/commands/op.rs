//! `op`: one operation, or a page of them; cancel and erase.

use genace_client::Client;

use crate::api::{Failure, page_json, query};
use crate::cli::Op;
use crate::print::{emit, print_operations, print_timeline};

pub(crate) async fn op(api: &Client, json: bool, command: Op) -> Result<(), Failure> {
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
            ]);
            let page = page_json("operations", api.operations_page(&q, page.cursor.as_deref()).await?);
            emit(json, &page, print_operations);
        }
        Op::Cancel { operation_id } => {
            let op = api.cancel(&operation_id).await?.view;
            emit(json, &op, print_timeline);
        }
        Op::Erase { operation_id } => {
            let op = api.erase_outputs(&operation_id).await?.view;
            emit(json, &op, print_timeline);
        }
        Op::Show { operation_id } => {
            let op = api.operation(&operation_id).await?.view;
            emit(json, &op, print_timeline);
        }
    }
    Ok(())
}
