use super::*;
use crate::clock::Clock;

fn lock(i: u64, at: MonoTime) -> Lock {
    Lock {
        session: (i % 6 == 1).then(|| LockId::from_u128(u128::from(i) + 99)),
        delay: Duration::from_millis(if i % 4 == 0 { 1500 } else { 0 }),
        name: format!("jobs/{i:06}"),
        id: LockId::from_u128(u128::from(i) << 70 | 7),
        node: 2,
        holder: "worker".into(),
        fence: Fence::new(3, i),
        kind: match i % 3 {
            0 => Kind::Exclusive,
            1 => Kind::Shared,
            _ => Kind::Permit(i as u32 % 7 + 1),
        },
        lease: Duration::from_secs(30),
        acquired: at - Duration::from_millis(i),
        expires: at + Duration::from_secs(20) + Duration::from_nanos(i),
        data: (i % 3 == 0).then(|| "x".repeat(i as usize % 50)),
        data_rev: (i % 5) as u32,
    }
}

fn header() -> ReportHeader {
    ReportHeader {
        node: 2,
        uptime_ms: 5,
        first_start: true,
        max_lease_ms: 600_000,
        copies: 2,
        departed: vec![Departed {
            node: 4,
            addr: "127.0.0.1:4".into(),
            left_ms: 9_000,
        }],
    }
}

#[test]
fn a_report_crosses_in_bounded_frames_and_each_frame_counts_from_its_arrival() {
    crosses(Layout::Plain);
    crosses(Layout::Revised);
    crosses(Layout::Kinded);
    crosses(Layout::Delayed);
    crosses(Layout::Sessioned);
}

#[test]
fn a_layout_is_asked_for_as_the_cluster_speaks() {
    for (version, layout) in [
        (0, Layout::Plain),
        (1, Layout::Plain),
        (2, Layout::Revised),
        (3, Layout::Kinded),
        (4, Layout::Kinded),
        (5, Layout::Delayed),
        (6, Layout::Sessioned),
    ] {
        assert_eq!(Layout::of_cluster(version), layout);
        assert_eq!(Layout::asked(&layout.request(7)), layout);
    }
}

/// A report of 3000 locks in `layout`.
fn crosses(layout: Layout) {
    let clock = Clock::new();
    let sent = clock.now();
    let locks: Vec<Lock> = (0..3000).map(|i| lock(i, sent)).collect();
    let limit = 16 * 1024;
    let frames = encode(
        &header(),
        locks.iter().map(|l| Sessioned::of(l, sent)),
        layout,
        limit,
    )
    .unwrap();
    assert!(frames.len() > 5, "{} frames", frames.len());
    assert!(frames.iter().all(|f| f.len() <= limit + 4));

    // The pieces arrive a second apart, cut to 1000 bytes each.
    let start = sent + Duration::from_millis(500);
    let arrivals = std::cell::Cell::new(0u32);
    let mut reader = ReportReader::new(limit, layout, || {
        let i = arrivals.get();
        arrivals.set(i + 1);
        start + Duration::from_secs(u64::from(i))
    });
    let bytes: Vec<u8> = frames.concat();
    for piece in bytes.chunks(1000) {
        reader.push(piece).unwrap();
    }
    let report = reader.finish().unwrap();
    assert_eq!(report.header, header());
    assert_eq!(report.frames, frames.len() - 2, "all but header and end");
    assert_eq!(report.locks.len(), locks.len());
    let base = start;
    let mut last_delay = Duration::ZERO;
    for (got, sent_lock) in report.locks.iter().zip(&locks) {
        // The same lock, moved later by its frame's arrival.
        let delay = got.expires.saturating_duration_since(sent_lock.expires);
        assert_eq!(
            (got.name.as_str(), got.id, got.fence, got.data.as_deref()),
            (
                sent_lock.name.as_str(),
                sent_lock.id,
                sent_lock.fence,
                sent_lock.data.as_deref()
            )
        );
        let rev = if layout >= Layout::Revised {
            sent_lock.data_rev
        } else {
            0
        };
        assert_eq!(got.data_rev, rev, "revisions cross only when asked");
        let kind = if layout >= Layout::Kinded {
            sent_lock.kind
        } else {
            Kind::Exclusive
        };
        assert_eq!(got.kind, kind, "kinds cross only when asked");
        let session = if layout >= Layout::Sessioned {
            sent_lock.session
        } else {
            None
        };
        assert_eq!(got.session, session, "sessions cross only when asked");
        let lock_delay = if layout >= Layout::Delayed {
            sent_lock.delay
        } else {
            Duration::ZERO
        };
        assert_eq!(got.delay, lock_delay, "lock-delays cross only when asked");
        assert_eq!(
            got.acquired,
            sent_lock.acquired + delay,
            "held as long as said"
        );
        assert!(got.expires >= sent_lock.expires, "never ends earlier");
        assert!(delay >= last_delay, "later frames count from later");
        assert!(got.expires >= base + sent_lock.ttl(sent));
        last_delay = delay;
    }
    assert!(
        last_delay >= Duration::from_secs(10),
        "the last frame came later"
    );
}

/// A fed reader passes each frame's locks on once the frame is whole,
/// with that frame's arrival, and keeps none in the report; a report
/// whose header names another node than the one asked is refused
/// before any of its locks goes anywhere.
#[test]
fn a_fed_report_passes_each_whole_frame_on_and_refuses_another_members() {
    use std::sync::{Arc, Mutex};
    let clock = Clock::new();
    let now = clock.now();
    let locks: Vec<Lock> = (0..3000).map(|i| lock(i, now)).collect();
    let limit = 16 * 1024;
    let frames = encode(
        &header(),
        locks.iter().map(|l| Sessioned::of(l, now)),
        Layout::Sessioned,
        limit,
    )
    .unwrap();
    let bytes = frames.concat();
    let whole = {
        let mut reader = ReportReader::new(limit, Layout::Sessioned, || now);
        reader.push(&bytes).unwrap();
        reader.finish().unwrap().locks
    };

    type Passed = Vec<(Vec<Lock>, MonoTime)>;
    let passed: Arc<Mutex<Passed>> = Arc::default();
    let sink = {
        let passed = Arc::clone(&passed);
        move |locks, at| passed.lock().unwrap().push((locks, at))
    };
    let arrivals = std::cell::Cell::new(0u64);
    let mut reader = ReportReader::new(limit, Layout::Sessioned, || {
        arrivals.set(arrivals.get() + 1);
        now + Duration::from_secs(arrivals.get())
    })
    .feeding(header().node, Box::new(sink));
    let mut seen = 0;
    for piece in bytes.chunks(1000) {
        reader.push(piece).unwrap();
        let passed = passed.lock().unwrap();
        assert!(passed.len() >= seen, "frames are passed on as they come");
        seen = passed.len();
    }
    let report = reader.finish().unwrap();
    assert!(report.locks.is_empty(), "none kept in the report");
    assert_eq!(report.count, locks.len());
    let passed = std::mem::take(&mut *passed.lock().unwrap());
    assert_eq!(
        passed.len(),
        frames.len() - 2,
        "one pass per frame of locks"
    );
    assert!(
        passed.windows(2).all(|w| w[0].1 < w[1].1),
        "each its own arrival"
    );
    let fed: Vec<Lock> = passed.into_iter().flat_map(|(locks, _)| locks).collect();
    let key = |l: &Lock| (l.id, l.name.clone(), l.fence, l.kind, l.session, l.delay);
    assert_eq!(
        fed.iter().map(key).collect::<Vec<_>>(),
        whole.iter().map(key).collect::<Vec<_>>()
    );

    let called = Arc::new(Mutex::new(0));
    let sink = {
        let called = Arc::clone(&called);
        move |_: Vec<Lock>, _: MonoTime| *called.lock().unwrap() += 1
    };
    let mut reader = ReportReader::new(limit, Layout::Sessioned, || now).feeding(9, Box::new(sink));
    let err = reader.push(&bytes).expect_err("another member's report");
    assert!(matches!(err, CodecError::UnexpectedFrame(_)), "{err}");
    assert_eq!(reader.reported_by(), Some(header().node));
    assert_eq!(*called.lock().unwrap(), 0, "no lock of it went anywhere");
}

#[test]
fn a_cut_or_garbled_report_is_an_error_never_a_panic_or_a_short_report() {
    let clock = Clock::new();
    let now = clock.now();
    let locks: Vec<Lock> = (0..40).map(|i| lock(i, now)).collect();
    let bytes = encode(
        &header(),
        locks.iter().map(|l| Sessioned::of(l, now)),
        Layout::Kinded,
        512,
    )
    .unwrap()
    .concat();
    let read = |bytes: &[u8]| {
        let mut reader = ReportReader::new(512, Layout::Kinded, || clock.now());
        reader.push(bytes)?;
        reader.finish()
    };
    assert_eq!(read(&bytes).unwrap().locks.len(), 40);
    for cut in 0..bytes.len() {
        let err = read(&bytes[..cut]).expect_err("a cut stream must not pass");
        assert!(
            matches!(
                err,
                CodecError::Truncated { .. } | CodecError::UnexpectedFrame(_)
            ),
            "cut at {cut}: {err}"
        );
    }
    for at in 0..bytes.len() {
        let mut garbled = bytes.clone();
        garbled[at] ^= 0xA5;
        // A flipped byte inside a string can decode; nothing may panic,
        // and no stream may come out longer or shorter than sent.
        if let Ok(report) = read(&garbled) {
            assert_eq!(report.locks.len(), 40, "flip at {at}");
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(read(&longer), Err(CodecError::TrailingBytes(1))));
}

#[test]
fn a_reports_frames_leave_as_they_fill_not_after_the_last_lock() {
    let now = MonoTime::from_nanos(1 << 62);
    let locks: Vec<Lock> = (0..5000).map(|i| lock(i, now)).collect();
    let pulled = std::cell::Cell::new(0);
    let each = locks.iter().map(|l| {
        pulled.set(pulled.get() + 1);
        Sessioned::of(l, now)
    });
    let mut pulled_at_each_frame = Vec::new();
    let mut frames = Vec::new();
    let limit = crate::NodeConfig::MIN_REPORT_FRAME_BYTES;
    encode_each(&header(), each, Layout::Sessioned, limit, &mut |frame| {
        pulled_at_each_frame.push(pulled.get());
        frames.push(frame);
    })
    .unwrap();
    assert!(frames.len() > 4, "{} frames", frames.len());
    // The header's frame leaves with the first lock, each full frame
    // with the lock that did not fit in it.
    assert!(pulled_at_each_frame[0] <= 1, "{pulled_at_each_frame:?}");
    assert!(pulled_at_each_frame[1] < 5000, "{pulled_at_each_frame:?}");
    let collected = encode(
        &header(),
        locks.iter().map(|l| Sessioned::of(l, now)),
        Layout::Sessioned,
        limit,
    );
    assert_eq!(
        collected.unwrap(),
        frames,
        "the same stream, sent as it fills"
    );
}

#[test]
fn the_largest_lock_the_api_admits_fits_the_smallest_frame() {
    use leasehold_api::{MAX_DATA_BYTES, MAX_HOLDER_BYTES, MAX_NAME_BYTES};
    let now = MonoTime::from_nanos(1 << 62);
    let mut big = lock(1, now);
    big.name = "n".repeat(MAX_NAME_BYTES);
    big.holder = "h".repeat(MAX_HOLDER_BYTES);
    big.data = Some("d".repeat(MAX_DATA_BYTES));
    let limit = crate::NodeConfig::MIN_REPORT_FRAME_BYTES;
    big.data_rev = u32::MAX;
    let frames = encode(&header(), [Sessioned::of(&big, now)], Layout::Kinded, limit).unwrap();
    assert!(frames.iter().all(|f| f.len() <= limit + 4));
}

#[test]
fn a_held_lock_leaves_as_the_same_lock_would() {
    let now = MonoTime::from_nanos(1 << 62);
    let mut held = locktable::Held::new();
    for i in 0..4 {
        held.record(lock(i, now));
    }
    let from_held: Vec<Delayed<&str>> =
        held.iter_live(now).map(|l| Delayed::held(l, now)).collect();
    let locks = held.live(now);
    let from_locks: Vec<Delayed<&str>> = locks.iter().map(|l| Delayed::of(l, now)).collect();
    assert_eq!(from_held.len(), 4);
    assert_eq!(from_held, from_locks);
}
