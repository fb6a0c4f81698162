//! The hold scenarios: an operation held for a person, cancelled or timed out there.

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use super::Scenario;
use crate::api;
use crate::context::{Outcome, check};

impl Scenario<'_> {
    /// Genace refuses the account (401): the operation is held for a person,
    /// with no job. Creates it and waits until the hold shows.
    async fn create_held(&self, body: &Value) -> Result<String, String> {
        self.on_post(
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"code": "unauthorized", "message": "invalid API key"}})),
        )
        .await;
        let r = api::create(&self.ctx.api, body).await?;
        check(r.status == 202, format!("create answered {} {}", r.status, r.body))?;
        let id = r.body["operation_id"].as_str().unwrap_or_default().to_owned();
        api::wait_for(&self.ctx.api, &id, self.ctx.patience, "held for the account", |v| {
            v["reconciliation_case"]["reason"] == "account_problem"
        })
        .await?;
        Ok(id)
    }

    /// A cancel while the operation is held wins: it ends `cancelled`, a
    /// repeat answers the same, and Genace sees no POST after it.
    pub(crate) async fn cancel_while_held(&self) -> Outcome {
        let id = self.create_held(&self.body(None)).await?;
        let posts = self.posts().await;
        for attempt in ["cancel", "repeated cancel"] {
            match api::answer(self.ctx.api.cancel(&id).await)? {
                Ok(op) if op.view["phase"] == "cancelled" => {}
                Ok(op) => return Err(format!("{attempt} answered {}", op.view)),
                Err(p) => return Err(format!("{attempt} answered {} {}", p.status, p.body)),
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let view = api::view(&self.ctx.api, &id).await?;
        check(
            view["phase"] == "cancelled" && view["reconciliation_case"].is_null(),
            format!(
                "after the cancel: phase {} case {}",
                view["phase"], view["reconciliation_case"]
            ),
        )?;
        self.expect_posts(posts).await
    }

    /// A dispatch deadline that passes while the operation is held cancels
    /// it with reason `deadline`, and Genace sees no POST after the hold's.
    pub(crate) async fn deadline_while_held(&self) -> Outcome {
        let mut body = self.body(None);
        // Long enough that the hold comes first on a loaded machine (a
        // dispatch that meets its deadline before the 401 cancels without
        // a hold, and the scenario would never see one).
        body["dispatch_within_seconds"] = json!(30);
        let id = self.create_held(&body).await?;
        let posts = self.posts().await;
        let view = api::wait_for(
            &self.ctx.api,
            &id,
            self.ctx.patience,
            "cancelled at its deadline",
            |v| v["phase"] == "cancelled",
        )
        .await?;
        check(
            view["cancellation"]["reason"] == "deadline",
            format!("cancelled for {}", view["cancellation"]),
        )?;
        self.expect_posts(posts).await
    }
}
