//! The Secrets Manager adapter against the local endpoint (moto over HTTP,
//! through the real SDK).

use genace_aws::SecretsManager;
use genace_aws::clients;
use genace_localaws::LocalAws;
use genace_stages::ports::webhooks::{SecretStore, SecretVault};

fn values(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| (*s).to_owned()).collect())
}

/// An operator's plain secret: read, cached for its version, and rotated
/// the Secrets Manager way (`AWSPREVIOUS` signs for the overlap).
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
    assert_eq!(store.signing_secrets(&name, 0).await.unwrap(), values(&["s3cret"]));
    assert_eq!(store.signing_secrets("genace/webhooks/nobody", 0).await.unwrap(), None);
    // Rotated around this process, under the same version: the cached
    // value serves until it ages out.
    client
        .put_secret_value()
        .secret_id(&name)
        .secret_string("rotated")
        .send()
        .await
        .unwrap();
    assert_eq!(store.signing_secrets(&name, 0).await.unwrap(), values(&["s3cret"]));
    // Then the new value signs first, and the old one too for the overlap.
    let fresh = SecretsManager::new(client.clone(), overlap);
    assert_eq!(
        fresh.signing_secrets(&name, 0).await.unwrap(),
        values(&["rotated", "s3cret"])
    );
    // Once the overlap is over, only the new one.
    let later = SecretsManager::new(client.clone(), chrono::Duration::zero());
    assert_eq!(later.signing_secrets(&name, 0).await.unwrap(), values(&["rotated"]));
    // The first rotation through the vault keeps both values still in
    // their overlap: the current one and the previous one.
    let vault = SecretsManager::new(client, overlap);
    vault.store_secret(&name, "whsec_new").await.unwrap();
    assert_eq!(
        vault.signing_secrets(&name, 1).await.unwrap(),
        values(&["whsec_new", "rotated", "s3cret"])
    );
}

/// An endpoint's secret rotated by the API (another process's vault): a
/// sender that cached the secret signs with the new value from the first
/// read under the rotation's version, and the old value beside it; a
/// second rotation inside the overlap keeps both replaced values.
#[tokio::test]
async fn a_rotation_signs_with_the_new_value_at_once_and_keeps_every_overlapping_one() {
    let env = LocalAws::fresh().await;
    let client = clients::secrets(&env.sdk);
    let name = format!("genace/webhooks/t/{}", uuid::Uuid::new_v4().simple());
    let overlap = chrono::Duration::hours(24);
    let api = SecretsManager::new(client.clone(), overlap);
    let sender = SecretsManager::new(client.clone(), overlap);
    api.store_secret(&name, "whsec_first").await.unwrap();
    assert_eq!(
        sender.signing_secrets(&name, 0).await.unwrap(),
        values(&["whsec_first"])
    );

    api.store_secret(&name, "whsec_second").await.unwrap();
    // Still version 0: the cache may answer (nothing told it otherwise).
    assert_eq!(
        sender.signing_secrets(&name, 0).await.unwrap(),
        values(&["whsec_first"])
    );
    // The endpoint's record names version 1 once the rotation returned.
    assert_eq!(
        sender.signing_secrets(&name, 1).await.unwrap(),
        values(&["whsec_second", "whsec_first"])
    );
    api.store_secret(&name, "whsec_third").await.unwrap();
    assert_eq!(
        sender.signing_secrets(&name, 2).await.unwrap(),
        values(&["whsec_third", "whsec_second", "whsec_first"])
    );
    // With no overlap, a rotation keeps only the new value.
    let strict = SecretsManager::new(client, chrono::Duration::zero());
    strict.store_secret(&name, "whsec_fourth").await.unwrap();
    assert_eq!(
        strict.signing_secrets(&name, 3).await.unwrap(),
        values(&["whsec_fourth"])
    );
}
