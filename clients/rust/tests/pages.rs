//! One page of a listing against wiremock: the query and the cursor as
//! sent, the items under the listing's member and the next cursor as read.

use genace_client::{Client, ListQuery};
use serde_json::json;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn one_page_of_cases_credits_and_attempts_with_its_query_and_cursor() {
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/reconciliation-cases"))
        .and(query_param("reason", "outcome_unknown"))
        .and(query_param("limit", "2"))
        .and(query_param("cursor", "c/1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "cases": [{"operation_id": "op-1"}, {"operation_id": "op-2"}], "next_cursor": "c/2"
        })))
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/credits"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"tenants": [{"tenant_id": "a"}], "next_cursor": null})),
        )
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/webhooks/endpoints/ep%201/attempts"))
        .and(query_param("tenant", "acme"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"attempts": [], "next_cursor": null})))
        .mount(&api)
        .await;
    let client = Client::new(&api.uri(), "t");

    let query = ListQuery::new().with("reason", "outcome_unknown").with("limit", 2);
    let cases = client.cases_page(&query, Some("c/1")).await.unwrap();
    assert_eq!(cases.items.len(), 2);
    assert_eq!(cases.items[1]["operation_id"], "op-2");
    assert_eq!(cases.next_cursor.as_deref(), Some("c/2"));

    let credits = client.credits_page(&ListQuery::new(), None).await.unwrap();
    assert_eq!(credits.items, [json!({"tenant_id": "a"})]);
    assert_eq!(credits.next_cursor, None);

    let attempts = client
        .endpoint_attempts_page("ep 1", &ListQuery::new().with("tenant", "acme"), None)
        .await
        .unwrap();
    assert!(attempts.items.is_empty() && attempts.next_cursor.is_none());

    let sent = api.received_requests().await.unwrap();
    assert_eq!(sent[0].url.query(), Some("reason=outcome_unknown&limit=2&cursor=c%2F1"));
}
