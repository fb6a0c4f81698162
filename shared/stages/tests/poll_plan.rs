//! The poll plan on the in-memory adapters: without data, the age-based
//! schedule; with a class's render times learned, the first look waits for
//! the early quantile and the next ones come densely through the likely
//! window; the end, once seen, is on the record with the looks it took,
//! and its render time is added to the class.

use chrono::{Duration, TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::messages::{PollHistory, Queue, WorkMessage};
use genace_core::record::OperationRecord;
use genace_core::render::{PollPlan, RenderClass};
use genace_memory::{MemoryApp, memory_app};
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::dispatch::{Dispatched, PostResult};
use genace_stages::pipeline::poll::Polled;
use genace_stages::pipeline::stage::Stage;
use genace_stages::ports::clock::Clock;
use genace_stages::ports::table::prelude::*;
use serde_json::json;

fn app() -> MemoryApp {
    memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap())
}

/// An accepted video job; its record.
async fn accepted(app: &MemoryApp, key: &str) -> OperationRecord {
    let body = json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": "a lighthouse", "duration": 8}});
    let intent = Intent::parse(&body, None).unwrap();
    let tenant = TenantId::parse("tenant-plan").unwrap();
    let id = match app.api().submit(&tenant, &intent, app.clock.now()).await.unwrap() {
        Submitted::New(rec) => rec.operation_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        app.dispatcher().dispatch(&id).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    record(app, &id).await
}

async fn record(app: &MemoryApp, id: &OperationId) -> OperationRecord {
    app.store.get(id, app.clock.now()).await.unwrap().unwrap()
}

/// The last poll message sent.
fn last_poll(app: &MemoryApp) -> WorkMessage {
    let body = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Poll)
        .max_by_key(|m| m.visible_at)
        .unwrap()
        .body;
    WorkMessage::parse(&body).unwrap()
}

/// `renders` finished jobs of the class, each `seconds` long.
async fn learned(app: &MemoryApp, rec: &OperationRecord, renders: usize, seconds: f64) {
    for i in 0..renders {
        let jitter = (i % 5) as f64 * 0.5;
        app.store
            .add_render_time(&RenderClass::of(rec), seconds - 1.0 + jitter)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn without_render_times_the_schedule_is_by_age() {
    let app = app();
    let rec = accepted(&app, "no-data").await;
    app.clock.advance(Duration::seconds(5));
    let polled = app.poller().poll(&rec.operation_id).await.unwrap();
    assert_eq!(polled, Polled::Running { next_poll_seconds: 5 });
    let next = last_poll(&app).poll.expect("the poll message carries its looks");
    assert_eq!((next.looks, next.planned, next.plan), (1, true, None));
    assert_eq!(next.running_seen_ms, Some(app.clock.now().timestamp_millis()));
}

#[tokio::test]
async fn learned_render_times_plan_the_looks_and_the_end_is_recorded() {
    let app = app();
    let rec = accepted(&app, "planned").await;
    // 40 renders of about 30 s (29 to 31): the first look waits for them.
    learned(&app, &rec, 40, 30.0).await;
    app.clock.advance(Duration::seconds(5));
    let Polled::Running {
        next_poll_seconds: first,
    } = app.poller().poll(&rec.operation_id).await.unwrap()
    else {
        panic!("still running");
    };
    assert!(
        (18..=26).contains(&first),
        "the next look waits for the early quantile, about 25 s after acceptance: {first} s"
    );
    let history = last_poll(&app).poll.unwrap();
    let plan = history.plan.expect("planned from 40 renders");
    let (early, late) = (plan.first().unwrap(), plan.last().unwrap());
    assert!(early > 20.0 && late < 40.0, "{plan:?}");
    // Inside the window the looks are dense: about 2 s and 4 % of the age.
    app.clock.advance(Duration::seconds(i64::from(first)));
    let message = last_poll(&app);
    let Polled::Running {
        next_poll_seconds: dense,
    } = app.poller().handle(message).await.unwrap()
    else {
        panic!("still running");
    };
    assert!((1..=3).contains(&dense), "{dense} s apart in the window");
    // The job ends; the next look sees it.
    let job = rec.remote_job_id.clone().unwrap();
    app.genace.set_job(
        &job,
        "completed",
        Some(json!([{"url": "https://cdn.genace.example/o.mp4"}])),
    );
    let running_seen = app.clock.now();
    app.clock.advance(Duration::seconds(i64::from(dense)));
    let message = last_poll(&app);
    assert_eq!(app.poller().handle(message).await.unwrap(), Polled::Rendered);
    let done = record(&app, &rec.operation_id).await;
    let detection = done.detection.expect("the end is on the record");
    assert_eq!(detection.looks, 3);
    assert_eq!(detection.looked_at.len(), 3, "each look's time: {detection:?}");
    assert_eq!(detection.looked_at[1], running_seen);
    assert_eq!(detection.looked_at.last(), Some(&app.clock.now()));
    assert_eq!(detection.last_running_at, Some(running_seen));
    assert_eq!(detection.ended_seen_at, app.clock.now());
    assert_eq!(detection.lag_bound_seconds(), Some(f64::from(dense)));
    let times = app.store.render_times(&RenderClass::of(&rec)).await.unwrap();
    assert_eq!(times.samples(), 41, "its render time joins the class's");
}

/// A job still running past its class's likely window is looked at by its
/// age again.
#[tokio::test]
async fn past_the_window_the_schedule_is_by_age_again() {
    let app = app();
    let rec = accepted(&app, "long").await;
    learned(&app, &rec, 40, 30.0).await;
    // 100 s after acceptance, far past renders of about 30 s.
    app.clock.advance(Duration::seconds(100));
    let history = PollHistory {
        looks: 2,
        ..PollHistory::default()
    };
    app.genace
        .set_job(rec.remote_job_id.as_deref().unwrap(), "running", None);
    let planned = app.poller().poll_after(&rec.operation_id, history).await.unwrap();
    // The age-based lattice walked from the acceptance: ... 86, 94, 103.
    assert_eq!(
        planned,
        Polled::Running { next_poll_seconds: 3 },
        "past the window: by age"
    );
    let at = last_poll(&app).poll.unwrap().look_at_ms.unwrap();
    assert_eq!(at - rec.accepted_at.unwrap().timestamp_millis(), 103_000);
}

/// Dispatch reads the class's plan once it saved the job id: the first
/// look waits for the early quantile, and the poller does not read the
/// render times again.
#[tokio::test]
async fn the_first_look_is_planned_at_acceptance() {
    let app = app();
    let teacher = accepted(&app, "teacher").await;
    let first = last_poll(&app)
        .poll
        .expect("dispatch's poll message carries its history");
    assert_eq!((first.planned, first.plan), (true, None), "no data yet");
    // 40 renders of about 30 s, then a job of the same class.
    learned(&app, &teacher, 40, 30.0).await;
    let rec = accepted(&app, "student").await;
    let message = app
        .queue
        .messages()
        .into_iter()
        .rfind(|m| m.queue == Queue::Poll && m.body.contains(rec.operation_id.as_str()))
        .unwrap();
    let history = WorkMessage::parse(&message.body).unwrap().poll.unwrap();
    let plan = history.plan.expect("planned from 40 renders");
    assert!(history.planned && history.looks == 0);
    // The queue delays by whole seconds, the look waits out the rest: it
    // comes at the early quantile to the tenth of a second.
    let first_look = plan.first().unwrap();
    let delay = (message.visible_at - app.clock.now()).num_milliseconds();
    // Whole seconds, rounded down unless that leaves a wait of more than
    // 0.9 s (a look a tenth of a second late needs no wait).
    let whole = (((first_look * 1000.0).round() as i64 + 100) / 1000) * 1000;
    assert_eq!(delay, whole, "{plan:?}");
    assert!(first_look > 20.0, "{plan:?}");
    let at = app.clock.now().timestamp_millis() + (first_look * 1000.0).round() as i64;
    assert_eq!(history.look_at_ms, Some(at), "{plan:?}");
}

/// A look whose message the queue handed over before its planned time
/// (a queue's delay is whole seconds) waits for that time, at most a
/// second, then reads Genace; the next look it plans carries its own.
#[tokio::test]
async fn a_look_comes_at_its_planned_time_to_the_tenth_of_a_second() {
    let app = app();
    let rec = accepted(&app, "precise").await;
    learned(&app, &rec, 40, 30.0).await;
    // Received 0.7 s before its planned time: it waits 0.7 s.
    app.clock.advance(Duration::seconds(20));
    let planned_at = app.clock.now() + Duration::milliseconds(700);
    let history = PollHistory {
        looks: 1,
        look_at_ms: Some(planned_at.timestamp_millis()),
        ..PollHistory::default()
    };
    let polled = app.poller().poll_after(&rec.operation_id, history).await.unwrap();
    assert!(matches!(polled, Polled::Running { .. }), "{polled:?}");
    assert_eq!(app.clock.now(), planned_at, "the look waited for its time");
    let next = last_poll(&app);
    let carried = next.poll.clone().unwrap();
    assert_eq!(
        carried.looked_at_ms.last(),
        Some(&planned_at.timestamp_millis()),
        "and read Genace then"
    );
    let at = carried.look_at_ms.expect("the next look is planned");
    let whole = (next_visible(&app, &next) - app.clock.now()).num_milliseconds();
    assert!(at - planned_at.timestamp_millis() >= 1000, "at least a second on");
    assert!(
        (-100..900).contains(&(at - planned_at.timestamp_millis() - whole)),
        "the queue's delay is the whole seconds of the planned one: {whole} ms, look at +{} ms",
        at - planned_at.timestamp_millis()
    );
    // A look received late, or planned far ahead (a clock apart), waits
    // at most a second.
    let late = PollHistory {
        looks: 2,
        look_at_ms: Some(app.clock.now().timestamp_millis() - 3000),
        ..PollHistory::default()
    };
    let now = app.clock.now();
    app.poller().poll_after(&rec.operation_id, late).await.unwrap();
    assert_eq!(app.clock.now(), now, "a late look does not wait");
    let far = PollHistory {
        looks: 3,
        look_at_ms: Some(app.clock.now().timestamp_millis() + 60_000),
        ..PollHistory::default()
    };
    app.poller().poll_after(&rec.operation_id, far).await.unwrap();
    assert_eq!(app.clock.now(), now + Duration::seconds(1));
}

/// A look that came a little after its planned time plans the next from
/// the time it was planned: the grid's next look, a second on, is not
/// passed over for being a second and some milliseconds from the look.
#[tokio::test]
async fn a_look_a_little_late_keeps_to_the_grid() {
    let app = app();
    let rec = accepted(&app, "late").await;
    learned(&app, &rec, 40, 30.0).await;
    app.clock.advance(Duration::seconds(5));
    app.poller().poll(&rec.operation_id).await.unwrap();
    let plan = last_poll(&app).poll.unwrap().plan.expect("planned");
    let looks = &plan.looks;
    let k = (0..looks.len() - 1)
        .find(|&k| looks[k + 1] - looks[k] < 1.05)
        .expect("the window's looks are a second apart");
    let accepted_ms = rec.accepted_at.unwrap().timestamp_millis();
    let at = |age: f64| accepted_ms + (age * 1000.0).round() as i64;
    // This look was planned at the grid's k-th and came 30 ms late.
    app.clock
        .set(chrono::DateTime::from_timestamp_millis(at(looks[k]) + 30).unwrap());
    let history = PollHistory {
        looks: u32::try_from(k).unwrap() + 1,
        plan: Some(plan.clone()),
        planned: true,
        look_at_ms: Some(at(looks[k])),
        ..PollHistory::default()
    };
    app.poller().poll_after(&rec.operation_id, history).await.unwrap();
    let next = last_poll(&app).poll.unwrap();
    let planned = next.look_at_ms.expect("planned");
    assert!(
        (planned - at(looks[k + 1])).abs() <= 1,
        "the next look at {planned}, the grid's at {}: {looks:?}, k = {k}",
        at(looks[k + 1])
    );
}

/// A long render's looks, each handled 300 ms after its planned time,
/// keep to the schedule a view walks from the acceptance: the lateness of
/// one look does not move the next, so the looks do not drift later and a
/// client reading just after a suggested look sees what that look saw.
#[tokio::test]
async fn late_looks_do_not_drift_from_the_schedule_a_view_walks() {
    let app = app();
    let rec = accepted(&app, "drift").await;
    let accepted_ms = rec.accepted_at.unwrap().timestamp_millis();
    let max = f64::from(app.config.poll_max_delay_seconds);
    let mut message = last_poll(&app);
    let mut planned = message
        .poll
        .as_ref()
        .unwrap()
        .look_at_ms
        .expect("the first look is planned");
    assert_eq!(planned - accepted_ms, 5_000, "the first look, 5 s after the 202");
    for look in 0..30 {
        app.clock
            .set(chrono::DateTime::from_timestamp_millis(planned + 300).unwrap());
        let polled = app.poller().handle(message).await.unwrap();
        assert!(matches!(polled, Polled::Running { .. }), "{polled:?}");
        message = last_poll(&app);
        let next = message.poll.as_ref().unwrap().look_at_ms.expect("planned");
        let age = (planned - accepted_ms) as f64 / 1000.0;
        let walked = genace_core::render::next_planned_look(None, age, 5.0, max);
        assert_eq!(
            next - accepted_ms,
            (walked * 1000.0).round() as i64,
            "look {look} at {age} s: the next at the walked {walked} s"
        );
        planned = next;
    }
    assert!(planned - accepted_ms > 200_000, "a long render's schedule was walked");
}

/// When the queue hands `message` over.
fn next_visible(app: &MemoryApp, message: &WorkMessage) -> chrono::DateTime<Utc> {
    let body = serde_json::to_string(message).unwrap();
    app.queue
        .messages()
        .into_iter()
        .find(|m| m.queue == Queue::Poll && m.body == body)
        .unwrap()
        .visible_at
}

/// Every look draws the plan from its class's render times as they are
/// then: a job accepted before its class had data switches to the plan
/// at its next look, and a job's carried plan gives way to the one the
/// renders that ended since would draw (the plan a view walks).
#[tokio::test]
async fn every_look_follows_its_class_s_plan_as_it_is_now() {
    let app = app();
    let rec = accepted(&app, "early").await;
    let first = last_poll(&app).poll.unwrap();
    assert_eq!((first.planned, first.plan), (true, None), "no data at acceptance");
    learned(&app, &rec, 40, 300.0).await;
    app.clock.advance(Duration::seconds(20));
    let without = |looks| PollHistory {
        looks,
        planned: true,
        ..PollHistory::default()
    };
    app.poller().poll_after(&rec.operation_id, without(1)).await.unwrap();
    let plan = last_poll(&app).poll.unwrap().plan.expect("the plan at the next look");
    assert!(plan.first().unwrap() > 250.0, "{plan:?}");
    // A plan carried from before (an empty one here) is replaced.
    let older = PollHistory {
        plan: Some(PollPlan::default()),
        ..without(2)
    };
    app.poller().poll_after(&rec.operation_id, older).await.unwrap();
    assert_eq!(last_poll(&app).poll.unwrap().plan, Some(plan));
}

/// Which ends teach a class its render times, and what the metrics say:
/// a render seen done at the first, on-time look of its chain is counted
/// (else renders shorter than the first look would never be learned) but
/// has no lag bound; one seen running and then done is counted with its
/// lag; a failed render, and an end a chain started late (the sweep's,
/// without history) sees, are not counted.
#[tokio::test]
async fn ends_seen_on_time_teach_the_class_and_others_do_not() {
    let mut app = app();
    let recorder = genace_stages::ports::metrics::Recorder::new(app.clock.clone());
    app.metrics = genace_stages::ports::metrics::Metrics::to(recorder.clone());
    let class_of = |rec: &OperationRecord| RenderClass::of(rec);
    let samples = |app: &MemoryApp, rec: &OperationRecord| {
        let (store, class) = (app.store.clone(), class_of(rec));
        async move { store.render_times(&class).await.unwrap().samples() }
    };
    let done = |app: &MemoryApp, rec: &OperationRecord, state: &str| {
        let outputs = (state == "completed").then(|| json!([{"url": "https://cdn.genace.example/o.mp4"}]));
        app.genace
            .set_job(rec.remote_job_id.as_deref().unwrap(), state, outputs);
    };
    // Done before its first look, which comes on time: counted, no lag bound.
    let quick = accepted(&app, "quick").await;
    done(&app, &quick, "completed");
    app.clock.advance(Duration::seconds(5));
    assert_eq!(app.poller().handle(last_poll(&app)).await.unwrap(), Polled::Rendered);
    assert_eq!(samples(&app, &quick).await, 1);
    let metric = |name: &str| recorder.points().iter().filter(|p| p.name == name).count();
    assert_eq!((metric("PollsPerJob"), metric("DetectionLagSeconds")), (1, 0));
    // Seen queued, then running, then done: counted, with its lag, and
    // the look that first found it running on the record.
    let seen = accepted(&app, "seen").await;
    app.genace
        .set_job(seen.remote_job_id.as_deref().unwrap(), "queued", None);
    app.clock.advance(Duration::seconds(5));
    app.poller().handle(last_poll(&app)).await.unwrap();
    app.genace
        .set_job(seen.remote_job_id.as_deref().unwrap(), "running", None);
    app.clock.advance(Duration::seconds(5));
    app.poller().handle(last_poll(&app)).await.unwrap();
    let started = app.clock.now();
    done(&app, &seen, "completed");
    app.clock.advance(Duration::seconds(5));
    assert_eq!(app.poller().handle(last_poll(&app)).await.unwrap(), Polled::Rendered);
    assert_eq!(samples(&app, &seen).await, 2);
    let detection = record(&app, &seen.operation_id).await.detection.unwrap();
    assert_eq!((detection.looks, detection.first_running_at), (3, Some(started)));
    assert_eq!(metric("DetectionLagSeconds"), 1);
    // A failed render: not counted.
    let failed = accepted(&app, "failed").await;
    done(&app, &failed, "failed");
    app.clock.advance(Duration::seconds(5));
    assert_eq!(
        app.poller().handle(last_poll(&app)).await.unwrap(),
        Polled::RenderFailed
    );
    assert_eq!(samples(&app, &failed).await, 2);
    // A chain the sweep started long after the acceptance: not counted.
    let late = accepted(&app, "late").await;
    done(&app, &late, "completed");
    app.clock.advance(Duration::seconds(400));
    assert_eq!(app.poller().poll(&late.operation_id).await.unwrap(), Polled::Rendered);
    assert_eq!(
        samples(&app, &late).await,
        2,
        "an end seen this late says little of when it was"
    );
}

/// A 429 on a look lengthens the plan: the next look waits for Genace's
/// Retry-After, even inside the dense window where the plan would look
/// again within seconds, and the look still counts.
#[tokio::test]
async fn a_429_on_a_look_waits_for_its_retry_after() {
    let app = app();
    let rec = accepted(&app, "limited").await;
    learned(&app, &rec, 40, 30.0).await;
    app.clock.advance(Duration::seconds(28));
    let dense = PollHistory {
        looks: 1,
        planned: false,
        ..PollHistory::default()
    };
    app.genace.answer_status_with(429, Some("20"));
    let polled = app.poller().poll_after(&rec.operation_id, dense).await.unwrap();
    assert_eq!(polled, Polled::BackedOff { next_poll_seconds: 20 });
    let next = last_poll(&app).poll.unwrap();
    assert_eq!(next.looks, 2, "the refused look counts");
    assert!(next.plan.is_some(), "the plan is kept for the next look");
}

/// Found at scale: a look that read nothing (a 429 with a long
/// Retry-After, a 5xx) did not move the sweep's deadline, though its next
/// look came later than the deadline covered once a job was about 20
/// minutes old; the sweep then started a second chain of looks, and both
/// polled until the job ended. Now one chain lives, whatever the looks
/// answer: followed minute by minute for three hours of a render under a
/// 429 storm with the sweep running each minute, the sweep never sends a
/// look, and exactly one look is ever queued.
#[tokio::test]
async fn one_chain_of_looks_lives_whatever_the_looks_answer() {
    use genace_stages::pipeline::stage::handle_body;
    let app = app();
    let rec = accepted(&app, "storm").await;
    let id = rec.operation_id.clone();
    let poller = app.poller();
    let sweeper = app.sweeper();
    let mut looks = 0;
    for minute in 0..180 {
        app.clock.advance(Duration::minutes(1));
        let report = sweeper.run().await.unwrap();
        assert_eq!(report.poll, 0, "the sweep started a second chain at minute {minute}");
        let queued = app
            .queue
            .messages()
            .into_iter()
            .filter(|m| m.queue == Queue::Poll)
            .count();
        assert_eq!(queued, 1, "one look queued at minute {minute}");
        for m in app.queue.receive(Queue::Poll, 10, Duration::seconds(30)) {
            looks += 1;
            // Past 20 minutes, three looks of four meet a 429 storm with a
            // long Retry-After, or a 503; the fourth sees the job running.
            if minute > 20 {
                match looks % 4 {
                    1 => app.genace.answer_status_with(429, Some("600")),
                    2 => app.genace.answer_status_with(503, None),
                    3 => app.genace.answer_status_with(429, Some("900")),
                    _ => {}
                }
            }
            handle_body(&poller, &m.body).await.unwrap();
            assert!(app.queue.delete(m.id, m.receipt));
        }
    }
    assert!(looks > 20, "the chain went on: {looks} looks");
    assert_eq!(record(&app, &id).await.phase, genace_core::record::Phase::Accepted);
}
