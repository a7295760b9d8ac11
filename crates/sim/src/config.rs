//! What a run simulates: the cluster, the workload, the faults, and the
//! timings the node and openraft run with.

pub use leasehold_protocol::Sabotage;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Config {
    /// Members.
    pub nodes: u64,
    /// Clients, each talking to one node.
    pub clients: usize,
    /// Names they contend for.
    pub names: usize,
    /// Faults are injected until this simulated time (ms); the run then
    /// waits for the last fault to heal and checks liveness in a quiet tail.
    pub duration_ms: u64,
    /// Strict rebuild mode (else proceed).
    pub strict: bool,
    /// Chance a message is lost (until the quiet tail).
    pub loss: f64,
    /// Longest message delay, in ms.
    pub max_delay_ms: u64,
    /// How many members must hold a record of a grant or renewal before
    /// its client hears of it (`--copies`; at most a quorum).
    pub copies: usize,
    /// Which faults to inject.
    pub scenario: Scenario,
    /// Safety mechanisms switched off on purpose, to show the checker
    /// catches it: the protocol's one vocabulary, read by the protocol
    /// where it decides and by this driver where the switch breaks a
    /// driver's duty.
    pub sabotage: Sabotage,
    /// Keep a trace of what happened (for `--reproduce`).
    pub trace: bool,
    /// Names of every kind: besides exclusive locks, names readers hold
    /// shared beside one another (writers among them), and semaphores of
    /// two permits (`n1`, `n4`, ... shared; `n2`, `n5`, ... permits), over
    /// three names at least (a name of each kind). Off, every name is
    /// exclusive and a seed draws what it always drew.
    pub kinds: bool,
    /// Lock-delays: half the grants ask for one (200 to 800 ms), so that a
    /// lease that runs out unreleased keeps its name closed that much
    /// longer, which the checker holds the cluster to. Off, a seed draws
    /// what it always drew.
    pub delays: bool,
    /// Sets of names: now and then a client asks for `n0` and `n1` at once,
    /// in a random order, and holds what it gets; the checker holds every
    /// set answer to be whole (each name asked, in order, consecutive
    /// fences). Off, a seed draws what it always drew.
    pub sets: bool,
    /// Sessions: now and then a client opens a session, takes one or two
    /// of the names in it, renews the session (not the locks) every third
    /// of its lease, and closes it or lets it lapse; each lock of it is
    /// judged as any lock. Off, a seed draws what it always drew.
    pub sessions: bool,
    /// Session copies (protocol 7): a session's grant is copied with the
    /// count and digest of its locks, and a member keeping exactly those
    /// renews its copies of them in place; one that does not is sent the
    /// session and every lock of it as copies. Off, every lock of a copied
    /// session is copied again at each renewal.
    pub session_copies: bool,
    /// Sessions taken back (protocol 7): a forwarded session's renewal
    /// carries the node's record of the session; a speaker whose table
    /// lacks it answers "records wanted", and the node sends its records
    /// of the session's locks at once, to be taken back
    /// (`Member::reclaim_session`). Off, a session the table lacks is
    /// "not held" (or "may be on record elsewhere" during a strict hold).
    pub session_reclaim: bool,
}

/// The faults a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A random mix: crashes with restarts, pauses, partitions (both ways
    /// and one way), graceful restarts (leadership handed over), and now
    /// and then, just after an election, a leader cut off from every member
    /// (a quorum blip) or deaf to their acknowledgements for longer than
    /// the step-down bound.
    Mixed,
    /// The speaker is paused for longer than a strict hold, again and
    /// again: it wakes to requests queued while it slept.
    SpeakerPauses,
    /// The speaker is cut off from a minority of followers (who campaign),
    /// then another follower, one the speaker's quorum counts on, crashes
    /// and restarts at once, a few times in a row.
    RestartBehindCut,
    /// Right after each election the new leader is cut off from every
    /// member for a little longer than its ReadIndex waits, but too briefly
    /// for any follower to campaign: the leader keeps its term.
    QuorumBlip,
    /// A speaker that just granted its own client the longest lease pauses
    /// until its successor's read arrives, and wakes a little later, in
    /// time for the successor's deadline: its report arrives late, counted
    /// down while it slept.
    SlowReports,
    /// Right after an election early in the run (the speaker is crashed to
    /// cause one), every acknowledgement to the new leader is lost for
    /// longer than the step-down bound, while its
    /// heartbeats still arrive (no follower campaigns): it fails to rebuild
    /// until it steps down and hands leadership over.
    AcksLost,
    /// Now and then, right after the speaker answers its own client a
    /// grant of the longest lease, it crashes (and restarts a little
    /// later): the holder renews through another member, whose speaker
    /// knows the lock only from a copy.
    SpeakerCrashes,
}

impl Scenario {
    /// Every scenario but the mixed one, each aimed at one fault.
    pub const TARGETED: [Scenario; 6] = [
        Scenario::SpeakerPauses,
        Scenario::RestartBehindCut,
        Scenario::QuorumBlip,
        Scenario::AcksLost,
        Scenario::SlowReports,
        Scenario::SpeakerCrashes,
    ];
}

impl Config {
    /// A configuration drawn from `seed`, with the mixed faults.
    pub fn from_seed(seed: u64) -> Config {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xC0F1);
        let mut config = Config {
            nodes: if rng.gen_bool(0.5) { 3 } else { 5 },
            clients: rng.gen_range(2..8),
            names: rng.gen_range(1..4),
            duration_ms: 8_000,
            strict: rng.gen_bool(0.5),
            loss: rng.gen_range(0.0..0.08),
            max_delay_ms: rng.gen_range(1..40),
            copies: 2,
            scenario: Scenario::Mixed,
            sabotage: Sabotage::NONE,
            trace: false,
            kinds: false,
            delays: false,
            sets: false,
            sessions: false,
            session_copies: false,
            session_reclaim: false,
        };
        // The node's default, min(2, quorum); five members now and then
        // ask for three, the most a quorum allows.
        if config.nodes == 5 && rng.gen_bool(0.25) {
            config.copies = 3;
        }
        config
    }

    /// A configuration drawn from `seed` that injects `scenario`'s faults.
    pub fn scenario(seed: u64, scenario: Scenario) -> Config {
        let mut config = Config::from_seed(seed);
        config.scenario = scenario;
        match scenario {
            Scenario::Mixed => {}
            Scenario::SpeakerPauses => {
                config.strict = true;
                config.clients = config.clients.max(4);
                config.duration_ms = 12_000;
            }
            Scenario::RestartBehindCut => {
                config.clients = config.clients.max(5);
                config.loss = config.loss.min(0.02);
                config.max_delay_ms = config.max_delay_ms.min(15);
            }
            Scenario::QuorumBlip => {}
            Scenario::SlowReports => {
                config.clients = config.clients.max(6);
                config.names = 1;
            }
            Scenario::AcksLost => config.duration_ms = 14_000,
            Scenario::SpeakerCrashes => config.clients = config.clients.max(4),
        }
        config
    }
}

/// Raft's and the node's timings, as leasehold runs them, and the lease
/// rule the simulated clients use.
pub(crate) mod timing {
    /// openraft's heartbeat interval.
    pub const HEARTBEAT_MS: u64 = 50;
    /// The randomized election timeout's bounds.
    pub const ELECTION_MIN_MS: u64 = 150;
    /// The upper bound, which is also openraft's leader lease: a follower
    /// refuses votes this long after the last heartbeat it accepted.
    pub const ELECTION_MAX_MS: u64 = 300;
    /// openraft's leader lease (`election_timeout_max`).
    pub const LEADER_LEASE_MS: u64 = ELECTION_MAX_MS;
    /// A candidate that saw a greater log waits this much longer
    /// (openraft's `smaller_log_timeout`).
    pub const SMALLER_LOG_MS: u64 = 2 * ELECTION_MAX_MS;
    /// openraft's tick (`heartbeat_interval * 13 / 64`).
    pub const RAFT_TICK_MS: u64 = 10;
    /// How often the speaker task looks at Raft (`WATCH_EVERY`).
    pub const WATCH_MS: u64 = 10;
    /// The longest wait between two rebuild attempts (the protocol's).
    pub const RETRY_AT_MOST_MS: u64 = leasehold_protocol::RETRY_AT_MOST.as_millis() as u64;
    /// How long a stopping leader waits for another leader.
    pub const HANDOVER_PATIENCE_MS: u64 = 2_000;
    /// How long a new speaker waits for each member's report.
    pub const REBUILD_TIMEOUT_MS: u64 = 300;
    /// How long a rebuild waits before it reads a member again whose read
    /// failed (the protocol's).
    pub const READ_AGAIN_AFTER_MS: u64 = leasehold_protocol::READ_AGAIN_AFTER.as_millis() as u64;
    /// The clients' lease.
    pub const LEASE_MS: u64 = 1_000;
    /// The longest lease (`--max-lease`).
    pub const MAX_LEASE_MS: u64 = 2_000;
    /// The strict hold after a rebuild that missed members: the longest
    /// lease plus one leader lease.
    pub const STRICT_HOLD_MS: u64 = MAX_LEASE_MS + LEADER_LEASE_MS;
    /// How often the expiry task polls the table.
    pub const POLL_MS: u64 = 20;
    /// How early a client stops before its own count of the lease ends.
    pub const CLIENT_MARGIN_MS: u64 = 100;
    /// How often a liveness probe asks while it has no grant.
    pub const PROBE_EVERY_MS: u64 = 50;
    /// How long a member has to acknowledge a copy before the next one is
    /// tried (the node's 1 s against its 30 s lease; here a fifth of the
    /// clients' lease, a few of the longest round trips).
    pub const COPY_TIMEOUT_MS: u64 = 200;
    /// How long a copy goes unanswered before the next member is sent one
    /// as well (the node's 200 ms against its 1 s copy timeout).
    pub const COPY_HEDGE_MS: u64 = COPY_TIMEOUT_MS / 5;
    /// How long a copy waits in its member's queue before it leaves.
    pub const COPY_QUEUE_MS: u64 = 1;
    /// How often a holder renews (a third of its lease, as the client).
    pub const RENEW_DIVISOR: u64 = 3;
    /// The longest one renewal attempt may take before another node is
    /// tried: two copy timeouts, as the client's 2 s against the node's
    /// 1 s.
    pub const RENEW_ATTEMPT_MS: u64 = 2 * COPY_TIMEOUT_MS;
}

/// How long after the last fault heals every live node must have served a
/// grant, for a run whose messages take at most `max_delay_ms` (and in
/// strict mode or not). The parts,
/// in the order a worst case meets them:
///
/// - a node restarted by the last fault runs Raft a leader lease later;
/// - an election: a follower campaigns a leader lease plus an election
///   timeout after the last heartbeat it accepted (plus `smaller_log`
///   after it saw a greater log), pre-vote and vote take two round trips;
///   three such rounds are allowed for split votes;
/// - a rebuild attempt that was under way fails after one leader lease
///   (ReadIndex) or the rebuild timeout (reading failed members again
///   happens within that timeout, and ending the reads early only
///   shortens it), and the next one starts after the longest backoff; it
///   then confirms and reads in two round trips (no message is lost in the
///   quiet tail, so no member is read again);
/// - in strict mode, a rebuild within the longest lease of a restart
///   misses that member and holds new grants back for the strict hold;
/// - the probe asks every `PROBE_EVERY_MS`, through a forward: two round
///   trips, and one more for a copy (a probe of the speaker's own node, or
///   one through a follower with three copies), queued a moment first.
pub fn liveness_bound_ms(max_delay_ms: u64, strict: bool) -> u64 {
    use timing::*;
    let round_trip = 2 * max_delay_ms;
    let restart = LEADER_LEASE_MS;
    let election_round = ELECTION_MAX_MS + SMALLER_LOG_MS + 2 * round_trip + RAFT_TICK_MS;
    let election = LEADER_LEASE_MS + 3 * election_round;
    let rebuild = WATCH_MS
        + LEADER_LEASE_MS.max(REBUILD_TIMEOUT_MS)
        + RETRY_AT_MOST_MS
        + WATCH_MS
        + 2 * round_trip;
    let probe = PROBE_EVERY_MS + 3 * round_trip + COPY_QUEUE_MS;
    let hold = if strict { STRICT_HOLD_MS } else { 0 };
    restart + election + rebuild + hold + probe
}
