//! The frames: every kind round-trips, in pieces of any size; every fault
//! is its own error; the layout is pinned.

use proptest::collection::vec;
use proptest::prelude::*;

mod every_kind;
mod strategies;

use super::*;
use crate::codec::CodecError;
use crate::{ErrorBody, ErrorCode, LockAnswer, LockView, RenewBody};
use every_kind::leaf;
use strategies::{answer, request};

/// The frames of `messages`, each with its id, one after another.
fn frames<M: Message>(messages: &[(u64, M)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, message) in messages {
        encode_frame(*id, message, &mut out).unwrap();
    }
    out
}

/// Every frame in `bytes`, handed to a decoder in `pieces`.
fn read<'a, M: Message>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Vec<(u64, M)> {
    let mut decoder = FrameDecoder::<M>::new();
    let mut out = Vec::new();
    for piece in pieces {
        decoder.feed(piece);
        while let Some(frame) = decoder.poll().unwrap() {
            out.push((frame.id, frame.message));
        }
    }
    decoder.finish().unwrap();
    assert_eq!(decoder.buffered(), 0);
    out
}

/// Reads `bytes` whole, cut in two at every boundary, and a byte at a time.
fn round_trips<M: Message + PartialEq + std::fmt::Debug + Clone>(messages: Vec<(u64, M)>) {
    let bytes = frames(&messages);
    assert_eq!(read::<M>([bytes.as_slice()]), messages);
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(read::<M>([a, b]), messages, "cut at {cut}");
    }
    assert_eq!(read::<M>(bytes.chunks(1)), messages);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn requests_round_trip_in_pieces_of_any_size(
        messages in vec((any::<u64>(), request()), 1..4)
    ) {
        round_trips(messages);
    }

    #[test]
    fn answers_round_trip_in_pieces_of_any_size(
        messages in vec((any::<u64>(), answer()), 1..4)
    ) {
        round_trips(messages);
    }

    /// HTTP and the frames carry the same values: what JSON reads back,
    /// the frames read back too.
    #[test]
    fn the_frames_carry_what_json_carries(request in request(), answer in answer()) {
        let back = match &request {
            Request::Acquire(b) => Request::Acquire(json_again(b)),
            Request::Release(b) => Request::Release(json_again(b)),
            Request::Renew(b) => Request::Renew(json_again(b)),
            Request::OpenSession(b) => Request::OpenSession(json_again(b)),
            Request::RenewSession(b) => Request::RenewSession(json_again(b)),
            Request::CloseSession(b) => Request::CloseSession(json_again(b)),
            Request::List(q) => Request::List(json_again(q)),
            Request::AddMember(b) => Request::AddMember(json_again(b)),
            // A path, a query string or the connection's own: no JSON.
            Request::Get(_)
            | Request::Cluster(_)
            | Request::History(_)
            | Request::RemoveMember(_)
            | Request::Token(_)
            | Request::Ping
            // A member's call: its HTTP request's bytes, not JSON's values.
            | Request::Peer(_) => request.clone(),
        };
        prop_assert_eq!(&back, &request);
        prop_assert_eq!(read::<Request>([frames(&[(1, back)]).as_slice()]), vec![(1, request)]);
        let back = match &answer {
            Answer::Lock(a) => Answer::Lock(json_again(a)),
            Answer::Locks(a) => Answer::Locks(json_again(a)),
            Answer::Session(a) => Answer::Session(json_again(a)),
            Answer::SessionClosed(a) => Answer::SessionClosed(json_again(a)),
            Answer::Cluster(a) => Answer::Cluster(json_again(a)),
            Answer::History(a) => Answer::History(json_again(a)),
            Answer::Done => Answer::Done,
            Answer::Peer(a) => Answer::Peer(a.clone()),
            Answer::Error(a) => Answer::Error(json_again(a)),
        };
        prop_assert_eq!(&back, &answer);
        prop_assert_eq!(read::<Answer>([frames(&[(1, back)]).as_slice()]), vec![(1, answer)]);
    }

    /// Whatever the bytes, a decoder answers frames or errors, never
    /// panics, and keeps no more than it was fed.
    #[test]
    fn garbage_is_an_error_never_a_panic(bytes in vec(any::<u8>(), 0..200), piece in 1usize..20) {
        for chunk in bytes.chunks(piece) {
            let mut decoder = FrameDecoder::<Request>::new();
            decoder.feed(chunk);
            while let Ok(Some(_)) | Err(FrameError::UnknownKind { .. } | FrameError::Body { .. }) = decoder.poll() {}
            prop_assert!(decoder.buffered() <= chunk.len());
        }
    }
}

fn json_again<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
}

/// A header for a frame of `kind`, `id` and a body of `len` bytes.
fn header(len: u32, kind: u8, id: u64) -> Vec<u8> {
    let mut out = len.to_le_bytes().to_vec();
    out.push(kind);
    out.extend_from_slice(&id.to_le_bytes());
    out
}

#[test]
fn a_frame_over_the_limit_is_refused_from_its_header_and_ends_the_stream() {
    let mut decoder = FrameDecoder::<Request>::new();
    let len = u32::try_from(MAX_REQUEST_BODY + 1).unwrap();
    decoder.feed(&header(len, kind::ACQUIRE, 42)[..HEADER_LEN - 1]);
    assert!(decoder.poll().unwrap().is_none(), "a header not whole");
    decoder.feed(&[0]);
    let err = decoder.poll().unwrap_err();
    assert!(
        matches!(err, FrameError::TooLarge { id: 42, kind: kind::ACQUIRE, len: l, limit }
            if l == MAX_REQUEST_BODY + 1 && limit == MAX_REQUEST_BODY),
        "{err}"
    );
    assert!(err.is_fatal());
    assert_eq!(err.id(), Some(42));
    assert_eq!(err.answer().unwrap().error, ErrorCode::TooLarge);
    // Nothing after it is kept or read.
    decoder.feed(&frames(&[(1, Request::Ping)]));
    assert_eq!(decoder.buffered(), 0);
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::TooLarge { id: 42, .. })
    ));
    assert!(decoder.finish().is_err());

    // At the limit, a frame is read (its body then judged on its own).
    let mut decoder = FrameDecoder::<Request>::new();
    let at = u32::try_from(MAX_REQUEST_BODY).unwrap();
    decoder.feed(&header(at, kind::TOKEN, 5));
    decoder.feed(&vec![0; MAX_REQUEST_BODY]);
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::Body { id: 5, .. })
    ));
    // The whole u32 range is refused alike, answers with their own limit.
    let mut decoder = FrameDecoder::<Answer>::new();
    decoder.feed(&header(u32::MAX, kind::LOCK, 1));
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::TooLarge { limit, .. }) if limit == MAX_ANSWER_BODY
    ));
}

#[test]
fn a_token_is_never_shown() {
    let request = Request::Token(Token("s3cret".into()));
    assert!(!format!("{request:?}").contains("s3cret"));
}

#[test]
fn a_writer_refuses_a_body_over_the_limit_and_writes_nothing() {
    let mut out = b"before".to_vec();
    let token = Request::Token(Token("x".repeat(MAX_REQUEST_BODY)));
    let err = encode_frame(3, &token, &mut out).unwrap_err();
    assert!(matches!(
        err,
        FrameError::TooLarge {
            id: 3,
            kind: kind::TOKEN,
            ..
        }
    ));
    assert_eq!(out, b"before");
    // The largest that fits is written, and read.
    let fits = Request::Token(Token("x".repeat(MAX_REQUEST_BODY - 3)));
    encode_frame(4, &fits, &mut out).unwrap();
    assert_eq!(out.len(), 6 + HEADER_LEN + MAX_REQUEST_BODY);
    assert_eq!(read::<Request>([&out[6..]]), vec![(4, fits)]);
}

#[test]
fn an_unknown_kind_is_skipped_whole_and_the_next_frame_read() {
    for unknown in [0x00, 0x0f, 0x3f, 0x41, 0x7f, kind::LOCK, kind::ERROR] {
        let mut bytes = header(3, unknown, 9);
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&frames(&[(10, Request::Ping)]));
        let mut decoder = FrameDecoder::<Request>::new();
        decoder.feed(&bytes);
        let err = decoder.poll().unwrap_err();
        assert!(
            matches!(err, FrameError::UnknownKind { id: 9, kind } if kind == unknown),
            "{err}"
        );
        assert!(!err.is_fatal());
        assert_eq!(err.answer().unwrap().error, ErrorCode::BadRequest);
        assert_eq!(
            decoder.poll().unwrap(),
            Some(Frame {
                id: 10,
                message: Request::Ping
            })
        );
        decoder.finish().unwrap();
    }
    // A request kind is unknown to an answer's reader.
    let mut decoder = FrameDecoder::<Answer>::new();
    decoder.feed(&frames(&[(1, Request::Ping)]));
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::UnknownKind {
            kind: kind::PING,
            ..
        })
    ));
}

#[test]
fn a_cut_off_frame_is_truncated_at_the_end_of_the_stream() {
    let bytes = frames(&[
        (1, Request::Renew(RenewBody::default())),
        (2, Request::Ping),
    ]);
    let first =
        HEADER_LEN + frames(&[(1, Request::Renew(RenewBody::default()))]).len() - HEADER_LEN;
    for cut in 1..bytes.len() {
        let mut decoder = FrameDecoder::<Request>::new();
        decoder.feed(&bytes[..cut]);
        while decoder.poll().unwrap().is_some() {}
        if cut == first {
            decoder.finish().unwrap();
            continue;
        }
        let err = decoder.finish().unwrap_err();
        let pending = if cut < first { cut } else { cut - first };
        assert!(
            matches!(err, FrameError::Truncated { pending: p } if p == pending),
            "cut at {cut}: {err}"
        );
        assert!(err.is_fatal());
        assert_eq!(err.answer(), None);
    }
}

#[test]
fn a_body_that_does_not_read_is_its_frames_error_and_the_stream_goes_on() {
    let cases: Vec<(u8, Vec<u8>)> = vec![
        // Bytes after a whole body.
        (kind::PING, vec![0]),
        (kind::REMOVE_MEMBER, vec![1, 2]),
        // Not a body at all.
        (kind::ACQUIRE, vec![0xff; 3]),
        // A string that is not UTF-8.
        (kind::TOKEN, vec![2, 0xc3, 0x28]),
        // A string claiming more than a request may allocate: refused
        // before it is allocated.
        (kind::TOKEN, vec![0xfc, 0xff, 0xff, 0xff, 0x7f]),
        // One claiming less, but more than the body holds.
        (kind::TOKEN, vec![0xfb, 0xff, 0x7f]),
        // A view no version has.
        (kind::CLUSTER, vec![7]),
    ];
    for (k, body) in cases {
        let mut bytes = header(u32::try_from(body.len()).unwrap(), k, 77);
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&frames(&[(78, Request::Ping)]));
        let mut decoder = FrameDecoder::<Request>::new();
        decoder.feed(&bytes);
        let err = decoder.poll().unwrap_err();
        assert!(
            matches!(err, FrameError::Body { id: 77, kind, .. } if kind == k),
            "{k:#x} {body:?}: {err}"
        );
        assert!(!err.is_fatal());
        assert_eq!(err.answer().unwrap().error, ErrorCode::BadRequest);
        assert_eq!(decoder.poll().unwrap().unwrap().id, 78);
    }
}

#[test]
fn a_length_prefix_cannot_make_a_small_body_allocate_much() {
    // A list of 2^40 names in a few bytes: refused by the claim, before
    // any allocation (a request may claim MAX_REQUEST_ALLOC at most).
    let mut body = vec![0, 1];
    body.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 1, 0, 0]);
    let err = <Request as Message>::decode_body(kind::ACQUIRE, &body).unwrap_err();
    assert!(matches!(
        err,
        CodecError::Decode(bincode::error::DecodeError::LimitExceeded)
    ));
}

#[test]
fn others_nest_no_deeper_than_the_bound() {
    let mut view = leaf();
    for _ in 0..MAX_NESTING {
        view = LockView {
            others: vec![view],
            ..leaf()
        };
    }
    let answer = Answer::Lock(LockAnswer {
        lock: view.clone(),
        served_ms: 0,
        locks: None,
        not_held: None,
    });
    assert_eq!(read::<Answer>([frames(&[(1, answer)]).as_slice()]).len(), 1);
    let deeper = Answer::Lock(LockAnswer {
        lock: LockView {
            others: vec![view],
            ..leaf()
        },
        served_ms: 0,
        locks: None,
        not_held: None,
    });
    let mut decoder = FrameDecoder::<Answer>::new();
    decoder.feed(&frames(&[(1, deeper)]));
    assert!(matches!(decoder.poll(), Err(FrameError::Body { .. })));
}

#[test]
fn an_error_code_a_newer_node_added_reads_by_its_status_as_over_http() {
    for (status, code) in [
        (503, ErrorCode::NoLeader),
        (409, ErrorCode::BadRequest),
        (500, ErrorCode::Internal),
    ] {
        let mut body = Vec::new();
        crate::codec::encode_fields_into(&"some_new_code", &mut body).unwrap();
        crate::codec::encode_fields_into(&status, &mut body).unwrap();
        crate::codec::encode_fields_into(&"why", &mut body).unwrap();
        crate::codec::encode_fields_into(&Option::<Box<LockView>>::None, &mut body).unwrap();
        let mut bytes = header(u32::try_from(body.len()).unwrap(), kind::ERROR, 1);
        bytes.extend_from_slice(&body);
        let read = read::<Answer>([bytes.as_slice()]);
        let http =
            ErrorBody::read(status, br#"{"error":"some_new_code","message":"why"}"#).unwrap();
        assert_eq!(read, vec![(1, Answer::Error(http))]);
        assert!(matches!(&read[0].1, Answer::Error(e) if e.error == code));
    }
}

#[test]
fn the_preamble_is_told_from_http_and_tls_at_the_first_byte() {
    for start in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"POST /v1/locks/acquire",
        b"PRI * HTTP/2.0",
        b"OPTIONS",
        &[0x16, 0x03, 0x01],
        &[0x89, b'L', b'H', b'X'],
    ] {
        assert_eq!(sniff(start), Sniff::Other, "{start:?}");
        assert_eq!(
            sniff(&start[..1.min(start.len())]) == Sniff::Other,
            start[0] != 0x89
        );
        assert_eq!(read_preamble(start), Err(PreambleError::NotBinary));
    }
    let hello = preamble(SPEAKS);
    assert_eq!(hello.len(), PREAMBLE_LEN);
    assert_eq!(sniff(&[]), Sniff::NeedMore);
    for n in 1..MAGIC.len() {
        assert_eq!(sniff(&hello[..n]), Sniff::NeedMore);
        assert_eq!(read_preamble(&hello[..n]), Ok(None));
    }
    assert_eq!(sniff(&hello[..MAGIC.len()]), Sniff::Binary);
    assert_eq!(read_preamble(&hello[..MAGIC.len()]), Ok(None));
    assert_eq!(read_preamble(&hello), Ok(Some(SPEAKS)));
    let mut more = hello.to_vec();
    more.extend_from_slice(b"frames");
    assert_eq!(read_preamble(&more), Ok(Some(SPEAKS)));
}

#[test]
fn the_version_spoken_is_the_lower_of_the_two_offers() {
    // A node of this build, callers of every version.
    assert_eq!(choose(SPEAKS, SPEAKS), Ok(SPEAKS));
    assert_eq!(choose(200, SPEAKS), Ok(SPEAKS), "a newer caller");
    assert_eq!(choose(1, 5), Ok(1), "an older caller");
    assert_eq!(choose(0, SPEAKS), Err(PreambleError::NoVersion));
    // A caller of this build, nodes of every version.
    assert_eq!(accept(SPEAKS, SPEAKS), Ok(SPEAKS));
    assert_eq!(
        accept(SPEAKS, NONE),
        Err(PreambleError::Refused { offered: SPEAKS })
    );
    assert_eq!(
        accept(1, 2),
        Err(PreambleError::NotOffered {
            offered: 1,
            chosen: 2
        })
    );
    assert_eq!(OLDEST, 1);
}

#[test]
fn a_members_call_is_shown_without_its_headers_values() {
    let call = PeerCall {
        path: "/internal/copies".into(),
        headers: vec![("x-leasehold-token".into(), b"cluster-secret".to_vec())],
        body: b"{}".to_vec(),
    };
    let shown = format!("{:?}", Request::Peer(call));
    assert!(shown.contains("x-leasehold-token"), "{shown}");
    assert!(!shown.contains("cluster-secret"), "{shown}");
    let reply = PeerReply {
        status: 200,
        headers: vec![("set-secret".into(), b"hidden-value".to_vec())],
        body: Vec::new(),
    };
    assert!(!format!("{:?}", Answer::Peer(reply)).contains("hidden-value"));
}

#[test]
fn a_members_headers_cross_a_frame_in_order_and_a_bad_one_is_refused() {
    let mut headers = http::HeaderMap::new();
    headers.append("x-leasehold-terms", "1".parse().unwrap());
    headers.append("x-b", "two".parse().unwrap());
    headers.append("x-b", "three".parse().unwrap());
    let carried = peer_headers(&headers);
    assert_eq!(carried.len(), 3);
    assert_eq!(header_map(carried), Some(headers));
    assert_eq!(header_map(vec![("bad name".into(), b"v".to_vec())]), None);
    assert_eq!(
        header_map(vec![("x-a".into(), b"line\nbreak".to_vec())]),
        None
    );
}

#[test]
fn a_members_call_may_be_larger_than_a_clients_but_not_without_bound() {
    let call = |len: usize| {
        Request::Peer(PeerCall {
            path: "/internal/copies".into(),
            headers: Vec::new(),
            body: vec![7; len],
        })
    };
    // Over a client's limit, within a member's: written and read.
    let bigger = call(MAX_REQUEST_BODY + 1024);
    assert_eq!(
        read::<Request>([frames(&[(3, bigger.clone())]).as_slice()]),
        vec![(3, bigger)]
    );
    // Over a member's: refused writing, and reading from its header.
    let mut out = Vec::new();
    assert!(matches!(
        encode_frame(4, &call(MAX_PEER_BODY), &mut out),
        Err(FrameError::TooLarge {
            limit: MAX_PEER_BODY,
            ..
        })
    ));
    assert!(out.is_empty());
    let mut decoder = FrameDecoder::<Request>::new();
    decoder.feed(&header(
        u32::try_from(MAX_PEER_BODY + 1).unwrap(),
        kind::PEER,
        5,
    ));
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::TooLarge {
            id: 5,
            limit: MAX_PEER_BODY,
            ..
        })
    ));
    // A client's call of that size is still over its own limit.
    let mut decoder = FrameDecoder::<Request>::new();
    decoder.feed(&header(
        u32::try_from(MAX_REQUEST_BODY + 1).unwrap(),
        kind::ACQUIRE,
        6,
    ));
    assert!(matches!(
        decoder.poll(),
        Err(FrameError::TooLarge {
            id: 6,
            limit: MAX_REQUEST_BODY,
            ..
        })
    ));
}
