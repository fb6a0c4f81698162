//! The scheduler's moves: receiving a message, the sweep, a poll, time
//! passing, Genace's progress, one step, and the quiet phase.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

impl World {
    pub(crate) fn receive(&mut self, queue: Queue) -> bool {
        let Some(m) = self.queue.receive(queue, 1, Duration::seconds(60)).pop() else {
            return false;
        };
        let body = m.body.clone();
        let message = Some((m.id, m.receipt));
        let op = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["operation_id"].as_str().map(|id| short(id).to_owned()))
            .unwrap_or_default();
        let label = format!("{queue:?} {op} msg {} (receive {})", m.id, m.receives);
        let after_end = queue == Queue::Poll && self.end_seen(&body);
        // Each function's timeout, as the template sets it.
        let (timeout, fut) = match queue {
            // Dispatch consumes the wake queue beside its own.
            Queue::Dispatch | Queue::Wake => (60, handler(self.app.dispatcher(), body)),
            Queue::Poll => (180, handler(self.app.poller(), body)),
            Queue::Deliver => (900, handler(self.app.deliverer(), body)),
            Queue::Recovery => (30, handler(self.app.recovery(), body)),
        };
        self.spawn(label, timeout, message, fut);
        if let Some(actor) = self.actors.last_mut() {
            actor.after_end = after_end;
            actor.receives = m.receives;
        }
        true
    }

    /// Whether a poll message's job was seen to end already (its end is on
    /// the record).
    pub(crate) fn end_seen(&self, body: &str) -> bool {
        genace_core::messages::WorkMessage::parse(body).is_ok_and(|w| {
            self.store
                .records()
                .iter()
                .any(|r| r.operation_id == w.operation_id && r.detection.is_some())
        })
    }

    pub(crate) fn sweep(&mut self) {
        let mut sweeper = self.app.sweeper();
        if let Some((page_size, max_pages)) = self.sweep_pages {
            sweeper.page_size = page_size;
            sweeper.max_pages = max_pages;
        }
        let start = self.sweep_start(sweeper.budget);
        self.sweeps.insert(self.next_actor, start);
        self.spawn(
            "sweep".into(),
            55,
            None,
            Box::pin(async move { sweeper.run().await.map(|r| format!("{r:?}")).map_err(|e| e.to_string()) }),
        );
    }

    /// Polls one handler once. `Err` is a violation (a panic: an invariant
    /// assertion or a bug).
    fn poll(&mut self, index: usize) -> Result<bool, String> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let actor = &self.actors[index];
        let sender = tracking::Sender {
            id: actor.id,
            label: format!("#{} {}", actor.id, actor.label),
            message: actor.message.map(|(id, _)| id),
            receives: actor.receives,
            started_at: actor.started_at,
        };
        self.chaos.lock().polling = Some((self.actors[index].id, self.actors[index].after_end));
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| self.actors[index].fut.as_mut().poll(&mut cx)));
        self.chaos.lock().polling = None;
        let crashed = self.chaos.take_crashed();
        self.link_poll_sends(&sender)?;
        // Its own time passed its function's timeout within this poll: it
        // was killed mid-flight, whatever the poll came to.
        let overtime = self.local_now(sender.id) >= self.actors[index].deadline;
        match polled {
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic".into());
                let actor = self.actors.remove(index);
                Err(format!("#{} {} panicked: {what}", actor.id, actor.label))
            }
            Ok(_) if overtime && !crashed => {
                let actor = self.actors.remove(index);
                self.timed_out(&actor)?;
                Ok(true)
            }
            Ok(Poll::Ready(result)) => {
                let actor = self.actors.remove(index);
                let ok = result.is_ok();
                self.check_sweep_reach(actor.id, ok)?;
                self.check_wake_cost(actor.id)?;
                self.check_ids_kept(actor.id, &actor.label)?;
                self.chaos.forget_time(actor.id);
                self.log(format!(
                    "end #{} {}",
                    actor.id,
                    match &result {
                        Ok(o) => format!("ok {o}"),
                        Err(e) => format!("err {e}"),
                    }
                ));
                // The event source deletes what succeeded; now and then that delete is lost.
                if let (true, Some((id, receipt))) = (ok, actor.message)
                    && !self.rng.chance(50)
                {
                    self.queue.delete(id, receipt);
                }
                Ok(true)
            }
            Ok(Poll::Pending) if crashed => {
                let actor = self.actors.remove(index);
                self.log(format!("crash #{} {}", actor.id, actor.label));
                self.check_wake_cost(actor.id)?;
                // Killed: what it was told may be only in its log, as a
                // Lambda killed mid-flight; the case for an uncertain
                // outcome covers it.
                self.chaos.lock().returned_ids.remove(&actor.id);
                self.chaos.forget_time(actor.id);
                Ok(true)
            }
            Ok(Poll::Pending) => Ok(false),
        }
    }

    pub(crate) fn advance(&mut self, seconds: i64) -> Result<(), String> {
        self.clock.advance(Duration::seconds(seconds));
        self.log(format!("clock +{seconds}s"));
        // Lambda ends an invocation at its timeout.
        let now = self.now();
        let mut i = 0;
        while i < self.actors.len() {
            if self.actors[i].deadline <= now + self.chaos.spent_by(self.actors[i].id) {
                let actor = self.actors.remove(i);
                // Killed at its timeout by a move of the run's clock it
                // could not see coming: what it was told may be only in
                // its log.
                self.log(format!("timeout #{} {}", actor.id, actor.label));
                // A wake-up cut off still made its requests.
                self.check_wake_cost(actor.id)?;
                self.chaos.lock().returned_ids.remove(&actor.id);
                self.chaos.forget_time(actor.id);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Genace moves one job on; unless `hurry`, a job ends only once it
    /// has rendered for the run's floor ([`Options::status_storms`]).
    pub(crate) fn genace_progress(&mut self, hurry: bool) {
        let now = self.now();
        for job in self.genace.jobs() {
            self.born.entry(job.id).or_insert(now);
        }
        let floor = self.render_floor.filter(|_| !hurry);
        let young = |id: &str| floor.is_some_and(|f| self.born.get(id).is_some_and(|b| now - *b < f));
        let jobs: Vec<_> = self
            .genace
            .jobs()
            .into_iter()
            .filter(|j| j.state == "queued" || (j.state == "running" && !young(&j.id)))
            .collect();
        if jobs.is_empty() {
            return;
        }
        let job = self.rng.pick(&jobs).clone();
        let (state, outputs) = match (job.state.as_str(), self.rng.below(10)) {
            ("queued", _) => ("running", None),
            (_, 0) => ("failed", None),
            (_, 1) => ("completed", Some(serde_json::Value::Null)),
            _ => {
                let count = 1 + self.rng.below(2);
                let mut list = Vec::new();
                for i in 0..count {
                    let url = format!("https://cdn.genace.example/{}/{i}.mp4", job.id);
                    let size = 200 + self.rng.below(2500) as usize;
                    let data: Vec<u8> = (0..size).map(|b| (b as u64 ^ self.seed) as u8).collect();
                    if self.rng.chance(150) {
                        self.downloads.answer(
                            &url,
                            genace_memory::ServedFile {
                                status: 503,
                                content_type: None,
                                data: Vec::new(),
                            },
                        );
                    } else {
                        self.downloads.serve(&url, Some("video/mp4"), data);
                    }
                    list.push(serde_json::json!({"url": url, "content_type": "video/mp4"}));
                }
                ("completed", Some(serde_json::Value::Array(list)))
            }
        };
        self.genace.set_job(&job.id, state, outputs);
        self.log(format!("genace {} {} -> {state}", job.id, job.state));
    }

    /// Serves every output of completed jobs whole (the quiet phase).
    pub(crate) fn heal_downloads(&mut self) {
        for job in self.genace.jobs() {
            if let Some(serde_json::Value::Array(list)) = &job.outputs {
                for o in list {
                    if let Some(url) = o["url"].as_str() {
                        self.downloads.serve(url, Some("video/mp4"), url.as_bytes().repeat(40));
                    }
                }
            }
        }
    }

    pub(crate) fn step(&mut self) -> Result<(), String> {
        if self.maybe_reconfigure() {
            return Ok(());
        }
        let roll = self.rng.below(100);
        // When calls take time, time passes for a handler only in its
        // calls: the run's clock moves only while none is in flight.
        let frozen = self.chaos.takes_time() && !self.actors.is_empty();
        match roll {
            0..=9 if self.intents_left > 0 => self.intake(),
            10..=34 => {
                let queue = *self.rng.pick(&[
                    Queue::Dispatch,
                    Queue::Wake,
                    Queue::Poll,
                    Queue::Deliver,
                    Queue::Recovery,
                ]);
                if !self.receive(queue) && !self.actors.is_empty() {
                    let i = self.rng.below(self.actors.len() as u64) as usize;
                    self.poll(i)?;
                }
            }
            35..=74 if !self.actors.is_empty() => {
                let i = self.rng.below(self.actors.len() as u64) as usize;
                self.poll(i)?;
            }
            75..=81 if frozen => {
                let i = self.rng.below(self.actors.len() as u64) as usize;
                self.poll(i)?;
            }
            75..=81 => {
                // Mostly short moves, so handlers finish; now and then a long
                // one, past leases and timeouts.
                let long = if self.render_floor.is_some() { 300 } else { 100 };
                let seconds = if self.rng.chance(long) {
                    *self.rng.pick(&[300, 900])
                } else {
                    *self.rng.pick(&[1, 2, 5, 10, 30, 61, 121])
                };
                self.advance(seconds)?;
            }
            82..=84 => self.sweep(),
            85..=91 => self.genace_progress(false),
            92..=95 => self.duplicate(),
            96 if self.rng.chance(500) => self.cancel(),
            96 => self.erase(),
            97..=99 => self.operator(),
            _ if frozen => {
                let i = self.rng.below(self.actors.len() as u64) as usize;
                self.poll(i)?;
            }
            _ => {
                let seconds = 1 + self.rng.below(10) as i64;
                self.advance(seconds)?;
            }
        }
        Ok(())
    }

    /// Runs every handler to its end.
    pub(crate) fn finish_actors(&mut self) -> Result<(), String> {
        let mut polls = 0;
        while !self.actors.is_empty() {
            polls += 1;
            if polls > 100_000 {
                return Err(format!("a handler never finished: {}", self.actors[0].label));
            }
            self.poll(0)?;
            self.check_step()?;
        }
        Ok(())
    }

    /// No crashes, no new work: let everything settle.
    pub(crate) fn quiesce(&mut self) -> Result<(), String> {
        self.chaos.quiet();
        self.log("quiet phase".into());
        self.heal_downloads();
        for round in 0..12 {
            self.finish_actors()?;
            self.finish_genace_jobs();
            self.heal_downloads();
            self.advance(1200)?;
            // From the second round, wake-ups lost to faults before the
            // quiet phase are repaired, and none may be lost since.
            if round > 0 {
                self.check_no_idle_slot()?;
            }
            self.sweep();
            self.finish_actors()?;
            self.drain_queues()?;
        }
        // Operations waiting for a slot take one more look each round; with
        // a small account that takes a few more rounds than the rest.
        for _ in 0..60 {
            if !self.store.records().iter().any(|r| r.capacity_hold.is_some()) {
                break;
            }
            self.advance(60)?;
            self.drain_queues()?;
            self.finish_genace_jobs();
            self.advance(60)?;
            self.drain_queues()?;
        }
        self.check_step()?;
        self.check_rest()
    }

    /// Moves Genace on until no job is queued or running.
    fn finish_genace_jobs(&mut self) {
        while self.genace.running() > 0 {
            self.genace_progress(true);
        }
    }

    fn drain_queues(&mut self) -> Result<(), String> {
        for queue in [
            Queue::Wake,
            Queue::Dispatch,
            Queue::Poll,
            Queue::Deliver,
            Queue::Recovery,
        ] {
            for _ in 0..50 {
                if !self.receive(queue) {
                    break;
                }
                self.finish_actors()?;
            }
        }
        Ok(())
    }
}
