//! The lifecycle-event scenarios: what the target's event stream carries.

use std::time::Duration;

use serde_json::Value;

use super::Scenario;
use crate::context::{Outcome, check};

impl Scenario<'_> {
    /// The operation's events from the target's events file, deduplicated
    /// on the event id, once `done` holds for them (or the patience ends).
    async fn events_of(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Result<Vec<Value>, String> {
        let Some(file) = &self.ctx.events else {
            return Ok(Vec::new());
        };
        let deadline = std::time::Instant::now() + self.ctx.patience;
        loop {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let mut seen = std::collections::HashSet::new();
            let events: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e["detail"]["operation_id"] == id)
                // A wait for capacity or credits depends on what else the
                // deployment is doing (other scenarios, a limit learned from
                // another's 429s), not on the path a scenario checks.
                .filter(|e| e["detail"]["type"] != "operation.queued")
                .filter(|e| seen.insert(e["detail"]["id"].as_str().unwrap_or_default().to_owned()))
                .collect();
            if done(&events) || std::time::Instant::now() > deadline {
                return Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every event is a well-formed bus event about this operation, and
    /// versions only grow.
    fn check_envelopes(&self, events: &[Value]) -> Outcome {
        let mut last = 0;
        for e in events {
            let d = &e["detail"];
            check(e["source"] == "genace.operations", format!("source of {e}"))?;
            check(
                e["detail-type"] == d["type"],
                format!("detail-type is not the type: {e}"),
            )?;
            check(d["operation_key"] == self.key.as_str(), format!("operation key of {d}"))?;
            for field in ["tenant_id", "phase", "delivery_state", "time"] {
                check(d[field].is_string(), format!("{field} missing in {d}"))?;
            }
            let v = d["version"].as_u64().unwrap_or(0);
            check(v >= last && v > 0, format!("version went from {last} to {v}"))?;
            // `<operation_id>:<incarnation>:<version>:<type>`.
            let id: Vec<&str> = d["id"].as_str().unwrap_or("").split(':').collect();
            check(
                id.len() == 4
                    && Some(id[0]) == d["operation_id"].as_str()
                    && id[1].parse::<i64>().is_ok()
                    && id[2] == v.to_string()
                    && Some(id[3]) == d["type"].as_str(),
                format!("event id of {d}"),
            )?;
            last = v;
        }
        Ok(())
    }

    fn types(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(|e| e["detail"]["type"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    pub(crate) async fn events_happy_path(&self) -> Outcome {
        if self.ctx.events.is_none() {
            return Ok(());
        }
        self.on_post(self.accepted("queued")).await;
        let done = self.completes_with_output().await;
        self.on_status(None, done).await;
        let id = self.create_new(None).await?;
        let view = self.wait_delivered(&id).await?;
        let events = self
            .events_of(&id, |e| Self::types(e).iter().any(|t| t == "operation.delivered"))
            .await?;
        let types = Self::types(&events);
        check(
            types == ["operation.accepted", "operation.rendered", "operation.delivered"],
            format!("events {types:?}, expected accepted, rendered, delivered"),
        )?;
        self.check_envelopes(&events)?;
        check(
            events[0]["detail"]["data"]["remote_job_id"] == self.job_id.as_str(),
            "accepted names another job",
        )?;
        let delivered = &events[2]["detail"];
        check(delivered["delivery_state"] == "delivered", "delivered event's state")?;
        let objects = delivered["data"]["objects"].as_array().cloned().unwrap_or_default();
        let shown = view["delivered_objects"].as_array().cloned().unwrap_or_default();
        check(
            objects.len() == shown.len()
                && objects
                    .iter()
                    .zip(&shown)
                    .all(|(o, s)| o["sha256"] == s["sha256"] && o["key"] == s["key"]),
            format!("delivered event objects {objects:?} differ from the view's"),
        )?;
        self.expect_posts(1).await
    }

    pub(crate) async fn events_lost_202(&self) -> Outcome {
        if self.ctx.events.is_none() {
            return Ok(());
        }
        self.on_post(self.accepted("queued").set_delay(self.ctx.lost_delay))
            .await;
        let id = self.create_new(None).await?;
        self.wait_phase(&id, "uncertain").await?;
        let events = self.events_of(&id, |e| !e.is_empty()).await?;
        // Redeliveries and sweeps must announce nothing more.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let events_later = self.events_of(&id, |_| true).await?;
        check(
            events.len() == events_later.len(),
            format!("more events followed: {:?}", Self::types(&events_later)),
        )?;
        let types = Self::types(&events_later);
        check(
            types == ["operation.case_opened"],
            format!("events {types:?}, expected one case_opened"),
        )?;
        self.check_envelopes(&events_later)?;
        let d = &events_later[0]["detail"];
        check(
            d["data"]["reason"] == "unknown_submit_outcome" && d["phase"] == "uncertain",
            format!("case event {d}"),
        )?;
        self.expect_posts(1).await
    }
}
