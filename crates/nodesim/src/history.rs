//! What the simulated clients saw, in simulated time: the record the
//! checks read.

use std::time::Duration;

/// A call a client made and the answer it acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Which client.
    pub client: usize,
    /// The node that answered.
    pub node: u64,
    /// The lock's name.
    pub name: String,
    /// The grant's id.
    pub id: String,
    /// When the client sent it.
    pub sent: Duration,
    /// When the answer came.
    pub at: Duration,
}

/// What a client saw, stamped with simulated time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A grant, or a renewal of it.
    Held {
        /// The acquire or the renewal.
        call: Call,
        /// What the client asked to hold of the name.
        kind: locktable::Kind,
        /// The fence it answered.
        fence: u64,
        /// The end of the lease on the holder's count: `served_ms +
        /// ttl_ms` after it sent the call.
        ends: Duration,
        /// A renewal, not the grant.
        renewal: bool,
        /// The lock-delay the grant asked for: once its lease ran out
        /// unreleased, the name is closed this much longer.
        delay: Duration,
    },
    /// A renewal (or a first release) answered `404 not_held`: the grant
    /// is gone.
    NotHeld(Call),
    /// An answer that is not what the API promises.
    Malformed(String),
    /// A release, from when it was sent: the client holds nothing since.
    Released {
        /// The lock's name.
        name: String,
        /// The grant's id.
        id: String,
        /// When the client sent it.
        sent: Duration,
    },
    /// An acquire answered `409 held`, naming the holder's grant.
    Refused {
        /// The name asked for.
        name: String,
        /// The id of the grant the refusal named.
        holder: String,
        /// When the client sent it: the speaker refused it later.
        sent: Duration,
        /// When the refusal came: the speaker refused it earlier.
        at: Duration,
    },
    /// A session ended, as its holder saw it: closed, or left to lapse
    /// (or answered `404`).
    SessionEnded {
        /// The session's id.
        session: String,
        /// Every lock granted in it: name, grant id, and the lock-delay
        /// it keeps the name closed for once the session lapses.
        locks: Vec<(String, String, Duration)>,
        /// When its close was answered `200`: the speaker had released
        /// it and every lock of it.
        closed: Option<Duration>,
        /// When the speaker's lease of it ends at the latest: the latest
        /// answer to its open or a renewal, plus the lease asked; `None`
        /// when a renewal's try may have been carried out unanswered.
        lapsed_by: Option<Duration>,
    },
    /// A speaker's table was rebuilt, as the driver saw it (sampled): a
    /// rebuilt table may take back a lock released before, whose release
    /// some member did not hear of, until its lease ends.
    Rebuilt {
        /// The speaker.
        node: u64,
        /// When it was seen rebuilt.
        at: Duration,
    },
    /// After the faults healed, a node served its first grant.
    Served {
        /// The node.
        node: u64,
        /// When the faults healed.
        healed: Duration,
        /// When its grant was answered.
        at: Duration,
    },
}

/// The events of a run, in the order they happened.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Every event.
    pub events: Vec<Event>,
}

impl History {
    /// Adds `event`.
    pub fn push(&mut self, event: Event) {
        self.events.push(event);
    }
}

/// The simulated time now (inside the simulation).
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}
