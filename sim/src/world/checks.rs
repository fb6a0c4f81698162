//! The promises a run keeps: after every step (records, counters, job
//! counts, Genace's books, every answer intake gave) and at rest.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;
use genace_core::record::Phase;

impl World {
    // ---- invariants

    /// What holds after every step.
    pub(crate) fn check_step(&mut self) -> Result<(), String> {
        let records = self.store.records();
        self.check_answers(&records)?;
        let mut keys = BTreeMap::new();
        for rec in &records {
            self.check_record(rec, &mut keys)?;
        }
        let ledgers = self.check_counters(&records)?;
        self.check_job_counts()?;
        self.check_no_rise_past_limits()?;
        self.check_looks(&records)?;
        self.check_books(&records, &ledgers)
    }

    /// Polls look at a job only while its end is unseen, one GET each, and
    /// a chain of them within the look bound
    /// ([`genace_core::render::look_bound`]): no poll that began after the
    /// end was on the record read Genace, no handler read it twice, and no
    /// end took more looks than the bound allows for its age.
    pub(crate) fn check_looks(&self, records: &[OperationRecord]) -> Result<(), String> {
        let chaos = self.chaos.lock();
        if let Some(read) = chaos.gets_after_end.first() {
            return Err(format!("a poll that began after its job was seen to end {read}"));
        }
        if let Some((actor, gets)) = chaos.gets_by_actor.iter().find(|(_, g)| **g > 1) {
            return Err(format!("handler #{actor} read Genace {gets} times"));
        }
        for (rec, bound) in self.look_bounds(records) {
            let looks = rec.detection.as_ref().map_or(0, |d| d.looks);
            if looks > bound {
                return Err(format!(
                    "{}: {looks} looks in its chain of polls, over the bound of {bound}",
                    short(rec.operation_id.as_str()),
                ));
            }
        }
        Ok(())
    }

    /// In a run with no crash and no duplicate message, where each job has
    /// one chain of polls: every GET of a job is a look of the chain that
    /// saw its end (no second chain, from the sweep or anywhere), within
    /// its look bound.
    pub(crate) fn check_gets_bound(&self, records: &[OperationRecord]) -> Result<(), String> {
        let chaos = self.chaos.lock();
        for (rec, bound) in self.look_bounds(records) {
            let job = rec.remote_job_id.as_deref().unwrap_or_default();
            let gets = chaos.gets.get(job).copied().unwrap_or(0);
            let looks = rec.detection.as_ref().map_or(0, |d| d.looks);
            if gets > bound || gets != looks {
                return Err(format!(
                    "{}: {gets} GETs of job {job}, {looks} looks in the chain that saw its end, a bound of {bound}",
                    short(rec.operation_id.as_str()),
                ));
            }
        }
        Ok(())
    }

    /// Each record whose end was seen, with the most looks its age allows
    /// ([`genace_core::render::look_bound`]).
    fn look_bounds<'r>(&self, records: &'r [OperationRecord]) -> Vec<(&'r OperationRecord, u32)> {
        let max_delay = f64::from(self.app.config.poll_max_delay_seconds);
        records
            .iter()
            .filter_map(|rec| {
                let (d, accepted) = (rec.detection.as_ref()?, rec.accepted_at?);
                let age = (d.ended_seen_at - accepted).num_milliseconds().max(0) as f64 / 1000.0;
                Some((rec, genace_core::render::look_bound(age, max_delay)))
            })
            .collect()
    }

    /// One stored record: its invariants, one record per (tenant, key),
    /// versions only growing, the specification never replaced, and
    /// `delivered` meaning every object is stored with its SHA-256. Logs the
    /// record's state when it changed.
    pub(crate) fn check_record(
        &mut self,
        rec: &OperationRecord,
        keys: &mut BTreeMap<(String, String), String>,
    ) -> Result<(), String> {
        let id = rec.operation_id.as_str().to_owned();
        machine::check_invariants(rec).map_err(|e| format!("{}: {e}", short(&id)))?;
        // No claim, and so no POST, at or after the dispatch deadline.
        if let (Phase::Submitting, Some(claim), Some(deadline)) = (rec.phase, &rec.claim, rec.dispatch_deadline) {
            let claimed_at = claim.lease_expires_at - self.app.config.policy.dispatch_lease;
            if claimed_at >= deadline {
                return Err(format!(
                    "{}: claimed at {claimed_at}, at or after its dispatch deadline {deadline}",
                    short(&id)
                ));
            }
        }
        if let Some(other) = keys.insert(
            (rec.tenant_id.as_str().to_owned(), rec.operation_key.clone()),
            id.clone(),
        ) {
            return Err(format!("two records for one (tenant, key): {other} and {id}"));
        }
        match self.seen.get(&id) {
            Some((version, _)) if rec.version < *version => {
                return Err(format!(
                    "{}: version went back from {version} to {}",
                    short(&id),
                    rec.version
                ));
            }
            Some((_, hash)) if *hash != rec.specification_hash => {
                return Err(format!("{}: the stored specification was replaced", short(&id)));
            }
            _ => {}
        }
        self.seen
            .insert(id.clone(), (rec.version, rec.specification_hash.clone()));
        let state = state_line(rec);
        if self.shown.get(&id) != Some(&state) {
            self.log(format!("  {} {state}", short(&id)));
            self.shown.insert(id.clone(), state);
        }
        if rec.outputs_erased.is_some() {
            // Nothing under its prefix, whichever attempt stored it.
            let prefix = genace_stages::ports::outputs::operation_prefix(&self.app.config.output_prefix, rec);
            if let Some(key) = self.objects.keys().into_iter().find(|k| k.starts_with(&prefix)) {
                return Err(format!("{}: erased, but {key} is still stored", short(&id)));
            }
        } else if rec.delivery_state == DeliveryState::Delivered && !self.erasing.contains(&id) {
            for object in &rec.delivered_objects {
                match self.objects.get(&object.key) {
                    Some(stored) if hex_sha256(&stored.data) == object.sha256 => {}
                    Some(_) => return Err(format!("{}: {} has another SHA-256", short(&id), object.key)),
                    None => return Err(format!("{}: delivered, but {} is not stored", short(&id), object.key)),
                }
            }
        }
        Ok(())
    }

    /// Each tenant's counters are the sum of its records' shares, and a
    /// spend limit is never passed. Returns the ledgers for the next checks.
    pub(crate) fn check_counters(&self, records: &[OperationRecord]) -> Result<BTreeMap<String, TenantLedger>, String> {
        let mut sums: BTreeMap<String, genace_core::ledger::Shares> = BTreeMap::new();
        for rec in records {
            let sum = sums.entry(rec.tenant_id.as_str().to_owned()).or_default();
            *sum = sum
                .plus(&genace_core::ledger::share(rec))
                .map_err(|e| format!("{}: {e}", rec.tenant_id))?;
        }
        self.check_slots(records)?;
        let ledgers = self.store.ledgers_now();
        for tenant in self.tenants.iter().map(String::as_str) {
            let counted = ledgers.get(tenant).map(|l| l.totals).unwrap_or_default();
            let summed = sums.get(tenant).copied().unwrap_or_default();
            if counted != summed {
                return Err(format!(
                    "{tenant}: ledger {counted:?} but the records sum to {summed:?}"
                ));
            }
            if let Some(limit) = ledgers.get(tenant).and_then(|l| l.spend_limit)
                && counted.held > limit
            {
                return Err(format!(
                    "{tenant}: {} millicredits held past the limit of {limit}",
                    counted.held
                ));
            }
        }
        Ok(ledgers)
    }

    /// The account's slots, counted without the ledger's share function:
    /// one per operation that may have a job running at Genace (claimed,
    /// uncertain, accepted, or abandoned from one of those), never more
    /// than the limit.
    pub(crate) fn check_slots(&self, records: &[OperationRecord]) -> Result<(), String> {
        let holds = |p: Phase| matches!(p, Phase::Submitting | Phase::Uncertain | Phase::Accepted);
        let truth = records
            .iter()
            .filter(|r| match r.phase {
                Phase::Abandoned => r.ledger_phase.is_some_and(holds),
                p => holds(p),
            })
            .count() as i64;
        let account = self.store.account_now();
        let waiting = records.iter().filter(|r| r.waits_in_order().is_some()).count() as i64;
        if account.waiting != waiting {
            return Err(format!(
                "the account counts {} operations waiting, the records hold {waiting}",
                account.waiting
            ));
        }
        let queued = records
            .iter()
            .filter(|r| matches!(r.wait(), Some((genace_core::record::WaitReason::Capacity, _))))
            .count() as i64;
        if account.queued != queued {
            return Err(format!(
                "the account counts {} operations waiting for a slot, the records hold {queued}",
                account.queued
            ));
        }
        if account.in_flight != truth {
            return Err(format!(
                "the account counts {} jobs in flight, the records hold {truth} slots",
                account.in_flight
            ));
        }
        if !self.chaos.lock().plants_429s
            && let Some(rec) = records
                .iter()
                .find(|r| r.case.as_ref().is_some_and(|c| c.reason == CaseReason::RateLimited))
        {
            return Err(format!(
                "{}: Genace's capacity alone opened a rate_limited case",
                short(rec.operation_id.as_str())
            ));
        }
        // Past the limit: `check_no_rise_past_limits`.
        self.check_shards(records, holds)
    }

    /// Each of the account's shards counts exactly the slots and the waits
    /// of the records that name it.
    fn check_shards(&self, records: &[OperationRecord], holds: impl Fn(Phase) -> bool) -> Result<(), String> {
        for (k, shard) in self.store.account_shards_now().iter().enumerate() {
            let on: Vec<&OperationRecord> = records
                .iter()
                .filter(|r| usize::from(r.account_shard.unwrap_or(0)) == k)
                .collect();
            let slots = on
                .iter()
                .filter(|r| match r.phase {
                    Phase::Abandoned => r.ledger_phase.is_some_and(&holds),
                    p => holds(p),
                })
                .count() as i64;
            let queued = on
                .iter()
                .filter(|r| matches!(r.wait(), Some((genace_core::record::WaitReason::Capacity, _))))
                .count() as i64;
            let waiting = on.iter().filter(|r| r.waits_in_order().is_some()).count() as i64;
            if (shard.in_flight, shard.queued, shard.waiting) != (slots, queued, waiting) {
                return Err(format!(
                    "account shard {k} counts {} jobs in flight, {} waiting for a slot and {} waiting in all; its \
                     records hold {slots}, {queued} and {waiting}",
                    shard.in_flight, shard.queued, shard.waiting
                ));
            }
        }
        Ok(())
    }

    /// At most one Genace job per operation, one more per confirm_not_created;
    /// none for a cancelled operation (a cancel wins only before the claim,
    /// and no POST may follow it).
    pub(crate) fn check_job_counts(&self) -> Result<(), String> {
        let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
        for job in self.genace.jobs() {
            *jobs.entry(job.client_reference.unwrap_or_default()).or_default() += 1;
        }
        for rec in self.store.records() {
            let id = rec.operation_id.as_str();
            // A POST already under way when an operator confirmed that none
            // was made may still land; nothing else may.
            let confirmed = self.confirmations.get(id).copied().unwrap_or(0);
            if rec.phase == Phase::Cancelled
                && let Some(count) = jobs.get(id).filter(|count| **count > confirmed)
            {
                return Err(format!(
                    "{}: cancelled, yet {count} Genace jobs were created",
                    short(id)
                ));
            }
        }
        for (op, count) in jobs {
            let allowed = 1 + self.confirmations.get(&op).copied().unwrap_or(0);
            if count > allowed {
                return Err(format!(
                    "{}: {count} Genace jobs created, {allowed} allowed",
                    short(&op)
                ));
            }
        }
        Ok(())
    }

    /// What every client saw of intake: the same key and specification
    /// always give the same operation id; a changed specification is always
    /// a 409, and a 409 means a changed specification; a new operation or a
    /// replay always carries the specification that was sent.
    pub(crate) fn check_answers(&mut self, records: &[OperationRecord]) -> Result<(), String> {
        let answers = std::mem::take(&mut *self.answers.lock().unwrap_or_else(|p| p.into_inner()));
        for a in answers {
            let who = format!("{}/{}", a.tenant, a.key);
            let stored = records
                .iter()
                .find(|r| r.tenant_id.as_str() == a.tenant && r.operation_key == a.key)
                .map(|r| r.specification_hash.clone());
            match a.reply {
                Reply::Operation {
                    id,
                    carried,
                    held,
                    replay,
                } => {
                    let answer = if replay { "a replay" } else { "a new operation" };
                    if held != a.sent_intent {
                        return Err(format!(
                            "{who}: {answer} carried another intent than the one sent: {held} for {}",
                            a.sent_intent
                        ));
                    }
                    if carried != a.sent {
                        return Err(format!(
                            "{who}: {answer} carried another specification than the one sent"
                        ));
                    }
                    if stored.as_ref().is_some_and(|h| *h != a.sent) {
                        return Err(format!(
                            "{who}: a changed specification was answered as {answer}, not 409"
                        ));
                    }
                    let first = self
                        .answered_ids
                        .entry((a.tenant.clone(), a.key.clone(), a.sent.clone()))
                        .or_insert_with(|| id.clone());
                    if *first != id {
                        return Err(format!(
                            "{who}: the same key and specification were answered with operation {} and then {}",
                            short(first),
                            short(&id)
                        ));
                    }
                }
                Reply::KeyReused if stored.as_ref() == Some(&a.sent) => {
                    return Err(format!("{who}: 409 for the specification the key holds"));
                }
                Reply::KeyReused | Reply::Failed => {}
            }
        }
        Ok(())
    }

    /// The ledger against Genace's own books, per tenant: no counter is
    /// ever negative; `spent` never exceeds what Genace charged for the
    /// jobs it completed; `held` covers every job still running; and every
    /// credit Genace holds or charged is on the ledger, held or spent.
    pub(crate) fn check_books(
        &self,
        records: &[OperationRecord],
        ledgers: &BTreeMap<String, TenantLedger>,
    ) -> Result<(), String> {
        let tenant_of: BTreeMap<&str, &str> = records
            .iter()
            .map(|r| (r.operation_id.as_str(), r.tenant_id.as_str()))
            .collect();
        let mut charged: BTreeMap<&str, (Millicredits, Millicredits)> = BTreeMap::new();
        for job in self.genace.jobs() {
            let Some(tenant) = job.client_reference.as_deref().and_then(|op| tenant_of.get(op)) else {
                continue;
            };
            let (completed, running) = charged.entry(tenant).or_default();
            let credits = genace_core::ledger::millis(job.credits);
            match job.state.as_str() {
                "completed" => *completed += credits,
                "queued" | "running" => *running += credits,
                _ => {}
            }
        }
        for tenant in self.tenants.iter().map(String::as_str) {
            let totals = ledgers.get(tenant).map(|l| l.totals).unwrap_or_default();
            let (completed, running) = charged.get(tenant).copied().unwrap_or_default();
            if totals.any_negative() {
                return Err(format!("{tenant}: a ledger counter is negative: {totals:?}"));
            }
            if totals.spent > completed {
                return Err(format!(
                    "{tenant}: {} millicredits spent, but Genace completed jobs worth {completed}",
                    totals.spent
                ));
            }
            if totals.held < running {
                return Err(format!(
                    "{tenant}: {} millicredits held, but Genace runs jobs worth {running}",
                    totals.held
                ));
            }
            if totals.spent + totals.held < completed + running {
                return Err(format!(
                    "{tenant}: Genace holds or charged {} millicredits, the ledger counts {} spent and {} held",
                    completed + running,
                    totals.spent,
                    totals.held
                ));
            }
        }
        Ok(())
    }

    /// What holds at rest: every job Genace created is on its operation's
    /// record, on the recovery channel, or in an open case.
    /// Quiet, with every handler run to its end: no slot of a limited
    /// account is left free while an operation waits that its tenant has
    /// room for (a slot under its own limit, credits for its reservation)
    /// and no wake-up or dispatch message is on its way to it, beyond the
    /// slots the messages on their way may take. The sweep
    /// would repair such a slot; this is checked before it runs.
    pub(crate) fn check_no_idle_slot(&self) -> Result<(), String> {
        let account = self.store.account_now();
        if account.limit().is_none() || !account.has_room() {
            return Ok(());
        }
        let pending: Vec<String> = self
            .queue
            .messages()
            .into_iter()
            .filter(|m| matches!(m.queue, Queue::Wake | Queue::Dispatch))
            .map(|m| m.body)
            .collect();
        let ledgers = self.store.ledgers_now();
        // Operations a claim may still be made for: those waiting, those
        // never claimed or given back, and those held until a time.
        let claimable: Vec<OperationRecord> = self
            .store
            .records()
            .into_iter()
            .filter(|r| r.phase == Phase::Prepared)
            .collect();
        let on_the_way = |r: &OperationRecord| pending.iter().any(|b| b.contains(r.operation_id.as_str()));
        // Each claim on its way may take a free slot.
        let coming = claimable.iter().filter(|r| on_the_way(r)).count() as u64;
        if account.free_slots().is_some_and(|free| free <= coming) {
            return Ok(());
        }
        let need = |r: &OperationRecord| r.reserved_credits.map_or(Millicredits::ZERO, ledger::millis);
        for rec in claimable
            .iter()
            .filter(|r| r.waits_in_order().is_some() && !on_the_way(r))
        {
            let tenant = rec.tenant_id.as_str();
            // What the operations on their way take of the tenant's room.
            let (slots, credits) = claimable
                .iter()
                .filter(|r| r.tenant_id.as_str() == tenant && on_the_way(r))
                .fold((0, Millicredits::ZERO), |(n, c), r| (n + 1, c + need(r)));
            if room_for(ledgers.get(tenant), rec, slots, credits) {
                return Err(format!(
                    "{}: waits with nothing to wake it while a slot is free ({} in flight) and its tenant has room for it",
                    short(rec.operation_id.as_str()),
                    account.in_flight
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn check_rest(&self) -> Result<(), String> {
        let account = self.store.account_now();
        let ledgers = self.store.ledgers_now();
        // One its tenant has no credits for waits for those, whatever the
        // reason its last claim recorded.
        if account.has_room()
            && let Some(waiting) = self.store.records().iter().find(|r| {
                r.capacity_hold.is_some()
                    && room_for(
                        ledgers.get(r.tenant_id.as_str()),
                        r,
                        0,
                        genace_core::ledger::Millicredits::ZERO,
                    )
            })
        {
            return Err(format!(
                "{}: waits for a slot at rest while the account has one free ({} in flight)",
                short(waiting.operation_id.as_str()),
                account.in_flight
            ));
        }
        let recovery = self.recovery_bodies();
        for job in self.genace.jobs() {
            let op = job.client_reference.clone().unwrap_or_default();
            let rec = self.store.records().into_iter().find(|r| r.operation_id.as_str() == op);
            let referenced = rec
                .as_ref()
                .is_some_and(|r| r.remote_job_id.as_deref() == Some(job.id.as_str()));
            let recovering = recovery.iter().any(|b| b.contains(&format!("\"{}\"", job.id)));
            let case = rec.as_ref().is_some_and(|r| r.case.is_some());
            if !(referenced || recovering || case) {
                return Err(format!(
                    "{}: Genace job {} is on no record, no recovery message and no case",
                    short(&op),
                    job.id
                ));
            }
        }
        Ok(())
    }
}

/// Whether `tenant` has room for `rec` beside `slots` more jobs and
/// `credits` more millicredits: a slot under its own limit, and credits
/// for the reservation under its spend limit.
fn room_for(tenant: Option<&TenantLedger>, rec: &OperationRecord, slots: i64, credits: ledger::Millicredits) -> bool {
    let need = rec.reserved_credits.map_or(Millicredits::ZERO, ledger::millis);
    tenant.is_none_or(|l| {
        l.max_in_flight
            .is_none_or(|max| l.totals.in_flight + slots < i64::from(max))
            && l.headroom().is_none_or(|room| need <= room - credits)
    })
}
