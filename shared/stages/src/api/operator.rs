//! What operators may do: list open reconciliation cases, read any operation
//! in their scope, and resolve a case with an explicit, audited decision.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::{info, warn};

use crate::api::context::Api;
use crate::api::errors::{ListError, OperationError};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, write_attempts};
use crate::ports::queue::WorkQueue;
use crate::ports::table::{CaseCount, CaseFilter, CasePage};
use genace_core::domain::{OperationId, TenantId};
use genace_core::machine::{self, Decision, Input, Resolution};
use genace_core::messages::Queue;
use genace_core::record::{OperationRecord, Phase};

/// An authenticated operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// Who acts, for the audit trail (the token's `sub`).
    pub actor: String,
    /// When set, the operator sees and resolves this tenant's operations only.
    pub tenant: Option<TenantId>,
}

impl Operator {
    pub fn may_see(&self, tenant: &TenantId) -> bool {
        self.tenant.as_ref().is_none_or(|t| t == tenant)
    }
}

/// The API as one operator sees it: every operator action is a method
/// here, so none can be reached without the [`Operator`] whose scope it
/// checks and whose name the audit keeps. Made by [`Api::operator`].
pub struct OperatorApi<'a, P: Ports> {
    /// The API whose ports and settings the operator's actions use.
    pub(crate) api: &'a Api<P>,
    pub(crate) op: &'a Operator,
}

impl<P: Ports> Api<P> {
    /// The operator actions, for `op`.
    pub fn operator<'a>(&'a self, op: &'a Operator) -> OperatorApi<'a, P> {
        OperatorApi { api: self, op }
    }
}

impl<P: Ports> OperatorApi<'_, P> {
    /// Which tenant a listing covers when the operator asks for `asked`
    /// (None: every tenant): an operator limited to a tenant covers only
    /// that one. None when the operator asked for a tenant it may not see.
    pub(crate) fn scope(&self, asked: Option<TenantId>) -> Option<Option<TenantId>> {
        match (&self.op.tenant, asked) {
            (Some(own), Some(asked)) if *own != asked => None,
            (Some(own), _) => Some(Some(own.clone())),
            (None, asked) => Some(asked),
        }
    }
}

impl<P: Ports> OperatorApi<'_, P> {
    /// How many cases are open per reason, and since when the oldest of
    /// each, over the operator's scope (one tenant, or every tenant).
    pub async fn case_counts(&self, tenant: Option<TenantId>) -> Result<Vec<CaseCount>, ListError> {
        match self.scope(tenant) {
            Some(scope) => Ok(self.api.store.case_counts(scope.as_ref()).await?),
            None => Ok(Vec::new()),
        }
    }

    /// Open cases, oldest first: one tenant's from the case index, every
    /// tenant's from the age index. An operator limited to a tenant sees
    /// only that tenant's, whatever filter they ask for.
    pub async fn cases(
        &self,
        tenant: Option<TenantId>,
        filter: CaseFilter,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<CasePage, ListError> {
        let op = self.op;
        let Some(scope) = self.scope(tenant) else {
            return Ok(CasePage {
                records: Vec::new(),
                next: None,
            });
        };
        // The store's position, bound to the scope and filter it was made
        // under: a cursor from another tenant or another filter is a bad
        // request, never a page that skips cases.
        let binding = crate::ports::cursor::binding(
            "cases",
            &[
                scope.as_ref().map_or("*", TenantId::as_str),
                filter.reason.map_or("", |r| r.as_str()),
                &filter.opened_before.map(|t| t.to_rfc3339()).unwrap_or_default(),
            ],
        );
        let position = cursor.map(|c| crate::ports::cursor::open(c, &binding)).transpose()?;
        let cursor = position.as_deref();
        // Both indexes filter by themselves: their pages are full.
        let mut page = match &scope {
            Some(one) => self.api.store.open_cases(Some(one), filter, limit, cursor).await?,
            None => self.api.store.open_cases_by_age(filter, limit, cursor).await?,
        };
        page.records.retain(|r| op.may_see(&r.tenant_id));
        page.next = page.next.map(|p| crate::ports::cursor::seal(&p, &binding));
        Ok(page)
    }

    /// Any live operation in the operator's scope.
    pub async fn get(&self, id: &OperationId) -> Result<OperationRecord, OperationError> {
        match self.api.store.get(id, self.api.clock.now()).await? {
            Some(rec) if self.op.may_see(&rec.tenant_id) => Ok(rec),
            _ => Err(OperationError::NotFound),
        }
    }

    /// Refuses to attach a job id that another operation holds: naming the
    /// holder when the operator may see it, and nothing about it otherwise.
    async fn refuse_held_job(&self, id: &OperationId, job_id: &str) -> Result<(), OperationError> {
        let op = self.op;
        let holders = self.api.store.holders_of_remote_job(job_id).await?;
        if let Some(other) = holders.into_iter().find(|h| h != id) {
            // An operator scoped to one tenant learns only that the job
            // cannot be attached, whoever holds it: naming a holder of its
            // own tenant, and not another's, would tell the two apart.
            let visible = match op.tenant {
                Some(_) => None,
                None => self.api.store.get(&other, self.api.clock.now()).await?,
            };
            return Err(match visible {
                Some(holder) => OperationError::JobHeldElsewhere {
                    job_id: job_id.to_owned(),
                    holder: Some(holder.operation_id),
                },
                None => OperationError::JobNotAttachable {
                    job_id: job_id.to_owned(),
                },
            });
        }
        Ok(())
    }

    /// Applies a decision (valid only from the right phase), records it in the
    /// audit trail, and hands the operation to the stage that continues it.
    /// `expected_version` is the version the operator decided on (the view's
    /// `ETag`): a request made on any other version changes nothing, so a
    /// stale or replayed decision can never act twice.
    pub async fn resolve(
        &self,
        id: &OperationId,
        resolution: &Resolution,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, OperationError> {
        let rec = self.get(id).await?;
        // In scope: a span of the operation's trace.
        let decided = self.decide(rec, resolution, reason, expected_version);
        genace_trace::traced("resolve", id, decided).await
    }

    /// [`OperatorApi::resolve`] on `rec`, read in the operator's scope.
    async fn decide(
        &self,
        rec: OperationRecord,
        resolution: &Resolution,
        reason: &str,
        expected_version: u64,
    ) -> Result<OperationRecord, OperationError> {
        let op = self.op;
        let id = &rec.operation_id.clone();
        let stale = |actual: u64| OperationError::StaleVersion {
            expected: expected_version,
            actual,
        };
        if rec.version != expected_version {
            return Err(stale(rec.version));
        }
        if let Resolution::AttachRemoteJob { job_id } = resolution {
            // A scoped operator could otherwise name a job id it read
            // anywhere (the recovery queue, an expired record) and take
            // another tenant's outputs.
            if op.tenant.is_some() && !named_by_evidence(&rec, job_id) {
                return Err(OperationError::JobNotInEvidence {
                    job_id: job_id.to_owned(),
                });
            }
            self.refuse_held_job(id, job_id).await?;
        }
        let now = self.api.clock.now();
        let policy = self.api.config.policy;
        let before = rec.clone();
        let next = commit(&self.api.store, rec, write_attempts(), |r| {
            if r.version != expected_version {
                return Err(machine::Refusal::StaleVersion { actual: r.version });
            }
            machine::transition(
                r,
                Input::Resolved(Decision {
                    resolution,
                    actor: &op.actor,
                    reason,
                }),
                now,
                &policy,
            )
        })
        .await
        .map_err(|e| match e {
            CommitError::Refused {
                refusal: machine::Refusal::StaleVersion { actual },
                ..
            } => stale(actual),
            CommitError::Refused { refusal, .. } => OperationError::Refused(refusal),
            CommitError::Store(s) => OperationError::Store(s),
        })?;
        info!(operation_id = %id, tenant = %next.tenant_id, phase = next.phase.as_str(), actor = %op.actor, action = resolution.name(), %reason, "case resolved");
        self.api.metrics.count("Resolutions", &[("Action", resolution.name())]);
        let stage = match resolution {
            // An abandoned operation's job is only observed, for its credits.
            _ if next.phase == Phase::Abandoned => next.due_at_ms.map(|_| Queue::Poll),
            Resolution::AttachRemoteJob { .. } => Some(Queue::Poll),
            Resolution::ConfirmNotCreated | Resolution::ReleaseHold => Some(Queue::Dispatch),
            Resolution::RedriveDelivery => Some(Queue::Deliver),
            Resolution::MarkSettled | Resolution::Abandon => None,
        };
        let message = match stage {
            Some(Queue::Poll) => genace_core::messages::WorkMessage::first_look(&next),
            _ => genace_core::messages::WorkMessage::for_operation(id.clone()),
        };
        if let Some(stage) = stage
            && let Err(e) = self.api.queue.send_work(stage, &message, 0).await
        {
            // The record is due now; the sweep re-enqueues it.
            warn!(operation_id = %id, error = %e, "enqueue after resolution failed; the sweep will pick it up");
        }
        // A decision that ends a job's slot (confirm_not_created, an attach
        // elsewhere) wakes the next operation waiting for one.
        if crate::pipeline::wake::frees_a_slot(&before, &next) {
            crate::pipeline::wake::wake_if_room_for(&self.api.store, &self.api.queue, &next.tenant_id).await;
        }
        Ok(next)
    }
}

/// Whether `job_id` is named, as a whole token, by what the operation
/// itself recorded of its jobs: its saved job, a job a refused recovery
/// message left on it ([`OperationRecord::unsaved_jobs`]), or its case's
/// evidence in the service's own words ([`own_words`]). (Not the Genace
/// error it kept, nor a Genace body quoted in the evidence: either may
/// quote the request, which the tenant wrote.) A token ends at a space, a quote, a bracket, a comma,
/// a semicolon, or a full stop that ends a sentence: `J1` does not match
/// `J12`, `J1.5` or `x/J1`.
fn named_by_evidence(rec: &OperationRecord, job_id: &str) -> bool {
    let delimiter = |c: char| c.is_whitespace() || "\"'`()[]{}<>,;".contains(c);
    let names = |text: &str| {
        text.match_indices(job_id).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let mut after = text[at + job_id.len()..].chars();
            let ends = match after.next() {
                None => true,
                Some('.') => after.next().is_none_or(delimiter),
                Some(c) => delimiter(c),
            };
            before.is_none_or(delimiter) && ends
        })
    };
    !job_id.is_empty()
        && (rec.remote_job_id.as_deref() == Some(job_id)
            || rec.unsaved_jobs.iter().any(|j| j == job_id)
            || rec.case.as_ref().is_some_and(|c| names(own_words(&c.evidence))))
}

/// A case's evidence up to the first Genace body it quotes
/// ([`QUOTED_BODY`](genace_core::remote::QUOTED_BODY)): what follows is
/// Genace's text, which may echo the tenant's request.
fn own_words(evidence: &str) -> &str {
    evidence
        .split(genace_core::remote::QUOTED_BODY)
        .next()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::own_words;

    /// The evidence of an unknown outcome, as dispatch writes it from
    /// Genace's answer: a job id only the quoted body names is not the
    /// service's own word.
    #[test]
    fn a_quoted_genace_body_is_not_evidence() {
        let answer = r#"{"error": "upstream", "prompt": "see job-theirs"}"#;
        let outcome = genace_core::remote::classify_submit(500, None, answer, chrono::Utc::now());
        let genace_core::remote::SubmitOutcome::Unknown { evidence } = outcome else {
            panic!("a 500 is an unknown outcome: {outcome:?}");
        };
        assert!(evidence.contains("job-theirs"), "{evidence}");
        assert!(!own_words(&evidence).contains("job-theirs"), "{evidence}");
        assert!(own_words(&evidence).starts_with("HTTP 500"), "{evidence}");
    }
}
