//! Stage logic on the in-memory adapters and a manual clock: the real
//! intake, dispatch, poll, recovery and sweep code, with no network. The
//! same stages run against moto and wiremock in `dispatch.rs` and
//! `lifecycle.rs`; these run in milliseconds and move time by hand.

use chrono::{Duration, TimeZone, Utc};
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::messages::Queue;
use genace_core::record::CaseReason;
use genace_core::record::OperationRecord;
use genace_core::record::Phase;
use genace_memory::MemoryApp;
use genace_memory::SubmitPlan;
use genace_memory::memory_app;
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::dispatch::Dispatched;
use genace_stages::pipeline::dispatch::PostResult;
use genace_stages::pipeline::poll::Polled;
use genace_stages::pipeline::recovery::RecoveryOutcome;
use genace_stages::pipeline::stage::Stage;
use genace_stages::pipeline::stage::StageError;
use genace_stages::pipeline::stage::handle_body;
use genace_stages::pipeline::stage::handle_received;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::table::prelude::*;
use serde_json::json;

fn app() -> MemoryApp {
    let mut app = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    app.config.fault_injection = true;
    app
}

/// Genace's first job (of `id`) fails, which frees its slot: the body of
/// the last message on the wake queue, the wake-up it sent, if any.
async fn fail_first_job_and_see_who_is_woken(app: &MemoryApp, id: &OperationId) -> Option<String> {
    app.poller().poll(id).await.unwrap();
    app.genace.set_job("job-0001", "failed", None);
    assert_eq!(app.poller().poll(id).await.unwrap(), Polled::RenderFailed);
    app.queue
        .messages()
        .into_iter()
        .rfind(|m| m.queue == Queue::Wake)
        .map(|m| m.body)
}

/// Submits a new video intent as `tenant`.
async fn submit_as(app: &MemoryApp, tenant: &str, key: &str) -> OperationId {
    submit_media(app, tenant, key, "video").await
}

/// Submits a new intent of `media` as `tenant`: a video reserves 10
/// credits, an image 1.
async fn submit_media(app: &MemoryApp, tenant: &str, key: &str, media: &str) -> OperationId {
    let model = if media == "video" {
        "genace-video-2"
    } else {
        "genace-image-1"
    };
    let body = json!({"operation_key": key, "media_type": media,
        "specification": {"model": model, "prompt": "a lighthouse"}});
    let intent = Intent::parse(&body, None).unwrap();
    match app
        .api()
        .submit(&TenantId::parse(tenant).unwrap(), &intent, app.clock.now())
        .await
        .unwrap()
    {
        Submitted::New(rec) => rec.operation_id,
        other => panic!("{other:?}"),
    }
}

/// Under an account limit of one (kept for the app's life): `running`
/// claimed and POSTed, `waiting` refused for capacity and in the order.
async fn one_running_one_waiting(app: &MemoryApp) -> (OperationId, OperationId) {
    let _limited = app.store.clone().with_account_limit(Some(1));
    let running = submit(app, "running", None).await;
    let waiting = submit(app, "waiting", None).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&running).await.unwrap();
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    (running, waiting)
}

async fn submit(app: &MemoryApp, key: &str, fault: Option<&str>) -> OperationId {
    let mut body = json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": "a lighthouse"}});
    if let Some(f) = fault {
        body["fault"] = json!(f);
    }
    let intent = Intent::parse(&body, None).unwrap();
    match app
        .api()
        .submit(&TenantId::parse("tenant-a").unwrap(), &intent, app.clock.now())
        .await
        .unwrap()
    {
        Submitted::New(rec) => rec.operation_id,
        other => panic!("expected a new operation, got {other:?}"),
    }
}

/// Polls the operation of Genace's first job once, then again after the
/// job completed: it is rendered (and its slot and credits freed).
async fn render_first_job(app: &MemoryApp, id: &OperationId) {
    render_job(app, id, "job-0001").await;
}

/// [`render_first_job`] for the operation of Genace's job `job`.
async fn render_job(app: &MemoryApp, id: &OperationId, job: &str) {
    app.poller().poll(id).await.unwrap();
    app.genace
        .set_job(job, "completed", Some(json!([{"url": "https://cdn.example/out.mp4"}])));
    assert_eq!(app.poller().poll(id).await.unwrap(), Polled::Rendered);
}

/// The operations the wake queue was sent, in order.
fn woken(app: &MemoryApp) -> Vec<String> {
    app.queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Wake)
        .map(|m| m.body)
        .collect()
}

async fn record(app: &MemoryApp, id: &OperationId) -> OperationRecord {
    app.store.get(id, app.clock.now()).await.unwrap().unwrap()
}

/// Delivers every visible message of `queue` to `stage`, deleting the ones it handled.
async fn drain<S: Stage>(app: &MemoryApp, queue: Queue, stage: &S) -> Vec<Result<S::Outcome, StageError>> {
    let mut outcomes = Vec::new();
    for m in app.queue.receive(queue, 10, Duration::seconds(30)) {
        let outcome = handle_body(stage, &m.body).await;
        if outcome.is_ok() {
            app.queue.delete(m.id, m.receipt);
        }
        outcomes.push(outcome);
    }
    outcomes
}

#[tokio::test]
async fn an_intent_is_posted_once_however_often_its_message_comes() {
    let app = app();
    let id = submit(&app, "k", None).await;
    assert_eq!(app.queue.messages().len(), 1, "intake announced it to dispatch");
    let dispatcher = app.dispatcher();
    let first = drain(&app, Queue::Dispatch, &dispatcher).await;
    assert!(matches!(first[..], [Ok(Dispatched::Posted(PostResult::Accepted))]));
    for _ in 0..3 {
        assert_eq!(
            dispatcher.dispatch(&id).await.unwrap(),
            Dispatched::NotDispatchable(Phase::Accepted)
        );
    }
    assert_eq!(app.genace.posts().len(), 1);
    let rec = record(&app, &id).await;
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-0001"));
    assert_eq!(app.genace.jobs()[0].client_reference.as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn a_lost_answer_leaves_an_uncertain_operation_with_a_case_and_no_second_post() {
    let app = app();
    app.genace.plan([SubmitPlan::LostAfterCreate]);
    let id = submit(&app, "k", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Uncertain)
    );
    let rec = record(&app, &id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert!(rec.case.is_some(), "a person must reconcile the job Genace created");
    app.clock.advance(Duration::hours(1));
    assert_eq!(
        dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::NotDispatchable(Phase::Uncertain)
    );
    assert_eq!((app.genace.posts().len(), app.genace.jobs().len()), (1, 1));
}

#[tokio::test]
async fn a_502_with_a_job_id_saves_the_id() {
    let app = app();
    app.genace.plan([SubmitPlan::FailWithJob]);
    let id = submit(&app, "k", None).await;
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::SubmitFailed)
    );
    let rec = record(&app, &id).await;
    assert_eq!(rec.phase, Phase::SubmitFailed);
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-0001"));
}

#[tokio::test]
async fn a_claim_whose_lease_expires_becomes_uncertain_not_a_second_post() {
    let app = app();
    let id = submit(&app, "k", Some("dispatch.after_response")).await;
    let dispatcher = app.dispatcher();
    assert!(matches!(dispatcher.dispatch(&id).await, Err(StageError::Crashed(_))));
    assert_eq!(record(&app, &id).await.phase, Phase::Submitting);
    assert_eq!(
        dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Duplicate,
        "lease still live"
    );
    app.clock
        .advance(app.config.policy.dispatch_lease + Duration::seconds(1));
    assert_eq!(dispatcher.dispatch(&id).await.unwrap(), Dispatched::Interrupted);
    let rec = record(&app, &id).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    assert_eq!(app.genace.posts().len(), 1);
}

#[tokio::test]
async fn an_unwritable_acceptance_goes_to_recovery_and_is_applied_from_there() {
    let app = app();
    let id = submit(&app, "k", Some("dispatch.persist_fails")).await;
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AcceptedUnpersisted)
    );
    assert_eq!(record(&app, &id).await.phase, Phase::Submitting);
    let outcomes = drain(&app, Queue::Recovery, &app.recovery()).await;
    assert!(matches!(outcomes[..], [Ok(RecoveryOutcome::Applied(Phase::Accepted))]));
    let rec = record(&app, &id).await;
    assert_eq!(rec.remote_job_id.as_deref(), Some("job-0001"));
    assert_eq!(app.genace.posts().len(), 1);
}

#[tokio::test]
async fn polling_follows_the_job_to_rendered_and_hands_it_to_delivery() {
    let app = app();
    let id = submit(&app, "k", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    let poller = app.poller();
    assert!(matches!(poller.poll(&id).await.unwrap(), Polled::Running { .. }));
    app.genace.set_job(
        "job-0001",
        "completed",
        Some(json!([{"url": "https://cdn.example/out.mp4"}])),
    );
    assert_eq!(poller.poll(&id).await.unwrap(), Polled::Rendered);
    let rec = record(&app, &id).await;
    assert_eq!(rec.phase, Phase::Rendered);
    assert!(
        app.queue
            .messages()
            .iter()
            .any(|m| m.queue == Queue::Deliver && m.body.contains(id.as_str()))
    );
}

/// The sweep restarted the looks at a job whose look came late (its
/// message was held past the sweep's deadline): the late look, of the
/// chain the restart replaced, ends before it reads Genace, and the
/// restarted chain looks on. One chain of looks per job, whatever the late
/// look would have read.
#[tokio::test]
async fn a_look_of_a_chain_the_sweep_replaced_ends_unread() {
    let app = app();
    let id = submit(&app, "k", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    app.clock.advance(Duration::seconds(30));
    let late = app.queue.receive(Queue::Poll, 10, Duration::hours(1));
    assert_eq!(late.len(), 1, "the first look");
    app.clock.advance(Duration::minutes(20));
    assert_eq!(
        app.sweeper().run().await.unwrap().poll,
        1,
        "the sweep restarted the looks"
    );
    // What the next read of Genace answers.
    app.genace.answer_status_with(404, None);
    assert_eq!(
        handle_body(&app.poller(), &late[0].body).await.unwrap(),
        Polled::Superseded
    );
    let restarted = drain(&app, Queue::Poll, &app.poller()).await;
    assert!(
        matches!(restarted[..], [Ok(Polled::CaseOpened(CaseReason::RemoteJobMissing))]),
        "the restarted chain read Genace: {restarted:?}"
    );
}

/// An accepted job 20 minutes old, Genace's next status read answering
/// `status` (none: running), and a rival that moves the deadline (and,
/// if `renames`, names a new chain of looks, as the sweep's restart does)
/// just before the look's first write.
async fn late_look_beside_a_rival(status: Option<(u16, &str)>, renames: bool) -> (MemoryApp, OperationId) {
    let app = app();
    let id = submit(&app, "k", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    app.clock.advance(Duration::minutes(20));
    if let Some((code, retry_after)) = status {
        app.genace.answer_status_with(code, Some(retry_after));
    }
    let (store, rival) = (app.store.clone(), id.clone());
    app.store.before_next_apply(move |_| {
        let rec = store.records().into_iter().find(|r| r.operation_id == rival).unwrap();
        let mut moved = rec.clone();
        moved.due_at_ms = moved.due_at_ms.map(|d| d + 1);
        moved.version += 1;
        if renames {
            moved.poll_chain = Some(moved.version);
        }
        store.apply_now(&rec, &moved).unwrap();
    });
    (app, id)
}

/// A look whose chain another superseded while it read Genace (the sweep
/// moved the deadline and sent a look of its own) records what it saw and
/// sends no next look: one chain of looks per job. So for a running job,
/// and for a 429 whose Retry-After moves the deadline. The look comes
/// late, past the deadline, as a look the sweep restarts a chain beside.
#[tokio::test]
async fn a_look_another_chain_superseded_sends_no_next_look() {
    for status in [None, Some((429, "900"))] {
        let (app, id) = late_look_beside_a_rival(status, false).await;
        let polls = |app: &MemoryApp| app.queue.messages().iter().filter(|m| m.queue == Queue::Poll).count();
        let before = polls(&app);
        assert_eq!(app.poller().poll(&id).await.unwrap(), Polled::Superseded, "{status:?}");
        assert_eq!(
            polls(&app),
            before,
            "{status:?}: a look was sent beside the other chain's"
        );
    }
}

/// A look of a chain the sweep replaced while it read Genace writes
/// nothing of a running job: the deadline and the stall are the new
/// chain's to write, and a write of them would end that chain too.
#[tokio::test]
async fn a_late_look_of_a_replaced_chain_writes_nothing_of_a_running_job() {
    for status in [None, Some((429, "900")), Some((503, "1"))] {
        let (app, id) = late_look_beside_a_rival(status, true).await;
        let history = genace_core::messages::PollHistory {
            chain: record(&app, &id).await.poll_chain,
            ..Default::default()
        };
        let polled = app.poller().poll_after(&id, history).await.unwrap();
        assert_eq!(polled, Polled::Superseded, "{status:?}");
        let after = record(&app, &id).await;
        assert_eq!(
            (after.version, after.poll_chain),
            (after.poll_chain.unwrap(), Some(after.version)),
            "{status:?}: the late look wrote over the restarted chain's record"
        );
    }
}

#[tokio::test]
async fn a_job_genace_does_not_know_opens_a_case() {
    let app = app();
    let id = submit(&app, "k", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    let mut rec = record(&app, &id).await;
    let before = rec.clone();
    rec.remote_job_id = Some("job-unknown".into());
    rec.version += 1;
    app.store.apply(&before, &rec).await.unwrap();
    assert_eq!(
        app.poller().poll(&id).await.unwrap(),
        Polled::CaseOpened(CaseReason::RemoteJobMissing)
    );
}

#[tokio::test]
async fn the_sweep_re_announces_an_intent_whose_message_was_lost() {
    let app = app();
    let id = submit(&app, "k", None).await;
    let lost = app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30));
    assert!(
        app.queue.delete(lost[0].id, lost[0].receipt),
        "the announcement is gone"
    );
    let sweeper = app.sweeper();
    assert_eq!(sweeper.run().await.unwrap().dispatch, 0, "not due yet");
    app.clock.advance(app.config.dispatch_grace + Duration::seconds(1));
    assert_eq!(sweeper.run().await.unwrap().dispatch, 1);
    let outcomes = drain(&app, Queue::Dispatch, &app.dispatcher()).await;
    assert!(matches!(outcomes[..], [Ok(Dispatched::Posted(PostResult::Accepted))]));
    assert_eq!(record(&app, &id).await.phase, Phase::Accepted);
}

#[tokio::test]
async fn the_memory_queue_hides_received_messages_and_redelivers_undeleted_ones() {
    let app = app();
    let id = submit(&app, "k", None).await;
    let first = app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30));
    assert_eq!(first.len(), 1);
    assert!(app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30)).is_empty());
    app.clock.advance(Duration::seconds(31));
    let again = app.queue.receive(Queue::Dispatch, 10, Duration::seconds(30));
    assert_eq!((again.len(), again[0].receives), (1, 2));
    assert!(
        !app.queue.delete(first[0].id, first[0].receipt),
        "a stale receipt deletes nothing"
    );
    assert!(app.queue.delete(again[0].id, again[0].receipt));
    assert!(app.queue.messages().is_empty());
    // A delayed message stays hidden until its delay has passed.
    use genace_stages::ports::queue::WorkQueue;
    app.queue.enqueue(Queue::Poll, &id, 60).await.unwrap();
    assert!(app.queue.receive(Queue::Poll, 10, Duration::seconds(30)).is_empty());
    app.clock.advance(Duration::seconds(60));
    assert_eq!(app.queue.receive(Queue::Poll, 10, Duration::seconds(30)).len(), 1);
}

/// An account hold longer than SQS's longest delay asked SQS for 901 s,
/// which it refuses; the look after the hold now stays within the bound
/// (the sweep re-sends the rest).
#[tokio::test]
async fn an_account_hold_longer_than_sqs_delays_is_still_enqueued() {
    let mut app = app();
    app.config.policy.account_hold = Duration::hours(1);
    app.genace.plan([SubmitPlan::Answer {
        status: 402,
        body: "payment required".into(),
    }]);
    let id = submit(&app, "held", None).await;
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AccountHeld)
    );
    assert_eq!(
        record(&app, &id).await.case.map(|c| c.reason),
        Some(CaseReason::AccountProblem)
    );
}

/// With every slot of the account taken by our jobs, dispatch records a
/// wait (no POST, no case, no message to itself: nothing polls); the write
/// that frees the slot wakes the oldest waiting operation, which then
/// POSTs. Exactly one POST per operation.
#[tokio::test]
async fn a_full_account_makes_dispatch_wait_until_a_freed_slot_wakes_it() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let first = submit(&app, "first", None).await;
    let second = submit(&app, "second", None).await;
    let third = submit(&app, "third", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&first).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let dispatch_messages = |id: &OperationId| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.queue == Queue::Wake && m.body.contains(id.as_str()))
            .count()
    };
    let before = dispatch_messages(&second);
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    app.clock.advance(Duration::seconds(1));
    assert_eq!(
        dispatcher.dispatch(&third).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let waiting = record(&app, &second).await;
    assert_eq!(waiting.phase, Phase::Prepared);
    assert!(waiting.capacity_hold.is_some());
    assert!(waiting.case.is_none(), "capacity is not a case");
    assert_eq!(app.genace.posts().len(), 1);
    assert_eq!(
        dispatch_messages(&second),
        before,
        "a waiting operation sends itself nothing"
    );
    assert_eq!(
        app.store
            .waiting(&TenantId::parse("tenant-a").unwrap(), 10)
            .await
            .unwrap(),
        vec![second.clone(), third.clone()],
        "oldest wait first"
    );
    let tenant = app.store.ledger(&TenantId::parse("tenant-a").unwrap()).await.unwrap();
    assert_eq!((tenant.totals.in_flight, tenant.totals.waiting), (1, 2));
    // The first job renders: its slot frees, and the oldest waiter is woken.
    app.poller().poll(&first).await.unwrap();
    app.genace.set_job(
        "job-0001",
        "completed",
        Some(json!([{"url": "https://cdn.example/out.mp4"}])),
    );
    assert_eq!(app.poller().poll(&first).await.unwrap(), Polled::Rendered);
    assert_eq!(dispatch_messages(&second), before + 1, "woken");
    assert_eq!(dispatch_messages(&third), 0, "only as many as slots freed");
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let claimed = record(&app, &second).await;
    assert_eq!((claimed.phase, claimed.capacity_hold), (Phase::Accepted, None));
    assert_eq!(app.genace.posts().len(), 2);
    assert_eq!(app.store.account().await.unwrap().in_flight, 1);
}

/// A slot freed while operations wait is theirs: a fresh intent that
/// arrives before the woken one claims does not take it, but waits behind
/// them (first in, first out), and the wake-up travels on the wake queue,
/// never behind fresh intents on the dispatch queue.
#[tokio::test]
async fn a_fresh_claim_yields_a_freed_slot_to_the_operations_that_wait_for_one() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let [running, waiting, fresh] = [
        submit(&app, "running", None).await,
        submit(&app, "waiting", None).await,
        submit(&app, "fresh", None).await,
    ];
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&running).await.unwrap();
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    // The running job fails: its slot frees, and the waiter is woken on the
    // wake queue.
    let woken = fail_first_job_and_see_who_is_woken(&app, &running)
        .await
        .expect("a wake-up");
    assert!(woken.contains(waiting.as_str()), "{woken}");
    let account = app.store.account().await.unwrap();
    assert!(account.has_room() && account.yields());
    // The fresh intent comes first, and yields: no POST, it waits behind.
    app.clock.advance(Duration::seconds(1));
    assert_eq!(
        dispatcher.dispatch(&fresh).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    assert_eq!(app.genace.posts().len(), 1);
    assert_eq!(
        app.store
            .waiting(&TenantId::parse("tenant-a").unwrap(), 10)
            .await
            .unwrap(),
        vec![waiting.clone(), fresh.clone()],
        "first in, first out"
    );
    // The woken operation takes the slot.
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 2);
    let account = app.store.account().await.unwrap();
    assert_eq!((account.in_flight, account.queued), (1, 1));
    assert_eq!(record(&app, &fresh).await.phase, Phase::Prepared);
}

/// A wait has no timer of its own: while the account stays full, three
/// hours of sweeps (one a minute) send the waiting operation nothing and
/// write nothing to it, so what a wait costs does not grow with its length.
/// A wake-up that is lost (here: taken off the wake queue unread) is
/// repaired by the sweep's next look at the account, and the operation is
/// admitted with one POST.
#[tokio::test]
async fn a_wait_costs_nothing_while_it_lasts_and_the_sweep_repairs_a_lost_wake_up() {
    let app = app();
    let (running, waiting) = one_running_one_waiting(&app).await;
    let dispatcher = app.dispatcher();
    let naming = |app: &MemoryApp| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.body.contains(waiting.as_str()))
            .count()
    };
    let before = (record(&app, &waiting).await, naming(&app));
    assert_eq!(before.0.due_at_ms, None, "no due time: the sweep does not look at it");
    for _ in 0..180 {
        app.clock.advance(Duration::minutes(1));
        app.sweeper().run().await.unwrap();
    }
    let after = (record(&app, &waiting).await, naming(&app));
    assert_eq!(after.0.version, before.0.version, "nothing written while it waited");
    assert_eq!(after.1, before.1, "nothing sent while it waited");
    // The running job fails, which frees its slot and wakes the waiter;
    // that wake-up is lost.
    assert!(fail_first_job_and_see_who_is_woken(&app, &running).await.is_some());
    for lost in app.queue.receive(Queue::Wake, 10, Duration::seconds(30)) {
        assert!(app.queue.delete(lost.id, lost.receipt));
    }
    assert_eq!(app.genace.posts().len(), 1);
    // The sweep finds a free slot while an operation waits, and wakes it.
    app.clock.advance(Duration::minutes(1));
    app.sweeper().run().await.unwrap();
    let repaired = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Wake)
        .map(|m| m.body)
        .collect::<Vec<_>>();
    assert!(
        repaired.len() == 1 && repaired[0].contains(waiting.as_str()),
        "{repaired:?}"
    );
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 2);
}

/// Found at scale: the sweep worked through its due items before its
/// capacity look, so a backlog longer than one run meant no lost wake-up
/// was ever repaired and no learned limit probed. Now the look comes first,
/// before the first due item is touched, and the due items stop at the
/// time budget, the rest left due for the next run.
#[tokio::test]
async fn the_sweep_looks_at_capacity_first_and_bounds_its_backlog_by_time() {
    let app = app();
    let (running, waiting) = one_running_one_waiting(&app).await;
    // The running job fails; the wake-up it sends is lost.
    assert!(fail_first_job_and_see_who_is_woken(&app, &running).await.is_some());
    for lost in app.queue.receive(Queue::Wake, 10, Duration::seconds(30)) {
        assert!(app.queue.delete(lost.id, lost.receipt));
    }
    // A backlog of due work: intents nobody dispatched, past their grace.
    for i in 0..120 {
        submit(&app, &format!("backlog-{i}"), None).await;
    }
    app.clock.advance(Duration::minutes(3));
    let mut sweeper = app.sweeper();
    sweeper.page_size = 10;
    sweeper.budget = std::time::Duration::from_secs(20);
    // Before the sweep's first write to a due item: was the waiter woken
    // already? Then that write takes 30 s, past the budget.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (queue, clock, at_first, id) = (app.queue.clone(), app.clock.clone(), seen.clone(), waiting.clone());
    app.store.before_next_apply(move |_| {
        let woken = queue
            .messages()
            .iter()
            .any(|m| m.queue == Queue::Wake && m.body.contains(id.as_str()));
        *at_first.lock().unwrap() = Some(woken);
        clock.advance(Duration::seconds(30));
    });
    let report = sweeper.run().await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        Some(true),
        "the capacity look came before the due items"
    );
    assert!(report.truncated, "{report:?}");
    assert_eq!(report.examined, 1, "the budget was spent at the first item: {report:?}");
    // The next run takes up what was left.
    let next = sweeper.run().await.unwrap();
    assert!(next.examined >= 100, "{next:?}");
    assert!(!next.truncated, "{next:?}");
}

/// The in-memory store cancels transaction tries for conflicts as DynamoDB
/// does, and tries again as the DynamoDB store does: at 100 % every try of
/// a claim (which moves the tenant's counters) is cancelled, counted, and
/// nothing is written; at 60 % a burst is claimed, POSTed once each and
/// saved, with the conflicts counted and no job id left to recovery.
#[tokio::test]
async fn conflicting_transactions_are_tried_again_and_never_half_written() {
    use genace_stages::ports::table::{CONFLICT_TRIES, StoreError};
    let app = app();
    let id = submit(&app, "k0", None).await;
    let before = record(&app, &id).await;
    let store = app.store.clone().with_transaction_conflicts(100, 0);
    let claimed = genace_core::machine::transition(
        &before,
        genace_core::machine::Input::ClaimDispatch { token: "t", shard: 0 },
        app.clock.now(),
        &genace_core::machine::Policy::default(),
    )
    .unwrap();
    assert!(matches!(
        store.apply(&before, &claimed).await,
        Err(StoreError::Contention)
    ));
    assert_eq!(store.transaction_conflicts(), u64::from(CONFLICT_TRIES));
    assert_eq!(record(&app, &id).await, before, "nothing written");
    assert_eq!(store.ledger(&before.tenant_id).await.unwrap().totals.in_flight, 0);

    let store = app.store.clone().with_transaction_conflicts(60, 0);
    let mut ids = vec![id];
    for i in 1..12 {
        ids.push(submit(&app, &format!("k{i}"), None).await);
    }
    let dispatcher = app.dispatcher();
    for id in &ids {
        let mut outcome = dispatcher.dispatch(id).await;
        // A claim whose every try met a conflict is an error the queue
        // retries, as it would retry any store failure.
        while matches!(outcome, Err(StageError::Store(StoreError::Contention))) {
            outcome = dispatcher.dispatch(id).await;
        }
        assert_eq!(outcome.unwrap(), Dispatched::Posted(PostResult::Accepted));
    }
    assert_eq!(app.genace.posts().len(), ids.len(), "one POST each");
    assert!(
        store.transaction_conflicts() > u64::from(CONFLICT_TRIES),
        "conflicts were met"
    );
    assert!(
        !app.queue.messages().iter().any(|m| m.queue == Queue::Recovery),
        "no job id left to recovery"
    );
}

/// Two claims that meet in one step on the items they share (the
/// tenant's ledger, the account): the later is cancelled as DynamoDB
/// cancels it (`TransactionConflict`), tried again once the first is
/// written, and both POST once.
#[tokio::test]
async fn two_transactions_that_meet_on_an_item_cancel_the_later_one() {
    let app = app();
    let store = app.store.clone().with_meeting_transactions();
    let (a, b) = (submit(&app, "a", None).await, submit(&app, "b", None).await);
    let dispatcher = app.dispatcher();
    let (ra, rb) = tokio::join!(dispatcher.dispatch(&a), dispatcher.dispatch(&b));
    assert_eq!(ra.unwrap(), Dispatched::Posted(PostResult::Accepted));
    assert_eq!(rb.unwrap(), Dispatched::Posted(PostResult::Accepted));
    assert!(store.transaction_conflicts() >= 1, "the two claims met");
    assert_eq!(store.transactions_contended(), 0, "and the later went through");
    assert_eq!(app.genace.posts().len(), 2);
    let ledger = store.ledger(&TenantId::parse("tenant-a").unwrap()).await.unwrap();
    assert_eq!(ledger.totals.in_flight, 2);
    // A plain write (an operator's limit) to the account item while a
    // claim's transaction holds it is refused as DynamoDB refuses it, and
    // sent again until the transaction is over.
    let c = submit(&app, "c", None).await;
    let met = store.transaction_conflicts();
    let (claimed, limited) = tokio::join!(dispatcher.dispatch(&c), store.set_account_limit(Some(9)));
    assert_eq!(claimed.unwrap(), Dispatched::Posted(PostResult::Accepted));
    assert_eq!(limited.unwrap().set_limit, Some(9));
    assert!(store.transaction_conflicts() > met, "the limit met the claim");
    // Run one after the other, they never meet.
    let quiet = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    let store = quiet.store.clone().with_meeting_transactions();
    for key in ["c", "d"] {
        let id = submit(&quiet, key, None).await;
        quiet.dispatcher().dispatch(&id).await.unwrap();
    }
    assert_eq!(store.transaction_conflicts(), 0);
}

/// The write meter charges each item of a transaction 2 write units. An
/// item past its budget within one second of the clock cancels the
/// transactions that reach it (DynamoDB's `ThrottlingError`), which the
/// store answers as contention; in the next second they go through. The
/// report names the busiest item and the jobs admitted.
#[tokio::test]
async fn an_item_past_its_write_budget_is_throttled_until_the_next_second() {
    use genace_stages::ports::table::StoreError;
    let app = app();
    let store = app.store.clone().with_write_meter(app.clock.clone(), Some(2));
    let a = submit_as(&app, "tenant-x", "a").await;
    let b = submit_as(&app, "tenant-y", "b").await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&a).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    // The account item took 2 units this second: b's claim waits for the next.
    assert!(matches!(
        dispatcher.dispatch(&b).await,
        Err(StageError::Store(StoreError::Contention))
    ));
    assert_eq!(app.genace.posts().len(), 1, "never POSTed unclaimed");
    app.clock.advance(Duration::seconds(1));
    assert_eq!(
        dispatcher.dispatch(&b).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let report = store.write_report().unwrap();
    assert_eq!(report.admitted, 2);
    assert!(report.throttled >= u64::from(genace_stages::ports::table::CONFLICT_TRIES));
    assert_eq!(report.peak_units_per_second, 2, "{report:?}");
    assert_eq!(report.busiest_item, genace_memory::ACCOUNT_ITEM, "{report:?}");
    assert_eq!(report.busiest_units, 4, "two claims, two units each: {report:?}");
    assert!((report.ceiling_jobs_per_second() - 500.0).abs() < 1e-9);
}

/// A job id Genace named, whose save meets a busy table (every try of its
/// transaction cancelled for a conflict), is tried again, pausing between
/// tries, for as long as a try can end within `JOB_SAVE_SECONDS` of the
/// answer; only then does it go to the recovery channel, with the job id.
#[tokio::test]
async fn a_job_id_is_tried_again_while_the_table_is_busy_then_recovered() {
    use genace_stages::pipeline::dispatch::JOB_SAVE_SECONDS;
    use genace_stages::ports::table::CONFLICT_TRIES;
    let app = app();
    let id = submit(&app, "busy", None).await;
    // Genace holds less than reserved: saving the job id moves the
    // tenant's credits, so it is a transaction.
    app.genace.plan([SubmitPlan::AcceptReporting {
        state: "queued".into(),
        held_credits: "4".into(),
    }]);
    // The claim goes through; from the write after it (the 202's), every
    // try of every transaction is cancelled.
    let store = app.store.clone();
    app.store.before_next_apply(move |_| {
        let busy = store.clone();
        store.before_next_apply(move |_| {
            let _ = busy.with_transaction_conflicts(100, 0);
        });
    });
    let answered = app.clock.now();
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AcceptedUnpersisted)
    );
    let tries = app.store.transaction_conflicts() / u64::from(CONFLICT_TRIES);
    assert!(
        tries >= 4 * 3,
        "only {tries} transactions tried: the save was not tried again"
    );
    let spent = (app.clock.now() - answered).num_seconds();
    assert!(
        spent > 1 && spent <= JOB_SAVE_SECONDS as i64,
        "paused {spent} s, within {JOB_SAVE_SECONDS} s"
    );
    let recovery: Vec<_> = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Recovery)
        .collect();
    assert_eq!(recovery.len(), 1);
    assert!(recovery[0].body.contains("job-0001"), "{}", recovery[0].body);
    assert_eq!(app.genace.posts().len(), 1, "never POSTed again");
}

/// Found at scale: a woken claim woke the next waiters (reading the
/// waiting set and the queue) between its claim write and its POST, so a
/// dispatcher stopped there left a claimed, never-POSTed operation for a
/// person. Now nothing comes between the claim and the POST: when the POST's
/// outcome is committed, no wake-up has been sent yet; the next waiter is
/// woken right after.
#[tokio::test]
async fn a_woken_claim_posts_before_it_wakes_the_next() {
    let app = app();
    let (running, waiting) = one_running_one_waiting(&app).await;
    let third = submit(&app, "third", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&third).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    // The running job ends and the account grows to two: `waiting` is woken.
    let _two = app.store.clone().with_account_limit(Some(2));
    assert!(fail_first_job_and_see_who_is_woken(&app, &running).await.is_some());
    let wakes_before = woken(&app).len();
    // Seen at the write after the claim: the commit of the POST's outcome.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (queue, genace, at_commit) = (app.queue.clone(), app.genace.clone(), seen.clone());
    app.store.before_next_apply(move |store| {
        store.before_next_apply(move |_| {
            let wakes = queue.messages().iter().filter(|m| m.queue == Queue::Wake).count();
            *at_commit.lock().unwrap() = Some((wakes, genace.posts().len()));
        });
    });
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let (wakes_at_commit, posts_at_commit) = seen.lock().unwrap().expect("the outcome was committed");
    assert_eq!(posts_at_commit, 2, "the woken claim had POSTed");
    assert_eq!(
        wakes_at_commit, wakes_before,
        "no wake-up went out between the claim and the POST"
    );
    let after = woken(&app);
    assert_eq!(
        after.len(),
        wakes_before + 1,
        "the next waiter is woken after the commit"
    );
    assert!(after.last().unwrap().contains(third.as_str()));
}

/// A second wake-up (or the intake message after a wake-up) that arrives
/// for an operation accepted meanwhile sends no poll: the dispatcher that
/// committed the 202 sent one, and another would poll the job twice for
/// its whole life. A message received again, whose dispatcher may have stopped
/// between the commit and the poll, does send it.
#[tokio::test]
async fn a_duplicate_wake_up_starts_no_second_chain_of_polls() {
    let app = app();
    let id = submit(&app, "k", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let polls = |app: &MemoryApp| app.queue.messages().iter().filter(|m| m.queue == Queue::Poll).count();
    assert_eq!(polls(&app), 1);
    let body = json!({"operation_id": id}).to_string();
    let accepted = Dispatched::NotDispatchable(Phase::Accepted);
    assert_eq!(handle_received(&dispatcher, &body, 1).await.unwrap(), accepted);
    assert_eq!(polls(&app), 1, "a duplicate starts no second chain");
    assert_eq!(handle_received(&dispatcher, &body, 2).await.unwrap(), accepted);
    assert_eq!(
        polls(&app),
        2,
        "a redelivery sends the poll its dispatcher may not have"
    );
    assert_eq!(app.genace.posts().len(), 1);
}

/// Tenants take turns: the next free slot goes to the waiting tenant with
/// the fewest jobs in flight, whoever waited longest overall.
#[tokio::test]
async fn a_freed_slot_goes_to_the_waiting_tenant_with_the_fewest_jobs_in_flight() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(2));
    let dispatcher = app.dispatcher();
    let mut heavy = Vec::new();
    for key in ["h1", "h2", "h3"] {
        heavy.push(submit_as(&app, "heavy", key).await);
    }
    let light = submit_as(&app, "light", "l1").await;
    dispatcher.dispatch(&heavy[0]).await.unwrap();
    dispatcher.dispatch(&heavy[1]).await.unwrap();
    assert_eq!(
        dispatcher.dispatch(&heavy[2]).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    app.clock.advance(Duration::seconds(5));
    assert_eq!(
        dispatcher.dispatch(&light).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    // heavy's h3 waited longer, but light has nothing in flight: light goes first.
    let woken = genace_stages::pipeline::wake::wake(&app.store, &app.queue)
        .await
        .unwrap();
    assert_eq!(woken, 0, "no slot is free yet");
    let last = fail_first_job_and_see_who_is_woken(&app, &heavy[0])
        .await
        .expect("a wake-up");
    assert!(last.contains(light.as_str()), "{last}");
}

/// On a tie in jobs in flight, the tenant with fewer operations waiting goes
/// first, whatever the names: a small burst finishes rather than trailing a
/// heavy one.
#[tokio::test]
async fn on_a_tie_in_flight_the_tenant_with_fewer_waiting_goes_first() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(3));
    let dispatcher = app.dispatcher();
    let mut heavy = Vec::new();
    for key in ["h1", "h2", "h3", "h4"] {
        heavy.push(submit_as(&app, "aaa-heavy", key).await);
    }
    let light = [
        submit_as(&app, "zzz-light", "l1").await,
        submit_as(&app, "zzz-light", "l2").await,
    ];
    for id in [&heavy[0], &heavy[1], &light[0]] {
        assert_eq!(
            dispatcher.dispatch(id).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
    }
    for id in [&heavy[2], &heavy[3], &light[1]] {
        assert_eq!(dispatcher.dispatch(id).await.unwrap(), Dispatched::WaitingForCapacity);
    }
    // heavy's first job ends: one job in flight each, heavy has two waiting, light one.
    let last = fail_first_job_and_see_who_is_woken(&app, &heavy[0])
        .await
        .expect("a wake-up");
    assert!(last.contains(light[1].as_str()), "{last}");
}

/// A 429 while other jobs of ours are in flight is the account being full:
/// it waits and never counts toward a `rate_limited` case. A 429 with
/// nothing else of ours in flight still counts.
#[tokio::test]
async fn a_429_counts_toward_a_case_only_when_nothing_else_of_ours_is_in_flight() {
    let app = app();
    let running = submit(&app, "running", None).await;
    app.dispatcher().dispatch(&running).await.unwrap();
    let refused = submit(&app, "refused", None).await;
    app.genace.plan([SubmitPlan::Answer {
        status: 429,
        body: "{}".into(),
    }]);
    assert_eq!(
        app.dispatcher().dispatch(&refused).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    let rec = record(&app, &refused).await;
    assert_eq!(rec.rate_limited_count, 0, "the account was full, not failing");
    assert!(rec.capacity_hold.is_some());
    assert!(rec.case.is_none());
    // Alone at Genace: the same answer counts.
    let alone = memory_app_alone().await;
    let rec = record(&alone.0, &alone.1).await;
    assert_eq!((rec.rate_limited_count, rec.capacity_hold), (1, None));
}

/// Genace renders two at once while our limit says four: the first 429
/// teaches a lower limit (what Genace took), so the next claim waits
/// without a POST; the sweep probes the learned limit upward, and every
/// operation is POSTed once it is admitted. No case.
/// Intents under `keys`, a second apart, under an account limit of four
/// against a Genace that renders two at once: the first two are accepted
/// and the third is refused with a 429. Their ids.
async fn two_accepted_then_a_429(app: &MemoryApp, keys: &[&str]) -> Vec<OperationId> {
    let _limited = app.store.clone().with_account_limit(Some(4));
    let _genace = app.genace.clone().with_concurrency(2);
    let mut ids = Vec::new();
    for key in keys {
        ids.push(submit(app, key, None).await);
        app.clock.advance(Duration::seconds(1));
    }
    let dispatcher = app.dispatcher();
    for id in &ids[..2] {
        assert_eq!(
            dispatcher.dispatch(id).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
    }
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    ids
}

/// A 429 whose lesson cannot be saved (every plain write refused, as
/// DynamoDB refuses one while transactions hold the account item): the
/// account still shows the room Genace refused, so no job's end may come
/// to wake a wait. The 429 counts as one of a full Genace account's
/// (retried after its Retry-After, toward a case if it repeats), and the
/// retry's 429 teaches again.
#[tokio::test]
async fn a_429_whose_lesson_is_not_saved_is_retried_after_its_retry_after() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(4));
    let _genace = app.genace.clone().with_concurrency(2);
    let mut ids = Vec::new();
    for key in ["one", "two", "three"] {
        ids.push(submit(&app, key, None).await);
        app.clock.advance(Duration::seconds(1));
    }
    let dispatcher = app.dispatcher();
    for id in &ids[..2] {
        dispatcher.dispatch(id).await.unwrap();
    }
    let _busy = app.store.clone().with_plain_write_conflicts(100, 7);
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    let account = app.store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.limit()),
        (None, Some(4)),
        "the lesson was not saved"
    );
    let rec = record(&app, &ids[2]).await;
    assert_eq!(
        rec.capacity_hold, None,
        "no wait that only a job's end would wake: {rec:?}"
    );
    assert_eq!(rec.rate_limited_count, 1);
    assert!(rec.retry_at_ms.is_some() && rec.case.is_none(), "{rec:?}");
    let retries: Vec<_> = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Dispatch && m.body.contains(ids[2].as_str()) && m.visible_at > app.clock.now())
        .collect();
    assert_eq!(retries.len(), 1, "a retry after the Retry-After: {retries:?}");
}

#[tokio::test]
async fn a_429_under_our_limit_teaches_a_lower_one_that_ended_jobs_raise_again() {
    let app = app();
    let ids = two_accepted_then_a_429(&app, &["one", "two", "three", "four"]).await;
    let dispatcher = app.dispatcher();
    let account = app.store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.limit(), account.in_flight),
        (Some(2), Some(2), 2),
        "three were in flight when Genace refused: two is learned"
    );
    assert_eq!(
        dispatcher.dispatch(&ids[3]).await.unwrap(),
        Dispatched::WaitingForCapacity,
        "over the learned limit: no POST"
    );
    assert_eq!((app.genace.posts().len(), app.genace.refused_full()), (3, 1));
    // The first job ends: its slot goes to the refused operation, first in
    // the order (one job ended is not yet a window of two).
    render_first_job(&app, &ids[0]).await;
    let account = app.store.account().await.unwrap();
    assert_eq!((account.learned, account.jobs_ended), (Some(2), 1));
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        dispatcher.dispatch(&ids[3]).await.unwrap(),
        Dispatched::WaitingForCapacity,
        "two in flight under a learned two"
    );
    assert_eq!(app.genace.refused_full(), 1, "one 429 so far");
    // A job ended since the lesson and its slot was taken again: dispatch
    // is not stuck under the learned limit, so the sweep does not probe
    // (a window of ended jobs raises it).
    app.sweeper().run().await.unwrap();
    assert_eq!(app.store.account().await.unwrap().learned, Some(2));
    assert_eq!(
        dispatcher.dispatch(&ids[3]).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    for id in &ids {
        let rec = record(&app, id).await;
        assert!(rec.case.is_none(), "capacity never opens a case: {rec:?}");
        assert_eq!(rec.rate_limited_count, 0);
    }
    assert_eq!(app.genace.refused_full(), 1);
}

/// An account stuck under its learned limit (operations wait, every slot
/// is held, no job ended since the limit last changed) is probed one
/// higher by the sweep, 5 minutes after the last lesson; a probe Genace
/// refuses at once teaches the limit again, doubles the jobs that must end
/// before the next raise, and lengthens the wait before the next probe.
#[tokio::test]
async fn a_stuck_account_is_probed_and_a_refused_probe_waits_twice_as_long() {
    let app = app();
    let ids = two_accepted_then_a_429(&app, &["one", "two", "three"]).await;
    let dispatcher = app.dispatcher();
    let account = app.store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.raise_every, account.queued),
        (Some(2), None, 1)
    );
    // Stuck, but the lesson is fresh: no probe within 5 minutes of it.
    app.sweeper().run().await.unwrap();
    assert_eq!(app.store.account().await.unwrap().learned, Some(2));
    // Stuck for 5 minutes: the sweep probes one higher, and the waiting
    // operation is woken into Genace's full account.
    app.clock
        .advance(Duration::seconds(genace_core::capacity::PROBE_AFTER_SECONDS));
    app.sweeper().run().await.unwrap();
    assert_eq!(app.store.account().await.unwrap().learned, Some(3));
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    let account = app.store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.raise_every),
        (Some(2), Some(6)),
        "the refused probe doubles the window of a limit of three"
    );
    assert_eq!(app.genace.refused_full(), 2);
    // The next probe waits as much longer as the window grew over the
    // limit (6 jobs over 2: 15 minutes), not 5 or 10.
    for _ in 0..2 {
        app.clock
            .advance(Duration::seconds(genace_core::capacity::PROBE_AFTER_SECONDS));
        app.sweeper().run().await.unwrap();
        assert_eq!(app.store.account().await.unwrap().learned, Some(2));
    }
    app.clock
        .advance(Duration::seconds(genace_core::capacity::PROBE_AFTER_SECONDS));
    app.sweeper().run().await.unwrap();
    assert_eq!(app.store.account().await.unwrap().learned, Some(3));
    for id in &ids {
        assert!(record(&app, id).await.case.is_none());
    }
}

/// Waiting is measured: every admitted claim counts, a claim that waited
/// says how long, and the sweep reports jobs in flight, operations waiting,
/// the effective limit and the age of the oldest wait (0 once none waits).
#[tokio::test]
async fn waits_are_measured_for_the_dashboards_and_the_oldest_wait_alarm() {
    let mut app = app();
    let recorder = genace_stages::ports::metrics::Recorder::new(app.clock.clone());
    app.metrics = genace_stages::ports::metrics::Metrics::to(recorder.clone());
    let _limited = app.store.clone().with_account_limit(Some(1));
    let first = submit(&app, "first", None).await;
    let second = submit(&app, "second", None).await;
    app.dispatcher().dispatch(&first).await.unwrap();
    assert_eq!(
        app.dispatcher().dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    app.clock.advance(Duration::seconds(90));
    app.sweeper().run().await.unwrap();
    let last = |name: &str| recorder.points().iter().rfind(|p| p.name == name).map(|p| p.value);
    assert_eq!(
        (last("InFlight"), last("Waiting"), last("EffectiveLimit")),
        (Some(1.0), Some(1.0), Some(1.0))
    );
    assert_eq!(last("OldestWaitSeconds"), Some(90.0));
    assert_eq!(last("WaitSeconds"), None, "the first claim did not wait");
    app.poller().poll(&first).await.unwrap();
    app.genace.set_job("job-0001", "failed", None);
    assert_eq!(app.poller().poll(&first).await.unwrap(), Polled::RenderFailed);
    app.clock.advance(Duration::seconds(10));
    assert_eq!(
        app.dispatcher().dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(last("WaitSeconds"), Some(100.0));
    let admitted = recorder.points().iter().filter(|p| p.name == "Admitted").count();
    assert_eq!(admitted, 2);
    app.sweeper().run().await.unwrap();
    assert_eq!((last("Waiting"), last("OldestWaitSeconds")), (Some(0.0), Some(0.0)));
}

/// A wait for credits begun while its tenant's job runs gets one look once
/// the wait indexes show it (the job's end may come first and miss it),
/// and that look claims nothing while the credits are still short: a
/// refused claim would cost a cancelled transaction and a rewrite.
#[tokio::test]
async fn a_wait_for_credits_beside_a_running_job_is_looked_at_once() {
    let app = app();
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(10.0)));
    let running = submit(&app, "running", None).await;
    let waits = submit(&app, "waits", None).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&running).await.unwrap();
    assert_eq!(
        dispatcher.dispatch(&waits).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    let looks = || {
        app.queue
            .messages()
            .into_iter()
            .filter(|m| m.queue == Queue::Dispatch && m.body.contains(waits.as_str()))
            .filter(|m| serde_json::from_str::<serde_json::Value>(&m.body).is_ok_and(|b| b["look"] == json!(true)))
            .count()
    };
    assert_eq!(looks(), 1, "one look once the indexes show the wait");
    let before = record(&app, &waits).await;
    assert_eq!(dispatcher.look(&waits).await.unwrap(), Dispatched::Looked);
    assert_eq!(
        record(&app, &waits).await.version,
        before.version,
        "no claim, no rewrite"
    );
    // Waiting again (a duplicate message) is no new wait: no second look.
    assert_eq!(
        dispatcher.dispatch(&waits).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    assert_eq!(looks(), 1);
}

/// Spend-limit waits use the same order as capacity waits: nothing polls,
/// the job whose end frees credits wakes the oldest waiter, and a woken
/// claim that is admitted wakes the next, which waits again (waking nobody)
/// when the credits do not stretch that far.
#[tokio::test]
async fn spend_limit_waits_are_woken_in_order_when_credits_free() {
    let app = app();
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(10.0)));
    let ids = [
        submit(&app, "first", None).await,
        submit(&app, "second", None).await,
        submit(&app, "third", None).await,
    ];
    let dispatcher = app.dispatcher();
    let messages = |id: &OperationId| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.queue == Queue::Wake && m.body.contains(id.as_str()))
            .count()
    };
    assert_eq!(
        dispatcher.dispatch(&ids[0]).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    for id in &ids[1..] {
        app.clock.advance(Duration::seconds(1));
        assert_eq!(dispatcher.dispatch(id).await.unwrap(), Dispatched::WaitingForCredits);
    }
    let tenant = TenantId::parse("tenant-a").unwrap();
    assert_eq!(app.store.waiting(&tenant, 10).await.unwrap(), ids[1..].to_vec());
    assert_eq!(app.store.ledger(&tenant).await.unwrap().totals.waiting, 2);
    let before = [messages(&ids[1]), messages(&ids[2])];
    let waiting = record(&app, &ids[1]).await;
    assert_eq!(waiting.retry_at_ms, None, "no timer of its own");
    // The first job renders: its 10 credits are spent, not held, so the
    // oldest waiter is woken, and only it.
    render_first_job(&app, &ids[0]).await;
    assert_eq!([messages(&ids[1]), messages(&ids[2])], [before[0] + 1, before[1]]);
    // Admitted, it takes the last credits: the next is not woken for nothing.
    assert_eq!(
        dispatcher.dispatch(&ids[1]).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(messages(&ids[2]), before[1], "no room left: not woken");
    // Sent anyway (a duplicate message), it waits again, waking nobody.
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    assert_eq!(messages(&ids[2]), before[1], "a wait for credits wakes nobody");
    let third = record(&app, &ids[2]).await;
    assert_eq!(
        third.spend_hold,
        waiting.spend_hold.map(|s| s + Duration::seconds(1)),
        "kept its place"
    );
    // A raised limit makes room: one wake-up, then the admitted claim wakes the next.
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(30.0)));
    // Parked by its wait for credits, the operator's route moves it back.
    assert!(app.store.unpark("tenant-a").await.unwrap());
    assert_eq!(
        genace_stages::pipeline::wake::wake(&app.store, &app.queue)
            .await
            .unwrap(),
        1
    );
    assert_eq!(messages(&ids[2]), before[1] + 1);
    assert_eq!(
        dispatcher.dispatch(&ids[2]).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 3);
    assert_eq!(app.store.ledger(&tenant).await.unwrap().totals.waiting, 0);
}

/// An app whose only operation was answered 429: returns it and the operation.
async fn memory_app_alone() -> (MemoryApp, OperationId) {
    let app = app();
    let id = submit(&app, "alone", None).await;
    app.genace.plan([SubmitPlan::Answer {
        status: 429,
        body: "{}".into(),
    }]);
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::RateLimited)
    );
    (app, id)
}

/// A tenant's own limit of jobs in flight: a claim past it waits (no POST,
/// no case), another tenant is not held by it, and the tenant's own job
/// ending wakes its waiting operation.
#[tokio::test]
async fn a_tenants_own_limit_makes_its_claims_wait_for_its_own_jobs() {
    let app = app();
    let tenant_a = TenantId::parse("tenant-a").unwrap();
    app.store.set_max_in_flight(&tenant_a, Some(1)).await.unwrap();
    let first = submit(&app, "first", None).await;
    let second = submit(&app, "second", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&first).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    assert!(record(&app, &second).await.capacity_hold.is_some());
    assert_eq!(app.genace.posts().len(), 1);
    app.poller().poll(&first).await.unwrap();
    app.genace.set_job("job-0001", "failed", None);
    assert_eq!(app.poller().poll(&first).await.unwrap(), Polled::RenderFailed);
    let woken = app
        .queue
        .messages()
        .into_iter()
        .rfind(|m| m.queue == Queue::Wake)
        .unwrap();
    assert!(woken.body.contains(second.as_str()), "{}", woken.body);
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// A cancel that wins against the claim leaves the waiting order, and no
/// POST ever follows: not from the wake-up a freed slot sends, nor from a
/// stale dispatch message. A repeat answers the same, and changes nothing.
#[tokio::test]
async fn a_cancel_before_the_claim_wins_and_no_post_ever_follows() {
    let app = app();
    let tenant = TenantId::parse("tenant-a").unwrap();
    let (running, waiting) = one_running_one_waiting(&app).await;
    let dispatcher = app.dispatcher();
    assert_eq!(app.store.account().await.unwrap().waiting, 1);

    let cancelled = app.api().cancel(&tenant, &waiting).await.unwrap();
    assert_eq!(cancelled.phase, Phase::Cancelled);
    let how = cancelled.cancellation.clone().unwrap();
    assert_eq!((how.by.as_str(), how.reason.as_str()), ("tenant-a", "requested"));
    assert_eq!(app.store.account().await.unwrap().waiting, 0, "it left the order");
    assert!(cancelled.expires_at_seconds.is_some() && cancelled.due_at_ms.is_none());

    // The slot frees, and a stale message comes: neither POSTs for it.
    assert_eq!(
        fail_first_job_and_see_who_is_woken(&app, &running).await,
        None,
        "nobody waits"
    );
    assert_eq!(
        dispatcher.dispatch(&waiting).await.unwrap(),
        Dispatched::NotDispatchable(Phase::Cancelled)
    );
    assert_eq!(app.genace.posts().len(), 1, "only the running operation's POST");
    let again = app.api().cancel(&tenant, &waiting).await.unwrap();
    assert_eq!(again, cancelled, "a repeat answers the same and writes nothing");
}

/// Once dispatch claimed the operation a job may exist: the cancel is
/// refused with the phase, and the record is untouched. Another tenant's
/// operation is not found.
#[tokio::test]
async fn a_cancel_after_the_claim_is_too_late_and_names_the_phase() {
    let app = app();
    let id = submit(&app, "claimed", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    let before = record(&app, &id).await;
    let refused = app
        .api()
        .cancel(&TenantId::parse("tenant-a").unwrap(), &id)
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            genace_stages::api::errors::OperationError::TooLateToCancel { phase: Phase::Accepted }
        ),
        "{refused:?}"
    );
    assert_eq!(record(&app, &id).await, before);
    let foreign = app
        .api()
        .cancel(&TenantId::parse("tenant-b").unwrap(), &id)
        .await
        .unwrap_err();
    assert!(
        matches!(foreign, genace_stages::api::errors::OperationError::NotFound),
        "{foreign:?}"
    );
}

/// An operation held for a person (repeated 429s) may be cancelled: its
/// case closes with it, and the audit names who decided.
#[tokio::test]
async fn cancelling_a_held_operation_closes_its_case_in_the_audit() {
    let app = app();
    let id = submit(&app, "held", None).await;
    for _ in 0..app.config.policy.rate_limit_max {
        app.genace.plan([SubmitPlan::Answer {
            status: 429,
            body: "{}".into(),
        }]);
        app.clock.advance(Duration::hours(1));
        app.dispatcher().dispatch(&id).await.unwrap();
    }
    let held = record(&app, &id).await;
    assert_eq!(held.case.as_ref().map(|c| c.reason), Some(CaseReason::RateLimited));
    let op = genace_stages::api::operator::Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let cancelled = app.api().operator(&op).cancel(&id).await.unwrap();
    assert_eq!((cancelled.phase, cancelled.case.is_none()), (Phase::Cancelled, true));
    let audit = cancelled.audit.last().unwrap();
    assert_eq!((audit.actor.as_str(), audit.action.as_str()), ("ops-1", "cancel"));
    assert!(app.genace.posts().len() <= app.config.policy.rate_limit_max as usize);
}

/// An operation whose dispatch deadline passes while it waits for a slot is
/// found by the sweep at its deadline and cancelled with reason `deadline`:
/// no POST, out of the waiting order.
#[tokio::test]
async fn a_deadline_passed_while_waiting_cancels_with_no_post() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let running = submit(&app, "running", None).await;
    let body = json!({"operation_key": "soon", "media_type": "video", "dispatch_within_seconds": 600,
        "specification": {"model": "genace-video-2", "prompt": "a lighthouse"}});
    let intent = Intent::parse(&body, None).unwrap();
    let Submitted::New(rec) = app
        .api()
        .submit(&TenantId::parse("tenant-a").unwrap(), &intent, app.clock.now())
        .await
        .unwrap()
    else {
        panic!("a new operation")
    };
    let id = rec.operation_id;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&running).await.unwrap();
    assert_eq!(dispatcher.dispatch(&id).await.unwrap(), Dispatched::WaitingForCapacity);
    let sweeper = app.sweeper();
    app.clock.advance(Duration::seconds(599));
    sweeper.run().await.unwrap();
    assert_eq!(record(&app, &id).await.phase, Phase::Prepared, "not yet");
    app.clock.advance(Duration::seconds(1));
    assert!(sweeper.run().await.unwrap().dispatch >= 1, "due at its deadline");
    assert_eq!(dispatcher.dispatch(&id).await.unwrap(), Dispatched::Expired);
    let done = record(&app, &id).await;
    let how = done.cancellation.clone().unwrap();
    assert_eq!(
        (done.phase, how.reason.as_str(), how.by.as_str()),
        (Phase::Cancelled, "deadline", "dispatch_deadline")
    );
    assert_eq!(app.store.account().await.unwrap().waiting, 0);
    assert_eq!(app.genace.posts().len(), 1, "only the running operation's POST");
}

/// A delivered operation's outputs are erased: the objects leave the bucket,
/// the record says when and who, a repeat answers the same. Before delivery
/// has finished the erasure is refused and nothing is deleted.
#[tokio::test]
async fn delivered_outputs_are_erased_once_and_never_before_delivery_ends() {
    let app = app();
    let tenant = TenantId::parse("tenant-a").unwrap();
    let id = submit(&app, "erase", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    let too_early = app.api().erase_outputs(&tenant, &id).await.unwrap_err();
    assert!(
        matches!(
            too_early,
            genace_stages::api::errors::OperationError::CannotErase { .. }
        ),
        "{too_early:?}"
    );
    app.downloads
        .serve("https://cdn.example/out.mp4", Some("video/mp4"), vec![7; 1024]);
    app.genace.set_job(
        "job-0001",
        "completed",
        Some(json!([{"url": "https://cdn.example/out.mp4"}])),
    );
    assert_eq!(app.poller().poll(&id).await.unwrap(), Polled::Rendered);
    app.deliverer().deliver(&id).await.unwrap();
    let delivered = record(&app, &id).await;
    assert_eq!(delivered.delivery_state, genace_core::record::DeliveryState::Delivered);
    let key = delivered.delivered_objects[0].key.clone();
    assert!(app.objects.keys().contains(&key));

    let erased = app.api().erase_outputs(&tenant, &id).await.unwrap();
    assert!(!app.objects.keys().contains(&key), "the object is gone");
    let how = erased.outputs_erased.clone().unwrap();
    assert_eq!((how.by.as_str(), how.at), ("tenant-a", app.clock.now()));
    assert_eq!(erased.audit.last().unwrap().action, "erase_outputs");
    assert_eq!(
        erased.delivered_objects, delivered.delivered_objects,
        "keys and digests stay"
    );
    assert!(app.api().links(&erased).await.is_empty(), "no links");
    let again = app.api().erase_outputs(&tenant, &id).await.unwrap();
    assert_eq!(again, erased, "a repeat writes nothing");
    let foreign = app
        .api()
        .erase_outputs(&TenantId::parse("tenant-b").unwrap(), &id)
        .await
        .unwrap_err();
    assert!(
        matches!(foreign, genace_stages::api::errors::OperationError::NotFound),
        "{foreign:?}"
    );
}

/// A delivery refused part way (its second output is too large) leaves
/// the first output stored and listed on no record. Its erasure deletes
/// everything under the operation's prefix, says which keys, and no
/// delivery runs after it.
#[tokio::test]
async fn an_erasure_after_a_refused_delivery_deletes_what_earlier_outputs_left() {
    let mut app = app();
    app.config.max_output_bytes = 2048;
    let tenant = TenantId::parse("tenant-a").unwrap();
    let id = submit(&app, "partial", None).await;
    app.dispatcher().dispatch(&id).await.unwrap();
    app.downloads
        .serve("https://cdn.example/small.mp4", Some("video/mp4"), vec![7; 1024]);
    app.downloads
        .serve("https://cdn.example/large.mp4", Some("video/mp4"), vec![8; 4096]);
    app.genace.set_job(
        "job-0001",
        "completed",
        Some(json!([{"url": "https://cdn.example/small.mp4"}, {"url": "https://cdn.example/large.mp4"}])),
    );
    assert_eq!(app.poller().poll(&id).await.unwrap(), Polled::Rendered);
    app.deliverer().deliver(&id).await.unwrap();
    let refused = record(&app, &id).await;
    assert_eq!(
        refused.delivery_state,
        genace_core::record::DeliveryState::DeliveryFailed
    );
    assert!(refused.delivered_objects.is_empty());
    let left: Vec<String> = app.objects.keys();
    assert_eq!(left.len(), 1, "the first output was stored: {left:?}");
    assert!(left[0].contains(id.as_str()));

    // A delivery killed part way through a multipart upload left its parts.
    use genace_stages::ports::outputs::ObjectStore;
    let prefix = genace_stages::ports::outputs::operation_prefix(&app.config.output_prefix, &refused);
    let upload = app
        .objects
        .begin(&format!("{prefix}output-9.mp4"), "video/mp4")
        .await
        .unwrap();
    app.objects
        .put_part(&format!("{prefix}output-9.mp4"), &upload, 1, vec![9; 64])
        .await
        .unwrap();

    let erased = app.api().erase_outputs(&tenant, &id).await.unwrap();
    assert!(app.objects.keys().is_empty(), "nothing is left");
    assert_eq!(
        app.objects.abort_uploads(&prefix, 10).await.unwrap(),
        0,
        "no parts are left"
    );
    assert_eq!(erased.outputs_erased.unwrap().objects, left, "the keys deleted");
    // No delivery after it, even redriven by the queue.
    assert!(matches!(
        app.deliverer().deliver(&id).await.unwrap(),
        genace_stages::pipeline::deliver::DeliverResult::NotDeliverable(..)
    ));
    assert!(app.objects.keys().is_empty());
}

/// Attaching a job id that another operation holds is refused. An
/// operator of every tenant is told which operation holds it; one scoped
/// to a tenant only that it cannot be attached, the same whether the
/// holder is of its own tenant or of another, so the answer never tells
/// that a job belongs to another tenant.
#[tokio::test]
async fn a_held_job_is_refused_without_naming_another_tenant() {
    use genace_core::machine::Resolution;
    use genace_stages::api::errors::OperationError;
    use genace_stages::api::operator::Operator;
    let app = app();
    let theirs = submit_as(&app, "ta", "theirs").await;
    app.dispatcher().dispatch(&theirs).await.unwrap();
    let own = submit_as(&app, "tb", "own").await;
    app.dispatcher().dispatch(&own).await.unwrap();
    app.genace.plan([SubmitPlan::LostAfterCreate]);
    let lost = submit_as(&app, "tb", "lost").await;
    app.dispatcher().dispatch(&lost).await.unwrap();
    let rec = record(&app, &lost).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    let job_of = |id: OperationId| {
        let app = &app;
        async move { record(app, &id).await.remote_job_id.unwrap() }
    };
    let (their_job, own_job) = (job_of(theirs.clone()).await, job_of(own.clone()).await);
    let attach = |op: Operator, job: String| {
        let app = &app;
        let lost = lost.clone();
        let version = rec.version;
        async move {
            app.api()
                .operator(&op)
                .resolve(&lost, &Resolution::AttachRemoteJob { job_id: job }, "found it", version)
                .await
        }
    };
    let everyone = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let scoped = Operator {
        actor: "ops-b".into(),
        tenant: Some(TenantId::parse("tb").unwrap()),
    };
    match attach(everyone, their_job.clone()).await {
        Err(OperationError::JobHeldElsewhere { holder, .. }) => assert_eq!(holder, Some(theirs.clone())),
        other => panic!("expected the holder named, got {other:?}"),
    }
    for job in [their_job, own_job] {
        match attach(scoped.clone(), job.clone()).await {
            Err(e @ (OperationError::JobNotAttachable { .. } | OperationError::JobNotInEvidence { .. })) => {
                assert!(!e.to_string().contains(theirs.as_str()), "{e}");
                assert!(!e.to_string().contains(own.as_str()), "{e}");
            }
            other => panic!("{job}: expected a refusal that names no holder, got {other:?}"),
        }
    }
    assert_eq!(record(&app, &lost).await, rec, "nothing was changed");
}

/// An operator scoped to one tenant attaches only a job id the operation's
/// own evidence names: one read elsewhere (the recovery queue, an expired
/// record, another tenant's console) could take another tenant's outputs.
/// An operator of every tenant may attach any job it has checked.
#[tokio::test]
async fn a_scoped_operator_attaches_only_a_job_the_evidence_names() {
    use genace_core::machine::Resolution;
    use genace_stages::api::errors::OperationError;
    use genace_stages::api::operator::Operator;
    let app = app();
    app.genace.plan([SubmitPlan::LostAfterCreate]);
    let lost = submit_as(&app, "tb", "lost").await;
    app.dispatcher().dispatch(&lost).await.unwrap();
    let mut rec = record(&app, &lost).await;
    assert_eq!(rec.phase, Phase::Uncertain);
    let before = rec.clone();
    let case = rec.case.as_mut().unwrap();
    // What follows a quoted Genace body is Genace's text, which may echo
    // the request: not evidence.
    case.evidence = format!(
        "{}; the log names job-7f3a2. See x/job-7f3a2x; body: {{\"detail\": \"unknown job-quoted\"}}",
        case.evidence
    );
    rec.version += 1;
    app.store.apply(&before, &rec).await.unwrap();
    let attach = |op: Operator, job: &str| {
        let (app, lost, version) = (&app, lost.clone(), rec.version);
        let job_id = job.to_owned();
        async move {
            app.api()
                .operator(&op)
                .resolve(&lost, &Resolution::AttachRemoteJob { job_id }, "found it", version)
                .await
        }
    };
    let scoped = Operator {
        actor: "ops-b".into(),
        tenant: Some(TenantId::parse("tb").unwrap()),
    };
    for unnamed in ["job-elsewhere", "job-7f3a", "job-7f3a2x", "7f3a2", "job-quoted"] {
        match attach(scoped.clone(), unnamed).await {
            Err(OperationError::JobNotInEvidence { job_id }) => assert_eq!(job_id, unnamed),
            other => panic!("{unnamed}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(record(&app, &lost).await, rec, "nothing was changed");
    let attached = attach(scoped, "job-7f3a2").await.unwrap();
    assert_eq!(attached.remote_job_id.as_deref(), Some("job-7f3a2"));
    // An operator of every tenant is not held to the evidence.
    let app2 = self::app();
    app2.genace.plan([SubmitPlan::LostAfterCreate]);
    let other = submit_as(&app2, "tb", "lost").await;
    app2.dispatcher().dispatch(&other).await.unwrap();
    let version = record(&app2, &other).await.version;
    let everyone = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let attached = app2
        .api()
        .operator(&everyone)
        .resolve(
            &other,
            &Resolution::AttachRemoteJob {
                job_id: "job-elsewhere".into(),
            },
            "checked at Genace",
            version,
        )
        .await
        .unwrap();
    assert_eq!(attached.remote_job_id.as_deref(), Some("job-elsewhere"));
}

/// A job that reached only the recovery queue: its claim was taken back
/// (the lease lapsed, an operator confirmed nothing was created, and a
/// second POST's outcome is unknown too), so the record refuses the
/// message. The refusal leaves the job id on the record, once however
/// often the message is read, and the tenant's own operator may then
/// attach it; an id no message carried is still refused.
#[tokio::test]
async fn a_job_only_the_recovery_queue_held_is_kept_and_attachable_in_scope() {
    use genace_core::machine::Resolution;
    use genace_stages::api::errors::OperationError;
    use genace_stages::api::operator::Operator;
    let app = app();
    let id = submit(&app, "k", Some("dispatch.persist_fails")).await;
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::AcceptedUnpersisted)
    );
    app.clock.advance(Duration::minutes(10));
    app.sweeper().run().await.unwrap();
    let interrupted = record(&app, &id).await;
    assert_eq!(interrupted.phase, Phase::Uncertain);
    let everyone = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let decide = |op: Operator, resolution: Resolution, version: u64| {
        let (app, id) = (&app, id.clone());
        async move {
            app.api()
                .operator(&op)
                .resolve(&id, &resolution, "checked", version)
                .await
        }
    };
    decide(everyone, Resolution::ConfirmNotCreated, interrupted.version)
        .await
        .unwrap();
    app.genace.plan([SubmitPlan::LostAfterCreate]);
    app.dispatcher().dispatch(&id).await.unwrap();
    assert_eq!(record(&app, &id).await.phase, Phase::Uncertain);
    assert_eq!(app.genace.posts().len(), 2);

    let outcomes = drain(&app, Queue::Recovery, &app.recovery()).await;
    assert!(matches!(outcomes[..], [Err(StageError::Refused(_))]), "{outcomes:?}");
    let kept = record(&app, &id).await;
    assert_eq!(kept.unsaved_jobs, ["job-0001"]);
    assert_eq!(kept.remote_job_id, None);
    // Read again (it stays on the queue): nothing more is written.
    app.clock.advance(Duration::minutes(1));
    drain(&app, Queue::Recovery, &app.recovery()).await;
    assert_eq!(record(&app, &id).await, kept);

    let scoped = Operator {
        actor: "ops-a".into(),
        tenant: Some(TenantId::parse("tenant-a").unwrap()),
    };
    let unknown = Resolution::AttachRemoteJob {
        job_id: "job-0003".into(),
    };
    assert!(matches!(
        decide(scoped.clone(), unknown, kept.version).await,
        Err(OperationError::JobNotInEvidence { .. })
    ));
    let found = Resolution::AttachRemoteJob {
        job_id: "job-0001".into(),
    };
    let attached = decide(scoped, found, kept.version).await.unwrap();
    assert_eq!(attached.remote_job_id.as_deref(), Some("job-0001"));
    assert!(
        attached.unsaved_jobs.is_empty(),
        "saved now: {:?}",
        attached.unsaved_jobs
    );
}

/// Genace as a stand-in whose POST, before it answers, lets a rival
/// dispatch run: the rival finds the claim's slot or credits taken, and
/// records its wait while the POST is in flight.
struct RivalDuringPost {
    genace: genace_memory::MemoryGenace,
    rival: genace_stages::pipeline::dispatch::Dispatcher<
        genace_stages::ports::Parts<
            genace_memory::MemoryStore,
            genace_memory::MemoryQueue,
            genace_memory::MemoryObjects,
            genace_memory::MemoryGenace,
            genace_stages::ports::Unused,
            genace_memory::ManualClock,
        >,
    >,
    rival_id: OperationId,
    waits: Dispatched,
}

impl genace_stages::ports::genace::Genace for RivalDuringPost {
    async fn submit(&self, body: &serde_json::Value) -> genace_core::remote::SubmitOutcome {
        assert_eq!(self.rival.dispatch(&self.rival_id).await.unwrap(), self.waits);
        self.genace.submit(body).await
    }

    async fn status(&self, job_id: &str) -> genace_core::remote::StatusOutcome {
        self.genace.status(job_id).await
    }
}

/// Dispatches `first` through [`RivalDuringPost`], with `second` the rival
/// that waits (`waits`) while the POST is in flight; returns how many
/// wake-ups `second` was sent by the time the first outcome was written.
async fn wake_ups_after_the_first_outcome(
    app: &MemoryApp,
    first: &OperationId,
    second: &OperationId,
    waits: Dispatched,
) -> usize {
    let wakes = |id: &OperationId| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.queue == Queue::Wake && m.body.contains(id.as_str()))
            .count()
    };
    let before = wakes(second);
    let rival = RivalDuringPost {
        genace: app.genace.clone(),
        rival: app.dispatcher(),
        rival_id: second.clone(),
        waits: waits.clone(),
    };
    let mut dispatcher = dispatcher_with(app, rival);
    dispatcher.config.fault_injection = true;
    dispatcher.dispatch(first).await.unwrap();
    assert!(record(app, second).await.waits_in_order().is_some(), "the rival waits");
    wakes(second) - before
}

/// A 502 naming a failed job frees the claim's slot at once (the job
/// holds none): the operation that waited for that slot is woken by the
/// write of the 502, not left for the sweep.
#[tokio::test]
async fn a_502_naming_a_failed_job_wakes_the_operation_waiting_for_its_slot() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let first = submit(&app, "fails", None).await;
    let second = submit(&app, "waits", None).await;
    app.genace.plan([SubmitPlan::FailWithJob]);
    let woken = wake_ups_after_the_first_outcome(&app, &first, &second, Dispatched::WaitingForCapacity).await;
    assert_eq!(record(&app, &first).await.phase, Phase::SubmitFailed);
    assert_eq!(woken, 1, "woken by the 502's write");
    assert_eq!(
        app.dispatcher().dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 2);
}

/// A 202 whose job holds less than the claim reserved gives the
/// difference back to the tenant at once: an operation waiting for those
/// credits is woken by the write of the 202.
#[tokio::test]
async fn a_202_holding_less_than_reserved_wakes_the_operation_waiting_for_credits() {
    let app = app();
    // Room for one video reservation (10 credits) and a half.
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(15.0)));
    let first = submit(&app, "cheap", None).await;
    let second = submit(&app, "waits", None).await;
    app.genace.plan([SubmitPlan::AcceptReporting {
        state: "queued".into(),
        held_credits: "4".into(),
    }]);
    let woken = wake_ups_after_the_first_outcome(&app, &first, &second, Dispatched::WaitingForCredits).await;
    let tenant = TenantId::parse("tenant-a").unwrap();
    assert_eq!(
        app.store.ledger(&tenant).await.unwrap().totals.held,
        genace_core::ledger::millis(4.0),
        "the 202's own figure is held"
    );
    assert_eq!(woken, 1, "woken by the 202's write");
    assert_eq!(
        app.dispatcher().dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// A 202 that holds what was reserved frees nothing, and wakes nobody.
#[tokio::test]
async fn a_202_holding_what_was_reserved_wakes_nobody() {
    let app = app();
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(15.0)));
    let first = submit(&app, "full-price", None).await;
    let second = submit(&app, "waits", None).await;
    let woken = wake_ups_after_the_first_outcome(&app, &first, &second, Dispatched::WaitingForCredits).await;
    assert_eq!(record(&app, &first).await.phase, Phase::Accepted);
    assert_eq!(woken, 0);
}

/// Under a spend limit, a freed slot goes past the tenant's head that its
/// credits cannot cover to a smaller operation behind it that fits (an
/// image behind a video), and the head keeps its place: once its credits
/// free, it is woken first and admitted.
#[tokio::test]
async fn a_freed_slot_passes_over_a_head_short_of_credits_to_one_that_fits() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(2));
    app.store
        .set_spend_limit_now("mixed", Some(genace_core::ledger::millis(12.0)));
    let dispatcher = app.dispatcher();
    let running = submit_media(&app, "mixed", "v1", "video").await;
    let other = submit_media(&app, "other", "o1", "image").await;
    for id in [&running, &other] {
        assert_eq!(
            dispatcher.dispatch(id).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
    }
    // A video short of credits, then an image that fits but finds the
    // account full, wait in the tenant's order.
    app.clock.advance(Duration::seconds(1));
    let head = submit_media(&app, "mixed", "v2", "video").await;
    assert_eq!(dispatcher.dispatch(&head).await.unwrap(), Dispatched::WaitingForCredits);
    app.clock.advance(Duration::seconds(1));
    let small = submit_media(&app, "mixed", "i1", "image").await;
    assert_eq!(
        dispatcher.dispatch(&small).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let tenant = TenantId::parse("mixed").unwrap();
    assert_eq!(
        app.store.waiting(&tenant, 10).await.unwrap(),
        [head.clone(), small.clone()]
    );

    // The other tenant's job ends. The head needs 10 credits of the 2 left;
    // the image needs 1: it is woken, not the head, and admitted.
    render_job(&app, &other, "job-0002").await;
    let sent = woken(&app);
    assert!(sent.last().is_some_and(|w| w.contains(small.as_str())), "{sent:?}");
    assert!(!sent.iter().any(|w| w.contains(head.as_str())), "{sent:?}");
    assert_eq!(
        dispatcher.dispatch(&small).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        app.store.waiting(&tenant, 10).await.unwrap(),
        std::slice::from_ref(&head),
        "kept its place"
    );

    // The running video ends: its slot and its 10 credits free, and the
    // head is woken and admitted.
    render_first_job(&app, &running).await;
    assert!(woken(&app).last().is_some_and(|w| w.contains(head.as_str())));
    assert_eq!(
        dispatcher.dispatch(&head).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 4, "one POST each, none refused");
}

/// A tenant whose every waiting operation is short of credits does not
/// take a freed slot from another tenant that can use it, even when the
/// tenants' turns would put it first.
#[tokio::test]
async fn a_freed_slot_passes_over_a_tenant_short_of_credits_to_the_next() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(3));
    app.store
        .set_spend_limit_now("mixed", Some(genace_core::ledger::millis(12.0)));
    let dispatcher = app.dispatcher();
    let running = [
        submit_media(&app, "mixed", "v1", "video").await,
        submit_media(&app, "third", "t1", "image").await,
        submit_media(&app, "other", "o1", "image").await,
    ];
    for id in &running {
        assert_eq!(
            dispatcher.dispatch(id).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
    }
    // mixed: one in flight, one image waiting for a slot; third: one in
    // flight, two waiting. By turns mixed goes first.
    let short = submit_media(&app, "mixed", "i1", "image").await;
    let fits = [
        submit_media(&app, "third", "t2", "image").await,
        submit_media(&app, "third", "t3", "image").await,
    ];
    for id in [&short, &fits[0], &fits[1]] {
        app.clock.advance(Duration::seconds(1));
        assert_eq!(dispatcher.dispatch(id).await.unwrap(), Dispatched::WaitingForCapacity);
    }
    // An operator lowers mixed's limit: 0.5 credits left, short of its image.
    app.store
        .set_spend_limit_now("mixed", Some(genace_core::ledger::millis(10.5)));
    render_job(&app, &running[2], "job-0003").await;
    let sent = woken(&app);
    assert!(sent.last().is_some_and(|w| w.contains(fits[0].as_str())), "{sent:?}");
    assert!(!sent.iter().any(|w| w.contains(short.as_str())), "{sent:?}");
    assert_eq!(
        dispatcher.dispatch(&fits[0]).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// A cancel that loses its first write to a rival that put the operation
/// in the waiting order judges on the record it finally wrote over: the
/// operation waited (a wake-up may have been sent for it), so the cancel
/// passes the wake-up on to the next in line.
#[tokio::test]
async fn a_cancel_that_lost_a_race_to_a_wait_passes_the_wake_up_on() {
    use genace_core::machine::{self, Input};
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let running = submit(&app, "running", None).await;
    let next_in_line = submit(&app, "next", None).await;
    let target = submit(&app, "target", None).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&running).await.unwrap();
    app.clock.advance(Duration::seconds(1));
    assert_eq!(
        dispatcher.dispatch(&next_in_line).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    // A second slot opens and nobody is told (a lost wake-up).
    let _raised = app.store.clone().with_account_limit(Some(2));
    let wakes = || woken(&app).iter().filter(|w| w.contains(next_in_line.as_str())).count();
    let before = wakes();
    // The rival: `target` joins the waiting order between the cancel's
    // read and its write.
    let (policy, now, rival) = (app.config.policy, app.clock.now(), target.clone());
    app.store.before_next_apply(move |store| {
        let rec = store
            .records()
            .into_iter()
            .find(|r| r.operation_id == rival)
            .expect("the target");
        let waiting = machine::transition(&rec, Input::CapacityReached, now, &policy).expect("a wait");
        store.apply_now(&rec, &waiting).expect("the rival's write");
    });
    let tenant = TenantId::parse("tenant-a").unwrap();
    let cancelled = app.api().cancel(&tenant, &target).await.unwrap();
    assert_eq!(cancelled.phase, Phase::Cancelled);
    assert!(cancelled.version > 2, "written over the rival's record");
    assert_eq!(wakes(), before + 1, "the cancel passed the wake-up on");
}

/// An abandon while the job may run keeps the slot: nobody is woken, and a
/// decision replayed on the version it was made on changes nothing. Once
/// the job is found and Genace reports it over, the slot frees and the
/// operation waiting for it is woken and admitted.
#[tokio::test]
async fn an_abandoned_job_keeps_its_slot_until_it_ends_then_wakes_the_next() {
    use genace_core::machine::Resolution;
    use genace_stages::api::errors::OperationError;
    use genace_stages::api::operator::Operator;
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    app.genace.plan([SubmitPlan::LostAfterCreate]);
    let lost = submit(&app, "lost", None).await;
    let dispatcher = app.dispatcher();
    dispatcher.dispatch(&lost).await.unwrap();
    app.clock.advance(Duration::seconds(1));
    let next = submit(&app, "next", None).await;
    assert_eq!(
        dispatcher.dispatch(&next).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let wakes = || woken(&app).iter().filter(|w| w.contains(next.as_str())).count();
    let before = wakes();
    let op = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let operator = app.api();
    let operator = operator.operator(&op);
    let decided = record(&app, &lost).await.version;
    let abandoned = operator
        .resolve(&lost, &Resolution::Abandon, "the user left", decided)
        .await
        .unwrap();
    assert_eq!(abandoned.phase, Phase::Abandoned);
    assert_eq!(wakes(), before, "the job may run: its slot stays taken");
    let replayed = operator.resolve(&lost, &Resolution::Abandon, "again", decided).await;
    assert!(
        matches!(replayed, Err(OperationError::StaleVersion { .. })),
        "{replayed:?}"
    );
    assert_eq!(wakes(), before);

    let attach = Resolution::AttachRemoteJob {
        job_id: "job-0001".into(),
    };
    operator
        .resolve(&lost, &attach, "found it", abandoned.version)
        .await
        .unwrap();
    assert_eq!(wakes(), before, "an attached job still runs");
    render_job(&app, &lost, "job-0001").await;
    assert_eq!(record(&app, &lost).await.phase, Phase::Abandoned);
    assert_eq!(wakes(), before + 1, "the job's end woke the next in line");
    assert_eq!(
        dispatcher.dispatch(&next).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// Genace refuses the account for one claim (a 403): the operation is held
/// with its case and gives its slot back, and the operation that began to
/// wait for that slot while the POST was under way is woken at once, not
/// at the next sweep.
#[tokio::test]
async fn a_refused_account_gives_its_slot_to_the_next_in_line() {
    use genace_core::machine::{self, Input};
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    app.genace.plan([SubmitPlan::Answer {
        status: 403,
        body: json!({"error": {"code": "forbidden", "message": "key not allowed"}}).to_string(),
    }]);
    let refused = submit(&app, "refused", None).await;
    let next = submit(&app, "next", None).await;
    // After the claim is written, before the refusal is: `next` waits.
    let (policy, now, rival) = (app.config.policy, app.clock.now(), next.clone());
    app.store.before_next_apply(move |store| {
        store.before_next_apply(move |store| {
            let rec = store
                .records()
                .into_iter()
                .find(|r| r.operation_id == rival)
                .expect("the rival");
            let waiting = machine::transition(&rec, Input::CapacityReached, now, &policy).expect("a wait");
            store.apply_now(&rec, &waiting).expect("the rival's write");
        });
    });
    let before = woken(&app).len();
    assert_eq!(
        app.dispatcher().dispatch(&refused).await.unwrap(),
        Dispatched::Posted(PostResult::AccountHeld)
    );
    let held = record(&app, &refused).await;
    assert_eq!(held.case.map(|c| c.reason), Some(CaseReason::AccountProblem));
    assert!(record(&app, &next).await.waits_in_order().is_some());
    let sent = woken(&app);
    assert_eq!(sent.len(), before + 1, "{sent:?}");
    assert!(sent.last().is_some_and(|w| w.contains(next.as_str())), "{sent:?}");
    assert_eq!(
        app.dispatcher().dispatch(&next).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// The commit loop refuses to write a decision that moves the version by
/// anything but one: such a decision is a bug in the rules, never written.
#[tokio::test]
#[should_panic(expected = "would write version")]
async fn a_decision_that_skips_a_version_is_never_written() {
    use genace_stages::ports::commit::commit;
    let app = app();
    let id = submit(&app, "skips", None).await;
    let rec = record(&app, &id).await;
    let _ = commit(&app.store, rec, 1, |r| {
        let mut next = r.clone();
        next.version += 2;
        Ok(next)
    })
    .await;
}

/// Operators page through every tenant's credits with sealed cursors:
/// each ledger once, and a cursor of another list or a garbled one is
/// refused as a bad cursor, never handed to the store.
#[tokio::test]
async fn every_tenants_credits_page_with_a_sealed_cursor() {
    use genace_stages::api::errors::ListError;
    use genace_stages::api::operator::Operator;
    let app = app();
    for tenant in ["ta", "tb", "tc"] {
        submit_as(&app, tenant, "k").await;
        app.store
            .set_spend_limit_now(tenant, Some(genace_core::ledger::millis(50.0)));
    }
    let op = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let api = app.api();
    let operator = api.operator(&op);
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = operator.all_credits(2, cursor.as_deref()).await.unwrap();
        seen.extend(page.ledgers.into_iter().map(|l| l.tenant_id));
        pages += 1;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 10, "the pages never end");
    }
    seen.sort();
    assert_eq!(seen, ["ta", "tb", "tc"]);
    assert!(pages >= 2, "a limit of 2 pages three ledgers");
    let first = operator.all_credits(2, None).await.unwrap().next.unwrap();
    submit_as(&app, "ta", "k2").await;
    let ta = TenantId::parse("ta").unwrap();
    let listing = api.list(&ta, &Default::default(), 1, None).await.unwrap();
    let other_list = listing.next_cursor.expect("two operations, one a page");
    for bad in [other_list, "garbled".into(), first[1..].to_owned()] {
        let refused = operator.all_credits(2, Some(&bad)).await;
        assert!(
            matches!(
                refused,
                Err(ListError::Store(genace_stages::ports::table::StoreError::Cursor))
            ),
            "{bad}: {refused:?}"
        );
    }
}

/// An account with more tenants than one capacity report reads (20 pages
/// of 100 ledgers): the report says it is partial, and still names the
/// tenant that waits although the listing never reached it. With few
/// tenants it is whole.
#[tokio::test]
async fn a_capacity_report_past_its_page_bound_says_so_and_names_who_waits() {
    use genace_stages::api::operator::Operator;
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let op = Operator {
        actor: "ops-1".into(),
        tenant: None,
    };
    let running = submit_as(&app, "aa-running", "r").await;
    app.dispatcher().dispatch(&running).await.unwrap();
    let report = app.api().operator(&op).capacity().await.unwrap();
    assert!(report.tenants_complete, "{report:?}");
    // The listing is in tenant order: `zz-waiting` comes after 2,050 idle
    // tenants that each hold a ledger.
    let pages = genace_stages::api::capacity::REPORT_PAGES;
    for i in 0..(pages * 100 + 50) {
        app.store.set_spend_limit_now(&format!("idle-{i:05}"), None);
    }
    let waiting = submit_as(&app, "zz-waiting", "w").await;
    assert_eq!(
        app.dispatcher().dispatch(&waiting).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let report = app.api().operator(&op).capacity().await.unwrap();
    assert!(!report.tenants_complete, "{report:?}");
    let names: Vec<&str> = report.tenants.iter().map(|t| t.tenant_id.as_str()).collect();
    assert!(names.contains(&"aa-running"), "{names:?}");
    let w = report
        .tenants
        .iter()
        .find(|t| t.tenant_id == "zz-waiting")
        .expect("the waiting tenant is named");
    assert_eq!((w.waiting, w.in_flight), (1, 0));
    assert!(w.oldest_wait_since.is_some());
}

/// Found at scale: tenants at their own limit keep their places at the
/// front of the waiting set, and a wake-up weighs only the front
/// (`WAKE_CANDIDATES`). With more of them than that, a free slot went to
/// nobody while a tenant behind them waited. Now the wake-up sends those it
/// had to pass over to the back and reads again.
#[tokio::test]
async fn tenants_at_their_own_limit_do_not_hide_a_waiting_tenant_behind_them() {
    use genace_stages::pipeline::wake::WAKE_CANDIDATES;
    let app = app();
    let blocked = WAKE_CANDIDATES + 10;
    let limit = u32::try_from(blocked).unwrap();
    let _limited = app.store.clone().with_account_limit(Some(limit));
    let dispatcher = app.dispatcher();
    for i in 0..blocked {
        let tenant = format!("capped-{i:03}");
        app.store
            .set_max_in_flight(&TenantId::parse(&tenant).unwrap(), Some(1))
            .await
            .unwrap();
        let running = submit_as(&app, &tenant, "r").await;
        assert_eq!(
            dispatcher.dispatch(&running).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
    }
    // Each then has one more, which waits for its tenant's own slot.
    for i in 0..blocked {
        let held = submit_as(&app, &format!("capped-{i:03}"), "w").await;
        assert_eq!(
            dispatcher.dispatch(&held).await.unwrap(),
            Dispatched::WaitingForCapacity
        );
    }
    // The account is full: a tenant with no limit of its own waits too,
    // behind all of them.
    let late = submit_as(&app, "late", "l").await;
    assert_eq!(
        dispatcher.dispatch(&late).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    // Room for more, and a wake-up.
    let _grown = app.store.clone().with_account_limit(Some(limit + 5));
    let before = woken(&app).len();
    let count = genace_stages::pipeline::wake::wake(&app.store, &app.queue)
        .await
        .unwrap();
    let sent = woken(&app);
    assert_eq!(count, 1, "{:?}", &sent[before..]);
    assert!(sent[before].contains(late.as_str()), "{:?}", &sent[before..]);
}

/// A tenant whose ledger began waiting before the waiting set existed is
/// in no wake-up's read. The sweep sees the set hold fewer waiting
/// operations than the account counts, puts the tenant back, and wakes it.
#[tokio::test]
async fn the_sweep_puts_tenants_waiting_outside_the_set_back_in_it() {
    let app = app();
    let (_running, waiting) = one_running_one_waiting(&app).await;
    app.store.forget_waiting_set_entry_now("tenant-a");
    let _two = app.store.clone().with_account_limit(Some(2));
    let before = woken(&app).len();
    assert_eq!(
        genace_stages::pipeline::wake::wake(&app.store, &app.queue)
            .await
            .unwrap(),
        0,
        "stranded: no wake-up reaches it"
    );
    app.sweeper().run().await.unwrap();
    let sent = woken(&app);
    assert_eq!(sent.len(), before + 1, "{sent:?}");
    assert!(sent[before].contains(waiting.as_str()));
    assert_eq!(app.store.waiting_ledgers(10).await.unwrap().len(), 1, "back in the set");
}

/// Makes every write of a record take `seconds` of the run's clock, as a
/// slow store does.
fn slow_writes(store: &genace_memory::MemoryStore, clock: genace_memory::ManualClock, seconds: i64) {
    store.before_next_apply(move |s| {
        clock.advance(Duration::seconds(seconds));
        slow_writes(s, clock, seconds);
    });
}

/// Found at scale: the sweep took one page of shard 0, then one of shard
/// 1, and so on, so a backlog of slow items in the first shards spent its
/// time budget run after run, and the later shards' expired claims, lost
/// polls and deadlines waited. Now it takes one item of each shard in
/// turn: every shard with due items is reached within two runs.
#[tokio::test]
async fn the_sweep_reaches_every_shard_within_two_runs_under_a_slow_backlog() {
    sweeps_reach_every_shard_within_two_runs(1).await;
}

/// Items so slow (10 s each) that a run's budget of 40 s ends after four
/// of the eight shards: the next run starts at the shard whose turn it
/// was. A start that moved on by one shard a minute left three shards
/// unreached by both runs, and one that moved on by five left one.
#[tokio::test]
async fn a_run_cut_short_leaves_the_rest_to_the_next() {
    sweeps_reach_every_shard_within_two_runs(10).await;
}

/// Two sweeps of a backlog in every shard, with every write taking
/// `seconds` on the clock, reach every shard.
async fn sweeps_reach_every_shard_within_two_runs(seconds: i64) {
    use genace_core::record::DUE_SHARDS;
    let app = app();
    for i in 0..160 {
        submit(&app, &format!("backlog-{i}"), None).await;
    }
    app.clock.advance(Duration::minutes(3));
    let due = |app: &MemoryApp| -> std::collections::BTreeMap<String, i64> {
        app.store
            .records()
            .into_iter()
            .filter_map(|r| r.due_at_ms.map(|d| (r.operation_id.as_str().to_owned(), d)))
            .collect()
    };
    let before = due(&app);
    let shards_with_work: std::collections::BTreeSet<u32> = app
        .store
        .records()
        .iter()
        .map(|r| r.operation_id.shard(DUE_SHARDS))
        .collect();
    assert_eq!(shards_with_work.len(), DUE_SHARDS as usize, "a backlog in every shard");
    let mut sweeper = app.sweeper();
    sweeper.page_size = 10;
    sweeper.budget = std::time::Duration::from_secs(40);
    slow_writes(&app.store, app.clock.clone(), seconds);
    for _ in 0..2 {
        let report = sweeper.run().await.unwrap();
        assert!(report.truncated, "a backlog longer than a run: {report:?}");
        app.clock.advance(Duration::minutes(1));
    }
    let after = due(&app);
    let reached: std::collections::BTreeSet<u32> = app
        .store
        .records()
        .iter()
        .filter(|r| after.get(r.operation_id.as_str()) != before.get(r.operation_id.as_str()))
        .map(|r| r.operation_id.shard(DUE_SHARDS))
        .collect();
    assert_eq!(
        reached, shards_with_work,
        "every shard's due items reached within two runs"
    );
}

/// Found at scale: a lesson written to the account item while a claim's
/// transaction held it was refused (as DynamoDB refuses a plain write to
/// an item a transaction holds) and lost. Now it is sent again, as the
/// DynamoDB store does, and saved once the transaction is over.
#[tokio::test]
async fn a_lesson_written_while_a_claim_holds_the_account_is_saved() {
    let app = app();
    let store = app.store.clone().with_meeting_transactions();
    let id = submit(&app, "held", None).await;
    let before = store.transaction_conflicts();
    // The claim's transaction opens first and holds the account item
    // across a step; the lesson meets it.
    let dispatcher = app.dispatcher();
    let (dispatched, learned) = tokio::join!(
        dispatcher.dispatch(&id),
        store.learn_account_limit(None, Some(3), None, None)
    );
    dispatched.unwrap();
    assert!(matches!(learned, Ok(true)), "the lesson is saved: {learned:?}");
    assert!(store.transaction_conflicts() > before, "the lesson met the claim");
    assert_eq!(store.account_now().learned, Some(3));
}

/// Genace whose POST takes `took` on the clock, and during which the
/// table browns out: every write after it takes `each` and times out.
struct SlowPostThenBrownout {
    genace: genace_memory::MemoryGenace,
    store: genace_memory::MemoryStore,
    clock: genace_memory::ManualClock,
    took: Duration,
    each: Duration,
}

impl genace_stages::ports::genace::Genace for SlowPostThenBrownout {
    async fn submit(&self, body: &serde_json::Value) -> genace_core::remote::SubmitOutcome {
        self.clock.advance(self.took);
        self.store.brown_out(Some((self.clock.clone(), self.each)));
        self.genace.submit(body).await
    }

    async fn status(&self, job_id: &str) -> genace_core::remote::StatusOutcome {
        self.genace.status(job_id).await
    }
}

/// A dispatcher of `app` whose Genace is `genace`.
fn dispatcher_with<G: genace_stages::ports::genace::Genace + 'static>(
    app: &MemoryApp,
    genace: G,
) -> genace_stages::pipeline::dispatch::Dispatcher<
    genace_stages::ports::Parts<
        genace_memory::MemoryStore,
        genace_memory::MemoryQueue,
        genace_memory::MemoryObjects,
        G,
        genace_stages::ports::Unused,
        genace_memory::ManualClock,
    >,
> {
    genace_stages::pipeline::dispatch::Dispatcher {
        store: app.store.clone(),
        queue: app.queue.clone(),
        genace,
        config: app.config.clone(),
        clock: app.clock.clone(),
        metrics: app.metrics.clone(),
    }
}

/// Found at scale: the bound on saving a job id began at Genace's answer
/// and covered only contention, so in a DynamoDB brownout (every write
/// timing out, each tried four times) a dispatch that began late and met
/// a slow POST was killed at its timeout before it sent the id to the
/// recovery channel, and the id lived only in a log line. Now the save
/// stops trying in time to send the id to the recovery queue before the
/// invocation's deadline, whatever the store does.
#[tokio::test]
async fn a_job_id_reaches_the_recovery_queue_before_the_invocation_ends_in_a_brownout() {
    use genace_stages::ports::deadline;
    let app = app();
    let id = submit(&app, "brownout", None).await;
    let deadline_at = app.clock.now() + Duration::seconds(60);
    // Time spent before the claim (a cold start, a contended read).
    app.clock.advance(Duration::seconds(7));
    let slow = SlowPostThenBrownout {
        genace: app.genace.clone(),
        store: app.store.clone(),
        clock: app.clock.clone(),
        took: Duration::seconds(25),
        each: Duration::seconds(7),
    };
    let dispatcher = dispatcher_with(&app, slow);
    let outcome = deadline::until(Some(deadline_at), dispatcher.dispatch(&id))
        .await
        .unwrap();
    assert_eq!(outcome, Dispatched::Posted(PostResult::AcceptedUnpersisted));
    let recovery: Vec<_> = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Recovery)
        .collect();
    assert_eq!(recovery.len(), 1, "the job id is on the recovery queue");
    assert!(recovery[0].body.contains("job-0001"));
    let sent = recovery[0].visible_at;
    assert!(
        sent + Duration::seconds(5) <= deadline_at,
        "sent at {sent}, with less than the send's 5 s before the deadline {deadline_at}"
    );
}

/// With too little of the invocation left for a claim, a POST (its
/// longest), a try at saving the answer and the recovery reserve, nothing
/// is claimed, and the operation is sent to dispatch again; when the claim
/// itself took the time, it is released unPOSTed, with nothing counted
/// against the operation. No POST is begun that the stop could cut in half.
#[tokio::test]
async fn a_dispatch_without_time_for_its_post_claims_nothing_or_releases_it() {
    use genace_stages::ports::deadline;
    let app = app();
    let dispatched_again = |app: &MemoryApp, id: &OperationId| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.queue == Queue::Dispatch && m.body.contains(id.as_str()))
            .count()
    };
    // 30 s left: not claimed at all.
    let id = submit(&app, "late", None).await;
    let before = record(&app, &id).await;
    let queued = dispatched_again(&app, &id);
    let deadline_at = app.clock.now() + Duration::seconds(30);
    let dispatched = deadline::until(Some(deadline_at), app.dispatcher().dispatch(&id))
        .await
        .unwrap();
    assert_eq!(dispatched, Dispatched::Released);
    assert_eq!(record(&app, &id).await.version, before.version, "nothing claimed");
    assert_eq!(dispatched_again(&app, &id), queued + 1);
    // 55 s left, but the claim takes 12 s: claimed, then released.
    let deadline_at = app.clock.now() + Duration::seconds(55);
    let clock = app.clock.clone();
    app.store
        .before_next_apply(move |_| clock.advance(Duration::seconds(12)));
    let dispatched = deadline::until(Some(deadline_at), app.dispatcher().dispatch(&id))
        .await
        .unwrap();
    assert_eq!(dispatched, Dispatched::Released);
    assert!(app.genace.posts().is_empty(), "never POSTed");
    let rec = record(&app, &id).await;
    assert_eq!(rec.phase, Phase::Prepared);
    assert_eq!(rec.version, before.version + 2, "claimed, then released");
    assert_eq!(rec.rate_limited_count, 0, "nothing counted");
    assert!(rec.case.is_none());
    let ledger = app.store.ledger(&TenantId::parse("tenant-a").unwrap()).await.unwrap();
    assert_eq!(ledger.totals.in_flight, 0, "the slot given back");
    assert_eq!(dispatched_again(&app, &id), queued + 2);
    // With time enough, the next dispatch POSTs once.
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(app.genace.posts().len(), 1);
}

/// Found at scale: the look that follows a recorded wait read two
/// eventually consistent indexes moments after the write, and usually
/// missed the operation that just waited, so a slot freed between its
/// refused claim and its wait idled until the next event or the sweep. On
/// a store whose indexes lag, the operation is woken by its id.
#[tokio::test]
async fn a_slot_freed_while_a_wait_is_written_wakes_the_waiter_though_the_index_lags() {
    use genace_core::machine::{self, Input};
    use genace_core::remote::{JobSnapshot, RenderStatus};
    let app = app();
    let _lagging = app
        .store
        .clone()
        .with_index_lag(app.clock.clone(), Duration::seconds(2), 7);
    let _limited = app.store.clone().with_account_limit(Some(1));
    let running = submit(&app, "running", None).await;
    let waiter = submit(&app, "waiter", None).await;
    app.dispatcher().dispatch(&running).await.unwrap();
    // The waiter's claim is refused; before its wait is written, the
    // running job fails and frees the slot (its own wake-up found nobody).
    let (clock, policy, ended) = (app.clock.clone(), app.config.policy, running.clone());
    app.store.before_next_apply(move |s| {
        s.before_next_apply(move |s| {
            let rec = s.records().into_iter().find(|r| r.operation_id == ended).unwrap();
            let snapshot = JobSnapshot {
                id: Some("job-0001".into()),
                state: "failed".into(),
                status: RenderStatus::Failed,
                outputs: None,
                outputs_unreadable: None,
                client_reference: None,
                error: None,
            };
            let seen = genace_core::record::Looks::default();
            let input = Input::Observed(genace_core::machine::Look {
                snapshot: &snapshot,
                next_check: clock.now(),
                stalled: None,
                seen: &seen,
            });
            let next = machine::transition(&rec, input, clock.now(), &policy).unwrap();
            s.apply_now(&rec, &next).unwrap();
        });
    });
    assert_eq!(
        app.dispatcher().dispatch(&waiter).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    assert_eq!(app.store.account_now().in_flight, 0, "the slot is free");
    let woken = woken(&app);
    assert_eq!(woken.len(), 1, "{woken:?}");
    assert!(woken[0].contains(waiter.as_str()), "the waiter is woken by its id");
}

/// An operation refused at its tenant's own limit of jobs in flight waits
/// for one of its tenant's jobs to end, not for an account slot: however
/// many account slots are free, the look after its wait does not wake it
/// (it would only be refused again, over and over).
#[tokio::test]
async fn a_wait_at_the_tenants_own_limit_is_not_woken_by_free_account_slots() {
    let app = app();
    let tenant = TenantId::parse("tenant-a").unwrap();
    app.store.set_max_in_flight(&tenant, Some(1)).await.unwrap();
    let running = submit(&app, "running", None).await;
    let waiting = submit(&app, "waiting", None).await;
    app.dispatcher().dispatch(&running).await.unwrap();
    assert_eq!(
        app.dispatcher().dispatch(&waiting).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    assert!(
        !woken(&app).iter().any(|m| m.contains(waiting.as_str())),
        "woken though its tenant is at its own limit"
    );
}

/// A wait for credits recorded just after the credits were freed (here an
/// operator's raised limit between the refused claim and the wait's write)
/// is not left until the next write that frees credits: the look after the
/// wait finds the room and wakes it by its id.
#[tokio::test]
async fn a_wait_for_credits_recorded_after_they_were_freed_is_woken() {
    let app = app();
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(10.0)));
    let first = submit(&app, "first", None).await;
    let second = submit(&app, "second", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&first).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    // Before the refused claim's write, then before the wait's.
    app.store.before_next_apply(|store| {
        store.before_next_apply(|store| {
            store.set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(30.0)));
        });
    });
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    let woken: Vec<_> = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Wake && m.body.contains(second.as_str()))
        .collect();
    assert_eq!(woken.len(), 1, "woken by its id");
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
}

/// A tenant parked though it may take a slot (its order read while the
/// index lagged, or its credits freed just before its wait was recorded)
/// is not read by wake-ups; the sweep's look at the parked set moves it
/// back and wakes it.
#[tokio::test]
async fn the_sweep_moves_back_a_parked_tenant_that_may_take_a_slot() {
    let app = app();
    let _limited = app.store.clone().with_account_limit(Some(1));
    let busy = submit_as(&app, "tenant-b", "busy").await;
    let waiter = submit(&app, "waiter", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&busy).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        dispatcher.dispatch(&waiter).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let read = app.store.waiting_ledgers(10).await.unwrap();
    assert_eq!(app.store.park(&read).await.unwrap(), 1);
    let woken = |app: &MemoryApp| {
        app.queue
            .messages()
            .iter()
            .filter(|m| m.queue == Queue::Wake && m.body.contains(waiter.as_str()))
            .count()
    };
    let before = woken(&app);
    // tenant-b's job fails: its slot frees, but its wake-up reads no one.
    fail_first_job_and_see_who_is_woken(&app, &busy).await;
    assert_eq!(woken(&app), before, "parked: not read");
    genace_stages::pipeline::wake::sweep(&app.store, &app.queue, &app.metrics, app.clock.now()).await;
    assert_eq!(woken(&app), before + 1, "moved back and woken by the sweep");
    assert!(app.store.parked_ledgers(10).await.unwrap().is_empty());
}

/// Parked tenants are looked at in turn: a sweep run looks at a bounded
/// number of them, and sends those that still cannot take a slot to the
/// back of the parked set, so that every parked tenant is reached.
#[tokio::test]
async fn the_sweep_looks_at_every_parked_tenant_in_turn() {
    let app = app();
    let dispatcher = app.dispatcher();
    for i in 0..10 {
        let tenant = format!("short-{i}");
        app.store
            .set_spend_limit_now(&tenant, Some(genace_core::ledger::millis(0.5)));
        let id = submit_as(&app, &tenant, "k").await;
        assert_eq!(dispatcher.dispatch(&id).await.unwrap(), Dispatched::WaitingForCredits);
        app.clock.advance(Duration::seconds(1));
    }
    let first = |ledgers: Vec<genace_core::ledger::TenantLedger>| ledgers[0].tenant_id.clone();
    assert_eq!(first(app.store.parked_ledgers(10).await.unwrap()), "short-0");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let front: Vec<String> = app
            .store
            .parked_ledgers(4)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.tenant_id)
            .collect();
        seen.extend(front);
        genace_stages::pipeline::wake::sweep(&app.store, &app.queue, &app.metrics, app.clock.now()).await;
        app.clock.advance(Duration::seconds(60));
    }
    assert_eq!(
        seen.len(),
        10,
        "every parked tenant at the front within three runs: {seen:?}"
    );
    assert_eq!(
        app.store.parked_ledgers(20).await.unwrap().len(),
        10,
        "none may take a slot"
    );
}

/// A tenant parked for credits goes back to the waiting set with the write
/// that frees them, but the index a wake-up reads shows the move late: the
/// wake-up after that write weighs the tenant as its ledger reads now, so
/// its waiter is woken at once, not at the next sweep.
#[tokio::test]
async fn the_write_that_frees_credits_wakes_its_parked_tenant_through_index_lag() {
    let app = app();
    let _lagging = app
        .store
        .clone()
        .with_index_lag(app.clock.clone(), Duration::minutes(10), 7);
    app.store
        .set_spend_limit_now("tenant-a", Some(genace_core::ledger::millis(10.0)));
    let first = submit(&app, "first", None).await;
    let second = submit(&app, "second", None).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&first).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCredits
    );
    // Long enough for every index to show the wait and the park.
    app.clock.advance(Duration::minutes(11));
    assert_eq!(app.store.parked_ledgers(10).await.unwrap().len(), 1);
    render_first_job(&app, &first).await;
    assert!(
        woken(&app).iter().any(|body| body.contains(second.as_str())),
        "woken by the write that freed its credits"
    );
}

/// Found in a security read: tenant ids may hold `/`, so erasing tenant
/// `a`'s operation `op_X` listed and deleted tenant `a/op_X`'s objects (its
/// keys began with `outputs/a/op_X/`). No operation's prefix may be a
/// prefix of another tenant's keys.
#[tokio::test]
async fn no_tenants_object_prefix_is_a_prefix_of_anothers() {
    use genace_stages::ports::outputs::{object_key, operation_prefix};
    let app = app();
    let a = record(&app, &submit_as(&app, "a", "k").await).await;
    let mut others = Vec::new();
    for tenant in [format!("a/{}", a.operation_id), format!("a%2F{}", a.operation_id)] {
        others.push(record(&app, &submit_as(&app, &tenant, "k").await).await);
    }
    let prefix = |r: &OperationRecord| operation_prefix(&app.config.output_prefix, r);
    let all: Vec<&OperationRecord> = std::iter::once(&a).chain(&others).collect();
    for r in &all {
        for s in &all {
            let key = object_key(&app.config.output_prefix, s, 0, "mp4");
            assert!(
                r.tenant_id == s.tenant_id || !key.starts_with(&prefix(r)),
                "{key} lies under {}",
                prefix(r)
            );
        }
    }
}

/// Tenant `a`'s operation, rendered with one output and delivered: its
/// id and its record.
async fn delivered_for_erase(app: &MemoryApp) -> (OperationId, OperationRecord) {
    let id = submit_as(app, "a", "erase").await;
    app.dispatcher().dispatch(&id).await.unwrap();
    app.downloads
        .serve("https://cdn.example/out.mp4", Some("video/mp4"), vec![7; 1024]);
    app.genace.set_job(
        "job-0001",
        "completed",
        Some(json!([{"url": "https://cdn.example/out.mp4"}])),
    );
    assert_eq!(app.poller().poll(&id).await.unwrap(), Polled::Rendered);
    app.deliverer().deliver(&id).await.unwrap();
    let delivered = record(app, &id).await;
    (id, delivered)
}

/// Stores 16 bytes at `key`.
async fn put_object(app: &MemoryApp, key: &str) {
    use genace_stages::ports::outputs::{ObjectStore, b64_sha256};
    let data = vec![9; 16];
    app.objects
        .put(key, "video/mp4", data.clone(), &b64_sha256(&data))
        .await
        .unwrap();
}

/// Objects stored before tenant segments were escaped: tenant `a/op_X`'s
/// lie at `outputs/a/op_X/op_Y/…`, under tenant `a`'s operation `op_X`.
/// Erasing `a`'s operation deletes its own objects only, directly under
/// its prefix, never those deeper keys.
#[tokio::test]
async fn an_erase_deletes_only_its_own_objects_not_an_old_layouts_nested_tenant() {
    use genace_stages::ports::outputs::operation_prefix;
    let app = app();
    let tenant = TenantId::parse("a").unwrap();
    let (id, delivered) = delivered_for_erase(&app).await;
    let prefix = operation_prefix(&app.config.output_prefix, &delivered);
    let nested = format!("{prefix}op_{}/output-0.mp4", "c".repeat(32));
    put_object(&app, &nested).await;
    app.api().erase_outputs(&tenant, &id).await.unwrap();
    assert_eq!(app.objects.keys(), [nested], "only the nested tenant's object is left");
}

/// More of a nested tenant's keys than one listing page holds, sorting
/// before the operation's own (`op_` before `output-`): an object of the
/// operation its record does not name (a killed delivery's) is still found
/// and erased.
#[tokio::test]
async fn a_page_of_a_nested_tenants_keys_does_not_hide_an_erased_operations_own() {
    use genace_stages::ports::outputs::{object_key, operation_prefix};
    let app = app();
    let tenant = TenantId::parse("a").unwrap();
    let (id, delivered) = delivered_for_erase(&app).await;
    let prefix = operation_prefix(&app.config.output_prefix, &delivered);
    for n in 0..1_001 {
        put_object(&app, &format!("{prefix}op_{n:032}/output-0.mp4")).await;
    }
    let unnamed = object_key(&app.config.output_prefix, &delivered, 7, "mp4");
    put_object(&app, &unnamed).await;
    app.api().erase_outputs(&tenant, &id).await.unwrap();
    let left = app.objects.keys();
    assert!(!left.contains(&unnamed), "the operation's own object is erased");
    assert_eq!(left.len(), 1_001, "the nested tenant's objects are left");
}

/// A view's progress: a waiting operation's place, how many the account
/// serves before it and when to look again; a rendering job's expected
/// end once its class has renders enough, and the waiting one's expected
/// start from them; nothing once an operation is finished.
#[tokio::test]
async fn a_view_shows_the_queue_the_expected_start_and_end_and_the_next_look() {
    use genace_core::progress::Basis;
    use genace_core::render::RenderClass;
    let app = app();
    let (running, waiting) = one_running_one_waiting(&app).await;
    let rival = submit_as(&app, "tenant-b", "rival").await;
    assert_eq!(
        app.dispatcher().dispatch(&rival).await.unwrap(),
        Dispatched::WaitingForCapacity
    );
    let api = app.api();
    let now = app.clock.now();
    let held = record(&app, &waiting).await;
    let shown = api.progress(&held).await;
    let queue = shown.queue.expect("a waiting operation shows its queue");
    assert_eq!(queue.place, Some(1));
    // First of its tenant; the other waiting tenant may go first, or not.
    let ahead = queue.ahead.unwrap();
    assert_eq!((ahead.min, ahead.max), (0, Some(1)));
    assert_eq!(queue.expected_start, None, "no renders learned yet");
    let look = shown.next_look_at.unwrap();
    assert!(look > now && look <= now + Duration::seconds(10), "{look}");

    let job = record(&app, &running).await;
    assert_eq!(job.phase, Phase::Accepted);
    let unlearned = api.progress(&job).await.expected_end.unwrap();
    assert_eq!(unlearned.basis, Basis::TooLittleData);
    let class = RenderClass::of(&job);
    for _ in 0..20 {
        app.store.add_render_time(&class, 60.0).await.unwrap();
    }
    let end = api.progress(&job).await.expected_end.unwrap();
    assert_eq!(end.basis, Basis::Learned);
    let accepted = job.accepted_at.unwrap();
    let p50 = end.p50_at.unwrap();
    assert!(
        p50 >= accepted + Duration::seconds(54) && p50 <= accepted + Duration::seconds(66),
        "{p50}"
    );
    // One slot turning over every 60 s: the waiting one starts with the
    // next, or the one after it if the other tenant's goes first.
    let start = api.progress(&held).await.queue.unwrap().expected_start.unwrap();
    assert!((start.earliest - now).num_seconds().abs() <= 66, "{start:?}");
    assert!(start.latest.unwrap() > start.earliest, "{start:?}");

    let mut done = job.clone();
    done.phase = Phase::Cancelled;
    assert_eq!(api.progress(&done).await, Default::default());
}
