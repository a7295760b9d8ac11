//! A member's report is encoded by a task of the node's own: under a
//! simulator (`leasehold_raft::tasks::spawn_locally`), in the set of tasks
//! its host runs, which the simulation pauses and crashes with the host
//! (docs/design.md, "Seams for simulation"). A task started on tokio's
//! scheduler instead runs while its host is paused. The report says how
//! many locks it holds before the first of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span;

use crate::common::start_one;

const TOKEN: &str = "report-task-token";
const ENCODED: &str = "report encoded for a rebuilding speaker";

/// Notes, for every report the node encodes, whether its host's set of
/// tasks was being polled at that moment.
struct Encodes {
    in_set: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<bool>>>,
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Encodes {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event()
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0 == ENCODED {
            let in_set = self.in_set.load(Ordering::SeqCst);
            self.seen.lock().unwrap().push(in_set);
        }
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// A host's set of tasks, marked while it is polled.
struct Marked<F> {
    in_set: Arc<AtomicBool>,
    set: Pin<Box<F>>,
}

impl<F: Future> Future for Marked<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.in_set.store(true, Ordering::SeqCst);
        let polled = self.set.as_mut().poll(cx);
        self.in_set.store(false, Ordering::SeqCst);
        polled
    }
}

#[test]
fn a_report_is_encoded_in_the_nodes_own_set_of_tasks() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // As the simulator runs a host: blocking work inline, tasks in the set.
    leasehold_raft::blocking::run_inline();
    leasehold_raft::tasks::spawn_locally();
    let in_set = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let _watching = tracing::subscriber::set_default(Encodes {
        in_set: Arc::clone(&in_set),
        seen: Arc::clone(&seen),
    });
    let set = tokio::task::LocalSet::new();
    let life = set.run_until(async {
        let (running, addr, _dir) = start_one(TOKEN, |c| c).await;
        let started = tokio::time::Instant::now();
        while running.node().may_grant_for().is_none() {
            assert!(started.elapsed() < Duration::from_secs(30), "never spoke");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Seven locks, each on record twice on a single node: in the table
        // it was granted from and in its client's record.
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        for i in 0..7 {
            let answer = http
                .post(format!("http://{addr}/v1/locks/acquire"))
                .json(&serde_json::json!({ "name": format!("jobs/{i}") }))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .expect("acquired");
            assert_eq!(answer.status(), 200);
        }
        let speaks = leasehold_raft::version::SPEAKS;
        let read = http
            .post(format!("http://{addr}/internal/held"))
            .header("x-leasehold-token", TOKEN)
            .header("x-leasehold-from", "99")
            .header("x-leasehold-store", format!("{:032x}", 99))
            .header(
                "x-leasehold-protocol",
                format!("speaks={speaks}; cluster={speaks}"),
            )
            .json(&serde_json::json!({ "term": 0 }))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("report read");
        assert_eq!(read.status(), 200);
        // Said up front, so that the rebuilding speaker makes room for the
        // locks at once.
        let said = read.headers().get("x-leasehold-report-locks").cloned();
        assert_eq!(
            said.as_ref().and_then(|v| v.to_str().ok()),
            Some("14"),
            "the report says how many locks it holds before they come"
        );
        let report = read.bytes().await.expect("the report's body");
        assert!(!report.is_empty());
        running.shutdown().await;
    });
    runtime.block_on(Marked {
        in_set: Arc::clone(&in_set),
        set: Box::pin(life),
    });
    let seen = seen.lock().unwrap().clone();
    // Twice: the node read its own report when it became speaker, and the
    // report read here.
    assert_eq!(
        seen,
        [true, true],
        "each report was encoded by a task of the node's set (false: on \
         tokio's scheduler, where a paused host's tasks still run)"
    );
}
