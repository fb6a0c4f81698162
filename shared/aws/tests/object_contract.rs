//! One contract for every `ObjectStore`: each assertion runs against the
//! in-memory bucket and the S3 store on the local endpoint (moto over HTTP,
//! through the real SDK).

use genace_stages::ports::outputs::MAX_DELETE_KEYS;
use genace_stages::ports::outputs::ObjectStore;
use genace_stages::ports::outputs::b64_sha256;
use genace_stages::ports::outputs::composite_sha256;

/// What deliver relies on: a checksum the store returns never contradicts
/// ours. S3 returns the whole-object SHA-256 of a put and `<b64>-<parts>`
/// for a multipart object; moto returns none for a put and the composite
/// digest without its `-<parts>` suffix, which deliver does not compare.
fn consistent(stored: Option<&str>, expected: &str) -> bool {
    match stored {
        None => true,
        Some(s) => s == expected || expected.split('-').next() == Some(s) && expected.contains('-'),
    }
}

async fn a_whole_put_is_read_back_with_its_checksum<O: ObjectStore>(objects: O) {
    let data = b"one small output".to_vec();
    let sha = b64_sha256(&data);
    assert_eq!(objects.head("outputs/a/0.mp4").await.unwrap(), None);
    objects
        .put("outputs/a/0.mp4", "video/mp4", data.clone(), &sha)
        .await
        .unwrap();
    let head = objects.head("outputs/a/0.mp4").await.unwrap().unwrap();
    assert_eq!(head.bytes, data.len() as u64);
    assert_eq!(head.content_type.as_deref(), Some("video/mp4"));
    assert!(consistent(head.checksum_sha256.as_deref(), &sha), "{head:?}");
    let link = objects
        .presign_get("outputs/a/0.mp4", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert!(link.contains("outputs/a/0.mp4"), "{link}");
}

async fn a_multipart_upload_is_one_object_with_the_composite_checksum<O: ObjectStore>(objects: O) {
    let key = "outputs/b/0.mp4";
    let upload = objects.begin(key, "video/mp4").await.unwrap();
    let first = vec![7u8; 5 * 1024 * 1024];
    let second = b"tail".to_vec();
    let parts = vec![
        objects.put_part(key, &upload, 1, first.clone()).await.unwrap(),
        objects.put_part(key, &upload, 2, second.clone()).await.unwrap(),
    ];
    assert_eq!(parts[0].sha256, b64_sha256(&first));
    assert_eq!(
        objects.head(key).await.unwrap(),
        None,
        "nothing visible before completion"
    );
    objects.complete(key, &upload, &parts).await.unwrap();
    let head = objects.head(key).await.unwrap().unwrap();
    assert_eq!(head.bytes, (first.len() + second.len()) as u64);
    assert!(
        consistent(head.checksum_sha256.as_deref(), &composite_sha256(&parts)),
        "{head:?}"
    );
    assert!(!consistent(Some("another"), &composite_sha256(&parts)));
}

async fn an_aborted_upload_leaves_nothing<O: ObjectStore>(objects: O) {
    let key = "outputs/c/0.png";
    let upload = objects.begin(key, "image/png").await.unwrap();
    objects.put_part(key, &upload, 1, vec![1; 1024]).await.unwrap();
    objects.abort(key, &upload).await.unwrap();
    assert_eq!(objects.head(key).await.unwrap(), None);
}

async fn a_deleted_object_is_gone_and_a_second_delete_succeeds<O: ObjectStore>(objects: O) {
    let key = "outputs/f/0.mp4";
    let data = b"erase me".to_vec();
    let sha = b64_sha256(&data);
    objects.put(key, "video/mp4", data, &sha).await.unwrap();
    objects
        .put("outputs/f/1.mp4", "video/mp4", b"keep".to_vec(), &b64_sha256(b"keep"))
        .await
        .unwrap();
    objects.delete_all(&[key.to_owned()]).await.unwrap();
    assert_eq!(objects.head(key).await.unwrap(), None);
    objects
        .delete_all(&[key.to_owned(), "outputs/f/never.mp4".to_owned()])
        .await
        .unwrap();
    objects.delete_all(&[]).await.unwrap();
    assert!(
        objects.head("outputs/f/1.mp4").await.unwrap().is_some(),
        "only that key"
    );
}

/// Listing a prefix gives its keys in order, none of a longer sibling
/// prefix, at most the limit, across pages.
async fn a_prefix_lists_its_keys_in_order_and_no_others<O: ObjectStore>(objects: O) {
    // Unique per run: the bucket may outlive one test run.
    let run = format!("outputs/list-{}", uuid::Uuid::new_v4().simple());
    let put = |key: String| {
        let objects = &objects;
        async move {
            objects
                .put(&key, "image/png", b"x".to_vec(), &b64_sha256(b"x"))
                .await
                .unwrap();
        }
    };
    for n in [2, 0, 1] {
        put(format!("{run}/op/output-{n}.png")).await;
    }
    put(format!("{run}/op2/output-0.png")).await;
    let listed = objects.list(&format!("{run}/op/"), 10).await.unwrap();
    let want: Vec<String> = (0..3).map(|n| format!("{run}/op/output-{n}.png")).collect();
    assert_eq!(listed, want);
    assert_eq!(objects.list(&format!("{run}/op/"), 2).await.unwrap(), want[..2]);
    assert!(objects.list(&format!("{run}/none/"), 10).await.unwrap().is_empty());
}

/// One request deletes several keys at once and no others; more keys than
/// one request may carry are refused with nothing deleted.
async fn many_keys_go_in_one_delete_up_to_its_limit<O: ObjectStore>(objects: O) {
    let run = format!("outputs/many-{}", uuid::Uuid::new_v4().simple());
    let keys: Vec<String> = (0..4).map(|n| format!("{run}/op/output-{n}.png")).collect();
    for key in &keys {
        objects
            .put(key, "image/png", b"x".to_vec(), &b64_sha256(b"x"))
            .await
            .unwrap();
    }
    let too_many: Vec<String> = (0..=MAX_DELETE_KEYS)
        .map(|n| format!("{run}/op/output-{n}.png"))
        .collect();
    assert!(objects.delete_all(&too_many).await.is_err());
    assert_eq!(
        objects.list(&format!("{run}/"), 10).await.unwrap(),
        keys,
        "nothing deleted"
    );
    objects.delete_all(&keys[..3]).await.unwrap();
    assert_eq!(objects.list(&format!("{run}/"), 10).await.unwrap(), keys[3..]);
}

/// Uploads left incomplete under a prefix are aborted, and only those.
async fn incomplete_uploads_under_a_prefix_are_aborted<O: ObjectStore>(objects: O) {
    let run = format!("outputs/uploads-{}", uuid::Uuid::new_v4().simple());
    for key in [
        format!("{run}/op/output-0.mp4"),
        format!("{run}/op/output-1.mp4"),
        format!("{run}/op2/output-0.mp4"),
    ] {
        let id = objects.begin(&key, "video/mp4").await.unwrap();
        objects.put_part(&key, &id, 1, vec![1u8; 64]).await.unwrap();
    }
    assert_eq!(
        objects.abort_uploads(&format!("{run}/op/"), 1).await.unwrap(),
        1,
        "at most the limit"
    );
    assert_eq!(objects.abort_uploads(&format!("{run}/op/"), 10).await.unwrap(), 1);
    assert_eq!(
        objects.abort_uploads(&format!("{run}/op/"), 10).await.unwrap(),
        0,
        "none left"
    );
    assert_eq!(
        objects.abort_uploads(&format!("{run}/op2/"), 10).await.unwrap(),
        1,
        "the sibling's kept"
    );
    assert!(
        objects.list(&format!("{run}/"), 10).await.unwrap().is_empty(),
        "no object appeared"
    );
}

genace_localaws::contract_tests!(
    memory => genace_memory::MemoryObjects::default(),
    s3 => |env| env.objects();
    a_whole_put_is_read_back_with_its_checksum,
    a_multipart_upload_is_one_object_with_the_composite_checksum,
    an_aborted_upload_leaves_nothing,
    a_deleted_object_is_gone_and_a_second_delete_succeeds,
    a_prefix_lists_its_keys_in_order_and_no_others,
    many_keys_go_in_one_delete_up_to_its_limit,
    incomplete_uploads_under_a_prefix_are_aborted,
);

#[tokio::test]
async fn the_memory_bucket_refuses_a_body_that_does_not_match_its_checksum() {
    let objects = genace_memory::MemoryObjects::default();
    let sha = b64_sha256(b"body");
    objects
        .put("outputs/e/0.mp4", "video/mp4", b"body".to_vec(), &sha)
        .await
        .unwrap();
    let head = objects.head("outputs/e/0.mp4").await.unwrap().unwrap();
    assert_eq!(head.checksum_sha256.as_deref(), Some(sha.as_str()), "as S3 returns it");
    let wrong = b64_sha256(b"something else");
    assert!(
        objects
            .put("outputs/d/0.mp4", "video/mp4", b"body".to_vec(), &wrong)
            .await
            .is_err()
    );
    assert_eq!(objects.head("outputs/d/0.mp4").await.unwrap(), None);
}
