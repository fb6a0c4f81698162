//! An operation as its tenant may see it: who decided is named only when it
//! was the tenant itself or the service, and what Genace said about our
//! whole account stays with the operators.
//!
//! - **Operators are pseudonymous.** An operator's subject (often an e-mail
//!   address) in the audit trail, a cancellation or an erasure becomes
//!   `operator-1`, `operator-2`... numbered by first appearance in the
//!   record's audit trail, so one operator is one name across a record's
//!   views and events, and nothing a tenant reads can be turned back into
//!   the subject.
//! - **Account-wide refusals are not quoted.** A 4xx from Genace other
//!   than 400, 409, 422 and 429 (401, 402, 403, a 404 or 405 from a wrong
//!   path) is about our account or deployment, not the intent: its body
//!   (which can name the account, its plan or its balance) is replaced by a
//!   fixed sentence, in the last error and in the case's evidence.

use super::case::CaseReason;
use super::operation::OperationRecord;

/// Actors that are the service itself, named as they are.
pub const SERVICE_ACTORS: [&str; 1] = [DEADLINE_ACTOR];

/// The actor of a cancellation at the operation's dispatch deadline.
pub const DEADLINE_ACTOR: &str = "dispatch_deadline";

/// What a tenant reads in place of Genace's answer about our account.
pub const ACCOUNT_REFUSED: &str =
    "Genace refused the service's account, not this operation; the operators are told and the operation is held.";

/// Whether a status of Genace's answer is about our whole account or
/// deployment, as `remote::classify_submit` sorts them: a 4xx that neither
/// refuses the request itself (400, 409, 422) nor limits its rate (429).
fn about_the_account(status: u16) -> bool {
    (400..500).contains(&status) && ![400, 409, 422, 429].contains(&status)
}

impl OperationRecord {
    /// This record as its tenant's views and lifecycle events show it.
    pub fn for_tenant(&self) -> Self {
        let mut shown = self.clone();
        let mut operators: Vec<String> = Vec::new();
        let tenant = self.tenant_id.as_str().to_owned();
        let mut name = |actor: &str| -> String {
            if actor == tenant || SERVICE_ACTORS.contains(&actor) {
                return actor.to_owned();
            }
            let n = match operators.iter().position(|o| o == actor) {
                Some(i) => i + 1,
                None => {
                    operators.push(actor.to_owned());
                    operators.len()
                }
            };
            format!("operator-{n}")
        };
        for entry in &mut shown.audit {
            entry.actor = name(&entry.actor);
        }
        if let Some(c) = &mut shown.cancellation {
            c.by = name(&c.by);
        }
        if let Some(e) = &mut shown.outputs_erased {
            e.by = name(&e.by);
        }
        if let Some(err) = &mut shown.last_error
            && err.status.is_some_and(about_the_account)
        {
            err.detail = ACCOUNT_REFUSED.to_owned();
        }
        if let Some(case) = &mut shown.case
            && case.reason == CaseReason::AccountProblem
        {
            case.evidence = ACCOUNT_REFUSED.to_owned();
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::super::case::ReconciliationCase;
    use super::super::operation::sample_prepared;
    use super::super::parts::{AuditEntry, CancelReason, Cancellation, RemoteError};
    use super::*;

    fn entry(actor: &str) -> AuditEntry {
        AuditEntry {
            actor: actor.into(),
            at: chrono::Utc::now(),
            action: "release_hold".into(),
            reason: "r".into(),
            job_id: None,
        }
    }

    #[test]
    fn operators_are_pseudonymous_and_the_tenant_and_service_named() {
        let mut rec = sample_prepared(chrono::Utc::now());
        let tenant = rec.tenant_id.as_str().to_owned();
        rec.audit = vec![
            entry("alice@example.com"),
            entry(&tenant),
            entry("bob@example.com"),
            entry("alice@example.com"),
        ];
        rec.cancellation = Some(Cancellation {
            at: chrono::Utc::now(),
            by: "bob@example.com".into(),
            reason: CancelReason::Requested,
        });
        let shown = rec.for_tenant();
        let actors: Vec<&str> = shown.audit.iter().map(|a| a.actor.as_str()).collect();
        assert_eq!(actors, ["operator-1", tenant.as_str(), "operator-2", "operator-1"]);
        assert_eq!(shown.cancellation.unwrap().by, "operator-2");
        let text = serde_json::to_string(&rec.for_tenant()).unwrap();
        assert!(!text.contains("example.com"), "{text}");
        rec.cancellation.as_mut().unwrap().by = DEADLINE_ACTOR.into();
        assert_eq!(rec.for_tenant().cancellation.unwrap().by, DEADLINE_ACTOR);
    }

    #[test]
    fn genace_s_words_about_the_account_are_not_quoted() {
        let mut rec = sample_prepared(chrono::Utc::now());
        for (status, quoted) in [
            (402, false),
            (401, false),
            (403, false),
            (404, false),
            (405, false),
            (400, true),
            (422, true),
            (429, true),
            (500, true),
        ] {
            rec.last_error = Some(RemoteError {
                kind: format!("http_{status}"),
                status: Some(status),
                detail: "{\"balance\": 0, \"account\": \"acme-prod\"}".into(),
            });
            rec.case = Some(ReconciliationCase {
                reason: if quoted {
                    CaseReason::UnknownSubmitOutcome
                } else {
                    CaseReason::AccountProblem
                },
                opened_at: chrono::Utc::now(),
                evidence: "HTTP 402: acme-prod".into(),
            });
            let shown = rec.for_tenant();
            let text = serde_json::to_string(&shown).unwrap();
            assert_eq!(text.contains("acme-prod"), quoted, "{status}: {text}");
            assert_eq!(shown.last_error.unwrap().detail == ACCOUNT_REFUSED, !quoted, "{status}");
        }
    }
}
