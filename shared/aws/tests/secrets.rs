//! The Secrets Manager adapter against the local endpoint (moto over HTTP,
//! through the real SDK).

use genace_aws::SecretsManager;
use genace_aws::clients;
use genace_aws::testkit::LocalAws;
use genace_stages::webhooks::SecretStore;

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
    let store = SecretsManager::new(client.clone());
    assert_eq!(store.secret(&name).await.unwrap().as_deref(), Some("s3cret"));
    assert_eq!(store.secret("genace/webhooks/nobody").await.unwrap(), None);
    // A rotation takes effect once the cached value ages out, not before.
    client
        .put_secret_value()
        .secret_id(&name)
        .secret_string("rotated")
        .send()
        .await
        .unwrap();
    assert_eq!(store.secret(&name).await.unwrap().as_deref(), Some("s3cret"));
    let fresh = SecretsManager::new(client);
    assert_eq!(fresh.secret(&name).await.unwrap().as_deref(), Some("rotated"));
}
