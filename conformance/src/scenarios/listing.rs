//! The listing scenario: a tenant pages through its own operations only.

use std::time::Duration;

use genace_client::{Client, ListQuery};
use serde_json::json;
use wiremock::ResponseTemplate;

use super::Scenario;
use crate::api;
use crate::context::{Outcome, check};

impl Scenario<'_> {
    /// Records `n` intents under this scenario's key prefix (`<key>/<i>`),
    /// through `api`; returns their ids, oldest first.
    async fn create_family(&self, client: &Client, n: usize) -> Result<Vec<String>, String> {
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let mut body = self.body(None);
            body["operation_key"] = json!(format!("{}/{i:02}", self.key));
            let r = api::create(client, &body).await?;
            check(r.status == 202, format!("create {i} answered {} {}", r.status, r.body))?;
            ids.push(r.body["operation_id"].as_str().unwrap_or_default().to_owned());
            // Creation times apart, so newest first is one order.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(ids)
    }

    /// Every page of `api`'s listing of this scenario's keys, 10 at a time:
    /// the ids in order and the first page's cursor.
    async fn list_family(&self, client: &Client) -> Result<(Vec<String>, Option<String>), String> {
        let query = ListQuery::new()
            .with("limit", 10)
            .with("key_prefix", format!("{}/", self.key));
        let (mut ids, mut cursor, mut first_cursor) = (Vec::new(), None::<String>, None);
        for page in 0..20 {
            let listed = match api::answer(client.operations_page(&query, cursor.as_deref()).await)? {
                Ok(listed) => listed,
                Err(p) => return Err(format!("page {page} answered {} {}", p.status, p.body)),
            };
            let (listed, next) = (listed.items, listed.next_cursor);
            check(
                listed.len() <= 10,
                format!("page {page} held {} operations", listed.len()),
            )?;
            ids.extend(
                listed
                    .iter()
                    .map(|v| v["operation_id"].as_str().unwrap_or_default().to_owned()),
            );
            cursor = next;
            if page == 0 {
                first_cursor.clone_from(&cursor);
            }
            if cursor.is_none() {
                return Ok((ids, first_cursor));
            }
        }
        Err("the listing did not end within 20 pages".into())
    }

    /// A listing pages through 25 operations of one tenant, newest first,
    /// and none of another tenant's with the same keys; a cursor is not
    /// accepted from another tenant. Genace refuses the jobs, so nothing
    /// of this scenario stays in flight.
    pub(crate) async fn list_pages(&self) -> Outcome {
        let Some(other) = &self.ctx.api_other_tenant else {
            return Err("needs a second tenant's token (--token-b)".into());
        };
        self.on_post(
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"code": "invalid_request", "message": "refused for a listing test"}})),
        )
        .await;
        let mut mine = self.create_family(&self.ctx.api, 25).await?;
        let theirs = self.create_family(other, 3).await?;
        mine.reverse();
        // The list indexes are eventually consistent: a deployment may show
        // the newest create a moment late.
        let mut listing = self.list_family(&self.ctx.api).await?;
        for _ in 0..10 {
            if listing.0 == mine {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            listing = self.list_family(&self.ctx.api).await?;
        }
        let (listed, cursor) = listing;
        check(
            listed == mine,
            format!(
                "listed {} operations, expected the 25 newest first: {listed:?}",
                listed.len()
            ),
        )?;
        let mut their_list = self.list_family(other).await?.0;
        for _ in 0..10 {
            if their_list.len() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            their_list = self.list_family(other).await?.0;
        }
        check(
            their_list.len() == 3 && their_list.iter().all(|id| theirs.contains(id)),
            format!("the other tenant listed {their_list:?}"),
        )?;
        let cursor = cursor.ok_or("25 operations fit one page of 10")?;
        let foreign = api::answer(
            other
                .operations_page(&ListQuery::new().with("limit", 10), Some(&cursor))
                .await,
        )?;
        match foreign {
            Err(p) if p.status == 400 && p.body["field"] == "cursor" => Ok(()),
            Err(p) => Err(format!("another tenant's cursor answered {} {}", p.status, p.body)),
            Ok(page) => Err(format!("another tenant's cursor answered 200 {:?}", page.items)),
        }
    }
}
