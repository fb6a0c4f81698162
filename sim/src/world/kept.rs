//! What a handler owes when it ends: every job id Genace returned to it
//! kept, and a wake-up's requests within a bound that does not grow with
//! the tenants.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

/// The most store requests a handler that woke operations may make: a
/// wake-up's own (the account, the waiting set, a page of each tenant's
/// order, the claims) and the rest of its handler's, whatever the number
/// of tenants. The most seen is 38 with 2 tenants and 61 with 20 or 1,000
/// (16 intents, transactions meeting); a wake-up whose cost grew with the
/// tenants short of credits made over a thousand.
pub(crate) const WAKE_REQUEST_BOUND: u64 = 100;

impl World {
    /// A handler (actor `id`) ended: if it woke operations, the requests it
    /// made count toward the most a wake-up made, which must stay within
    /// [`WAKE_REQUEST_BOUND`] whatever the tenants.
    pub(crate) fn check_wake_cost(&mut self, id: usize) -> Result<(), String> {
        let Some(made) = self.chaos.woke_with(id) else {
            return Ok(());
        };
        self.wake_max = self.wake_max.max(made);
        if made > WAKE_REQUEST_BOUND {
            return Err(format!(
                "handler #{id} woke operations with {made} requests, over the bound of {WAKE_REQUEST_BOUND}"
            ));
        }
        Ok(())
    }

    /// Actor `actor`'s own time passed its function's timeout: killed
    /// mid-flight. A handler that sees its time pass must have kept every
    /// job id Genace returned to it by then.
    pub(crate) fn timed_out(&mut self, actor: &Actor) -> Result<(), String> {
        self.log(format!("timeout #{} {} (its own time)", actor.id, actor.label));
        self.check_wake_cost(actor.id)?;
        self.check_ids_kept(actor.id, &actor.label)?;
        self.chaos.forget_time(actor.id);
        Ok(())
    }

    /// The bodies of the messages on the recovery queue.
    pub(crate) fn recovery_bodies(&self) -> Vec<String> {
        self.queue
            .messages()
            .into_iter()
            .filter(|m| m.queue == Queue::Recovery)
            .map(|m| m.body)
            .collect()
    }

    /// A handler (actor `id`) ended on its own: every job id Genace's
    /// answers gave it is on a record, on the recovery queue, or in an open
    /// case's evidence, never only in its log.
    pub(crate) fn check_ids_kept(&mut self, id: usize, label: &str) -> Result<(), String> {
        let returned = self.chaos.lock().returned_ids.remove(&id).unwrap_or_default();
        if returned.is_empty() {
            return Ok(());
        }
        let records = self.store.records();
        let recovery = self.recovery_bodies();
        for job in returned {
            let saved = records.iter().any(|r| {
                r.remote_job_id.as_deref() == Some(job.as_str())
                    || r.case.as_ref().is_some_and(|c| c.evidence.contains(&job))
            });
            let recovering = recovery.iter().any(|b| b.contains(&format!("\"{job}\"")));
            if !(saved || recovering) {
                return Err(format!(
                    "#{id} {label} ended, and job {job} that Genace returned to it is on no record, no recovery message and no case: only in a log"
                ));
            }
        }
        Ok(())
    }
}
