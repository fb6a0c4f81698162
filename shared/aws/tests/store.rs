//! What only the DynamoDB store and provisioning promise (request counts,
//! the provisioned resources, timeouts), against the local AWS endpoint. The
//! behaviour every store shares is in `store_contract.rs`.

use chrono::Utc;
use genace_aws::clients as aws;
use genace_aws::provision;
use genace_aws::schema::DUE_INDEX;
use genace_core::record::OperationRecord;
use genace_localaws::{LocalAws, claimed};
use genace_stages::ports::table::Applied;
use genace_stages::ports::table::Created;
use genace_stages::ports::table::StoreError;
use genace_stages::ports::table::prelude::*;

fn record(key: &str, prompt: &str) -> OperationRecord {
    genace_localaws::intent_record("tenant-a", key, prompt)
}

#[tokio::test]
async fn create_then_duplicate_returns_the_stored_record_in_one_request() {
    let env = LocalAws::fresh().await;
    let (store, counter) = env.counted_store();
    let rec = record("k1", "p");
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    let before = counter.get();
    let dup = record("k1", "changed");
    match store.create(&dup, Utc::now()).await.unwrap() {
        Created::Existing(existing) => assert_eq!(*existing, rec),
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(counter.get() - before, 1, "a duplicate costs exactly one request");
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), Some(rec));
}

#[tokio::test]
async fn a_transition_that_changes_nothing_sends_no_request() {
    let env = LocalAws::fresh().await;
    let (store, counter) = env.counted_store();
    let rec = record("k3", "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let claimed = claimed(&rec, "tok");
    let before = counter.get();
    assert_eq!(store.apply(&rec, &claimed).await.unwrap(), Applied::Written);
    assert_eq!(counter.get() - before, 1, "one conditional UpdateItem");
    let before = counter.get();
    assert_eq!(store.apply(&claimed, &claimed).await.unwrap(), Applied::Unchanged);
    assert_eq!(counter.get(), before, "no write when nothing changed");
}

#[tokio::test]
async fn provisioning_creates_the_index_ttl_and_dead_letter_queues_idempotently() {
    let env = LocalAws::fresh().await;
    let (ddb, sqs, s3) = (aws::dynamodb(&env.sdk), aws::sqs(&env.sdk), aws::s3(&env.sdk));
    // Running it again changes nothing and fails nothing.
    let again = provision::ensure_all(&env.sdk, &env.names).await.unwrap();
    assert_eq!(again, env.queues);

    let table = ddb
        .describe_table()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let gsi = &table.global_secondary_indexes()[0];
    assert_eq!(gsi.index_name(), Some(DUE_INDEX));
    let keys: Vec<_> = gsi.key_schema().iter().map(|k| k.attribute_name()).collect();
    assert_eq!(keys, ["due_pk", "due_at"]);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at"));

    for url in [
        &env.queues.dispatch,
        &env.queues.poll,
        &env.queues.deliver,
        &env.queues.recovery,
    ] {
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let policy: serde_json::Value =
            serde_json::from_str(&attrs[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy]).unwrap();
        assert!(
            policy["deadLetterTargetArn"].as_str().unwrap().ends_with("-dlq"),
            "{url}: {policy}"
        );
        // The recovery queue holds job ids: it outlasts a long table outage.
        let receives = if url == &env.queues.recovery {
            provision::RECOVERY_MAX_RECEIVE_COUNT
        } else {
            provision::MAX_RECEIVE_COUNT
        };
        assert_eq!(
            policy["maxReceiveCount"]
                .as_u64()
                .or_else(|| policy["maxReceiveCount"].as_str()?.parse().ok()),
            Some(receives as u64),
            "{url}"
        );
        assert_eq!(
            attrs[&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod],
            "1209600",
            "{url}: kept 14 days"
        );
    }
    s3.head_bucket().bucket(&env.names.bucket).send().await.unwrap();
}

/// A DynamoDB endpoint that accepts connections and never answers: every
/// request must still end, in an error, within the client's budget.
#[tokio::test]
async fn a_hung_table_endpoint_fails_within_the_sdk_budget_instead_of_hanging() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    // The client is configured exactly as `aws::load` configures it, pointed at the hung endpoint.
    let sdk = aws::load().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .endpoint_url(format!("http://{addr}"))
        .build();
    let store = genace_aws::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), "hung");
    let rec = record("k-hung", "p");
    let outcome = tokio::time::timeout(
        aws::SMALL_REQUESTS.operation + std::time::Duration::from_secs(10),
        store.get(&rec.operation_id, Utc::now()),
    )
    .await
    .expect("the request ended on its own timeout");
    assert!(
        matches!(&outcome, Err(StoreError::Service(e)) if e.contains("timed out")),
        "{outcome:?}"
    );
}

/// Requests one wake-up costs on DynamoDB with `idle` tenants beside the
/// one that waits: each idle tenant holds a ledger with a limit of its own
/// and waits for nothing.
async fn wake_requests_beside(idle: usize) -> usize {
    use genace_core::machine::{self, Input, Policy};
    let env = LocalAws::fresh().await;
    let store = env.store().with_account_limit(Some(2));
    let now = Utc::now();
    for i in 0..idle {
        let tenant = genace_core::domain::TenantId::parse(&format!("idle-{i}")).unwrap();
        store.set_max_in_flight(&tenant, Some(4)).await.unwrap();
    }
    for key in ["w1", "w2"] {
        let rec = genace_localaws::intent_record("waits", key, "p");
        store.create(&rec, now).await.unwrap();
        let next = machine::transition(&rec, Input::CapacityReached, now, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
    }
    let (counted, counter) = env.counted_store();
    let counted = counted.with_account_limit(Some(2));
    let queue = env.queue();
    let before = counter.get();
    let woken = genace_stages::pipeline::wake::wake(&counted, &queue).await.unwrap();
    assert!(woken >= 1, "the waiting tenant is woken");
    counter.get() - before
}

/// Found at scale: every wake-up read every tenant's ledger, one GetItem
/// each. Now it reads the waiting set, so its DynamoDB requests are the
/// same with 2 idle tenants beside the waiting one as with 40.
#[tokio::test]
async fn a_wake_up_costs_the_same_however_many_tenants_are_idle() {
    let few = wake_requests_beside(2).await;
    let many = wake_requests_beside(40).await;
    assert_eq!(
        few, many,
        "a wake-up's requests grew with idle tenants: {few} then {many}"
    );
    assert!(few <= 12, "a wake-up made {few} DynamoDB requests");
}

/// The account's shards across a change of `GENACE_ACCOUNT_SHARDS` on one
/// table: the limits set and learned with one item read back whole with
/// two and are split for them (a lesson saved over the value seen); a job
/// in flight on the second shard is still counted once the deployment goes
/// back to one item, until it ends.
#[tokio::test]
async fn account_limits_and_counts_survive_a_change_of_shards() {
    use genace_core::machine::{self, Input, Policy};
    use genace_core::shard::AccountShards;
    let env = LocalAws::fresh().await;
    let one = env.store().with_account_limit(Some(8));
    let two = env
        .store()
        .with_account_limit(Some(8))
        .with_account_shards(AccountShards::new(2).unwrap());
    one.set_account_limit(Some(6)).await.unwrap();
    assert!(one.learn_account_limit(None, Some(5), None, None).await.unwrap());
    let account = two.account().await.unwrap();
    assert_eq!(
        (account.set_limit, account.learned, account.limit()),
        (Some(6), Some(5), Some(5))
    );
    let parts: Vec<Option<u32>> = two.account_shards().await.unwrap().iter().map(|s| s.limit()).collect();
    assert_eq!(parts, [Some(3), Some(2)]);
    assert!(two.learn_account_limit(Some(5), Some(4), None, None).await.unwrap());
    assert!(
        !two.learn_account_limit(Some(5), Some(3), None, None).await.unwrap(),
        "stale"
    );
    // A job on shard 1, then back to one item.
    let now = Utc::now();
    let rec = genace_localaws::intent_record("tenant-resharded", "r1", "p");
    two.create(&rec, now).await.unwrap();
    let claimed = machine::transition(
        &rec,
        Input::ClaimDispatch { token: "t", shard: 1 },
        now,
        &Policy::default(),
    )
    .unwrap();
    two.apply(&rec, &claimed).await.unwrap();
    let account = one.account().await.unwrap();
    assert_eq!(
        (account.in_flight, account.learned, account.set_limit),
        (1, Some(4), Some(6))
    );
    assert!(
        one.learn_account_limit(Some(4), Some(3), None, None).await.unwrap(),
        "one item again: its own format"
    );
    let shards = one.account_shards().await.unwrap();
    assert_eq!(shards.len(), 2, "the second shard is read while it counts a job");
    assert_eq!(shards[1].limit(), Some(0), "and admits nothing");
    // The job ends: the second shard is no longer read.
    let released = machine::transition(
        &claimed,
        Input::RateLimited {
            token: "t",
            retry_at: now,
            busy: false,
        },
        now,
        &Policy::default(),
    )
    .unwrap();
    one.apply(&claimed, &released).await.unwrap();
    assert_eq!(one.account().await.unwrap().in_flight, 0);
    one.account().await.unwrap();
    assert_eq!(one.account_shards().await.unwrap().len(), 1);
}

/// Found at scale: a plain write to an item that a transaction holds is
/// refused by DynamoDB (`TransactionConflictException`), and lessons and
/// operators' limits written to the account item were lost to it. Now every
/// plain write to an item that transactions also write is sent again: a
/// lesson whose first two answers were conflicts is saved.
#[tokio::test]
async fn a_plain_write_refused_for_a_transaction_is_sent_again() {
    use genace_localaws::TransactionConflicts;
    let env = LocalAws::fresh().await;
    let conflicts = TransactionConflicts::new("UpdateItem", 2);
    let store = env.conflicting_store(&conflicts);
    assert!(
        store.learn_account_limit(None, Some(3), None, None).await.unwrap(),
        "the lesson is saved over the value seen"
    );
    assert_eq!(conflicts.answered(), 2, "two conflicts met first");
    assert_eq!(env.store().account().await.unwrap().learned, Some(3));
    // An operator's limit, and a tenant's own limit, alike.
    let conflicts = TransactionConflicts::new("UpdateItem", 2);
    let store = env.conflicting_store(&conflicts);
    assert_eq!(store.set_account_limit(Some(7)).await.unwrap().set_limit, Some(7));
    let tenant = genace_core::domain::TenantId::parse("tenant-a").unwrap();
    let conflicts = TransactionConflicts::new("UpdateItem", 2);
    let store = env.conflicting_store(&conflicts);
    assert_eq!(
        store.set_max_in_flight(&tenant, Some(2)).await.unwrap().max_in_flight,
        Some(2)
    );
    assert_eq!(conflicts.answered(), 2);
}

/// Found at scale: a wake-up that found a drained tenant in the waiting set
/// failed whole when that tenant's ledger was inside a transaction (its own
/// jobs ending), so the freed slot idled. The removal is best effort: every
/// try refused, the read still answers with the tenants that wait.
#[tokio::test]
async fn a_drained_tenant_whose_ledger_is_busy_does_not_fail_the_waiting_read() {
    use genace_core::machine::{self, Input, Policy};
    use genace_localaws::TransactionConflicts;
    let env = LocalAws::fresh().await;
    let store = env.store();
    let now = Utc::now();
    let mut waiting = Vec::new();
    for tenant in ["drains", "waits"] {
        let rec = genace_localaws::intent_record(tenant, "k", "p");
        store.create(&rec, now).await.unwrap();
        let next = machine::transition(&rec, Input::CapacityReached, now, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
        waiting.push(next);
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    // The first tenant's only waiter is claimed: it has drained, and its
    // entry waits for the next read to drop it.
    store.apply(&waiting[0], &claimed(&waiting[0], "tok")).await.unwrap();
    let conflicts = TransactionConflicts::new("UpdateItem", usize::MAX);
    let busy = env.conflicting_store(&conflicts);
    let read = busy.waiting_ledgers(10).await.unwrap();
    let tenants: Vec<&str> = read.iter().map(|l| l.tenant_id.as_str()).collect();
    assert_eq!(tenants, ["waits"]);
    assert!(conflicts.answered() >= 1, "the removal met a transaction");
}

/// Found at scale: splitting the account's limits again for a new shard
/// count was conditional only on the count they were split for, so an
/// operator's limit written between its read and its write was undone by
/// the older one it had read. Now the split holds to everything it read,
/// and reads again when a rival came between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_of_the_limits_never_undoes_a_newer_limit() {
    use genace_core::shard::AccountShards;
    use genace_localaws::RivalWrite;
    let env = LocalAws::fresh().await;
    let one = env.store();
    one.set_account_limit(Some(10)).await.unwrap();
    // A deployment with two shards reads the limit of 10 and splits it;
    // between its read and its split, an operator sets 4 through a
    // deployment still on one shard.
    let rival_store = env.store();
    let rival = RivalWrite::new("TransactWriteItems", move || async move {
        rival_store.set_account_limit(Some(4)).await.unwrap();
    });
    let two = env
        .store_with_rival(&rival)
        .with_account_shards(AccountShards::new(2).unwrap());
    let account = two.account().await.unwrap();
    assert!(rival.ran(), "the operator's write came between");
    assert_eq!(account.set_limit, Some(4), "the split read again");
    let fresh = env.store().with_account_shards(AccountShards::new(2).unwrap());
    assert_eq!(fresh.account().await.unwrap().set_limit, Some(4));
    let parts: Vec<Option<u32>> = fresh
        .account_shards()
        .await
        .unwrap()
        .iter()
        .map(|s| s.limit())
        .collect();
    assert_eq!(parts, [Some(2), Some(2)], "the newer limit, split");
}

/// The split for a new shard count, and an operator's limit, are over the
/// jobs each shard already counts. An even split let the new shards admit
/// their parts beside a full shard 0 (17 jobs against 10 after a raise
/// from one shard to four), and a lowered limit let an emptier shard admit
/// while the account was already at it.
#[tokio::test]
async fn a_split_over_the_jobs_counted_admits_nothing_past_the_limit() {
    use genace_core::shard::AccountShards;
    let env = LocalAws::fresh().await;
    let one = env.store();
    one.set_account_limit(Some(10)).await.unwrap();
    assert_eq!(genace_localaws::claims_admitted(&one, "before", 0, 12).await, 10);
    let four = env.store().with_account_shards(AccountShards::new(4).unwrap());
    let parts: Vec<Option<u32>> = four.account_shards().await.unwrap().iter().map(|s| s.limit()).collect();
    assert_eq!(
        parts,
        [Some(10), Some(0), Some(0), Some(0)],
        "shard 0 keeps its jobs' slots"
    );
    for shard in 1..4 {
        assert_eq!(
            genace_localaws::claims_admitted(&four, "raised", shard, 3).await,
            0,
            "shard {shard}"
        );
    }
    let account = four.account().await.unwrap();
    assert_eq!((account.in_flight, account.set_limit), (10, Some(10)));
    // On two shards under a fresh limit of 10: 5 jobs on shard 0, 1 on
    // shard 1; then lowered to 6, which the account holds already.
    let fresh = LocalAws::fresh().await;
    let two = fresh.store().with_account_shards(AccountShards::new(2).unwrap());
    two.set_account_limit(Some(10)).await.unwrap();
    assert_eq!(genace_localaws::claims_admitted(&two, "first", 0, 5).await, 5);
    assert_eq!(genace_localaws::claims_admitted(&two, "first", 1, 1).await, 1);
    two.set_account_limit(Some(6)).await.unwrap();
    assert_eq!(
        genace_localaws::claims_admitted(&two, "lowered", 1, 3).await,
        0,
        "the emptier shard"
    );
    assert_eq!(genace_localaws::claims_admitted(&two, "lowered", 0, 3).await, 0);
    assert_eq!(two.account().await.unwrap().in_flight, 6);
}

/// A claim on another shard than 0, landing between an operator's read of
/// the account and the write of the new parts, cancels the write on that
/// shard's condition: the write reads again and lands over the new counts
/// (it answered a service error before). Over the new limit, every part is
/// 0, so the account admits nothing more.
#[tokio::test]
async fn a_claim_between_the_read_and_the_parts_is_read_again() {
    use genace_core::shard::AccountShards;
    let env = LocalAws::fresh().await;
    let shards = AccountShards::new(2).unwrap();
    let two = env.store().with_account_shards(shards);
    two.set_account_limit(Some(10)).await.unwrap();
    assert_eq!(genace_localaws::claims_admitted(&two, "first", 0, 5).await, 5);
    assert_eq!(genace_localaws::claims_admitted(&two, "first", 1, 1).await, 1);
    let rival_store = env.store().with_account_shards(shards);
    let rival = genace_localaws::RivalWrite::new("TransactWriteItems", move || async move {
        assert_eq!(genace_localaws::claims_admitted(&rival_store, "between", 1, 1).await, 1);
    });
    let operator = env.store_with_rival(&rival).with_account_shards(shards);
    let account = operator.set_account_limit(Some(6)).await.unwrap();
    assert!(rival.ran(), "the claim came between");
    assert_eq!((account.in_flight, account.set_limit), (7, Some(6)));
    let parts: Vec<Option<u32>> = two.account_shards().await.unwrap().iter().map(|s| s.limit()).collect();
    assert_eq!(parts, [Some(0), Some(0)], "over the limit: nothing admitted");
    for shard in 0..2 {
        assert_eq!(
            genace_localaws::claims_admitted(&two, "over", shard, 2).await,
            0,
            "shard {shard}"
        );
    }
}

/// Found at scale: a tenant short of credits (room under its spend limit,
/// but less than its waiting operation's reservation) was read by every
/// wake-up with free slots, a query and its records each, over up to four
/// reads of the waiting set: 100 such tenants made each dispatch slower
/// than the last. Now a wait for credits parks its tenant, out of every
/// wake-up's read: a wake-up costs the same beside them as without them.
#[tokio::test]
async fn a_wake_up_costs_the_same_beside_a_hundred_tenants_short_of_credits() {
    use genace_core::domain::TenantId;
    use genace_core::machine::{self, Input, Policy};
    let mut costs = Vec::new();
    for short in [0, 100] {
        let env = LocalAws::fresh().await;
        let (store, counter) = env.counted_store();
        store.set_account_limit(Some(4)).await.unwrap();
        store.account().await.unwrap();
        let now = Utc::now();
        let wait = |tenant: String, event: Input<'static>| {
            let store = store.clone();
            async move {
                let rec = genace_localaws::intent_record(&tenant, "k", "p");
                store.create(&rec, now).await.unwrap();
                let next = machine::transition(&rec, event, now, &Policy::default()).unwrap();
                store.apply(&rec, &next).await.unwrap();
            }
        };
        for i in 0..short {
            let tenant = TenantId::parse(&format!("short-{i:03}")).unwrap();
            let limit = genace_core::ledger::millis(0.5);
            store.set_spend_limit(&tenant, Some(limit)).await.unwrap();
            wait(tenant.as_str().to_owned(), Input::SpendLimitReached).await;
        }
        wait("slot-a".to_owned(), Input::CapacityReached).await;
        let queue = genace_memory::MemoryQueue::new(genace_memory::ManualClock::new(now));
        let before = counter.get();
        let woken = genace_stages::pipeline::wake::wake(&store, &queue).await.unwrap();
        assert_eq!(woken, 1, "the one waiting for a slot");
        costs.push(counter.get() - before);
    }
    assert!(
        costs[1] * 10 <= costs[0] * 11,
        "requests per wake-up without and beside them: {costs:?}"
    );
}
