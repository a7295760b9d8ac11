//! Becoming and stopping being the speaker: drop on every change of leader
//! or term, rebuild from every member before granting, retry the rebuild
//! for as long as this member leads that term without serving, and hand
//! leadership on when it cannot serve.
//!
//! Attempts are numbered: an outcome that comes back after its attempt
//! was abandoned (leadership moved on meanwhile) is dropped here, so a
//! driver only runs attempts and reports how each ended.
//!
//! Every state has a way out: a rebuild that fails (openraft's ReadIndex
//! gives up after one leader lease while a quorum is out of reach, and the
//! leader keeps its term when the quorum comes back) is tried again with
//! backoff for as long as this member leads the term; one that cannot
//! succeed, or keeps failing for [`STEP_DOWN_AFTER`], makes this member
//! drop its table and hand leadership on. So does a rebuilt leader whose
//! guard has not let it grant for as long.

use std::time::Duration;

use locktable::MonoTime;

use crate::Sabotage;

/// The first wait before a failed rebuild is tried again; it doubles on
/// every failure up to [`RETRY_AT_MOST`].
pub const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between two rebuild attempts of one term.
pub const RETRY_AT_MOST: Duration = Duration::from_secs(1);

/// How long a leader may fail to rebuild, or be barred by its guard, before
/// it hands leadership to another member, so that the cluster is not left
/// with a leader that cannot serve.
pub const STEP_DOWN_AFTER: Duration = Duration::from_secs(10);

/// How one rebuild attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The table serves.
    Rebuilt,
    /// Not rebuilt, for a reason that may pass (no quorum confirmed this
    /// leader in time, or the table was dropped again meanwhile).
    Failed(&'static str),
    /// This member can never serve in this term (its term is beyond the
    /// fences' range): it must hand leadership on.
    CannotSpeak(String),
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Leadership changed: drop the table (speaking for the given term
    /// now, or none) and abandon any rebuild under way.
    Drop(Option<u64>),
    /// Start a rebuild attempt for `term`, and report how it ended with
    /// its number ([`Leadership::attempt_ended`]).
    Rebuild {
        /// The term.
        term: u64,
        /// The attempt's number.
        attempt: u64,
    },
    /// Drop the table for `term`, then hand Raft leadership to another
    /// member (in that order: the transfer lets the target win at once).
    StepDown {
        /// The term.
        term: u64,
        /// Why, for the log.
        why: String,
    },
}

/// When the next rebuild attempt of this term may start.
#[derive(Debug, Clone, Copy)]
struct Retry {
    failures: u32,
    next: Option<MonoTime>,
    failing_since: Option<MonoTime>,
}

impl Retry {
    const NEW: Retry = Retry {
        failures: 0,
        next: None,
        failing_since: None,
    };

    fn due(&self, now: MonoTime) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    fn failed(&mut self, now: MonoTime) {
        let wait = RETRY_FIRST
            .saturating_mul(1 << self.failures.min(16))
            .min(RETRY_AT_MOST);
        self.failures += 1;
        self.next = Some(now + wait);
        self.failing_since.get_or_insert(now);
    }

    /// Whether the rebuild has failed for so long that another member
    /// should try to speak.
    fn hopeless(&self, now: MonoTime) -> bool {
        self.failing_since
            .is_some_and(|since| now.saturating_duration_since(since) >= STEP_DOWN_AFTER)
    }
}

/// The speaker task's state: the term spoken for, the rebuild under way,
/// and the clocks that decide retries and step-downs.
#[derive(Debug, Clone)]
pub struct Leadership {
    speaking: Option<u64>,
    /// The number of the attempt under way.
    attempting: Option<u64>,
    /// How many attempts were started: the last one's number.
    attempts: u64,
    retry: Retry,
    /// Since when this member, rebuilt, has been barred from granting by
    /// its guard while still leading the term.
    muted_since: Option<MonoTime>,
    /// Whether an attempt of the term spoken for failed.
    failed_in_term: bool,
    sabotage: Sabotage,
}

impl Default for Leadership {
    fn default() -> Self {
        Self::new(Sabotage::NONE)
    }
}

impl Leadership {
    /// Speaking for no term; `sabotage` is [`Sabotage::NONE`] but in a
    /// simulation's self-test (it reads `no_rebuild_retry`).
    pub fn new(sabotage: Sabotage) -> Self {
        Leadership {
            speaking: None,
            attempting: None,
            attempts: 0,
            retry: Retry::NEW,
            muted_since: None,
            failed_in_term: false,
            sabotage,
        }
    }

    /// The term spoken for.
    pub fn speaking(&self) -> Option<u64> {
        self.speaking
    }

    /// How many rebuild attempts of this term failed in a row.
    pub fn failures(&self) -> u32 {
        self.retry.failures
    }

    /// Raft says this member leads `term` (or none): a change drops the
    /// table and abandons the attempt under way.
    pub fn leads(&mut self, term: Option<u64>) -> Option<Step> {
        if term == self.speaking {
            return None;
        }
        self.speaking = term;
        self.attempting = None;
        self.retry = Retry::NEW;
        self.muted_since = None;
        self.failed_in_term = false;
        Some(Step::Drop(term))
    }

    /// The attempt numbered `attempt` ended at `now` with `outcome`; one
    /// that is no longer under way (abandoned when leadership changed) is
    /// dropped.
    pub fn attempt_ended(&mut self, attempt: u64, outcome: Attempt, now: MonoTime) -> Option<Step> {
        if self.attempting != Some(attempt) {
            return None;
        }
        self.attempting = None;
        let term = self.speaking?;
        match outcome {
            Attempt::Rebuilt => {
                self.retry = Retry::NEW;
                None
            }
            Attempt::Failed(why) => {
                self.failed_in_term = true;
                self.retry.failed(now);
                tracing::warn!(
                    term,
                    why,
                    attempts = self.retry.failures,
                    "rebuild failed; trying again while this node leads the term"
                );
                if self.retry.hopeless(now) {
                    self.retry = Retry::NEW;
                    return Some(Step::StepDown {
                        term,
                        why: "the rebuild keeps failing".into(),
                    });
                }
                None
            }
            Attempt::CannotSpeak(why) => {
                self.retry.failed(now);
                Some(Step::StepDown { term, why })
            }
        }
    }

    /// What to do at `now`, given whether the table is rebuilt and whether
    /// the guard lets this member grant: start a rebuild when one is due,
    /// or step down after [`STEP_DOWN_AFTER`] barred by the guard (a
    /// leader whose acknowledgements stopped coming back while its
    /// heartbeats still arrive keeps its followers from campaigning, yet
    /// cannot grant).
    pub fn tick(&mut self, rebuilt: bool, may_speak: bool, now: MonoTime) -> Option<Step> {
        let term = self.speaking?;
        if self.attempting.is_none() && !rebuilt && self.retry.due(now) {
            self.attempts += 1;
            self.attempting = Some(self.attempts);
            if self.failed_in_term && self.sabotage.no_rebuild_retry {
                // Sabotaged: this attempt is never made, so never ends.
                return None;
            }
            return Some(Step::Rebuild {
                term,
                attempt: self.attempts,
            });
        }
        if rebuilt && !may_speak {
            let since = *self.muted_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= STEP_DOWN_AFTER {
                self.muted_since = None;
                return Some(Step::StepDown {
                    term,
                    why: "no quorum has acknowledged this leader".into(),
                });
            }
        } else {
            self.muted_since = None;
        }
        None
    }

    /// When [`Leadership::tick`] next has something to do on time alone:
    /// a retry falling due, or a step-down while muted. Leadership changes
    /// and attempts ending are events of their own.
    pub fn next_due(&self) -> Option<MonoTime> {
        self.speaking?;
        if let Some(since) = self.muted_since {
            return Some(since + STEP_DOWN_AFTER);
        }
        if self.attempting.is_some() {
            return None;
        }
        self.retry.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    #[test]
    fn a_new_term_drops_the_table_and_rebuilds_at_once() {
        let mut lead = Leadership::default();
        assert_eq!(lead.tick(false, false, at(0)), None, "not leading");
        assert_eq!(lead.leads(Some(4)), Some(Step::Drop(Some(4))));
        assert_eq!(lead.leads(Some(4)), None);
        assert_eq!(
            lead.tick(false, false, at(0)),
            Some(Step::Rebuild {
                term: 4,
                attempt: 1
            })
        );
        assert_eq!(
            lead.tick(false, false, at(1)),
            None,
            "one attempt at a time"
        );
        assert_eq!(lead.attempt_ended(1, Attempt::Failed("x"), at(2)), None);
        assert_eq!(lead.failures(), 1);
        assert_eq!(lead.leads(None), Some(Step::Drop(None)));
        assert_eq!(lead.failures(), 0);
    }

    #[test]
    fn failed_rebuilds_back_off_doubling_to_a_second_then_step_down() {
        let mut lead = Leadership::default();
        lead.leads(Some(2));
        let mut now = 0;
        let mut starts = Vec::new();
        let mut stepped = None;
        while now < 12_000 {
            match lead.tick(false, false, at(now)) {
                Some(Step::Rebuild { attempt, .. }) => {
                    starts.push(now);
                    let failed = Attempt::Failed("no quorum");
                    if let Some(step) = lead.attempt_ended(attempt, failed, at(now)) {
                        stepped = Some((now, step));
                        break;
                    }
                }
                Some(other) => panic!("{other:?}"),
                None => {}
            }
            now += 10;
        }
        assert_eq!(&starts[..6], &[0, 50, 150, 350, 750, 1_550]);
        assert_eq!(lead.speaking(), Some(2));
        assert_eq!(starts[6] - starts[5], 1_000, "at most a second apart");
        let (when, step) = stepped.expect("stepped down");
        assert!((10_000..11_100).contains(&when), "{when}");
        assert!(matches!(step, Step::StepDown { term: 2, .. }));
    }

    #[test]
    fn a_rebuilt_leader_barred_by_its_guard_steps_down_after_the_bound() {
        let mut lead = Leadership::default();
        lead.leads(Some(7));
        lead.tick(false, true, at(0));
        assert_eq!(lead.attempt_ended(1, Attempt::Rebuilt, at(5)), None);
        assert_eq!(lead.tick(true, true, at(10)), None);
        assert_eq!(lead.tick(true, false, at(20)), None, "muted since 20");
        assert_eq!(lead.next_due(), Some(at(10_020)));
        assert_eq!(lead.tick(true, true, at(5_000)), None, "heard again: reset");
        assert_eq!(lead.tick(true, false, at(6_000)), None);
        assert_eq!(lead.tick(true, false, at(15_999)), None);
        assert!(matches!(
            lead.tick(true, false, at(16_000)),
            Some(Step::StepDown { term: 7, .. })
        ));
    }

    #[test]
    fn a_term_that_cannot_speak_steps_down_at_once() {
        let mut lead = Leadership::default();
        lead.leads(Some(1));
        lead.tick(false, false, at(0));
        let step = lead.attempt_ended(1, Attempt::CannotSpeak("fences".into()), at(1));
        assert_eq!(
            step,
            Some(Step::StepDown {
                term: 1,
                why: "fences".into()
            })
        );
    }

    #[test]
    fn an_outcome_of_an_abandoned_attempt_is_dropped() {
        let mut lead = Leadership::default();
        lead.leads(Some(3));
        let Some(Step::Rebuild { attempt: first, .. }) = lead.tick(false, false, at(0)) else {
            panic!("no attempt");
        };
        // Leadership moves on and back while the attempt runs.
        assert_eq!(lead.leads(None), Some(Step::Drop(None)));
        assert_eq!(lead.leads(Some(5)), Some(Step::Drop(Some(5))));
        let Some(Step::Rebuild {
            attempt: second, ..
        }) = lead.tick(false, false, at(1))
        else {
            panic!("no attempt");
        };
        assert_ne!(first, second);
        assert_eq!(
            lead.attempt_ended(first, Attempt::CannotSpeak("old".into()), at(2)),
            None,
            "the first attempt's outcome is stale"
        );
        assert_eq!(lead.failures(), 0);
        assert_eq!(lead.tick(false, false, at(3)), None, "the second runs on");
        assert_eq!(
            lead.attempt_ended(second, Attempt::Failed("x"), at(4)),
            None
        );
        assert_eq!(lead.failures(), 1);
        assert_eq!(
            lead.attempt_ended(second, Attempt::Failed("x"), at(5)),
            None,
            "an outcome counts once"
        );
        assert_eq!(lead.failures(), 1);
    }

    #[test]
    fn sabotaged_no_attempt_follows_a_failed_one_in_the_term() {
        let sabotage = Sabotage {
            no_rebuild_retry: true,
            ..Sabotage::NONE
        };
        for sabotaged in [false, true] {
            let mut lead = Leadership::new(if sabotaged { sabotage } else { Sabotage::NONE });
            lead.leads(Some(2));
            let Some(Step::Rebuild { attempt, .. }) = lead.tick(false, false, at(0)) else {
                panic!("no first attempt");
            };
            lead.attempt_ended(attempt, Attempt::Failed("no quorum"), at(1));
            let retried = (2..2_000)
                .step_by(10)
                .any(|ms| matches!(lead.tick(false, false, at(ms)), Some(Step::Rebuild { .. })));
            assert_eq!(retried, !sabotaged, "sabotaged: {sabotaged}");
            // A new term tries again either way.
            lead.leads(Some(3));
            assert!(matches!(
                lead.tick(false, false, at(3_000)),
                Some(Step::Rebuild { term: 3, .. })
            ));
        }
    }
}
