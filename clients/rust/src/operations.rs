//! A tenant's operations: read one, list them, cancel, erase outputs,
//! read a trace, and wait for a phase as the service suggests.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::Stream;
use reqwest::Method;
use serde_json::Value;

use crate::client::{Client, Reply, Request, enc, with_query};
use crate::error::Error;

/// The shortest pause between two reads of [`Client::wait`], whatever the
/// service suggests.
const MIN_PAUSE: Duration = Duration::from_millis(250);

/// The header of a `GET` of an operation that says when to look again,
/// in whole seconds.
pub const NEXT_LOOK_HEADER: &str = "next-look-in";

/// An operation as the service showed it: the view, its version (the
/// `ETag`, for `If-Match`), and when the service suggests looking again.
#[derive(Debug, Clone)]
pub struct Operation {
    pub view: Value,
    pub version: Option<u64>,
    /// From `Next-Look-In`; none once the operation is finished.
    pub next_look: Option<Duration>,
}

impl Operation {
    pub(crate) fn from_reply(reply: Reply) -> Self {
        let version = reply.header("etag").and_then(|e| {
            let e = e.strip_prefix("W/").unwrap_or(e);
            e.trim_matches('"').parse().ok()
        });
        let next_look = reply
            .header(NEXT_LOOK_HEADER)
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Self {
            view: reply.body,
            version,
            next_look,
        }
    }

    pub fn id(&self) -> &str {
        self.view["operation_id"].as_str().unwrap_or("")
    }

    pub fn phase(&self) -> &str {
        self.view["phase"].as_str().unwrap_or("")
    }

    pub fn delivery_state(&self) -> &str {
        self.view["delivery_state"].as_str().unwrap_or("")
    }

    /// The view's `progress`: queue place, expected start and end, and the
    /// suggested next look, while unfinished.
    pub fn progress(&self) -> &Value {
        &self.view["progress"]
    }

    /// How long until the view's `progress.next_look_at`, when it says.
    fn suggested_by_view(&self) -> Option<Duration> {
        let at = self.progress()["next_look_at"].as_str()?;
        let at = chrono::DateTime::parse_from_rfc3339(at)
            .ok()?
            .with_timezone(&chrono::Utc);
        (at - chrono::Utc::now()).to_std().ok()
    }
}

/// What [`Client::wait`] waits for.
pub enum WaitFor {
    /// Any of these phases (`rendered`, `render_failed`, ...).
    Phases(Vec<String>),
    /// The outputs stored (`delivery_state` `delivered`).
    Delivered,
    /// Any view this holds for.
    View(Box<dyn Fn(&Value) -> bool + Send + Sync>),
}

impl WaitFor {
    pub fn phases(phases: &[&str]) -> Self {
        WaitFor::Phases(phases.iter().map(|p| (*p).to_owned()).collect())
    }

    fn holds(&self, view: &Value) -> bool {
        match self {
            WaitFor::Phases(phases) => phases.iter().any(|p| view["phase"] == p.as_str()),
            WaitFor::Delivered => view["delivery_state"] == "delivered",
            WaitFor::View(f) => f(view),
        }
    }
}

/// The filters of a listing, each as the API names it.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub pairs: Vec<(String, String)>,
}

impl ListQuery {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name=value` (`phase`, `key_prefix`, `created_after`, `tenant`,
    /// `limit`, ...).
    pub fn with(mut self, name: &str, value: impl ToString) -> Self {
        self.pairs.push((name.to_owned(), value.to_string()));
        self
    }

    fn path(&self, path: &str, cursor: Option<&str>) -> String {
        let mut pairs: Vec<(&str, Option<String>)> =
            self.pairs.iter().map(|(k, v)| (k.as_str(), Some(v.clone()))).collect();
        pairs.push(("cursor", cursor.map(str::to_owned)));
        with_query(path, &pairs)
    }
}

/// One page of a listing: its items and the cursor of the next, if any.
#[derive(Debug, Clone)]
pub struct Page {
    pub items: Vec<Value>,
    pub next_cursor: Option<String>,
}

impl Client {
    /// Sends `req`, whose success is an operation's view.
    pub(crate) async fn operation_call(&self, req: Request) -> Result<Operation, Error> {
        let reply = self.send(&req).await?;
        if reply.is_success() {
            Ok(Operation::from_reply(reply))
        } else {
            Err(reply.into_result().unwrap_err())
        }
    }

    /// `GET /v1/operations/{id}`.
    pub async fn operation(&self, id: &str) -> Result<Operation, Error> {
        self.operation_call(Request::new(Method::GET, format!("/v1/operations/{}", enc(id))))
            .await
    }

    /// One page of `GET /v1/operations`.
    pub async fn operations_page(&self, query: &ListQuery, cursor: Option<&str>) -> Result<Page, Error> {
        self.page("/v1/operations", "operations", query, cursor).await
    }

    /// One page of the paged listing at `path`, its items under `member`.
    pub(crate) async fn page(
        &self,
        path: &str,
        member: &str,
        query: &ListQuery,
        cursor: Option<&str>,
    ) -> Result<Page, Error> {
        let body = self.call(Request::new(Method::GET, query.path(path, cursor))).await?;
        page_of(body, member)
    }

    /// Every operation the query matches, page after page, following
    /// `next_cursor`.
    pub fn operations<'a>(&'a self, query: &'a ListQuery) -> impl Stream<Item = Result<Value, Error>> + 'a {
        self.pages("/v1/operations", "operations", query)
    }

    /// The items of a paged listing at `path`, under `member`, following
    /// `next_cursor` until the last page.
    pub(crate) fn pages<'a>(
        &'a self,
        path: &'a str,
        member: &'a str,
        query: &'a ListQuery,
    ) -> impl Stream<Item = Result<Value, Error>> + 'a {
        struct State {
            items: VecDeque<Value>,
            cursor: Option<String>,
            done: bool,
        }
        let start = State {
            items: VecDeque::new(),
            cursor: None,
            done: false,
        };
        futures::stream::try_unfold(start, move |mut st| async move {
            loop {
                if let Some(item) = st.items.pop_front() {
                    return Ok(Some((item, st)));
                }
                if st.done {
                    return Ok(None);
                }
                let body = self
                    .call(Request::new(Method::GET, query.path(path, st.cursor.as_deref())))
                    .await?;
                let page = page_of(body, member)?;
                st.items.extend(page.items);
                st.done = page.next_cursor.is_none();
                st.cursor = page.next_cursor;
            }
        })
    }

    /// `POST /v1/operations/{id}/cancel`: the operation, cancelled (a
    /// repeat changes nothing) or a 409 once it is dispatched.
    pub async fn cancel(&self, id: &str) -> Result<Operation, Error> {
        let req = Request::new(Method::POST, format!("/v1/operations/{}/cancel", enc(id))).idempotent(true);
        self.operation_call(req).await
    }

    /// `DELETE /v1/operations/{id}/outputs`: the stored outputs erased;
    /// the view names them (`erased_objects`). A repeat changes nothing.
    pub async fn erase_outputs(&self, id: &str) -> Result<Operation, Error> {
        let req = Request::new(Method::DELETE, format!("/v1/operations/{}/outputs", enc(id)));
        self.operation_call(req).await
    }

    /// `GET /v1/operations/{id}/trace`: the operation's trace, its spans.
    pub async fn trace(&self, id: &str) -> Result<Value, Error> {
        self.call(Request::new(Method::GET, format!("/v1/operations/{}/trace", enc(id))))
            .await
    }

    /// `GET /v1/tenants/me/credits`: the caller's credits.
    pub async fn my_credits(&self) -> Result<Value, Error> {
        self.call(Request::new(Method::GET, "/v1/tenants/me/credits")).await
    }

    /// Reads operation `id` until `until` holds for its view, or `within`
    /// has passed ([`Error::Deadline`], with the last view). Between reads
    /// it waits as the service suggests (`Next-Look-In`), and without a
    /// suggestion backs off from 250 ms to 10 s: never a fixed interval.
    pub async fn wait(&self, id: &str, until: WaitFor, within: Duration) -> Result<Operation, Error> {
        let deadline = Instant::now() + within;
        let mut backoff = Duration::from_millis(250);
        loop {
            let op = self.operation(id).await?;
            if until.holds(&op.view) {
                return Ok(op);
            }
            // Finished (no progress shown, so nothing more will happen to it
            // without a person): waiting longer cannot help.
            if op.view.get("progress").is_none() && op.view.get("phase").is_some() {
                return Err(Error::Finished(Box::new(op.view)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Deadline(Box::new(op.view)));
            }
            let suggested = op.next_look.or_else(|| op.suggested_by_view());
            let pause = suggested.unwrap_or_else(|| {
                backoff = (backoff * 2).min(Duration::from_secs(10));
                backoff / 2
            });
            tokio::time::sleep(pause.max(MIN_PAUSE).min(deadline - now)).await;
        }
    }
}

/// A page's items under `member` and its `next_cursor`.
pub(crate) fn page_of(mut body: Value, member: &str) -> Result<Page, Error> {
    let items = match body.get_mut(member).map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => return Err(Error::Unreadable(format!("a page without `{member}`: {body}"))),
    };
    Ok(Page {
        items,
        next_cursor: body["next_cursor"].as_str().map(str::to_owned),
    })
}
