//! Deferred redelivery on SQS (moto over HTTP, through the real SDK): a
//! received message's visibility is changed, so it comes back sooner or
//! later than the queue's timeout says. And copies of webhook events
//! go in batches.

use std::time::Duration;

use genace_aws::{SqsReceiptDeferral, clients};
use genace_localaws::LocalAws;
use genace_stages::ports::queue::ReceiptDeferral;

async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, visibility: i32) -> Option<(String, String)> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .visibility_timeout(visibility)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    out.messages
        .unwrap_or_default()
        .into_iter()
        .next()
        .map(|m| (m.body.unwrap(), m.receipt_handle.unwrap()))
}

#[tokio::test]
async fn a_deferred_message_comes_back_when_asked_and_not_before() {
    let env = LocalAws::fresh().await;
    let sqs = clients::sqs(&env.sdk);
    let url = env.queues.webhooks.clone();
    sqs.send_message()
        .queue_url(&url)
        .message_body("event-1")
        .send()
        .await
        .unwrap();
    let redelivery = SqsReceiptDeferral::new(sqs.clone(), &url);

    // Received for an hour, but asked back at once: it is there again.
    let (body, receipt) = receive(&sqs, &url, 3600).await.expect("the message");
    assert_eq!(body, "event-1");
    redelivery.defer_receipt(&receipt, 0).await.unwrap();
    let (_, receipt) = receive(&sqs, &url, 1).await.expect("received again at once");

    // Received for a second, but deferred for an hour: it stays hidden.
    redelivery.defer_receipt(&receipt, 3600).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receive(&sqs, &url, 1).await, None, "deferred past the queue's timeout");

    // A receipt SQS never issued is an error, not a silent success.
    assert!(redelivery.defer_receipt("not-a-receipt", 10).await.is_err());
}

/// A recovery's copies go to the webhook queue ten to a request, each
/// once and in order.
#[tokio::test]
async fn webhook_copies_go_ten_to_a_request() {
    use genace_stages::ports::queue::WorkQueue;
    let env = LocalAws::fresh().await;
    let (queue, requests) = env.counted_queue();
    let copies: Vec<String> = (0..25).map(|i| format!("{{\"to\":\"e\",\"n\":{i}}}")).collect();
    queue.send_webhook_copies(copies.clone()).await.unwrap();
    assert_eq!(requests.get(), 3);
    let mut got = Vec::new();
    while got.len() < copies.len() {
        let drained = env.drain(&env.queues.webhooks).await;
        assert!(!drained.is_empty(), "only {} of the copies arrived", got.len());
        got.extend(drained);
    }
    got.sort();
    let mut sent = copies;
    sent.sort();
    assert_eq!(got, sent);
}
