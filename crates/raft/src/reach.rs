//! Whether each member answers Raft's messages, as this node sees it, and
//! the log lines an operator greps for: a member that stops answering is
//! logged once when it goes, at most every [`REMIND_EVERY`] while it stays
//! gone, and once when it answers again; not once per heartbeat.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::types::NodeId;

/// How often a member still unreachable is logged again.
pub const REMIND_EVERY: Duration = Duration::from_secs(30);

/// One member's reachability.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// When it last answered, if it ever did.
    answered: Option<Instant>,
    /// Since when it has not answered, while it does not.
    down_since: Option<Instant>,
    /// When its being down was last logged.
    logged: Option<Instant>,
}

/// Every member's reachability, updated by each Raft message's outcome.
#[derive(Debug, Default)]
pub struct Reachability {
    members: Mutex<HashMap<NodeId, Seen>>,
}

/// What an operator may read of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberReach {
    /// Whether its last message was answered.
    pub reachable: bool,
    /// How long ago it last answered, if it ever did.
    pub last_contact: Option<Duration>,
}

impl Reachability {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Seen>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `member` answered a message now.
    pub fn answered(&self, member: NodeId) {
        let now = Instant::now();
        let mut members = self.lock();
        let seen = members.entry(member).or_default();
        if let Some(since) = seen.down_since.take() {
            if seen.logged.is_some() {
                tracing::info!(
                    member,
                    down_ms = millis(now - since),
                    "peer reachable again"
                );
            }
        }
        seen.answered = Some(now);
        seen.logged = None;
    }

    /// `member` did not answer a message (`why`).
    pub fn failed(&self, member: NodeId, why: &dyn std::fmt::Display) {
        let now = Instant::now();
        let mut members = self.lock();
        let seen = members.entry(member).or_default();
        let since = *seen.down_since.get_or_insert(now);
        match seen.logged {
            None => tracing::warn!(member, %why, "peer unreachable"),
            Some(at) if now - at >= REMIND_EVERY => tracing::warn!(
                member,
                %why,
                down_ms = millis(now - since),
                "peer still unreachable"
            ),
            Some(_) => return,
        }
        seen.logged = Some(now);
    }

    /// What is known of `member`, if it was ever sent a message.
    pub fn of(&self, member: NodeId) -> Option<MemberReach> {
        let now = Instant::now();
        self.lock().get(&member).map(|seen| MemberReach {
            reachable: seen.down_since.is_none(),
            last_contact: seen.answered.map(|at| now - at),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_member_is_unreachable_until_it_answers_again() {
        let reach = Reachability::default();
        assert_eq!(reach.of(2), None);
        reach.answered(2);
        assert_eq!(
            reach.of(2),
            Some(MemberReach {
                reachable: true,
                last_contact: Some(Duration::ZERO)
            })
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        reach.failed(2, &"connection refused");
        tokio::time::advance(Duration::from_secs(1)).await;
        reach.failed(2, &"connection refused");
        let seen = reach.of(2).unwrap();
        assert!(!seen.reachable);
        assert_eq!(seen.last_contact, Some(Duration::from_secs(2)));
        reach.answered(2);
        assert!(reach.of(2).unwrap().reachable);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_still_down_is_logged_again_only_after_the_reminder_interval() {
        let reach = Reachability::default();
        reach.failed(3, &"refused");
        let first = reach.lock()[&3].logged;
        assert!(first.is_some());
        tokio::time::advance(Duration::from_secs(10)).await;
        reach.failed(3, &"refused");
        assert_eq!(reach.lock()[&3].logged, first, "not logged again at 10 s");
        tokio::time::advance(REMIND_EVERY).await;
        reach.failed(3, &"refused");
        assert_ne!(reach.lock()[&3].logged, first, "logged again past 30 s");
    }
}
