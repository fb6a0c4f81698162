//! An operator's routes: cases and resolutions, credits, capacity and
//! limits, a tenant's webhook settings. The token must be an operator's.

use futures::Stream;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Client, Request, enc, with_query};
use crate::error::Error;
use crate::operations::{ListQuery, Operation, Page};

impl Client {
    /// Open reconciliation cases, page after page (`tenant`, `reason`,
    /// `opened_before`, `limit` as the API names them).
    pub fn cases<'a>(&'a self, query: &'a ListQuery) -> impl Stream<Item = Result<Value, Error>> + 'a {
        self.pages("/v1/reconciliation-cases", "cases", query)
    }

    /// One page of open reconciliation cases (`GET /v1/reconciliation-cases`).
    pub async fn cases_page(&self, query: &ListQuery, cursor: Option<&str>) -> Result<Page, Error> {
        self.page("/v1/reconciliation-cases", "cases", query, cursor).await
    }

    /// `GET /v1/reconciliation-cases/counts`, of one tenant or all.
    pub async fn case_counts(&self, tenant: Option<&str>) -> Result<Value, Error> {
        let path = with_query(
            "/v1/reconciliation-cases/counts",
            &[("tenant", tenant.map(str::to_owned))],
        );
        self.call(Request::new(Method::GET, path)).await
    }

    /// `POST /v1/operations/{id}/resolution` with `If-Match: "version"`:
    /// `action` (`attach_remote_job` needs `job_id`) and the reason.
    /// Sent once: a decision is not retried behind the operator's back.
    pub async fn resolve(
        &self,
        id: &str,
        version: u64,
        action: &str,
        reason: &str,
        job_id: Option<&str>,
    ) -> Result<Operation, Error> {
        let mut body = json!({"action": action, "reason": reason});
        if let Some(job) = job_id {
            body["job_id"] = json!(job);
        }
        let req = Request::new(Method::POST, format!("/v1/operations/{}/resolution", enc(id)))
            .json(&body)
            .header("if-match", format!("\"{version}\""));
        self.operation_call(req).await
    }

    /// Every tenant's credits, page after page (`GET /v1/credits`).
    pub fn credits<'a>(&'a self, query: &'a ListQuery) -> impl Stream<Item = Result<Value, Error>> + 'a {
        self.pages("/v1/credits", "tenants", query)
    }

    /// One page of every tenant's credits (`GET /v1/credits`).
    pub async fn credits_page(&self, query: &ListQuery, cursor: Option<&str>) -> Result<Page, Error> {
        self.page("/v1/credits", "tenants", query, cursor).await
    }

    /// `GET /v1/capacity`.
    pub async fn capacity(&self) -> Result<Value, Error> {
        self.call(Request::new(Method::GET, "/v1/capacity")).await
    }

    /// `PUT /v1/capacity`: the account's limit of jobs in flight (`None`:
    /// the deployment's).
    pub async fn set_account_limit(&self, limit: Option<u32>) -> Result<Value, Error> {
        self.call(Request::new(Method::PUT, "/v1/capacity").json(&json!({"max_in_flight": limit})))
            .await
    }

    /// `PUT /v1/tenants/{tenant}/spend-limit`, in credits (`None`: no limit).
    pub async fn set_spend_limit(&self, tenant: &str, credits: Option<f64>) -> Result<Value, Error> {
        let path = format!("/v1/tenants/{}/spend-limit", enc(tenant));
        self.call(Request::new(Method::PUT, path).json(&json!({"spend_limit": credits})))
            .await
    }

    /// `PUT /v1/tenants/{tenant}/max-in-flight` (`None`: no limit).
    pub async fn set_max_in_flight(&self, tenant: &str, limit: Option<u32>) -> Result<Value, Error> {
        let path = format!("/v1/tenants/{}/max-in-flight", enc(tenant));
        self.call(Request::new(Method::PUT, path).json(&json!({"max_in_flight": limit})))
            .await
    }

    /// `GET /v1/tenants/{tenant}/webhook`.
    pub async fn webhook(&self, tenant: &str) -> Result<Value, Error> {
        self.call(Request::new(
            Method::GET,
            format!("/v1/tenants/{}/webhook", enc(tenant)),
        ))
        .await
    }

    /// `PUT /v1/tenants/{tenant}/webhook`: `{"url", "secret_id", "events"}`.
    pub async fn set_webhook(&self, tenant: &str, settings: &Value) -> Result<Value, Error> {
        let path = format!("/v1/tenants/{}/webhook", enc(tenant));
        self.call(Request::new(Method::PUT, path).json(settings)).await
    }

    /// `DELETE /v1/tenants/{tenant}/webhook`.
    pub async fn remove_webhook(&self, tenant: &str) -> Result<Value, Error> {
        self.call(Request::new(
            Method::DELETE,
            format!("/v1/tenants/{}/webhook", enc(tenant)),
        ))
        .await
    }
}
