//! The HTTP edge of intake: API Gateway HTTP API (payload v2) requests in,
//! JSON or `application/problem+json` responses out. Every error of the
//! layers below is mapped to a problem document here, and only here.

use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::{Map, Value, json};
use tracing::error;

use crate::admin::Operator;
use crate::clock::Clock;
use crate::domain::{Intent, InvalidInput, OperationId, RemoteJobId, TenantId};
use crate::intake::{Intake, IntakeError, Submitted};
use crate::machine::Resolution;
use crate::queue::WorkQueue;
use crate::record::CaseReason;
use crate::record::OperationRecord;
use crate::storage::ObjectStore;
use crate::store::OperationStore;

pub const PROBLEM_JSON: &str = "application/problem+json";
const PROBLEM_BASE: &str = "https://genace-operations.dev/problems/";

/// An RFC 9457 problem, ready to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    /// Short slug; the problem `type` is a URI built from it.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            title,
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }

    pub fn into_response(self, instance: &str) -> Response<Body> {
        let mut body = Map::new();
        body.insert("type".into(), format!("{PROBLEM_BASE}{}", self.kind).into());
        body.insert("title".into(), self.title.into());
        body.insert("status".into(), self.status.as_u16().into());
        body.insert("detail".into(), self.detail.into());
        body.insert("instance".into(), instance.into());
        body.extend(self.extensions);
        Response::builder()
            .status(self.status)
            .header(header::CONTENT_TYPE, PROBLEM_JSON)
            .body(Body::Text(Value::Object(body).to_string()))
            .expect("a problem response is always valid")
    }
}

impl From<InvalidInput> for Problem {
    fn from(e: InvalidInput) -> Self {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "The request is invalid",
            e.to_string(),
        )
        .with("field", e.field)
    }
}

impl From<IntakeError> for Problem {
    fn from(e: IntakeError) -> Self {
        match e {
            IntakeError::KeyReused { ref existing, .. } => {
                let id = existing.as_str().to_owned();
                Problem::new(
                    StatusCode::CONFLICT,
                    "operation-key-reused",
                    "The operation key is already used for a different specification",
                    format!("{e}. Use a new operation key for a new intent."),
                )
                .with("operation_id", id)
            }
            IntakeError::NotFound => not_found(),
            IntakeError::StaleVersion { actual, .. } => Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "stale-version",
                "The operation changed since it was read",
                format!("{e}. Read it again and decide on what it is now."),
            )
            .with("current_version", actual),
            IntakeError::JobHeldElsewhere { ref holder, .. } => {
                let p = Problem::new(
                    StatusCode::CONFLICT,
                    "remote-job-held",
                    "The remote job belongs to another operation",
                    e.to_string(),
                );
                match holder {
                    Some(id) => p.with("operation_id", id.as_str()),
                    None => p,
                }
            }
            IntakeError::Refused(refusal) => Problem::new(
                StatusCode::CONFLICT,
                "wrong-phase",
                "The operation is not in a phase that allows this",
                refusal.to_string(),
            ),
            IntakeError::Store(crate::store::StoreError::Cursor) => {
                Problem::from(InvalidInput::new("cursor", "is not a cursor this API returned"))
            }
            IntakeError::Store(inner) => {
                error!(error = %inner, "store failure");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store-unavailable",
                    "The operation store is unavailable",
                    "Try again shortly; nothing was lost.",
                )
            }
        }
    }
}

fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such operation",
        "No operation with this id exists for the caller.",
    )
}

/// The view with presigned links for the delivered objects.
pub fn view_with_links(rec: &OperationRecord, links: &[Option<String>]) -> Value {
    let mut v = view(rec);
    if !rec.delivered_objects.is_empty() {
        let objects: Vec<Value> = rec
            .delivered_objects
            .iter()
            .zip(links.iter().chain(std::iter::repeat(&None)))
            .map(|(o, link)| {
                json!({
                    "key": o.key,
                    "bytes": o.bytes,
                    "sha256": o.sha256,
                    "content_type": o.content_type,
                    "url": link,
                })
            })
            .collect();
        v["delivered_objects"] = Value::Array(objects);
    }
    v
}

/// The JSON view of an operation that clients see.
pub fn view(rec: &OperationRecord) -> Value {
    let mut v = json!({
        "operation_id": rec.operation_id,
        "operation_key": rec.operation_key,
        "media_type": rec.media_type,
        "phase": rec.phase,
        "delivery_state": rec.delivery_state,
        "specification_hash": rec.specification_hash,
        "specification": rec.specification_value(),
        "remote_job_id": rec.remote_job_id,
        "remote_state": rec.remote_state,
        "observed_at": rec.observed_at,
        "accepted_at": rec.accepted_at,
        "settlement": rec.settlement,
        "delivery_attempts": rec.delivery_attempts,
        "version": rec.version,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
    });
    let obj = v.as_object_mut().expect("view is an object");
    if let Some(case) = &rec.case {
        obj.insert("reconciliation_case".into(), json!(case));
    }
    if let Some(err) = &rec.last_error {
        obj.insert("last_error".into(), json!(err));
    }
    if !rec.audit.is_empty() {
        obj.insert("audit".into(), json!(rec.audit));
    }
    v
}

fn json_response(status: StatusCode) -> lambda_http::http::response::Builder {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
}

fn claims(req: &Request) -> Option<&std::collections::HashMap<String, String>> {
    match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.authorizer.as_ref()?.jwt.as_ref().map(|j| &j.claims),
        _ => None,
    }
}

/// The operator behind a request, if its token carries the operator claim.
/// A token that also names a tenant limits the operator to that tenant; a
/// tenant claim that is present but not a valid tenant id is refused (403),
/// never read as "no tenant", which would make the operator global.
fn operator(req: &Request, config: &crate::config::Config) -> Result<Option<Operator>, Problem> {
    let Some(claims) = claims(req) else {
        return Ok(None);
    };
    let Some(values) = claims.get(&config.operator_claim) else {
        return Ok(None);
    };
    let is_operator = values
        .trim_matches(|c| c == '[' || c == ']')
        .split(|c: char| c.is_whitespace() || c == ',')
        .any(|v| v == config.operator_value);
    if !is_operator {
        return Ok(None);
    }
    let tenant = match claims.get(&config.tenant_claim) {
        None => None,
        Some(raw) => Some(TenantId::parse(raw).map_err(|_| {
            Problem::new(
                StatusCode::FORBIDDEN,
                "invalid-operator-tenant",
                "The operator token's tenant claim is not valid",
                format!(
                    "The {:?} claim is present but is not a tenant id; the token is refused.",
                    config.tenant_claim
                ),
            )
        })?),
    };
    Ok(Some(Operator {
        actor: claims.get("sub").cloned().unwrap_or_else(|| "unknown".into()),
        tenant,
    }))
}

fn require_operator(req: &Request, config: &crate::config::Config) -> Result<Operator, Problem> {
    if claims(req).is_none() {
        return Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "No credentials",
            "Send a bearer token.",
        ));
    }
    operator(req, config)?.ok_or_else(|| {
        Problem::new(
            StatusCode::FORBIDDEN,
            "operator-only",
            "Operators only",
            format!(
                "This route needs {:?} in the {:?} claim.",
                config.operator_value, config.operator_claim
            ),
        )
    })
}

/// Query parameters, percent-decoded.
fn query(req: &Request) -> std::collections::HashMap<String, String> {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let decoded = match bytes[i] {
                b'+' => Some((b' ', 1)),
                b'%' => bytes
                    .get(i + 1)
                    .and_then(|h| hex(*h))
                    .zip(bytes.get(i + 2).and_then(|l| hex(*l)))
                    .map(|(h, l)| (h * 16 + l, 3)),
                _ => None,
            };
            let (byte, used) = decoded.unwrap_or((bytes[i], 1));
            out.push(byte);
            i += used;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn claims_tenant(req: &Request, claim: &str) -> Result<TenantId, Problem> {
    let unauthorized = |detail: &str| {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "No usable tenant in the credentials",
            detail.to_owned(),
        )
    };
    let raw = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx
            .authorizer
            .as_ref()
            .and_then(|a| a.jwt.as_ref())
            .and_then(|j| j.claims.get(claim))
            .cloned(),
        _ => None,
    };
    let raw = raw.ok_or_else(|| unauthorized(&format!("The token carries no {claim:?} claim.")))?;
    TenantId::parse(&raw).map_err(|_| unauthorized(&format!("The {claim:?} claim is not a valid tenant id.")))
}

/// The request body as JSON: 415 unless it says JSON, 400 unless it is.
fn json_body(req: &Request) -> Result<Value, Problem> {
    if !is_json(req) {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "The request body must be JSON",
            "Send Content-Type: application/json.",
        ));
    }
    serde_json::from_slice(req.body().as_ref()).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "The body is not valid JSON",
            e.to_string(),
        )
    })
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .is_some_and(|m| m == "application/json" || (m.starts_with("application/") && m.ends_with("+json")))
}

enum Route {
    Operations,
    Operation(String),
    Resolution(String),
    Cases,
}

fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path
        .trim_end_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        [.., "v1", "operations"] => Some(Route::Operations),
        [.., "v1", "operations", id] => Some(Route::Operation((*id).to_owned())),
        [.., "v1", "operations", id, "resolution"] => Some(Route::Resolution((*id).to_owned())),
        [.., "v1", "reconciliation-cases"] => Some(Route::Cases),
        _ => None,
    }
}

/// Handles one intake request. Never fails: every outcome is a response.
pub async fn handle<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Response<Body> {
    let instance = req.uri().path().to_owned();
    match dispatch(intake, req).await {
        Ok(resp) => resp,
        Err(problem) => problem.into_response(&instance),
    }
}

async fn dispatch<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Result<Response<Body>, Problem> {
    let method_not_allowed = |allow: &'static str| {
        Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            format!("Use {allow}."),
        )
        .with("allow", allow)
    };
    match (route(req.uri().path()), req.method()) {
        (Some(Route::Operations), &Method::POST) => create(intake, req).await,
        (Some(Route::Operations), _) => Err(method_not_allowed("POST")),
        (Some(Route::Operation(id)), &Method::GET) => read(intake, &req, &id).await,
        (Some(Route::Operation(_)), _) => Err(method_not_allowed("GET")),
        (Some(Route::Resolution(id)), &Method::POST) => resolve(intake, req, &id).await,
        (Some(Route::Resolution(_)), _) => Err(method_not_allowed("POST")),
        (Some(Route::Cases), &Method::GET) => list_cases(intake, &req).await,
        (Some(Route::Cases), _) => Err(method_not_allowed("GET")),
        (None, _) => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "no-route",
            "No such route",
            "See the API description for the routes.",
        )),
    }
}

async fn create<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
) -> Result<Response<Body>, Problem> {
    let tenant = claims_tenant(&req, &intake.config.tenant_claim)?;
    let body: &[u8] = req.body().as_ref();
    if body.len() > intake.config.max_body_bytes {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The request body is too large",
            format!("The body may be at most {} bytes.", intake.config.max_body_bytes),
        ));
    }
    let value = json_body(&req)?;
    let header_key = match req.headers().get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Problem::from(InvalidInput::new("Idempotency-Key", "must be visible ASCII")))?,
        ),
    };
    let intent = Intent::parse(&value, header_key)?;
    if intent.fault.is_some() && !intake.config.fault_injection {
        return Err(InvalidInput::new("fault", "fault injection is disabled in this deployment").into());
    }
    let outcome = intake.submit(&tenant, &intent, intake.clock.now()).await?;
    let (status, rec, replayed) = match &outcome {
        Submitted::New(rec) => (StatusCode::ACCEPTED, rec, false),
        Submitted::Replayed(rec) => (StatusCode::OK, rec, true),
    };
    let body = view(rec);
    let mut builder = json_response(status).header(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/operations/{}", rec.operation_id)).expect("ids are ASCII"),
    );
    if replayed {
        builder = builder.header("Idempotent-Replayed", "true");
    }
    Ok(builder.body(Body::Text(body.to_string())).expect("valid response"))
}

async fn read<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
    raw_id: &str,
) -> Result<Response<Body>, Problem> {
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let rec = match operator(req, &intake.config)? {
        Some(op) => intake.operator_get(&op, &id).await?,
        None => {
            let tenant = claims_tenant(req, &intake.config.tenant_claim)?;
            intake.get(&tenant, &id, intake.clock.now()).await?
        }
    };
    let body = view_with_links(&rec, &intake.links(&rec).await);
    Ok(json_response(StatusCode::OK)
        .header(header::ETAG, etag(&rec))
        .body(Body::Text(body.to_string()))
        .expect("valid response"))
}

/// The strong validator of an operation view: its version.
pub fn etag(rec: &OperationRecord) -> String {
    format!("\"{}\"", rec.version)
}

/// The version named by `If-Match`: 428 when absent, 400 for `*` or a list,
/// 412 when it names no version this API ever gave.
fn if_match_version(req: &Request) -> Result<u64, Problem> {
    let raw = req
        .headers()
        .get(header::IF_MATCH)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::PRECONDITION_REQUIRED,
                "if-match-required",
                "Send If-Match with the operation's version",
                "Read the operation first and send its ETag in If-Match, so the decision applies to what was seen.",
            )
        })?
        .to_str()
        .unwrap_or("")
        .trim();
    if raw == "*" || raw.contains(',') {
        return Err(InvalidInput::new("If-Match", "must be the one ETag of the operation as read").into());
    }
    raw.trim_start_matches("W/")
        .trim_matches('"')
        .parse::<u64>()
        .map_err(|_| {
            Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "stale-version",
                "The operation changed since it was read",
                "If-Match names no version of this operation.",
            )
        })
}

/// Largest resolution body accepted.
const MAX_RESOLUTION_BODY: usize = 8 * 1024;

async fn list_cases<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: &Request,
) -> Result<Response<Body>, Problem> {
    let op = require_operator(req, &intake.config)?;
    let q = query(req);
    let tenant = q
        .get("tenant")
        .map(|t| TenantId::parse(t).map_err(|_| Problem::from(InvalidInput::new("tenant", "is not a tenant id"))))
        .transpose()?;
    let reason = q
        .get("reason")
        .map(|r| {
            serde_json::from_value::<CaseReason>(Value::String(r.clone()))
                .map_err(|_| Problem::from(InvalidInput::new("reason", "is not a case reason")))
        })
        .transpose()?;
    let limit = match q.get("limit") {
        None => 25,
        Some(l) => l
            .parse::<i32>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| Problem::from(InvalidInput::new("limit", "must be 1-100")))?,
    };
    let page = intake
        .cases(&op, tenant, reason, limit, q.get("cursor").map(String::as_str))
        .await?;
    let cases: Vec<Value> = page.records.iter().map(case_view).collect();
    let body = json!({"cases": cases, "next_cursor": page.next});
    Ok(json_response(StatusCode::OK)
        .body(Body::Text(body.to_string()))
        .expect("valid response"))
}

/// One open case as the case list shows it.
pub fn case_view(rec: &OperationRecord) -> Value {
    json!({
        "operation_id": rec.operation_id,
        "tenant_id": rec.tenant_id,
        "operation_key": rec.operation_key,
        "phase": rec.phase,
        "delivery_state": rec.delivery_state,
        "remote_job_id": rec.remote_job_id,
        "reason": rec.case.as_ref().map(|c| c.reason),
        "opened_at": rec.case.as_ref().map(|c| c.opened_at),
        "evidence": rec.case.as_ref().map(|c| c.evidence.clone()),
    })
}

async fn resolve<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock>(
    intake: &Intake<S, Q, O, C>,
    req: Request,
    raw_id: &str,
) -> Result<Response<Body>, Problem> {
    let op = require_operator(&req, &intake.config)?;
    if req.body().as_ref().len() > MAX_RESOLUTION_BODY {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The request body is too large",
            format!("A resolution may be at most {MAX_RESOLUTION_BODY} bytes."),
        ));
    }
    let body = json_body(&req)?;
    let text = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let reason = text("reason").ok_or_else(|| Problem::from(InvalidInput::new("reason", "is required")))?;
    let resolution = match text("action") {
        Some("attach_remote_job") => {
            let raw = text("job_id")
                .ok_or_else(|| Problem::from(InvalidInput::new("job_id", "is required to attach a job")))?;
            Resolution::AttachRemoteJob {
                job_id: RemoteJobId::parse(raw)?.into_string(),
            }
        }
        Some("confirm_not_created") => Resolution::ConfirmNotCreated,
        Some("release_hold") => Resolution::ReleaseHold,
        Some("mark_settled") => Resolution::MarkSettled,
        Some("redrive_delivery") => Resolution::RedriveDelivery,
        Some("abandon") => Resolution::Abandon,
        _ => {
            return Err(InvalidInput::new(
                "action",
                "must be attach_remote_job, confirm_not_created, release_hold, mark_settled, redrive_delivery or abandon",
            )
            .into());
        }
    };
    let id = OperationId::parse(raw_id).map_err(|_| not_found())?;
    let version = if_match_version(&req)?;
    let rec = intake.resolve(&op, &id, &resolution, reason, version).await?;
    let body = view_with_links(&rec, &intake.links(&rec).await);
    Ok(json_response(StatusCode::OK)
        .header(header::ETAG, etag(&rec))
        .body(Body::Text(body.to_string()))
        .expect("valid response"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{self, AcceptedJob, Policy};

    fn prepared() -> OperationRecord {
        crate::record::sample_prepared(chrono::Utc::now())
    }

    #[test]
    fn the_view_shows_the_remote_job_and_the_open_case() {
        let now = chrono::Utc::now();
        let claimed = machine::claim_dispatch(&prepared(), "tok", now, &Policy::default()).unwrap();
        let uncertain = machine::mark_uncertain(&claimed, "tok", "timed out", now).unwrap();
        let v = view(&uncertain);
        assert_eq!(v["phase"], "uncertain");
        assert_eq!(v["reconciliation_case"]["reason"], "unknown_submit_outcome");
        assert_eq!(v["reconciliation_case"]["evidence"], "timed out");
        assert!(v.get("claim").is_none(), "claim tokens stay private");

        let job = AcceptedJob {
            job_id: "J1".into(),
            state: Some("running".into()),
            model: None,
            created_at: None,
            held_credits: None,
        };
        let accepted = machine::accept(&claimed, "tok", &job, now, &Policy::default()).unwrap();
        let v = view(&accepted);
        assert_eq!(v["phase"], "accepted");
        assert_eq!(v["remote_job_id"], "J1");
        assert_eq!(v["remote_state"], "running");
        assert!(v.get("reconciliation_case").is_none());
    }
}
