//! The learned render times: one item per class of job
//! (`RENDERTIME#v2#<class>`), a counter per bucket (`b0` to `b99`), each
//! finished job one `ADD` to its bucket: atomic, unconditional, and never
//! in anyone's transaction.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use genace_core::render::{BUCKETS, RenderClass, RenderTimes};
use genace_stages::ports::table::{RenderTimeLog, StoreError};

use crate::schema::render_times_key;

use super::DynamoStore;
use super::item::{Item, service_error};
use super::ledger_reads::number;

fn key(class: &RenderClass) -> Item {
    HashMap::from([("pk".to_owned(), AttributeValue::S(render_times_key(class.as_str())))])
}

impl RenderTimeLog for DynamoStore {
    async fn render_times(&self, class: &RenderClass) -> Result<RenderTimes, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(class)))
            .send()
            .await
            .map_err(service_error)?;
        let Some(item) = out.item() else {
            return Ok(RenderTimes::default());
        };
        let counts = (0..BUCKETS)
            .map(|i| Ok((i, number::<u32>(item, &format!("b{i}"))?.unwrap_or(0))))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(RenderTimes::from_counts(counts))
    }

    async fn add_render_time(&self, class: &RenderClass, seconds: f64) -> Result<(), StoreError> {
        let bucket = RenderTimes::bucket(seconds);
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(class)))
            .update_expression("ADD #b :one")
            .expression_attribute_names("#b", format!("b{bucket}"))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            .map_err(service_error)?;
        Ok(())
    }
}
