//! Intake: body bytes -> JSON -> Intent -> fingerprint. Never panics, and the
//! fingerprint does not change when members are reordered or integers are
//! respelled as fractions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use genace_core::domain::Intent;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let header = value.get("operation_key").and_then(Value::as_str).map(str::to_owned);
    let Ok(intent) = Intent::parse(&value, None) else {
        return;
    };
    // The header form of the key gives the same intent.
    if let Some(key) = header {
        let mut without = value.clone();
        without
            .as_object_mut()
            .expect("an intent body is an object")
            .remove("operation_key");
        let by_header = Intent::parse(&without, Some(&key)).expect("the key may come in the header");
        assert_eq!(by_header.canonical.hash(), intent.canonical.hash());
    }
    let respelled = genace_fuzz::respell(&value);
    let again: Value = serde_json::from_str(&respelled).expect("respelled JSON parses");
    let other = Intent::parse(&again, None).expect("a respelled valid intent stays valid");
    assert_eq!(
        other.canonical.hash(),
        intent.canonical.hash(),
        "fingerprint changed by respelling: {respelled}"
    );
    assert_eq!(other.canonical.json(), intent.canonical.json());
});
