//! A tenant's webhook endpoints: create, list, read, update, delete,
//! rotate the secret, read the attempt log, replay one event and recover
//! a window. An operator names the tenant (`tenant`); a tenant's own
//! token needs none.

use futures::Stream;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Client, Request, enc, with_query};
use crate::error::Error;
use crate::operations::{ListQuery, Page};

impl Client {
    fn endpoint_path(id: &str, tail: &str, tenant: Option<&str>) -> String {
        let base = if id.is_empty() {
            "/v1/webhooks/endpoints".to_owned()
        } else {
            format!("/v1/webhooks/endpoints/{}{tail}", enc(id))
        };
        with_query(&base, &[("tenant", tenant.map(str::to_owned))])
    }

    /// `POST /v1/webhooks/endpoints`: `{"url", "description", "events"}`;
    /// the answer holds the secret, shown this once.
    pub async fn create_endpoint(&self, tenant: Option<&str>, endpoint: &Value) -> Result<Value, Error> {
        let req = Request::new(Method::POST, Self::endpoint_path("", "", tenant)).json(endpoint);
        self.call(req).await
    }

    /// `GET /v1/webhooks/endpoints`.
    pub async fn endpoints(&self, tenant: Option<&str>) -> Result<Value, Error> {
        self.call(Request::new(Method::GET, Self::endpoint_path("", "", tenant)))
            .await
    }

    /// `GET /v1/webhooks/endpoints/{id}`.
    pub async fn endpoint(&self, tenant: Option<&str>, id: &str) -> Result<Value, Error> {
        self.call(Request::new(Method::GET, Self::endpoint_path(id, "", tenant)))
            .await
    }

    /// `PATCH /v1/webhooks/endpoints/{id}`: the members to change.
    pub async fn update_endpoint(&self, tenant: Option<&str>, id: &str, change: &Value) -> Result<Value, Error> {
        let req = Request::new(Method::PATCH, Self::endpoint_path(id, "", tenant))
            .json(change)
            .idempotent(true);
        self.call(req).await
    }

    /// `DELETE /v1/webhooks/endpoints/{id}`.
    pub async fn delete_endpoint(&self, tenant: Option<&str>, id: &str) -> Result<(), Error> {
        self.call(Request::new(Method::DELETE, Self::endpoint_path(id, "", tenant)))
            .await
            .map(|_| ())
    }

    /// `POST /v1/webhooks/endpoints/{id}/rotate`: a new secret, shown
    /// once; the old one keeps signing for the overlap.
    pub async fn rotate_endpoint(&self, tenant: Option<&str>, id: &str) -> Result<Value, Error> {
        self.call(Request::new(Method::POST, Self::endpoint_path(id, "/rotate", tenant)))
            .await
    }

    /// An endpoint's delivery attempts, newest first, page after page
    /// (`status`, `limit`, and `tenant` for an operator, in `query`).
    pub fn endpoint_attempts<'a>(
        &'a self,
        path: &'a str,
        query: &'a ListQuery,
    ) -> impl Stream<Item = Result<Value, Error>> + 'a {
        self.pages(path, "attempts", query)
    }

    /// One page of endpoint `id`'s delivery attempts, newest first
    /// (`status`, `limit`, and `tenant` for an operator, in `query`).
    pub async fn endpoint_attempts_page(
        &self,
        id: &str,
        query: &ListQuery,
        cursor: Option<&str>,
    ) -> Result<Page, Error> {
        self.page(&Self::attempts_path(id), "attempts", query, cursor).await
    }

    /// The path of an endpoint's attempt log, for
    /// [`Client::endpoint_attempts`].
    pub fn attempts_path(id: &str) -> String {
        format!("/v1/webhooks/endpoints/{}/attempts", enc(id))
    }

    /// `POST /v1/webhooks/endpoints/{id}/replay`: one kept event again.
    pub async fn replay(&self, tenant: Option<&str>, id: &str, event_id: &str) -> Result<Value, Error> {
        let req =
            Request::new(Method::POST, Self::endpoint_path(id, "/replay", tenant)).json(&json!({"event_id": event_id}));
        self.call(req).await
    }

    /// `POST /v1/webhooks/endpoints/{id}/recover?since=`: every kept event
    /// since then, again.
    pub async fn recover(
        &self,
        tenant: Option<&str>,
        id: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Value, Error> {
        let base = format!("/v1/webhooks/endpoints/{}/recover", enc(id));
        let path = with_query(
            &base,
            &[
                ("since", Some(since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))),
                ("tenant", tenant.map(str::to_owned)),
            ],
        );
        self.call(Request::new(Method::POST, path)).await
    }
}
