//! The one-pass body reader answers exactly as the field-by-field one:
//! the same bodies accepted with the same values, the same refusals.

use leasehold_api::{parse_body, parse_body_checked, AcquireBody, Body, ReleaseBody, RenewBody};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "name", "holder", "lease_ms", "wait_ms", "data", "id", "locks", "Name", "other", "",
];

fn value() -> impl Strategy<Value = String> {
    let fixed = prop::sample::select(vec![
        "null",
        "true",
        "[]",
        "[\"jobs/1\"]",
        "{}",
        "{\"name\":\"x\"}",
        "[{\"name\":\"x\",\"id\":\"01J0000000000000000000000A\"}]",
        "[{\"name\":\"x\",\"id\":\"01J0000000000000000000000A\",\"fence\":1}]",
        "[{\"name\":\"x\",\"name\":\"y\",\"id\":\"01J0000000000000000000000A\"}]",
        "[{\"name\":\"x\",\"id\":\"01J0000000000000000000000A\"},{\"name\":\"x\",\"id\":\"01J0000000000000000000000B\"}]",
        "[[\"x\",\"01J0000000000000000000000A\"]]",
        "[{\"name\":\"x\"}]",
        "[{\"name\":\"x\",\"id\":null}]",
        "0",
        "-0",
        "-0.0",
        "1",
        "-1",
        "30000",
        "1.0",
        "1.5",
        "1e3",
        "1E3",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
        "1e400",
        "\"\"",
        "\"jobs/42\"",
        "\"worker-7\"",
        "\"01J0000000000000000000000A\"",
        "\"01j0000000000000000000000a\"",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "\"caf\\u00e9\"",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        4 => fixed,
        1 => "[a-z/]{0,600}".prop_map(|s| format!("\"{s}\"")),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let member = (prop::sample::select(KEYS.to_vec()), value());
    let object = (
        prop::collection::vec(member, 0..7),
        prop::sample::select(vec!["", " ", "\n\t ", "\r\n"]),
    )
        .prop_map(|(members, ws)| {
            let inner: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}"))
                .collect();
            format!("{ws}{{{}{ws}}}{ws}", inner.join(","))
        });
    prop_oneof![
        8 => object.prop_map(String::into_bytes),
        1 => value().prop_map(String::into_bytes),
        1 => object_then_junk(),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

fn object_then_junk() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        "{\"name\":\"a\"} x",
        "{\"name\":\"a\",}",
        "{\"name\":\"a\"",
        "{\"name\" \"a\"}",
        "{\"name\":\"a\"}{}",
        "\u{feff}{\"name\":\"a\"}",
    ])
    .prop_map(|s| s.as_bytes().to_vec())
}

fn same<T: Body + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    let fast = parse_body::<T>(bytes);
    let checked = parse_body_checked::<T>(bytes);
    assert_eq!(fast, checked, "body {:?}", String::from_utf8_lossy(bytes));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn one_pass_and_checked_agree(bytes in body()) {
        same::<AcquireBody>(&bytes);
        same::<ReleaseBody>(&bytes);
        same::<RenewBody>(&bytes);
    }
}

#[test]
fn known_traps_agree() {
    for body in [
        r#"{"name":"a","lease_ms":-0}"#,
        r#"{"name":"a","name":"b"}"#,
        r#"{"name":"a","lease_ms":1,"lease_ms":null}"#,
        r#"["a"]"#,
        r#"{"name":null}"#,
        r#"{"name":"a","holder":null,"data":null}"#,
        r#"{"name":"a","wait_ms":18446744073709551616}"#,
        r#"{"name":"","id":"01J0000000000000000000000A"}"#,
        r#"{"locks":[["a","01J0000000000000000000000A"]]}"#,
        r#"{"locks":[{"name":"a","id":"01J0000000000000000000000A","id":"x"}]}"#,
        r#"{"locks":[{"name":"a","id":"01J0000000000000000000000A"}],"name":"a"}"#,
        r#"{"locks":[{"id":"01J0000000000000000000000A","name":"a","name":1}]}"#,
    ] {
        same::<AcquireBody>(body.as_bytes());
        same::<ReleaseBody>(body.as_bytes());
        same::<RenewBody>(body.as_bytes());
    }
    // The fast path does take the plain body.
    assert_eq!(
        parse_body::<AcquireBody>(br#"{"name":"jobs/1","lease_ms":1000}"#)
            .unwrap()
            .lease_ms,
        Some(1000)
    );
}
