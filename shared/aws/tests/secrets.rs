//! The Secrets Manager adapter against the local endpoint (moto over HTTP,
//! through the real SDK).

use genace_aws::SecretsManager;
use genace_aws::clients;
use genace_aws::testkit::LocalAws;
use genace_stages::webhooks::SecretStore;

fn values(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| (*s).to_owned()).collect())
}

#[tokio::test]
async fn a_secret_is_read_a_missing_one_is_none_and_reads_are_cached() {
    let env = LocalAws::fresh().await;
    let client = clients::secrets(&env.sdk);
    let name = format!("genace/webhooks/{}", uuid::Uuid::new_v4().simple());
    client
        .create_secret()
        .name(&name)
        .secret_string("s3cret")
        .send()
        .await
        .unwrap();
    let overlap = chrono::Duration::hours(24);
    let store = SecretsManager::new(client.clone(), overlap);
    assert_eq!(store.signing_secrets(&name).await.unwrap(), values(&["s3cret"]));
    assert_eq!(store.signing_secrets("genace/webhooks/nobody").await.unwrap(), None);
    // A rotation takes effect once the cached value ages out, not before.
    client
        .put_secret_value()
        .secret_id(&name)
        .secret_string("rotated")
        .send()
        .await
        .unwrap();
    assert_eq!(store.signing_secrets(&name).await.unwrap(), values(&["s3cret"]));
    // Then the new value signs first, and the old one too for the overlap.
    let fresh = SecretsManager::new(client.clone(), overlap);
    assert_eq!(
        fresh.signing_secrets(&name).await.unwrap(),
        values(&["rotated", "s3cret"])
    );
    // Once the overlap is over, only the new one.
    let later = SecretsManager::new(client, chrono::Duration::zero());
    assert_eq!(later.signing_secrets(&name).await.unwrap(), values(&["rotated"]));
}
