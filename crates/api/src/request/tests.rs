use std::time::Duration;

use locktable::LockId;

use super::*;

fn acquire(json: &str) -> Result<AcquireBody, BadRequest> {
    parse_body(json.as_bytes())
}

fn refused(json: &str) -> (BadRequest, String) {
    let e = acquire(json).expect_err(json);
    let msg = e.to_string();
    (e, msg)
}

#[test]
fn a_good_acquire() {
    let b = acquire(
        r#"{"name":"jobs/42","holder":"w","lease_ms":5000,"wait_ms":0,"data":"d","future":1}"#,
    )
    .unwrap();
    assert_eq!(b.name(), "jobs/42");
    assert_eq!(b.holder(), "w");
    assert_eq!(b.lease(), Some(Duration::from_secs(5)));
    assert_eq!(b.wait(), Duration::ZERO);
    let min = acquire(r#"{"name":"a","holder":null,"lease_ms":null}"#).unwrap();
    assert_eq!(
        (min.holder(), min.lease(), min.wait()),
        ("", None, Duration::ZERO)
    );
    let long = acquire(r#"{"name":"a","wait_ms":18446744073709551615}"#).unwrap();
    assert_eq!(long.wait(), Duration::from_millis(MAX_WAIT_MS));
    // The serialized form leaves absent fields out and reads back.
    let text = serde_json::to_string(&min).unwrap();
    assert_eq!(text, r#"{"name":"a"}"#);
}

/// A new lock's name must travel as one path segment and show as one
/// row: dot segments, control characters and edge whitespace are
/// refused at acquire; a held lock's calls check only the length, so
/// that one granted before the rule is still renewed and released.
#[test]
fn names_that_cannot_travel_are_refused_at_acquire_only() {
    for name in [".", "..", "a\nb", "a\u{7}", " a", "a ", "\ta"] {
        let json = serde_json::json!({ "name": name }).to_string();
        let (e, msg) = refused(&json);
        assert!(
            matches!(e, BadRequest::NameCannotTravel(_)),
            "{name:?}: {e:?}"
        );
        assert!(msg.contains("could not be read or released"), "{msg}");
        let renew = serde_json::json!({ "name": name, "id": "00000000000000000000000001" });
        let renew: RenewBody = parse_body(renew.to_string().as_bytes()).unwrap();
        assert_eq!(renew.name, name);
    }
    for fine in ["a.b", "...", "jobs/42", "a b", "ünï"] {
        let json = serde_json::json!({ "name": fine }).to_string();
        assert_eq!(acquire(&json).unwrap().name(), fine);
    }
}

#[test]
fn malformed_and_not_objects() {
    for bad in ["", "{", "{\"name\":", "nope", "{\"name\":\"a\",}", "\u{1}"] {
        assert!(
            matches!(refused(bad).0, BadRequest::Malformed(_)),
            "{bad:?}"
        );
        assert!(refused(bad).1.starts_with("malformed JSON"));
    }
    for bad in ["[]", "\"a\"", "1", "null"] {
        assert_eq!(refused(bad).0, BadRequest::NotAnObject);
    }
    // Lone surrogates are not UTF-8.
    assert!(matches!(
        refused(r#"{"name":"\ud800"}"#).0,
        BadRequest::Malformed(_)
    ));
}

#[test]
fn missing_and_wrong_types_name_the_field() {
    assert_eq!(refused("{}").0, BadRequest::Missing("name"));
    assert_eq!(refused(r#"{"name":null}"#).1, "missing field `name`");
    for (json, field) in [
        (r#"{"name":1}"#, "name"),
        (r#"{"name":["a"]}"#, "name"),
        (r#"{"name":"a","holder":7}"#, "holder"),
        (r#"{"name":"a","data":{}}"#, "data"),
        (r#"{"name":"a","lease_ms":"5"}"#, "lease_ms"),
        (r#"{"name":"a","wait_ms":true}"#, "wait_ms"),
    ] {
        let (e, msg) = refused(json);
        assert!(matches!(e, BadRequest::WrongType { .. }), "{json}");
        assert!(msg.contains(&format!("`{field}`")), "{msg}");
    }
}

/// JSON Schema's `integer` is a value: `1.0` and `1e3` are integers, and
/// the API's description says `integer`, so they are read as 1 and 1000.
#[test]
fn whole_numbers_written_with_a_fraction_or_exponent_are_integers() {
    let b = acquire(r#"{"name":"a","lease_ms":1.0,"wait_ms":1e3}"#).unwrap();
    assert_eq!(
        (b.lease(), b.wait()),
        (Some(Duration::from_millis(1)), Duration::from_secs(1))
    );
    let big = acquire(r#"{"name":"a","wait_ms":1.8e19}"#).unwrap();
    assert_eq!(big.wait_ms, Some(18_000_000_000_000_000_000));
}

#[test]
fn bad_durations_name_the_field_and_fault() {
    for (json, want) in [
        (
            r#"{"name":"a","lease_ms":-1}"#,
            BadRequest::Negative("lease_ms"),
        ),
        (
            r#"{"name":"a","wait_ms":-1.5}"#,
            BadRequest::Negative("wait_ms"),
        ),
        (
            r#"{"name":"a","lease_ms":-99999999999999999999}"#,
            BadRequest::Negative("lease_ms"),
        ),
        (
            r#"{"name":"a","lease_ms":1.5}"#,
            BadRequest::NotInteger("lease_ms"),
        ),
        (
            r#"{"name":"a","lease_ms":2.5e0}"#,
            BadRequest::NotInteger("lease_ms"),
        ),
        (
            r#"{"name":"a","lease_ms":18446744073709551616}"#,
            BadRequest::TooBig("lease_ms"),
        ),
        (
            r#"{"name":"a","wait_ms":99999999999999999999999999999}"#,
            BadRequest::TooBig("wait_ms"),
        ),
        (
            r#"{"name":"a","wait_ms":1e300}"#,
            BadRequest::TooBig("wait_ms"),
        ),
    ] {
        assert_eq!(refused(json).0, want, "{json}");
    }
    assert_eq!(
        refused(r#"{"name":"a","lease_ms":-1}"#).1,
        "field `lease_ms` must not be negative"
    );
    assert_eq!(
        refused(r#"{"name":"a","lease_ms":18446744073709551616}"#).1,
        "field `lease_ms` does not fit in 64 bits"
    );
    assert_eq!(
        refused(r#"{"name":"a","lease_ms":1.5}"#).1,
        "field `lease_ms` must be an integer number of milliseconds"
    );
    // The edge that fits.
    let b = acquire(r#"{"name":"a","lease_ms":18446744073709551615}"#).unwrap();
    assert_eq!(b.lease_ms, Some(u64::MAX));
    // serde_json cannot tell `-0` from -0.0; both are refused.
    assert_eq!(
        refused(r#"{"name":"a","lease_ms":-0}"#).0,
        BadRequest::Negative("lease_ms")
    );
}

#[test]
fn sizes() {
    assert_eq!(refused(r#"{"name":""}"#).0, BadRequest::EmptyName);
    let ok = format!(r#"{{"name":"{}"}}"#, "n".repeat(MAX_NAME_BYTES));
    assert!(acquire(&ok).is_ok());
    // 171 three-byte characters: 513 bytes.
    let multi = format!(r#"{{"name":"{}"}}"#, "€".repeat(171));
    assert_eq!(
        refused(&multi).0,
        BadRequest::TooLong {
            field: "name",
            len: 513,
            max: MAX_NAME_BYTES
        }
    );
    let holder = format!(r#"{{"name":"a","holder":"{}"}}"#, "h".repeat(257));
    assert_eq!(
        refused(&holder).1,
        "field `holder` is 257 bytes, more than the 256 allowed"
    );
    let holder_ok = format!(r#"{{"name":"a","holder":"{}"}}"#, "h".repeat(256));
    assert!(acquire(&holder_ok).is_ok());
    let data = format!(r#"{{"name":"a","data":"{}"}}"#, "d".repeat(4097));
    assert!(refused(&data).1.contains("`data`"));
    let data_ok = format!(r#"{{"name":"a","data":"{}"}}"#, "d".repeat(4096));
    assert!(acquire(&data_ok).is_ok());
}

#[test]
fn worst_case_escaped_body_fits_the_body_limit() {
    let esc = |n| "\\u0000".repeat(n);
    // A name escaped as fully, of a printable character (a new lock's
    // name holds no control character).
    let body = format!(
        r#"{{"name":"{}","holder":"{}","lease_ms":18446744073709551615,"wait_ms":18446744073709551615,"data":"{}"}}"#,
        "\\u0041".repeat(MAX_NAME_BYTES),
        esc(MAX_HOLDER_BYTES),
        esc(MAX_DATA_BYTES)
    );
    assert!(body.len() <= MAX_BODY_BYTES);
    assert!(acquire(&body).is_ok());
}

#[test]
fn release_and_renew() {
    let id = LockId::from_u128(12345).to_string();
    let r: ReleaseBody = parse_body(format!(r#"{{"name":"a","id":"{id}"}}"#).as_bytes()).unwrap();
    assert_eq!(r.lock_id(), Ok(LockId::from_u128(12345)));
    let e = parse_body::<ReleaseBody>(br#"{"name":"a","id":"nope"}"#).unwrap_err();
    assert_eq!(e, BadRequest::BadId);
    assert!(e.to_string().contains("`id`"));
    assert_eq!(
        parse_body::<ReleaseBody>(br#"{"name":"a"}"#).unwrap_err(),
        BadRequest::Missing("id")
    );
    assert!(matches!(
        parse_body::<ReleaseBody>(br#"{"name":"a","id":5}"#).unwrap_err(),
        BadRequest::WrongType { field: "id", .. }
    ));
    // A single release still travels as it did.
    assert_eq!(
        serde_json::to_string(&ReleaseBody::one("a", id.clone())).unwrap(),
        format!(r#"{{"name":"a","id":"{id}"}}"#)
    );
    let n: RenewBody =
        parse_body(format!(r#"{{"name":"a","id":"{id}","lease_ms":100}}"#).as_bytes()).unwrap();
    assert_eq!(n.lease(), Some(Duration::from_millis(100)));
    assert_eq!(
        parse_body::<RenewBody>(format!(r#"{{"name":"a","id":"{id}","lease_ms":-5}}"#).as_bytes())
            .unwrap_err(),
        BadRequest::Negative("lease_ms")
    );
    assert_eq!(
        parse_body::<RenewBody>(format!(r#"{{"name":"","id":"{id}"}}"#).as_bytes()).unwrap_err(),
        BadRequest::EmptyName
    );
}

#[test]
fn name_checks_for_paths() {
    assert!(validate_name("jobs/42").is_ok());
    assert_eq!(validate_name(""), Err(BadRequest::EmptyName));
    assert!(validate_name(&"x".repeat(513)).is_err());
    assert_eq!(validate_id("x"), Err(BadRequest::BadId));
}

#[test]
fn a_set_is_refused_past_its_count_or_its_bytes_and_its_largest_body_fits_when_forwarded() {
    use crate::{MAX_BODY_BYTES, MAX_SET_BYTES, MAX_SET_NAMES};
    let body = |names: Vec<String>| serde_json::json!({ "names": names }).to_string();
    let many: Vec<String> = (0..=MAX_SET_NAMES).map(|i| format!("n{i}")).collect();
    assert_eq!(refused(&body(many)).0, BadRequest::SetSize);
    let long: Vec<String> = (0..9).map(|i| format!("{i}{}", "x".repeat(511))).collect();
    assert!(matches!(
        refused(&body(long)).0,
        BadRequest::TooLong { field: "names", .. }
    ));
    // The largest set a node takes, every character escaped, with every
    // other field at its limit: forwarded in a batch, it still fits.
    let each = MAX_SET_BYTES / MAX_SET_NAMES;
    let names: Vec<String> = (0..MAX_SET_NAMES)
        .map(|i| format!("{i:02}{}", "\"".repeat(each - 2)))
        .collect();
    let full = serde_json::json!({
        "names": names,
        "holder": "\"".repeat(crate::MAX_HOLDER_BYTES),
        "data": "\"".repeat(crate::MAX_DATA_BYTES),
        "request_id": "r".repeat(crate::MAX_REQUEST_ID_BYTES),
    });
    let parsed: crate::AcquireBody = crate::parse_body(full.to_string().as_bytes()).expect("taken");
    let forwarded = serde_json::json!({
        "calls": [{ "Acquire": { "body": parsed, "node": u64::MAX } }]
    })
    .to_string();
    assert!(
        forwarded.len() <= MAX_BODY_BYTES,
        "{} bytes",
        forwarded.len()
    );
}

/// A set's release: `locks` of `{name, id}` (other fields of a granted
/// lock skipped, so an acquire's `locks` may be sent back whole), each name
/// once, within the bounds of an acquire's `names`, never beside `name` or
/// `id`.
#[test]
fn a_sets_release() {
    let id = |n: u128| LockId::from_u128(n).to_string();
    let release = |json: serde_json::Value| parse_body::<ReleaseBody>(json.to_string().as_bytes());
    let body = release(serde_json::json!({"locks": [
        {"name": "a", "id": id(1)},
        {"name": "b", "id": id(2), "fence": 7, "holder": "w", "data": null},
    ]}))
    .unwrap();
    assert!(body.is_set());
    assert_eq!(
        body.all_locks(),
        vec![LockRef::new("a", id(1)), LockRef::new("b", id(2))]
    );
    assert_eq!(
        validate_release_set(body.locks.as_deref().unwrap()),
        Ok(vec![LockId::from_u128(1), LockId::from_u128(2)])
    );
    assert_eq!(
        serde_json::to_string(&ReleaseBody::set(vec![LockRef::new("a", id(1))])).unwrap(),
        format!(r#"{{"locks":[{{"name":"a","id":"{}"}}]}}"#, id(1))
    );
    let many: Vec<serde_json::Value> = (0..=MAX_SET_NAMES)
        .map(|i| serde_json::json!({"name": format!("n{i}"), "id": id(1)}))
        .collect();
    let long: Vec<serde_json::Value> = (0..2)
        .map(|i| serde_json::json!({"name": format!("{i}{}", "x".repeat(MAX_SET_BYTES / 2)), "id": id(1)}))
        .collect();
    let refused = [
        (serde_json::json!({"locks": []}), BadRequest::ReleaseSize),
        (serde_json::json!({"locks": many}), BadRequest::ReleaseSize),
        (
            serde_json::json!({"locks": [{"name": "a", "id": id(1)}], "name": "a"}),
            BadRequest::NameAndLocks,
        ),
        (
            serde_json::json!({"locks": [{"name": "a", "id": id(1)}], "id": id(1)}),
            BadRequest::NameAndLocks,
        ),
        (
            serde_json::json!({"locks": [{"name": "a", "id": "nope"}]}),
            BadRequest::BadId,
        ),
        (
            serde_json::json!({"locks": [{"name": "", "id": id(1)}]}),
            BadRequest::EmptyName,
        ),
        (
            serde_json::json!({"locks": long}),
            BadRequest::NamesTooLong {
                field: "locks",
                len: 2 * (1 + MAX_SET_BYTES / 2),
                max: MAX_SET_BYTES,
            },
        ),
    ];
    for (json, expected) in refused {
        assert_eq!(release(json.clone()), Err(expected), "{json}");
    }
    for wrong in [
        serde_json::json!({"locks": "a"}),
        serde_json::json!({"locks": ["a"]}),
        serde_json::json!({"locks": [["a", id(1)]]}),
        serde_json::json!({"locks": [{"name": "a"}]}),
        serde_json::json!({"locks": [{"name": "a", "id": 5}]}),
        serde_json::json!({"locks": [{"name": null, "id": id(1)}]}),
    ] {
        let e = release(wrong.clone()).unwrap_err();
        assert!(
            matches!(e, BadRequest::WrongType { field: "locks", .. }),
            "{wrong}: {e:?}"
        );
        assert!(
            e.to_string().contains(r#"{"name": string, "id": string}"#),
            "{e}"
        );
    }
}

/// A lock of a session may carry a lock-delay (kept after its session's
/// lease), within the same bounds as any; it takes no lease of its own.
#[test]
fn a_lock_of_a_session_may_carry_a_lock_delay_but_no_lease() {
    let session = "00000000000000000000000001";
    let json = serde_json::json!({ "name": "a", "session": session, "lock_delay_ms": 5000 });
    let body = acquire(&json.to_string()).unwrap();
    assert_eq!(body.delay(), Duration::from_secs(5));
    assert_eq!(body.session(), Some(LockId::from_u128(1)));
    let over = serde_json::json!({ "name": "a", "session": session, "lock_delay_ms": 60001 });
    assert!(matches!(refused(&over.to_string()).0, BadRequest::BadDelay));
    let lease = serde_json::json!({ "name": "a", "session": session, "lease_ms": 1000 });
    assert!(matches!(
        refused(&lease.to_string()).0,
        BadRequest::WithSession("lease_ms")
    ));
}
