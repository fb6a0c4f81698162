//! What must hold at scale, on DynamoDB and SQS (moto) through the real
//! adapters, with wiremock as Genace: a woken claim POSTs before it wakes
//! anyone, and the sweep's capacity look comes before any due item however
//! long the backlog. The same promises are tested on the in-memory adapters
//! in `genace-stages`' `stages_in_memory`.

use std::time::Duration;

use chrono::Utc;
use genace_aws::{DynamoStore, S3Store, SqsQueue};
use genace_core::domain::{Intent, OperationId, TenantId};
use genace_localaws::LocalAws;
use genace_memory::ManualClock;
use genace_outbound::{GenaceClient, GenaceConfig};
use genace_stages::api::context::Api;
use genace_stages::api::intake::Submitted;
use genace_stages::pipeline::dispatch::{Dispatched, Dispatcher, PostResult};
use genace_stages::pipeline::sweep::Sweeper;
use genace_stages::ports::table::prelude::*;
use genace_stages::ports::{Parts, Unused};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

struct Rig {
    env: LocalAws,
    genace: MockServer,
    dispatcher: Dispatcher<Parts<DynamoStore, SqsQueue, S3Store, GenaceClient>>,
    api: Api<Parts<DynamoStore, SqsQueue, S3Store>>,
}

/// An account of one slot, and a Genace that accepts every POST after
/// `answer_after`.
async fn rig(answer_after: Duration) -> Rig {
    let env = LocalAws::fresh().await;
    let genace = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(
            ResponseTemplate::new(202)
                .set_body_json(json!({"job_id": "job-scale", "state": "queued", "held_credits": 1}))
                .set_delay(answer_after),
        )
        .mount(&genace)
        .await;
    let mut config = env.config.clone();
    config.max_in_flight = Some(1);
    let mut gconf = GenaceConfig::new(genace.uri(), "key");
    gconf.timeout = Duration::from_secs(10);
    let app = genace_app::from_sdk(&env.sdk, config).with_genace(GenaceClient::new(gconf).unwrap());
    let (dispatcher, api) = (app.dispatcher(), app.api());
    Rig {
        env,
        genace,
        dispatcher,
        api,
    }
}

impl Rig {
    /// A new intent of `tenant-a`; api's dispatch message is dropped, as
    /// the tests dispatch by hand.
    async fn intent(&self, key: &str) -> OperationId {
        let body = json!({"operation_key": key, "media_type": "image",
            "specification": {"model": "genace-image-1", "prompt": key}});
        let intent = Intent::parse(&body, None).unwrap();
        let tenant = TenantId::parse("tenant-a").unwrap();
        let Submitted::New(rec) = self.api.submit(&tenant, &intent, Utc::now()).await.unwrap() else {
            panic!("expected a new operation")
        };
        rec.operation_id
    }

    async fn posts(&self) -> usize {
        self.genace.received_requests().await.unwrap().len()
    }

    /// The operation ids on the wake queue, which are taken off it.
    async fn woken(&self) -> Vec<String> {
        self.env
            .drain(&self.env.queues.wake)
            .await
            .iter()
            .map(|b| serde_json::from_str::<serde_json::Value>(b).unwrap()["operation_id"].to_string())
            .collect()
    }

    /// One slot taken by `a`; `b` and `c` wait for one. The account then
    /// grows to three without waking anyone, as if the wake-up were lost.
    async fn one_running_two_waiting(&self) -> [OperationId; 3] {
        let ids = [self.intent("a").await, self.intent("b").await, self.intent("c").await];
        assert_eq!(
            self.dispatcher.dispatch(&ids[0]).await.unwrap(),
            Dispatched::Posted(PostResult::Accepted)
        );
        for waiting in &ids[1..] {
            assert_eq!(
                self.dispatcher.dispatch(waiting).await.unwrap(),
                Dispatched::WaitingForCapacity
            );
        }
        self.env.drain(&self.env.queues.dispatch).await;
        self.env.drain(&self.env.queues.poll).await;
        self.env.store().set_account_limit(Some(3)).await.unwrap();
        assert!(self.woken().await.is_empty(), "nothing woken yet");
        ids
    }
}

/// A woken claim sends its POST before anything else: while Genace takes
/// its time to answer, no wake-up has gone out; once the outcome is
/// committed, the next waiter is woken.
#[tokio::test]
async fn a_woken_claim_posts_before_it_wakes_the_next() {
    let rig = rig(Duration::from_millis(1500)).await;
    let [_, b, c] = rig.one_running_two_waiting().await;
    let during_post = async {
        while rig.posts().await < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The POST has arrived and is not answered yet.
        rig.woken().await
    };
    let (dispatched, woken_during_post) = tokio::join!(rig.dispatcher.dispatch(&b), during_post);
    assert_eq!(dispatched.unwrap(), Dispatched::Posted(PostResult::Accepted));
    assert_eq!(
        woken_during_post,
        Vec::<String>::new(),
        "a wake-up went out between the claim and its POST"
    );
    assert_eq!(
        rig.woken().await,
        vec![format!("\"{c}\"")],
        "the next waiter is woken after the outcome"
    );
}

/// The messages on `url` with when each was sent (ms), taken off it.
async fn sent(env: &LocalAws, url: &str) -> Vec<(String, i64)> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let sqs = genace_aws::clients::sqs(&env.sdk);
    let mut found = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return found;
        }
        for m in messages {
            let at = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|t| t.parse().ok())
                .expect("a sent timestamp");
            found.push((m.body().unwrap_or_default().to_owned(), at));
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
    }
}

/// Under a due backlog longer than one run, the sweep makes its capacity
/// look first: a waiter whose wake-up was lost is woken before the first
/// due item is sent on, and even when the run's budget ends before the
/// first due item.
#[tokio::test]
async fn the_sweep_looks_at_capacity_first_under_a_due_backlog() {
    let rig = rig(Duration::ZERO).await;
    let [_, b, c] = rig.one_running_two_waiting().await;
    for i in 0..150 {
        rig.intent(&format!("backlog-{i}")).await;
    }
    rig.env.drain(&rig.env.queues.dispatch).await;
    // Ten minutes on: every intent is past its dispatch grace.
    let clock = ManualClock::new(Utc::now() + chrono::Duration::minutes(10));
    let mut sweeper = Sweeper::<Parts<DynamoStore, SqsQueue, S3Store, Unused, Unused, ManualClock>>::new(
        rig.env.store(),
        SqsQueue::new(genace_aws::clients::sqs(&rig.env.sdk), rig.env.queues.clone()),
        rig.env.config.clone(),
        clock,
    );
    sweeper.page_size = 20;
    // No budget at all: no due item is touched, and the look is made.
    sweeper.budget = Duration::ZERO;
    let report = sweeper.run().await.unwrap();
    assert!(report.truncated, "{report:?}");
    assert_eq!(report.examined, 0, "{report:?}");
    assert!(
        rig.woken().await.contains(&format!("\"{b}\"")),
        "the lost wake-up was repaired"
    );
    // Lost again; with a budget, the run wakes it before it sends on the
    // first of the 150 due items.
    sweeper.budget = Duration::from_secs(40);
    let next = sweeper.run().await.unwrap();
    assert!(next.examined >= 150 && next.dispatch >= 150, "{next:?}");
    let woken = sent(&rig.env, &rig.env.queues.wake).await;
    let wake_at = woken
        .iter()
        .find(|(body, _)| body.contains(b.as_str()))
        .map(|(_, at)| *at)
        .expect("woken again");
    // The due items, not the looks the two waits queued once the indexes
    // show them (docs/decisions/0006).
    let first_due = sent(&rig.env, &rig.env.queues.dispatch)
        .await
        .iter()
        .filter(|(body, _)| ![&b, &c].iter().any(|w| body.contains(w.as_str())))
        .map(|(_, at)| *at)
        .min()
        .expect("due items sent on");
    assert!(
        wake_at <= first_due,
        "the wake-up was sent at {wake_at}, after the first due item at {first_due}"
    );
}

/// A tenant whose ledger began waiting before the waiting set existed (no
/// `wait_pk` on its ledger item) is in no wake-up's read. The sweep sees
/// the set hold fewer waiting operations than the account counts, puts
/// the tenant back in it, and wakes its oldest waiter.
#[tokio::test]
async fn the_sweep_puts_a_tenant_waiting_outside_the_set_back_in_it() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let rig = rig(Duration::ZERO).await;
    let [_, b, _] = rig.one_running_two_waiting().await;
    // As written before the waiting set existed.
    genace_aws::clients::dynamodb(&rig.env.sdk)
        .update_item()
        .table_name(&rig.env.names.table)
        .key("pk", AttributeValue::S(genace_aws::schema::ledger_key("tenant-a")))
        .update_expression("REMOVE wait_pk, wait_sk")
        .send()
        .await
        .unwrap();
    let store = rig.env.store();
    assert!(store.waiting_ledgers(10).await.unwrap().is_empty(), "stranded");
    let sweeper = Sweeper::<Parts<DynamoStore, SqsQueue, S3Store>>::new(
        store.clone(),
        SqsQueue::new(genace_aws::clients::sqs(&rig.env.sdk), rig.env.queues.clone()),
        rig.env.config.clone(),
        genace_stages::ports::clock::SystemClock,
    );
    sweeper.run().await.unwrap();
    let woken = rig.woken().await;
    assert!(woken.contains(&format!("\"{b}\"")), "{woken:?}");
    let back: Vec<String> = store
        .waiting_ledgers(10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.tenant_id)
        .collect();
    assert_eq!(back, ["tenant-a"]);
}
