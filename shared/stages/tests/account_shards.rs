//! The stages over an account split into shards ([`genace_core::shard`]),
//! on the in-memory adapters: a claim goes to its operation's home shard,
//! and one woken from a wait takes a free slot wherever the account has
//! one.

use chrono::{TimeZone, Utc};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_core::messages::Queue;
use genace_core::shard::AccountShards;
use genace_memory::{MemoryApp, memory_app};
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::dispatch::{Dispatched, PostResult};
use genace_stages::ports::clock::Clock;
use genace_stages::ports::table::prelude::*;
use serde_json::json;

/// An app whose account of two slots is split into two shards of one: the
/// limits split by a first read of the account, as on a new table.
async fn sharded_app() -> (MemoryApp, AccountShards) {
    let shards = AccountShards::new(2).unwrap();
    let mut app = memory_app(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
    app.config.policy.account_shards = shards;
    app.store = app
        .store
        .clone()
        .with_account_limit(Some(2))
        .with_account_shards(shards);
    app.store.account_shards().await.unwrap();
    (app, shards)
}

async fn submit(app: &MemoryApp, key: &str) -> OperationId {
    let body = json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": "a lighthouse"}});
    let intent = Intent::parse(&body, None).unwrap();
    let tenant = TenantId::parse("tenant-shards").unwrap();
    match app.api().submit(&tenant, &intent, app.clock.now()).await.unwrap() {
        Submitted::New(rec) => rec.operation_id,
        other => panic!("{other:?}"),
    }
}

/// Two intents whose operations have the same home shard.
async fn same_home(app: &MemoryApp, shards: AccountShards) -> (OperationId, OperationId, u16) {
    let mut by_home: [Option<OperationId>; 2] = [None, None];
    for i in 0.. {
        let id = submit(app, &format!("k{i}")).await;
        let rec = app.store.get(&id, app.clock.now()).await.unwrap().unwrap();
        let home = shards.home(&rec);
        match by_home[usize::from(home)].take() {
            Some(first) => return (first, id, home),
            None => by_home[usize::from(home)] = Some(id),
        }
    }
    unreachable!()
}

/// The second operation finds its home shard full and waits there, though
/// the other shard's slot is free; the wake-up its wait sends lets it claim
/// that slot at once instead of waiting for the first job to end.
#[tokio::test]
async fn a_woken_operation_takes_a_free_slot_on_another_shard() {
    let (app, shards) = sharded_app().await;
    let (first, second, home) = same_home(&app, shards).await;
    let dispatcher = app.dispatcher();
    assert_eq!(
        dispatcher.dispatch(&first).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::WaitingForCapacity,
        "its home shard's one slot is taken"
    );
    let wakes: Vec<String> = app
        .queue
        .messages()
        .into_iter()
        .filter(|m| m.queue == Queue::Wake)
        .map(|m| m.body)
        .collect();
    assert!(
        wakes.iter().any(|b| b.contains(second.as_str())),
        "the account has a free slot, so its wait woke it: {wakes:?}"
    );
    assert_eq!(
        dispatcher.dispatch(&second).await.unwrap(),
        Dispatched::Posted(PostResult::Accepted)
    );
    let rec = app.store.get(&second, app.clock.now()).await.unwrap().unwrap();
    assert_eq!(rec.account_shard, Some(1 - home), "admitted on the other shard");
    let shards_now = app.store.account_shards().await.unwrap();
    assert_eq!(
        shards_now.iter().map(|s| (s.in_flight, s.queued)).collect::<Vec<_>>(),
        [(1, 0), (1, 0)]
    );
    assert_eq!(app.genace.posts().len(), 2);
}

/// A fresh claim goes to its home shard, and its record says which.
#[tokio::test]
async fn a_fresh_claim_is_admitted_on_its_home_shard() {
    let (app, shards) = sharded_app().await;
    let id = submit(&app, "fresh").await;
    let rec = app.store.get(&id, app.clock.now()).await.unwrap().unwrap();
    let home = shards.home(&rec);
    app.dispatcher().dispatch(&id).await.unwrap();
    let claimed = app.store.get(&id, app.clock.now()).await.unwrap().unwrap();
    assert_eq!(claimed.account_shard, Some(home));
    let shards_now = app.store.account_shards().await.unwrap();
    assert_eq!(shards_now[usize::from(home)].in_flight, 1);
    assert_eq!(shards_now[usize::from(1 - home)].in_flight, 0);
}
