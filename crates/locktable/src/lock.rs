//! A lock granted, the request for one, and the form in which it travels.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::time::MonoTime;

/// A node of the cluster, as Raft numbers it.
pub type NodeId = u64;

/// The identity of one grant: what a holder renews and releases by.
///
/// A 128-bit value shown as a 26-character ULID (Crockford base32). The node
/// granting a lock makes it from the wall time and random bits, so ids are
/// unique without coordination and sort roughly by creation.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LockId(u128);

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

impl LockId {
    /// The id of these 128 bits.
    pub const fn from_u128(bits: u128) -> Self {
        LockId(bits)
    }

    /// A ULID: 48 bits of wall time in milliseconds, then 80 random bits.
    pub fn from_parts(wall_ms: u64, random: u128) -> Self {
        let time = u128::from(wall_ms & 0xFFFF_FFFF_FFFF) << 80;
        LockId(time | (random & ((1u128 << 80) - 1)))
    }

    /// The 128 bits of the id.
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; 26];
        // 26 digits of 5 bits: the first carries the top 3 bits (125..128).
        for (i, c) in out.iter_mut().enumerate() {
            let bits = (self.0 >> (125 - 5 * i)) & 0x1F;
            *c = CROCKFORD[bits as usize];
        }
        f.write_str(std::str::from_utf8(&out).expect("ascii"))
    }
}

impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockId({self})")
    }
}

/// A string that is not a lock id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a lock id (26 characters of Crockford base32 expected)")]
pub struct BadLockId;

impl FromStr for LockId {
    type Err = BadLockId;

    fn from_str(s: &str) -> Result<Self, BadLockId> {
        let bytes = s.as_bytes();
        if bytes.len() != 26 || bytes[0] > b'7' {
            return Err(BadLockId);
        }
        let mut value: u128 = 0;
        for &b in bytes {
            let digit = match b.to_ascii_uppercase() {
                c @ b'0'..=b'9' => c - b'0',
                b'O' => 0,
                b'I' | b'L' => 1,
                c => CROCKFORD[10..]
                    .iter()
                    .position(|&d| d == c)
                    .map(|p| p as u8 + 10)
                    .ok_or(BadLockId)?,
            };
            value = (value << 5) | u128::from(digit);
        }
        Ok(LockId(value))
    }
}

/// A fencing token: strictly greater than every fence granted before it
/// anywhere in the cluster.
///
/// The Raft term of the speaker that granted it is in the high
/// [`Fence::EPOCH_BITS`] bits and a counter of that speaker's grants in the
/// low [`Fence::COUNTER_BITS`]. A term names at most one leader and terms
/// only grow, so a later speaker's fences exceed an earlier one's, and within
/// a term the one speaker counts up.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub u64);

impl Fence {
    /// Bits given to the counter of grants within one term.
    pub const COUNTER_BITS: u32 = 40;
    /// Bits given to the term.
    pub const EPOCH_BITS: u32 = 64 - Self::COUNTER_BITS;
    /// The largest term a fence can carry.
    pub const MAX_EPOCH: u64 = (1 << Self::EPOCH_BITS) - 1;

    /// The fence of the `counter`-th grant in `epoch`.
    pub const fn new(epoch: u64, counter: u64) -> Self {
        Fence((epoch << Self::COUNTER_BITS) | (counter & ((1 << Self::COUNTER_BITS) - 1)))
    }

    /// The term the fence was granted in.
    pub const fn epoch(self) -> u64 {
        self.0 >> Self::COUNTER_BITS
    }

    /// The grant's number within its term.
    pub const fn counter(self) -> u64 {
        self.0 & ((1 << Self::COUNTER_BITS) - 1)
    }

    /// The counter's top bit, set on every grant of a term whose speaker
    /// rebuilt from a read that saw every grant answered before it (fewer
    /// members missing than there are copies): such a grant was made
    /// knowing every live lock of earlier terms.
    pub const SEEN_ALL: u64 = 1 << (Self::COUNTER_BITS - 1);

    /// Whether the fence was granted by a speaker that had seen every
    /// earlier grant (see [`Fence::SEEN_ALL`]).
    pub const fn seen_all(self) -> bool {
        self.counter() & Self::SEEN_ALL != 0
    }
}

/// What a grant holds of its name: the whole of it, a share beside other
/// readers, or one of a fixed number of permits.
///
/// A name is, while anyone holds or waits on it, either a lock (holders
/// [`Kind::Exclusive`] or [`Kind::Shared`]) or a semaphore of `n` permits
/// (holders [`Kind::Permit`]`(n)`); a request of the other family, or for
/// another count, is refused rather than queued.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The name alone: no other holder beside it.
    #[default]
    Exclusive,
    /// A reader's share: any number of shared holders together, no writer.
    Shared,
    /// One of `n` permits: at most `n` holders together.
    Permit(u32),
}

impl Kind {
    /// The largest permit count a semaphore may have.
    pub const MAX_PERMITS: u32 = 1_000_000;

    /// Whether a grant of this kind may be held beside one of `other`.
    pub fn compatible(self, other: Kind) -> bool {
        match (self, other) {
            (Kind::Shared, Kind::Shared) => true,
            (Kind::Permit(a), Kind::Permit(b)) => a == b,
            _ => false,
        }
    }

    /// Whether a request of this kind may queue on a name held or awaited
    /// as `other`: both lock kinds, or permits of one count.
    pub fn same_family(self, other: Kind) -> bool {
        match (self, other) {
            (Kind::Permit(a), Kind::Permit(b)) => a == b,
            (Kind::Permit(_), _) | (_, Kind::Permit(_)) => false,
            _ => true,
        }
    }

    /// How many grants of this kind a name holds at most together.
    pub fn limit(self) -> u32 {
        match self {
            Kind::Exclusive => 1,
            Kind::Shared => u32::MAX,
            Kind::Permit(n) => n,
        }
    }

    /// The kind as one number, as a slot keeps it and peers pass it: 0
    /// exclusive, `u32::MAX` shared, else the permit count.
    pub fn to_bits(self) -> u32 {
        match self {
            Kind::Exclusive => 0,
            Kind::Shared => u32::MAX,
            Kind::Permit(n) => n.clamp(1, u32::MAX - 1),
        }
    }

    /// The kind [`Kind::to_bits`] made `bits` of.
    pub fn from_bits(bits: u32) -> Kind {
        match bits {
            0 => Kind::Exclusive,
            u32::MAX => Kind::Shared,
            n => Kind::Permit(n),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Exclusive => f.write_str("exclusive"),
            Kind::Shared => f.write_str("shared"),
            Kind::Permit(n) => write!(f, "one of {n} permits"),
        }
    }
}

/// A cluster lock granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// The name locked.
    pub name: String,
    /// The grant's id, which its holder renews and releases by.
    pub id: LockId,
    /// The node whose client holds the lock.
    pub node: NodeId,
    /// Who holds it, for the reader of a listing.
    pub holder: String,
    /// The grant's fencing token.
    pub fence: Fence,
    /// What the grant holds of its name.
    pub kind: Kind,
    /// The lease last granted or renewed.
    pub lease: Duration,
    /// The grant's lock-delay: once its lease runs out unreleased, its name
    /// stays closed this much longer (zero for none).
    pub delay: Duration,
    /// When it was granted, on the clock of the node keeping this record.
    pub acquired: MonoTime,
    /// When the record ends, on the clock of the node keeping this record:
    /// the lease's end, then the lock-delay (see [`Lock::lease_ends`]).
    pub expires: MonoTime,
    /// Data kept with the lock.
    pub data: Option<String>,
    /// How many times the data was changed since the grant: of two records
    /// of one grant, the data of the higher revision is the newer, whatever
    /// their leases (a proclaim may shorten the lease).
    pub data_rev: u32,
    /// The session the lock hangs off, if any: it has no lease of its own
    /// but its session's, and ends with it (see [`crate::session`]).
    pub session: Option<LockId>,
}

impl Lock {
    /// The longest lock-delay a grant may ask for.
    pub const MAX_DELAY: Duration = Duration::from_secs(60);

    /// Time left on the record at `now`: the lease's, then the lock-delay's.
    pub fn ttl(&self, now: MonoTime) -> Duration {
        self.expires.saturating_duration_since(now)
    }

    /// When the holder's lease ends: the record's end less the lock-delay.
    /// From then on the holder holds nothing (a renewal or release is
    /// refused), and the name stays closed until [`Lock::expires`].
    pub fn lease_ends(&self) -> MonoTime {
        self.expires - self.delay
    }

    /// Time left on the holder's lease at `now` (what a client is told).
    pub fn lease_left(&self, now: MonoTime) -> Duration {
        self.lease_ends().saturating_duration_since(now)
    }

    /// Whether the holder's lease ran out at `now` while the lock-delay
    /// keeps the name closed.
    pub fn is_lapsed(&self, now: MonoTime) -> bool {
        now >= self.lease_ends()
    }

    /// How long the lock has been held at `now`.
    pub fn held_for(&self, now: MonoTime) -> Duration {
        now.saturating_duration_since(self.acquired)
    }

    /// Whether the lock was renewed since it was granted: its lease ends
    /// later than one lease from its grant. Only a client holding the lock
    /// renews it.
    pub fn renewed_since_granted(&self) -> bool {
        self.expires > self.acquired + self.lease + self.delay
    }

    /// Whether the lease still runs at `now`.
    pub fn is_live(&self, now: MonoTime) -> bool {
        now < self.expires
    }

    /// The lock as it travels to another node: its times as durations.
    pub fn in_transit(&self, now: MonoTime) -> LockInTransit {
        LockInTransit {
            name: self.name.clone(),
            id: self.id,
            node: self.node,
            holder: self.holder.clone(),
            fence: self.fence,
            kind: self.kind,
            lease: self.lease,
            delay: self.delay,
            ttl: self.ttl(now),
            held_for: self.held_for(now),
            data: self.data.clone(),
            data_rev: self.data_rev,
            session: self.session,
        }
    }
}

/// Whether data at revision `a.0` in a record whose lease ends at `a.1` is
/// newer than the data of `b`: the higher revision, and of equal ones the
/// record whose lease ends later (the record of the later renewal; builds
/// before revisions changed data at revision 0, and two speakers that each
/// took a change unknown to the other count the same revision).
pub fn newer_data(a: (u32, MonoTime), b: (u32, MonoTime)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 > b.1)
}

/// A lock on its way between nodes: the lease as time left, the age as time
/// held, never an instant of the sender's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInTransit {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: LockId,
    /// The node whose client holds the lock.
    pub node: NodeId,
    /// Who holds it.
    pub holder: String,
    /// The grant's fencing token.
    pub fence: Fence,
    /// What the grant holds of its name.
    pub kind: Kind,
    /// The lease last granted or renewed.
    pub lease: Duration,
    /// The grant's lock-delay ([`Lock::delay`]).
    pub delay: Duration,
    /// Time left on the record (lease, then lock-delay), as the sender
    /// counted it when it sent.
    pub ttl: Duration,
    /// How long the lock had been held, as the sender counted it.
    pub held_for: Duration,
    /// Data kept with the lock.
    pub data: Option<String>,
    /// The data's revision ([`Lock::data_rev`]).
    pub data_rev: u32,
    /// The session the lock hangs off ([`Lock::session`]).
    pub session: Option<LockId>,
}

impl LockInTransit {
    /// The lock on the receiver's clock, counting the time left from
    /// `counted_from`.
    ///
    /// A node reading another's lock passes the instant it *sent* its
    /// request: the sender measured `ttl` later than that, so the lease ends
    /// no later on the receiver's clock than on the sender's.
    pub fn arrive(self, counted_from: MonoTime) -> Lock {
        Lock {
            name: self.name,
            id: self.id,
            node: self.node,
            holder: self.holder,
            fence: self.fence,
            kind: self.kind,
            lease: self.lease,
            delay: self.delay,
            acquired: counted_from - self.held_for,
            expires: counted_from + self.ttl,
            data: self.data,
            data_rev: self.data_rev,
            session: self.session,
        }
    }
}

/// A lock asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The name to lock.
    pub name: String,
    /// The id the grant will carry; the caller makes it unique.
    pub id: LockId,
    /// The node whose client asks.
    pub node: NodeId,
    /// Who asks, for the reader of a listing.
    pub holder: String,
    /// What the grant is to hold of the name.
    pub kind: Kind,
    /// How long the lock is held once granted, unless released before; none
    /// means the default lease.
    pub lease: Option<Duration>,
    /// How long the request waits for a lock held by another; zero fails at
    /// once.
    pub wait: Duration,
    /// The grant's lock-delay ([`Lock::delay`]), at most
    /// [`Lock::MAX_DELAY`] and shorter than the table's longest lease.
    pub delay: Duration,
    /// Data to keep with the lock.
    pub data: Option<String>,
    /// The session the grant is to hang off ([`Lock::session`]): it is
    /// granted only while that session is held, with the session's lease.
    pub session: Option<LockId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_print_as_ulids_and_parse_back() {
        for bits in [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210,
        ] {
            let id = LockId::from_u128(bits);
            let text = id.to_string();
            assert_eq!(text.len(), 26);
            assert_eq!(text.parse::<LockId>(), Ok(id));
            assert_eq!(text.to_lowercase().parse::<LockId>(), Ok(id));
        }
        assert_eq!(
            LockId::from_u128(u128::MAX).to_string(),
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
        );
    }

    #[test]
    fn bad_lock_ids_are_refused() {
        for text in [
            "",
            "short",
            "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "0000000000000000000000000U",
            "00000000000000000000000000X",
        ] {
            assert_eq!(text.parse::<LockId>(), Err(BadLockId), "{text}");
        }
    }

    #[test]
    fn ulid_time_is_in_the_high_bits() {
        let a = LockId::from_parts(1_000, u128::MAX);
        let b = LockId::from_parts(1_001, 0);
        assert!(a < b);
    }

    #[test]
    fn fences_order_by_term_then_counter() {
        assert!(Fence::new(2, 0) > Fence::new(1, (1 << Fence::COUNTER_BITS) - 1));
        assert!(Fence::new(1, 2) > Fence::new(1, 1));
        let f = Fence::new(3, 7);
        assert_eq!((f.epoch(), f.counter()), (3, 7));
    }

    #[test]
    fn a_lock_in_transit_arrives_counted_from_the_send() {
        let at = MonoTime::from_nanos(10_000_000_000);
        let lock = Lock {
            session: Default::default(),
            name: "a".into(),
            id: LockId::from_u128(1),
            node: 1,
            holder: String::new(),
            fence: Fence::new(1, 1),
            kind: Kind::Exclusive,
            lease: Duration::from_secs(5),
            delay: Duration::ZERO,
            acquired: at - Duration::from_secs(2),
            expires: at + Duration::from_secs(3),
            data: None,
            data_rev: 0,
        };
        let moved = lock.in_transit(at);
        assert_eq!(moved.ttl, Duration::from_secs(3));
        assert_eq!(moved.held_for, Duration::from_secs(2));
        // The receiver's clock reads differently; only durations matter.
        let there = MonoTime::from_nanos(50_000_000_000);
        let arrived = moved.arrive(there);
        assert_eq!(arrived.ttl(there), Duration::from_secs(3));
        assert_eq!(arrived.held_for(there), Duration::from_secs(2));
    }
}
