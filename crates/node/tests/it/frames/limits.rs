//! The binary transport's bounds on what a caller can make a node hold or
//! wait for: big answers read slowly, large answers one at a time, the
//! writer's buffer, `--chaos`'s lost answers, and a stop.

use super::*;

/// Takes every name of `names` over `conn`, its calls pipelined, each
/// lock with `data`.
async fn take_all(conn: &mut Conn, names: &[String], data: &str) {
    let deadline = Instant::now() + PATIENCE;
    for chunk in names.chunks(200) {
        let mut left: Vec<usize> = (0..chunk.len()).collect();
        while !left.is_empty() {
            for &i in &left {
                let mut body = acquire(&chunk[i]);
                if let Request::Acquire(b) = &mut body {
                    b.data = Some(data.into());
                }
                conn.send(i as u64, &body).await;
            }
            let mut again = Vec::new();
            for _ in 0..left.len() {
                let frame = conn.recv().await;
                match frame.message {
                    Answer::Lock(_) => {}
                    // A node too busy to keep its speaker's lease: again.
                    Answer::Error(e) if e.http_status() == 503 => again.push(frame.id as usize),
                    other => panic!("acquire {}: {other:?}", chunk[frame.id as usize]),
                }
            }
            assert!(Instant::now() < deadline, "{} names not taken", again.len());
            left = again;
        }
    }
}

#[tokio::test]
async fn a_caller_that_reads_a_big_answer_slowly_but_steadily_gets_it_whole() {
    // An idle timeout of a few seconds: no read below pauses for that long,
    // even on a loaded machine.
    let idle = IDLE * 2;
    let node = start_with(|c| c.with_idle_timeout(idle)).await;
    let mut holder = Conn::open(&node.addr).await;
    take_when_serving(&mut holder, "big/warm").await;
    // A listing of about 10 MB: more than the sockets' buffers hold, so
    // the node's write of it lasts as long as the caller takes to read it.
    let names: Vec<String> = (0..2500).map(|i| format!("big/{i:04}")).collect();
    take_all(&mut holder, &names, &"d".repeat(4000)).await;

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 << 10).unwrap();
    let stream = socket.connect(node.addr.parse().unwrap()).await.unwrap();
    let mut conn = Conn {
        stream,
        answers: FrameDecoder::new(),
    };
    conn.stream
        .write_all(&wire::preamble(wire::SPEAKS))
        .await
        .unwrap();
    let mut chosen = [0u8; PREAMBLE_LEN];
    conn.stream.read_exact(&mut chosen).await.unwrap();
    let list = Request::List(leasehold_api::ListQuery {
        prefix: Some("big/".into()),
        limit: Some(10_000),
    });
    conn.send(1, &list).await;
    // Read at about 500 kB/s, never pausing for more than a few tens of
    // milliseconds: the write always makes progress, though it takes
    // several idle timeouts in all.
    let started = Instant::now();
    let mut buffer = vec![0u8; 16 << 10];
    let answer = loop {
        if let Some(frame) = conn.answers.poll().unwrap() {
            break frame;
        }
        let read = tokio::time::timeout(PATIENCE, conn.stream.read(&mut buffer))
            .await
            .expect("the answer goes on")
            .unwrap();
        assert!(
            read > 0,
            "the node closed the connection of a caller reading its answer, after {:?}",
            started.elapsed()
        );
        conn.answers.feed(&buffer[..read]);
        tokio::time::sleep(Duration::from_millis(30)).await;
    };
    assert!(
        started.elapsed() > IDLE,
        "the answer was read too fast to show anything"
    );
    match answer.message {
        Answer::Locks(listing) => assert_eq!(listing.locks.len(), 2501),
        other => panic!("not a listing: {other:?}"),
    }
}

#[tokio::test]
async fn a_lost_answer_under_chaos_holds_no_place_and_the_connection_still_goes_idle() {
    let node = start_with(|c| c.with_idle_timeout(IDLE).with_chaos(true)).await;
    let mut conn = Conn::open(&node.addr).await;
    take_when_serving(&mut conn, "chaos/warm").await;
    let set = node
        .http
        .post(format!("http://{}/internal/chaos", node.addr))
        .header("x-leasehold-token", TOKEN)
        .json(&serde_json::json!({ "lose_next_answer": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status().as_u16(), 200);

    // Served, and its answer never sent: the next call is answered.
    conn.send(1, &acquire("chaos/lost")).await;
    assert_eq!(conn.call(2, Request::Ping).await, Answer::Done);
    assert_eq!(node.holder_over_http("chaos/lost").await.0, 200, "served");
    // The lost answer is not a call in flight for ever: it holds none of
    // the connection's places, and the connection, with nothing in flight,
    // is closed once idle (as one whose caller read the answer would be).
    let deadline = Instant::now() + PATIENCE;
    while node.metric("leasehold_binary_calls_in_flight").await != 0.0 {
        assert!(Instant::now() < deadline, "the lost answer stays in flight");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        conn.closed_within(PATIENCE).await.is_some(),
        "a connection whose one call in flight lost its answer never goes idle"
    );
}

/// This process's resident memory, in bytes (Linux).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test]
async fn a_connection_that_was_sent_a_big_answer_does_not_keep_its_size() {
    let node = start_with(|c| c).await;
    let mut holder = Conn::open(&node.addr).await;
    take_when_serving(&mut holder, "kept/warm").await;
    // A listing of about 10 MB.
    let names: Vec<String> = (0..2500).map(|i| format!("kept/{i:04}")).collect();
    take_all(&mut holder, &names, &"d".repeat(4000)).await;
    let list = Request::List(leasehold_api::ListQuery {
        prefix: Some("kept/".into()),
        limit: Some(10_000),
    });

    // Each caller lists once, reads the answer whole (dropping its bytes
    // as they come), and stays connected.
    let callers = 48;
    let before = resident();
    let mut open = Vec::new();
    for _ in 0..callers {
        let mut conn = Conn::open(&node.addr).await;
        conn.send(1, &list).await;
        let mut header = [0u8; wire::HEADER_LEN];
        conn.stream.read_exact(&mut header).await.unwrap();
        let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as u64;
        assert!(len > 10_000_000, "a listing of {len} bytes");
        let mut body = (&mut conn.stream).take(len);
        let read = tokio::io::copy(&mut body, &mut tokio::io::sink())
            .await
            .unwrap();
        assert_eq!(read, len);
        assert_eq!(conn.call(2, Request::Ping).await, Answer::Done);
        open.push(conn);
    }
    let kept = resident().saturating_sub(before);
    assert!(
        kept < 200 << 20,
        "{callers} connections, each sent a listing once, keep {} MB",
        kept >> 20
    );
    drop(open);
}

#[tokio::test]
async fn a_node_that_stops_does_not_wait_for_a_preamble_half_sent() {
    let (running, addr, _dir) = crate::common::start_one(TOKEN, |c| c).await;
    let mut conn = Conn::open(&addr).await;
    take_when_serving(&mut conn, "stop/warm").await;
    drop(conn);
    // The magic's first bytes, and no more.
    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(&wire::MAGIC[..2]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    running.shutdown().await;
    let (_, _) = read_to_close(&mut half).await;
    let took = started.elapsed();
    // Well within the idle timeout (30 s), and within the 5 s a shutdown
    // gives its tasks to end.
    assert!(
        took < Duration::from_secs(5),
        "the node took {took:?} to stop and close a connection with half a preamble"
    );
}

/// What a caller reads until the node closes: the bytes, and whether the
/// connection was reset.
async fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout(PATIENCE * 2, stream.read(&mut buffer))
            .await
            .expect("the node closes in time")
        {
            Ok(0) => return (got, false),
            Ok(n) => got.extend_from_slice(&buffer[..n]),
            Err(_) => return (got, true),
        }
    }
}

#[tokio::test]
async fn a_caller_that_reads_nothing_has_one_large_answer_made_at_a_time() {
    let node = start_with(|c| c).await;
    let mut holder = Conn::open(&node.addr).await;
    take_when_serving(&mut holder, "large/warm").await;
    // Listings of about 2 MB each: more than loopback's buffers hold a few
    // of.
    let names: Vec<String> = (0..500).map(|i| format!("large/{i:03}")).collect();
    take_all(&mut holder, &names, &"d".repeat(4000)).await;
    let list = Request::List(leasehold_api::ListQuery {
        prefix: Some("large/".into()),
        limit: Some(1000),
    });
    let listings = || async {
        let text = node
            .http
            .get(format!("http://{}/metrics", node.addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with("leasehold_http_request_duration_seconds_count{")
                    && l.contains("route=\"/v1/locks\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = listings().await;

    let mut conn = Conn::open(&node.addr).await;
    for id in 1..=40 {
        conn.send(id, &list).await;
    }
    // A lookup is answered meanwhile: only large answers wait their turn.
    let mut other = Conn::open(&node.addr).await;
    let warm = Request::Get(GetQuery {
        name: "large/warm".into(),
        watch: None,
    });
    lock(other.call(1, warm).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let made = listings().await - before;
    assert!(
        (1.0..=10.0).contains(&made),
        "{made} listings made for a caller that read none of them"
    );
    // Read, they all come.
    for _ in 1..=40 {
        match conn.recv().await.message {
            Answer::Locks(l) => assert_eq!(l.locks.len(), 501),
            other => panic!("{other:?}"),
        }
    }
}
