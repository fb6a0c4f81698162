//! The actors of a run: applications sending intents and duplicates,
//! tenants cancelling and erasing, an operator deciding cases.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use super::*;

impl World {
    pub(crate) fn intake(&mut self) {
        self.intents_left -= 1;
        let tenant = self.rng.pick(&self.tenants).clone();
        let key = *self.rng.pick(&KEYS);
        let (body, label) = if self.vary_members {
            self.one_member_varied(key)
        } else {
            self.any_intent(key)
        };
        let intent = Intent::parse(&body, None).expect("a valid intent");
        let tenant_id = TenantId::parse(&tenant).expect("a valid tenant");
        let api = self.app.api();
        let now = self.now();
        let answers = self.answers.clone();
        let sent = intent.canonical.hash().as_str().to_owned();
        let sent_intent = sent_intent(&body);
        self.spawn(
            format!("intake {tenant}/{key} {label}"),
            10,
            None,
            Box::pin(async move {
                use genace_stages::api::errors::SubmitError;
                use genace_stages::api::intake::Submitted;
                let result = api.submit(&tenant_id, &intent, now).await;
                let reply = match &result {
                    Ok(Submitted::New(r)) | Ok(Submitted::Replayed(r)) => Reply::Operation {
                        id: r.operation_id.as_str().to_owned(),
                        carried: r.specification_hash.clone(),
                        held: held_intent(r),
                        replay: matches!(result, Ok(Submitted::Replayed(_))),
                    },
                    Err(SubmitError::KeyReused { .. }) => Reply::KeyReused,
                    Err(_) => Reply::Failed,
                };
                answers.lock().unwrap_or_else(|p| p.into_inner()).push(Answer {
                    tenant: tenant.to_owned(),
                    key: key.to_owned(),
                    sent,
                    sent_intent,
                    reply,
                });
                result
                    .map(|s| match s {
                        Submitted::New(r) => format!("new {}", short(r.operation_id.as_str())),
                        Submitted::Replayed(r) => format!("replayed {}", short(r.operation_id.as_str())),
                    })
                    .map_err(|e| e.to_string())
            }),
        );
    }

    /// Any of the run's intents: videos and images under the same keys
    /// (reservations of 10 and 1 credits meet under a spend limit, and a
    /// key sent again with the other media type is a changed intent, 409),
    /// a quarter with a dispatch deadline, which is part of the intent.
    fn any_intent(&mut self, key: &str) -> (serde_json::Value, String) {
        let prompt = *self.rng.pick(&PROMPTS);
        let (media, model) = *self
            .rng
            .pick(&[("video", "genace-video-2"), ("image", "genace-image-1")]);
        let mut body = serde_json::json!({"operation_key": key, "media_type": media,
            "specification": {"model": model, "prompt": prompt}});
        if self.rng.chance(250) {
            body["dispatch_within_seconds"] = serde_json::json!(*self.rng.pick(&[60, 600]));
        }
        (body, format!("{media} {prompt:?}"))
    }

    /// The key's first intent, or it with exactly one member the
    /// fingerprint covers changed ([`Options::vary_members`]).
    fn one_member_varied(&mut self, key: &str) -> (serde_json::Value, String) {
        let mut body = serde_json::json!({"operation_key": key, "media_type": "video",
            "specification": {"model": "genace-video-2", "prompt": "a lighthouse",
                "prompt_revision": 1, "aspect_ratio": "16:9", "resolution": "720p",
                "parameters": {"seed": 7}}});
        let member = *self.rng.pick(&VARIED_MEMBERS);
        let spec = &mut body["specification"];
        match member {
            "media_type" => body["media_type"] = "image".into(),
            "model" => spec["model"] = "genace-video-3".into(),
            "prompt" => spec["prompt"] = "a harbour".into(),
            "prompt_revision" => spec["prompt_revision"] = 2.into(),
            "aspect_ratio" => spec["aspect_ratio"] = "9:16".into(),
            "duration" => spec["duration"] = 5.5.into(),
            "resolution" => spec["resolution"] = "1080p".into(),
            "parameters" => spec["parameters"]["seed"] = 8.into(),
            "dispatch_within_seconds" => body["dispatch_within_seconds"] = 600.into(),
            _ => {}
        }
        (body, member.to_owned())
    }

    pub(crate) fn duplicate(&mut self) {
        let messages = self.queue.messages_by_id();
        if messages.is_empty() {
            return;
        }
        let (original, m) = self.rng.pick(&messages).clone();
        let copy = self.queue.send(m.queue, m.body.clone(), self.rng.below(30) as u32);
        self.note_copy(original, copy);
        self.log(format!("duplicate a {:?} message", m.queue));
    }

    /// A tenant takes back one of its operations, whatever its phase: the
    /// cancel wins only before the dispatch claim, and then no POST may
    /// ever follow ([`World::check_job_counts`]).
    pub(crate) fn cancel(&mut self) {
        let records = self.store.records();
        if records.is_empty() {
            return;
        }
        let rec = self.rng.pick(&records).clone();
        let api = self.app.api();
        self.spawn(
            format!("cancel {} ({})", short(rec.operation_id.as_str()), rec.phase.as_str()),
            10,
            None,
            Box::pin(async move {
                match api.cancel(&rec.tenant_id, &rec.operation_id).await {
                    Ok(r) => Ok(r.phase.as_str().to_owned()),
                    Err(e @ genace_stages::api::errors::OperationError::TooLateToCancel { .. }) => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }),
        );
    }

    /// A tenant erases one of its operations' outputs, whatever its phase:
    /// refused while a delivery may run, and then no object of it remains,
    /// delivered or left by a failed attempt ([`World::check_record`]).
    pub(crate) fn erase(&mut self) {
        let records = self.store.records();
        if records.is_empty() {
            return;
        }
        let rec = self.rng.pick(&records).clone();
        // The erasure reads the record again when it runs, and may find it
        // erasable then: from here on, its objects may go before the record
        // says so.
        self.erasing.insert(rec.operation_id.as_str().to_owned());
        let api = self.app.api();
        self.spawn(
            format!("erase {} ({})", short(rec.operation_id.as_str()), rec.phase.as_str()),
            10,
            None,
            Box::pin(async move {
                match api.erase_outputs(&rec.tenant_id, &rec.operation_id).await {
                    Ok(r) => Ok(format!(
                        "erased {} objects",
                        r.outputs_erased.map_or(0, |e| e.objects.len())
                    )),
                    Err(e @ genace_stages::api::errors::OperationError::CannotErase { .. }) => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }),
        );
    }

    /// An operator resolves one open case, truthfully: the jobs Genace holds
    /// decide between attach and confirm_not_created.
    pub(crate) fn operator(&mut self) {
        let cases: Vec<OperationRecord> = self.store.records().into_iter().filter(|r| r.case.is_some()).collect();
        if cases.is_empty() {
            return;
        }
        let rec = self.rng.pick(&cases).clone();
        let id = rec.operation_id.as_str().to_owned();
        let jobs: Vec<String> = self
            .genace
            .jobs()
            .into_iter()
            .filter(|j| j.client_reference.as_deref() == Some(id.as_str()))
            .map(|j| j.id)
            .collect();
        let reason = rec.case.as_ref().map(|c| c.reason);
        // Now and then an operator gives up instead: every abandon path must
        // keep what Genace holds or charged.
        let gives_up = self.rng.chance(200);
        let resolution = match (rec.phase, reason) {
            (Phase::Uncertain | Phase::Prepared | Phase::SubmitFailed, _) if gives_up => Resolution::Abandon,
            (Phase::Uncertain, _) => match jobs.first() {
                Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                None => Resolution::ConfirmNotCreated,
            },
            (Phase::Accepted, Some(CaseReason::RemoteJobMissing)) => {
                match jobs.iter().find(|j| Some(j.as_str()) != rec.remote_job_id.as_deref()) {
                    Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                    None => Resolution::Abandon,
                }
            }
            (Phase::Accepted, _) => return,
            // An abandoned operation whose job is unobserved: re-attach the
            // job Genace holds, or confirm there is none.
            (Phase::Abandoned, Some(CaseReason::SettlementPending)) => Resolution::MarkSettled,
            (Phase::Abandoned, _) => match jobs.iter().find(|j| j.as_str() != "job-foreign") {
                Some(job) => Resolution::AttachRemoteJob { job_id: job.clone() },
                None => Resolution::ConfirmNotCreated,
            },
            (Phase::SubmitFailed, _) if rec.settlement == Some(Settlement::Pending) => Resolution::MarkSettled,
            (Phase::Prepared, _) => Resolution::ReleaseHold,
            (Phase::Rendered, _) if rec.delivery_state == DeliveryState::DeliveryFailed && self.rng.chance(500) => {
                Resolution::RedriveDelivery
            }
            _ => Resolution::Abandon,
        };
        // Only a confirmation on an uncertain operation allows a new POST.
        if resolution == Resolution::ConfirmNotCreated && rec.phase == Phase::Uncertain {
            *self.confirmations.entry(id.clone()).or_default() += 1;
        }
        let api = self.app.api();
        let op = Operator {
            actor: "sim-operator".into(),
            tenant: None,
        };
        let name = resolution.name();
        self.spawn(
            format!("operator {name} {}", short(&id)),
            10,
            None,
            Box::pin(async move {
                let id = OperationId::parse(&id).map_err(|e| e.to_string())?;
                api.operator(&op)
                    .resolve(&id, &resolution, "simulated operator", rec.version)
                    .await
                    .map(|r| r.phase.as_str().to_owned())
                    .map_err(|e| e.to_string())
            }),
        );
    }

    // ---- the run
}

/// What [`World::one_member_varied`] may change, one at a time ("none":
/// the key's first intent again).
const VARIED_MEMBERS: [&str; 10] = [
    "none",
    "media_type",
    "model",
    "prompt",
    "prompt_revision",
    "aspect_ratio",
    "duration",
    "resolution",
    "parameters",
    "dispatch_within_seconds",
];

/// The intent a client sent, as the simulator reads its own body (not
/// through the fingerprint it checks).
fn sent_intent(body: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "media_type": body["media_type"],
        "specification": body["specification"],
        "dispatch_within_seconds": body["dispatch_within_seconds"],
    })
}

/// The intent a record holds, read as [`sent_intent`] reads a body: its
/// media type, and its specification and deadline from its canonical JSON.
fn held_intent(rec: &OperationRecord) -> serde_json::Value {
    let canonical: serde_json::Value = serde_json::from_str(&rec.specification).unwrap_or_default();
    serde_json::json!({
        "media_type": rec.media_type.as_str(),
        "specification": canonical["specification"],
        "dispatch_within_seconds": canonical["dispatch_within_seconds"],
    })
}
