//! Request decoding never panics, whatever the bytes: bodies, queries,
//! ids and peer locks.
#![no_main]

use leasehold_api::{parse_body, AcquireBody, ListQuery, PeerLock, ReleaseBody, RenewBody};
use libfuzzer_sys::fuzz_target;
use locktable::{LockId, LockInTransit};

fuzz_target!(|data: &[u8]| {
    let _ = parse_body::<AcquireBody>(data);
    let _ = parse_body::<ReleaseBody>(data);
    let _ = parse_body::<RenewBody>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(query) = ListQuery::parse(Some(text)) {
            let _ = (query.prefix(), query.limit());
        }
        let _ = text.parse::<LockId>();
        let _ = leasehold_api::validate_name(text);
    }
    if let Ok(peer) = serde_json::from_slice::<PeerLock>(data) {
        let _ = LockInTransit::try_from(peer);
    }
});
