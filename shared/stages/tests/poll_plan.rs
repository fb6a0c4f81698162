//! The poll plan on the in-memory adapters: without data, the age-based
//! schedule; with a class's render times learned, the first look waits for
//! the early quantile and the next ones come densely through the likely
//! window; the end, once seen, is on the record with the looks it took,
//! and its render time is added to the class.

use chrono::{Duration, TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::messages::{PollHistory, Queue, WorkMessage};
use genace_core::record::OperationRecord;
use genace_core::render::RenderClass;
use genace_stages::api::intake::Submitted;
use genace_stages::memory::{MemoryApp, memory_app};
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
    let id = match app.intake().submit(&tenant, &intent, app.clock.now()).await.unwrap() {
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
    assert!(plan.early > 20.0 && plan.late < 40.0, "{plan:?}");
    // Inside the window the looks are dense: a second and 4 % of the median.
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
    assert_eq!(
        planned,
        Polled::Running { next_poll_seconds: 10 },
        "past the window: by age"
    );
}
