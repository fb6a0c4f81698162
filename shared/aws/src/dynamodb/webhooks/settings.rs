//! A tenant's webhook settings item.

use genace_core::domain::TenantId;
use genace_core::webhook::WebhookConfig;
use genace_stages::ports::table::{StoreError, WebhookSettings};

use crate::dynamodb::DynamoStore;
use crate::dynamodb::item::{Item, service_error};

impl WebhookSettings for DynamoStore {
    async fn webhook(&self, tenant: &TenantId) -> Result<Option<WebhookConfig>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::webhook_key(tenant.as_str())))
            .consistent_read(true)
            .send()
            .await
            .map_err(service_error)?;
        out.item
            .map(|mut item| {
                item.remove("pk");
                serde_dynamo::from_item(item).map_err(|e| StoreError::Decode(e.to_string()))
            })
            .transpose()
    }

    async fn set_webhook(&self, tenant: &TenantId, config: Option<&WebhookConfig>) -> Result<(), StoreError> {
        match config {
            Some(c) => {
                let mut item: Item = serde_dynamo::to_item(c).map_err(|e| StoreError::Decode(e.to_string()))?;
                item.extend(Self::webhook_key(tenant.as_str()));
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map_err(service_error)?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(Self::webhook_key(tenant.as_str())))
                    .send()
                    .await
                    .map_err(service_error)?;
            }
        }
        Ok(())
    }
}
