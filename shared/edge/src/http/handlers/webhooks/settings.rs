//! `/v1/tenants/{tenant_id}/webhook`: a tenant's single webhook, operators only.

use genace_core::domain::TenantId;
use genace_core::requests::WebhookRequest;
use genace_stages::api::context::Api;
use genace_stages::api::operator::Operator;
use genace_stages::ports::Ports;
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};

use crate::http::handlers::ok_json;
use crate::http::problem::{Problem, not_found};
use crate::http::request::{MAX_SMALL_BODY_BYTES, parsed_body};
use crate::http::views::webhook_view;

/// GET, PUT or DELETE a tenant's webhook (operators only).
pub(crate) async fn webhook<P: Ports>(
    api: &Api<P>,
    op: &Operator,
    req: Request,
    raw_tenant: &str,
) -> Result<Response<Body>, Problem> {
    let tenant = TenantId::parse(raw_tenant).map_err(|_| not_found())?;
    let config = match *req.method() {
        Method::PUT => {
            let policy = api.config.webhook_url_policy();
            let request = parsed_body(&req, "webhook", MAX_SMALL_BODY_BYTES, |body| {
                WebhookRequest::parse(body, &policy, &tenant)
            })?;
            Some(api.operator(op).set_webhook(&tenant, request).await?)
        }
        Method::DELETE => {
            api.operator(op).remove_webhook(&tenant).await?;
            None
        }
        _ => api.operator(op).webhook(&tenant).await?,
    };
    Ok(ok_json(webhook_view(tenant.as_str(), config.as_ref())))
}
