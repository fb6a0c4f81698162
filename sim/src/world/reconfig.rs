//! The reconfiguration model ([`Options::reconfigure`]): while work runs,
//! a new deployment changes the account's shard count (handlers started
//! after it see the new count, those in flight keep theirs, as in a
//! rolling change), and operators set or remove the account's limit.
//! Beside it, the check that holds in every run: the account's jobs in
//! flight, and each shard's, never rise past the limit (or its part), and
//! never rise at all while they are over it (the limit was lowered).

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

use genace_core::shard::AccountShards;

/// How often a step reconfigures, in steps per thousand.
const PER_MILLE: u64 = 25;

impl World {
    /// With the model on, now and then: a deployment with another shard
    /// count (1 to 4), or an operator's limit (1 to the run's limit, or
    /// none: the deployment's again). True when it did either.
    pub(crate) fn maybe_reconfigure(&mut self) -> bool {
        let Some(most) = self.reconfigure else {
            return false;
        };
        if !self.rng.chance(PER_MILLE) {
            return false;
        }
        if self.rng.chance(500) {
            let shards = AccountShards::new(1 + self.rng.below(4) as u16).unwrap_or_default();
            self.app.store = chaotic(&self.store.clone().with_account_shards(shards), &self.chaos);
            self.app.config.policy.account_shards = shards;
            self.log(format!("deploy: the account in {} shards", shards.get()));
            return true;
        }
        let limit = (!self.rng.chance(250)).then(|| 1 + self.rng.below(u64::from(most)) as u32);
        let api = self.app.api();
        let op = genace_stages::api::operator::Operator {
            actor: "sim-operator".into(),
            tenant: None,
        };
        self.spawn(
            format!("operator sets the account's limit to {limit:?}"),
            30,
            None,
            Box::pin(async move {
                api.operator(&op)
                    .set_account_limit(limit)
                    .await
                    .map(|r| format!("limit {:?}", r.max_in_flight))
                    .map_err(|e| e.to_string())
            }),
        );
        true
    }

    /// The account's jobs in flight, and each shard's, never rise past the
    /// limit (the operator's, else the deployment's) or the shard's part of
    /// it, and never rise while over it: a lowered limit admits nothing
    /// new until the jobs fall under it, and a split for a new shard count
    /// admits nothing past what the shards already count.
    pub(crate) fn check_no_rise_past_limits(&mut self) -> Result<(), String> {
        let account = self.store.account_now();
        let (was, shards_were) = &self.counted;
        if let Some(max) = account.max_in_flight()
            && account.in_flight > i64::from(max)
            && account.in_flight > *was
        {
            return Err(format!(
                "{} jobs in flight past the limit of {max} (from {was})",
                account.in_flight
            ));
        }
        let shards = self.store.account_shards_now();
        for (k, shard) in shards.iter().enumerate() {
            let before = shards_were.get(k).copied().unwrap_or(0);
            if let Some(max) = shard.max_in_flight()
                && shard.in_flight > i64::from(max)
                && shard.in_flight > before
            {
                return Err(format!(
                    "account shard {k}: {} jobs in flight past its part, {max} (from {before})",
                    shard.in_flight
                ));
            }
        }
        self.counted = (account.in_flight, shards.iter().map(|s| s.in_flight).collect());
        Ok(())
    }
}
