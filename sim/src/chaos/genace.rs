//! Genace through chaos: each POST answered with an outcome class drawn
//! from the seed, status reads with moving states, storms and odd answers.

use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status};
use genace_memory::{MemoryGenace, SubmitPlan};
use genace_stages::ports::genace::Genace;

use super::{Chaotic, port, slow};

/// Genace answers each POST with an outcome class drawn from the seed.
impl Genace for Chaotic<MemoryGenace> {
    async fn submit(&self, body: &serde_json::Value) -> SubmitOutcome {
        let reporting = |held: &str| SubmitPlan::AcceptReporting {
            state: "queued".into(),
            held_credits: held.into(),
        };
        let plan = match self.chaos.below(100) {
            _ if self.chaos.is_calm() => SubmitPlan::Accept { state: "queued".into() },
            0..=34 => SubmitPlan::Accept { state: "queued".into() },
            // Genace's own figure (what it charges for the job's media
            // type), and figures nobody can mean: the ledger must believe
            // the first and not the others.
            35..=39 => match body.get("media_type").and_then(|m| m.as_str()) {
                Some("image") => reporting("1"),
                _ => reporting("10"),
            },
            40..=42 => reporting("-50"),
            43 => reporting("1e400"),
            44 => reporting("250000"),
            45..=54 => SubmitPlan::Accept {
                state: "running".into(),
            },
            55..=61 => SubmitPlan::FailWithJob,
            62..=64 => SubmitPlan::BadGateway,
            65..=67 => SubmitPlan::Answer {
                status: 503,
                body: "upstream unavailable".into(),
            },
            68..=74 => SubmitPlan::LostAfterCreate,
            75..=79 => SubmitPlan::Unreachable,
            80..=83 => SubmitPlan::Answer {
                status: 202,
                body: r#"{"accepted":true}"#.into(),
            },
            84..=91 if self.chaos.lock().plants_429s => SubmitPlan::Answer {
                status: 429,
                body: "slow down".into(),
            },
            84..=91 => SubmitPlan::Accept { state: "queued".into() },
            92..=95 => SubmitPlan::Answer {
                status: 401,
                body: "bad key".into(),
            },
            _ => SubmitPlan::Answer {
                status: 403,
                body: "forbidden".into(),
            },
        };
        slow(&self.chaos).await;
        let outcome = port(&self.chaos, async { self.inner.submit_by(Some(plan), body) }).await;
        let returned = match &outcome {
            SubmitOutcome::Accepted { job, .. } => Some(job.job_id.clone()),
            SubmitOutcome::FailedWithJob { job_id, .. } => Some(job_id.clone()),
            _ => None,
        };
        let mut chaos = self.chaos.lock();
        if let (Some(job_id), Some((clock, _))) = (&returned, &chaos.latency) {
            let now = genace_stages::ports::clock::Clock::now(clock);
            chaos.created_at.insert(job_id.clone(), now);
        }
        if let (Some(job_id), Some((actor, _))) = (returned, chaos.polling) {
            chaos.returned_ids.entry(actor).or_default().push(job_id);
        }
        outcome
    }

    async fn status(&self, job_id: &str) -> StatusOutcome {
        {
            let mut chaos = self.chaos.lock();
            *chaos.gets.entry(job_id.to_owned()).or_default() += 1;
            if let Some((actor, after_end)) = chaos.polling {
                *chaos.gets_by_actor.entry(actor).or_default() += 1;
                if after_end {
                    chaos.gets_after_end.push(format!("#{actor} read job {job_id}"));
                }
            }
        }
        slow(&self.chaos).await;
        let storm = self.chaos.lock().status_storm;
        if let Some((percent, retry_after)) = storm
            && self.chaos.below(100) < percent
        {
            let header = retry_after.to_string();
            return port(&self.chaos, async move {
                genace_core::remote::classify_status_with(429, Some(&header), "", chrono::Utc::now())
            })
            .await;
        }
        let ended = {
            let chaos = self.chaos.lock();
            let now = chaos
                .latency
                .as_ref()
                .map(|(clock, _)| genace_stages::ports::clock::Clock::now(clock));
            chaos
                .render_ends
                .get(job_id)
                .is_some_and(|end| now.is_some_and(|now| *end <= now))
        };
        let rendering = self
            .inner
            .jobs()
            .iter()
            .any(|j| j.id == job_id && (j.state == "queued" || j.state == "running"));
        if ended && rendering {
            let outputs = serde_json::json!([{"url": crate::common::output_url(job_id), "content_type": "image/png"}]);
            self.inner.set_job(job_id, "completed", Some(outputs));
        }
        let errors = self.chaos.lock().status_errors;
        match self.chaos.below(100) {
            _ if self.chaos.is_calm() => port(&self.chaos, self.inner.status(job_id)).await,
            0..=4 => port(&self.chaos, async { classify_status(500, "busy") }).await,
            5..=12 => {
                let other = serde_json::json!({"id": "job-foreign", "state": "running"}).to_string();
                port(&self.chaos, async move { classify_status(200, &other) }).await
            }
            13..=14 => port(&self.chaos, async { classify_status(404, "not found") }).await,
            n if n < 15 + errors.saturating_sub(5) => {
                port(&self.chaos, async { classify_status(503, "overloaded") }).await
            }
            _ => port(&self.chaos, self.inner.status(job_id)).await,
        }
    }
}
