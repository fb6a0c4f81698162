//! Who is calling: the one reader of the claims API Gateway's JWT
//! authorizer verified and put in `requestContext.authorizer.jwt.claims`.

use std::collections::HashMap;

use genace_core::domain::TenantId;
use genace_stages::api::operator::Operator;
use genace_stages::config::Config;
use lambda_http::http::StatusCode;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use super::problem::Problem;

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An application acting for its tenant.
    Tenant(TenantId),
    /// An operator (the operator claim holds the operator value), limited to
    /// one tenant when the token also names one.
    Operator(Operator),
}

fn claims(req: &Request) -> Option<&HashMap<String, String>> {
    match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.authorizer.as_ref()?.jwt.as_ref().map(|j| &j.claims),
        _ => None,
    }
}

/// The values of a claim that lists several: space- or comma-separated,
/// or `[a b]` as API Gateway renders a list.
fn listed(values: &str) -> impl Iterator<Item = &str> {
    values
        .trim_matches(|c| c == '[' || c == ']')
        .split(|c: char| c.is_whitespace() || c == ',')
}

fn unauthorized(title: &'static str, detail: String) -> Problem {
    Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", title, detail)
}

impl Principal {
    /// Reads the caller. No claims at all is 401. A token with the operator
    /// value is an operator: of the tenant its tenant claim names, or of
    /// every tenant when it also carries the global-operator mark. One with
    /// neither is refused (403), as is a tenant claim that is not a tenant
    /// id: a claim the issuer names differently never makes an operator
    /// global. Any other token must name a valid tenant (401).
    pub fn read(req: &Request, config: &Config) -> Result<Self, Problem> {
        let claims = claims(req).ok_or_else(|| unauthorized("No credentials", "Send a bearer token.".into()))?;
        let operator_claim_has = |value: &str| {
            claims
                .get(&config.operator_claim)
                .is_some_and(|values| listed(values).any(|v| v == value))
        };
        let claim = &config.tenant_claim;
        if operator_claim_has(&config.operator_value) {
            let tenant = match claims.get(claim) {
                None if operator_claim_has(&config.global_operator_value) => None,
                None => {
                    return Err(Problem::new(
                        StatusCode::FORBIDDEN,
                        "operator-scope-unknown",
                        "The operator token names no tenant and is not marked global",
                        format!(
                            "An operator token needs the {claim:?} claim (an operator of that tenant) or {:?} in \
                             the {:?} claim (an operator of every tenant); this one has neither and is refused.",
                            config.global_operator_value, config.operator_claim
                        ),
                    ));
                }
                Some(raw) => Some(TenantId::parse(raw).map_err(|_| {
                    Problem::new(
                        StatusCode::FORBIDDEN,
                        "invalid-operator-tenant",
                        "The operator token's tenant claim is not valid",
                        format!("The {claim:?} claim is present but is not a tenant id; the token is refused."),
                    )
                })?),
            };
            return Ok(Principal::Operator(Operator {
                actor: claims.get("sub").cloned().unwrap_or_else(|| "unknown".into()),
                tenant,
            }));
        }
        let raw = claims.get(claim).ok_or_else(|| {
            unauthorized(
                "No usable tenant in the credentials",
                format!("The token carries no {claim:?} claim."),
            )
        })?;
        TenantId::parse(raw).map(Principal::Tenant).map_err(|_| {
            unauthorized(
                "No usable tenant in the credentials",
                format!("The {claim:?} claim is not a valid tenant id."),
            )
        })
    }

    /// The tenant a new intent is recorded for: the caller's own, or the
    /// one an operator's token is limited to.
    pub fn tenant(&self, config: &Config) -> Result<&TenantId, Problem> {
        match self {
            Principal::Tenant(t) => Ok(t),
            Principal::Operator(Operator { tenant: Some(t), .. }) => Ok(t),
            Principal::Operator(_) => Err(unauthorized(
                "No usable tenant in the credentials",
                format!("The token carries no {:?} claim.", config.tenant_claim),
            )),
        }
    }

    /// Whether the token grants `scope` (the authorizer's `scope` claim,
    /// space-separated, or `scp` as a list).
    pub fn has_scope(req: &Request, scope: &str) -> bool {
        claims(req).is_some_and(|c| {
            ["scope", "scp"]
                .iter()
                .filter_map(|k| c.get(*k))
                .any(|values| listed(values).any(|v| v == scope))
        })
    }

    /// The token's subject, for the audit of a change.
    pub fn subject(req: &Request) -> Option<String> {
        claims(req).and_then(|c| c.get("sub").cloned())
    }

    /// The operator, or 403 for an application's token.
    pub fn operator(self, config: &Config) -> Result<Operator, Problem> {
        match self {
            Principal::Operator(op) => Ok(op),
            Principal::Tenant(_) => Err(Problem::new(
                StatusCode::FORBIDDEN,
                "operator-only",
                "Operators only",
                format!(
                    "This route needs {:?} in the {:?} claim.",
                    config.operator_value, config.operator_claim
                ),
            )),
        }
    }
}
