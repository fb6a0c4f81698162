//! The parsers' tests: every refusal, the canonical form and the fingerprint.

use super::*;
use serde_json::Value;
use serde_json::json;
use sha2::{Digest, Sha256};

fn intent(v: Value) -> Result<Intent, InvalidInput> {
    Intent::parse(&v, None)
}

fn base() -> Value {
    json!({
        "operation_key": "frame-12/rev-3",
        "media_type": "video",
        "specification": {
            "model": "genace-video-2",
            "prompt": "a lighthouse at dusk",
            "prompt_revision": 3,
            "aspect_ratio": "16:9",
            "duration": 5,
            "resolution": "1080p",
            "parameters": {"seed": 42, "style": {"grain": 0.2, "palette": ["warm", "teal"]}}
        }
    })
}

fn hash_of(v: Value) -> String {
    intent(v).unwrap().canonical.hash().as_str().to_owned()
}

#[test]
fn key_order_and_number_spelling_do_not_change_the_hash() {
    let reordered = json!({
        "specification": {
            "parameters": {"style": {"palette": ["warm", "teal"], "grain": 0.20}, "seed": 42.0},
            "resolution": "1080p",
            "duration": 5.0,
            "aspect_ratio": "16:9",
            "prompt_revision": 3,
            "prompt": "a lighthouse at dusk",
            "model": "genace-video-2"
        },
        "media_type": "video",
        "operation_key": "frame-12/rev-3"
    });
    assert_eq!(hash_of(base()), hash_of(reordered));
}

#[test]
fn omitted_and_null_are_the_same() {
    let mut with_nulls = base();
    let spec = with_nulls["specification"].as_object_mut().unwrap();
    spec.insert("resolution".into(), Value::Null);
    spec["parameters"]["negative_prompt"] = Value::Null;
    spec["parameters"]["style"]["extra"] = Value::Null;
    let mut omitted = base();
    omitted["specification"].as_object_mut().unwrap().remove("resolution");
    assert_eq!(hash_of(with_nulls), hash_of(omitted));

    let mut empty_params = base();
    empty_params["specification"]["parameters"] = json!({});
    let mut null_params = base();
    null_params["specification"]["parameters"] = Value::Null;
    assert_eq!(hash_of(empty_params), hash_of(null_params));
}

#[test]
fn every_meaningful_change_changes_the_hash() {
    let original = hash_of(base());
    let changes: Vec<(&str, Value)> = vec![
        ("/specification/model", json!("genace-video-3")),
        ("/specification/prompt", json!("a lighthouse at dawn")),
        ("/specification/prompt_revision", json!(4)),
        ("/specification/prompt_revision", json!("3")),
        ("/specification/aspect_ratio", json!("9:16")),
        ("/specification/duration", json!(6)),
        ("/specification/resolution", json!("720p")),
        ("/specification/parameters/seed", json!(43)),
        ("/specification/parameters/style/grain", json!(0.25)),
        ("/specification/parameters/style/palette", json!(["teal", "warm"])),
        ("/media_type", json!("image")),
    ];
    for (pointer, value) in changes {
        let mut changed = base();
        if pointer == "/media_type" {
            changed["specification"].as_object_mut().unwrap().remove("duration");
        }
        *changed.pointer_mut(pointer).unwrap() = value;
        assert_ne!(original, hash_of(changed), "changing {pointer} must change the hash");
    }
}

#[test]
fn canonical_form_is_rfc8785() {
    let i = intent(json!({
        "operation_key": "k",
        "media_type": "image",
        "specification": {"prompt": "p", "model": "m", "parameters": {"b": 5.0, "a": [1, {"d": 1, "c": 2}]}}
    }))
    .unwrap();
    assert_eq!(
        i.canonical.json(),
        r#"{"media_type":"image","specification":{"model":"m","parameters":{"a":[1,{"c":2,"d":1}],"b":5},"prompt":"p"}}"#
    );
}

#[test]
fn hash_is_tagged_sha256_of_canonical_bytes() {
    let i = intent(base()).unwrap();
    let mut h = Sha256::new();
    h.update(b"genace-spec/v1\n");
    h.update(i.canonical.json().as_bytes());
    assert_eq!(i.canonical.hash().as_str(), hex(&h.finalize()));
}

#[test]
fn operation_keys_must_be_visible_ascii_up_to_255() {
    assert!(OperationKey::parse("a").is_ok());
    assert!(OperationKey::parse(&"k".repeat(255)).is_ok());
    for bad in ["", " lead", "tab\tkey", "caf\u{e9}", "new\nline"] {
        assert!(OperationKey::parse(bad).is_err(), "{bad:?} must be refused");
    }
    assert!(OperationKey::parse(&"k".repeat(256)).is_err());
}

#[test]
fn key_may_come_from_header_but_both_must_agree() {
    let mut v = base();
    v.as_object_mut().unwrap().remove("operation_key");
    assert_eq!(Intent::parse(&v, Some("hdr")).unwrap().operation_key.as_str(), "hdr");
    assert!(Intent::parse(&v, None).is_err());
    let e = Intent::parse(&base(), Some("other")).unwrap_err();
    assert_eq!(e.field, "operation_key");
    assert!(Intent::parse(&base(), Some("frame-12/rev-3")).is_ok());
}

#[test]
fn refuses_bad_intents() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([1]), "body"),
        (
            json!({"operation_key": "k", "media_type": "audio", "specification": {"model": "m", "prompt": "p"}}),
            "media_type",
        ),
        (json!({"operation_key": "k", "media_type": "video"}), "specification"),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"prompt": "p"}}),
            "specification.model",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": " "}}),
            "specification.prompt",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "duration": -1}}),
            "specification.duration",
        ),
        (
            json!({"operation_key": "k", "media_type": "image", "specification": {"model": "m", "prompt": "p", "duration": 4}}),
            "specification.duration",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "aspect_ratio": "wide"}}),
            "specification.aspect_ratio",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "colour": "red"}}),
            "specification.colour",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "parameters": [1]}}),
            "specification.parameters",
        ),
        (
            json!({"operation_key": 7, "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
            "operation_key",
        ),
        (
            json!({"tenant_id": "t", "operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
            "tenant_id",
        ),
        (
            json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}, "extra": 1}),
            "extra",
        ),
    ];
    for (body, field) in cases {
        let err = intent(body.clone()).expect_err(&body.to_string());
        assert_eq!(err.field, field, "{body}");
    }
}

/// The table's composite keys join a tenant id to what follows with
/// `#`: a tenant id holding one could name another tenant's items, so
/// none is accepted, from a token, a path or a stored record.
#[test]
fn tenant_ids_hold_no_key_separator() {
    for bad in ["a#b", "#", "a#", "", "a b", "é"] {
        assert!(TenantId::parse(bad).is_err(), "{bad:?}");
    }
    for good in ["a", "tenant-a", "org:team.1", "user@example.com", "a%23b", "a/b"] {
        assert_eq!(TenantId::parse(good).unwrap().as_str(), good);
    }
    assert!(serde_json::from_value::<TenantId>(json!("a#b")).is_err());
}

#[test]
fn operation_id_is_per_tenant_and_stable() {
    let k = OperationKey::parse("same-key").unwrap();
    let a = OperationId::derive(&TenantId::parse("tenant-a").unwrap(), &k);
    let b = OperationId::derive(&TenantId::parse("tenant-b").unwrap(), &k);
    assert_ne!(a, b);
    assert_eq!(a, OperationId::derive(&TenantId::parse("tenant-a").unwrap(), &k));
    assert_eq!(OperationId::parse(a.as_str()).unwrap(), a);
    assert!(OperationId::parse("op_xyz").is_err());
    assert!(a.shard(8) < 8);
}

/// A deadline is read as sent and is part of the fingerprint: the same
/// instant in another offset is the same intent, another deadline (or
/// none) is not, and an intent without one fingerprints as before.
#[test]
fn a_dispatch_deadline_is_parsed_and_fingerprinted_as_sent() {
    let plain = intent(base()).unwrap();
    assert_eq!(plain.deadline, None);
    assert_eq!(
        plain.canonical,
        CanonicalSpec::new(plain.media_type, &plain.specification),
        "no deadline: the fingerprint deadlines did not exist for"
    );
    let with = |member: &str, value: Value| {
        let mut v = base();
        v[member] = value;
        intent(v)
    };
    let utc = with("dispatch_deadline", json!("2026-12-02T16:00:00Z")).unwrap();
    let offset = with("dispatch_deadline", json!("2026-12-02T17:00:00+01:00")).unwrap();
    let later = with("dispatch_deadline", json!("2026-12-02T16:00:01Z")).unwrap();
    let within = with("dispatch_within_seconds", json!(600)).unwrap();
    assert_eq!(utc.canonical.hash(), offset.canonical.hash());
    for other in [&plain, &later, &within] {
        assert_ne!(utc.canonical.hash(), other.canonical.hash());
    }
    let recorded = chrono::DateTime::parse_from_rfc3339("2026-12-02T15:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    assert_eq!(
        within.deadline.unwrap().resolve(recorded),
        recorded + chrono::Duration::seconds(600)
    );
    assert!(utc.deadline.unwrap().check(recorded).is_ok());
    assert_eq!(
        utc.deadline
            .unwrap()
            .check(recorded + chrono::Duration::hours(2))
            .unwrap_err()
            .field,
        "dispatch_deadline",
        "in the past"
    );
    assert!(within.deadline.unwrap().check(recorded).is_ok());
    for (member, bad) in [
        ("dispatch_deadline", json!("tomorrow")),
        ("dispatch_deadline", json!(5)),
        ("dispatch_within_seconds", json!(0)),
        ("dispatch_within_seconds", json!(2_592_001)),
        ("dispatch_within_seconds", json!(1.5)),
    ] {
        assert_eq!(with(member, bad).unwrap_err().field, member);
    }
    let mut both = base();
    both["dispatch_deadline"] = json!("2026-12-02T16:00:00Z");
    both["dispatch_within_seconds"] = Value::Null;
    assert_eq!(intent(both).unwrap_err().field, "dispatch_within_seconds");
}

#[test]
fn an_unknown_member_is_named_where_it_is() {
    let known = ["a", "b"];
    assert!(members(&json!({"a": 1}), "body", &known).is_ok());
    assert_eq!(members(&json!({"c": 1}), "body", &known).unwrap_err().field, "c");
    assert_eq!(members(&json!({"c": 1}), "outer", &known).unwrap_err().field, "outer.c");
    assert_eq!(members(&json!([1]), "outer", &known).unwrap_err().field, "outer");
    let intent = json!({"operation_key": "k", "media_type": "image",
                        "specification": {"model": "m", "prompt": "p", "seed": 3}});
    let err = Intent::parse(&intent, None).unwrap_err();
    assert_eq!(err.field, "specification.seed");
    assert!(err.reason.contains("specification.parameters"), "{}", err.reason);
    let not_object = json!({"operation_key": "k", "media_type": "image", "specification": "p"});
    let err = Intent::parse(&not_object, None).unwrap_err();
    assert_eq!(err.field, "specification");
    assert!(!err.reason.contains("parameters"), "{}", err.reason);
}
