//! A rebuild's reports settled as their frames arrive, on a thread of
//! their own: the reads decode frames on the runtime's threads and pass
//! each frame's locks on; a million locks settle while the rest of the
//! report is still on its way, and the settling holds up neither Raft's
//! heartbeats nor the node's clients.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use leasehold_protocol::RebuildFeed;
use locktable::{Lock, MonoTime};

use crate::report::LockSink;

/// What the settling thread is told.
enum Message {
    /// A frame's locks, arrived at that instant.
    Frame(Vec<Lock>, MonoTime),
    /// A member said its report holds about this many locks.
    Expect(usize),
    /// The reads are over: settle nothing more.
    End,
}

/// Where the reads' frames go: a thread settling them as they come, or,
/// where blocking work runs inline (a simulator stepping every host on one
/// thread), the feed itself, filled as each frame is passed on.
#[derive(Clone)]
pub(super) struct Frames(Route);

#[derive(Clone)]
enum Route {
    Thread(mpsc::Sender<Message>),
    Inline(Arc<Mutex<Option<RebuildFeed>>>),
}

impl Frames {
    /// Passes on `locks`, arrived at `now`: dropped once the reads are
    /// over.
    pub(super) fn add(&self, locks: Vec<Lock>, now: MonoTime) {
        match &self.0 {
            Route::Thread(to) => {
                let _ = to.send(Message::Frame(locks, now));
            }
            Route::Inline(feed) => {
                if let Some(feed) = lock(feed).as_mut() {
                    feed.add(locks, now);
                }
            }
        }
    }

    /// The reader's sink for the frames of one report.
    pub(super) fn sink(&self) -> Box<dyn LockSink> {
        Box::new(self.clone())
    }
}

impl LockSink for Frames {
    /// Makes room for about `locks` more locks at once.
    fn expect(&mut self, locks: usize) {
        match &self.0 {
            Route::Thread(to) => {
                let _ = to.send(Message::Expect(locks));
            }
            Route::Inline(feed) => {
                if let Some(feed) = lock(feed).as_mut() {
                    feed.reserve(locks);
                }
            }
        }
    }

    fn take(&mut self, locks: Vec<Lock>, now: MonoTime) {
        self.add(locks, now);
    }
}

fn lock(feed: &Mutex<Option<RebuildFeed>>) -> std::sync::MutexGuard<'_, Option<RebuildFeed>> {
    feed.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A rebuild attempt's feed being filled.
pub(super) struct Collector {
    frames: Frames,
    settled: Option<tokio::task::JoinHandle<RebuildFeed>>,
}

impl Collector {
    /// Starts filling `feed` from the frames passed to [`Collector::frames`].
    pub(super) fn start(feed: RebuildFeed) -> Self {
        if leasehold_raft::blocking::inline() {
            return Collector {
                frames: Frames(Route::Inline(Arc::new(Mutex::new(Some(feed))))),
                settled: None,
            };
        }
        let (to, from) = mpsc::channel();
        let settled = tokio::task::spawn_blocking(move || {
            let mut feed = feed;
            // Until the end is said, or every sender is gone (the attempt
            // dropped: nobody waits for the feed).
            loop {
                match from.recv() {
                    Ok(Message::Frame(locks, now)) => feed.add(locks, now),
                    Ok(Message::Expect(locks)) => feed.reserve(locks),
                    Ok(Message::End) | Err(_) => break,
                }
            }
            feed
        });
        Collector {
            frames: Frames(Route::Thread(to)),
            settled: Some(settled),
        }
    }

    /// Where the reads pass their frames.
    pub(super) fn frames(&self) -> &Frames {
        &self.frames
    }

    /// The feed with every frame passed on before now settled in; frames
    /// passed on later are dropped. `None` if the settling panicked.
    pub(super) async fn finish(self) -> Option<RebuildFeed> {
        match self.frames.0 {
            Route::Thread(to) => {
                let _ = to.send(Message::End);
                self.settled?.await.ok()
            }
            Route::Inline(feed) => lock(&feed).take(),
        }
    }
}
