//! The speaker protocol, as `crates/node` runs it: the watch loop that drops
//! the table on every change of leader or term and rebuilds it (retrying
//! with backoff while the node leads the term, stepping down after
//! failing too long), the rebuild (ReadIndex, then every member's report),
//! the guarded grant and release paths, and the member side of a rebuild.

use std::collections::BTreeMap;
use std::time::Duration;

use locktable::{AcquireError, Acquired, LockId, NodeId, RebuildFrom, Request};

use crate::config::timing::{
    MAX_LEASE_MS, READ_AGAIN_AFTER_MS, REBUILD_TIMEOUT_MS, STRICT_HOLD_MS,
};
use crate::config::Sabotage;
use crate::node::{Attempt, Forwarded, Origin, Outcome, Phase, Reads, Retry, Unread};
use crate::world::{Ask, ClientId, Event, Msg, Refusal, ReqId, To, World};

impl World {
    pub(crate) fn ignores_lease(&self) -> bool {
        self.config.sabotaged(Sabotage::IgnoreLeaderLease)
    }

    /// `watch_leadership`, one turn: drop the table whenever the term this
    /// node leads changes; while it leads, take a finished attempt's outcome
    /// and start another attempt when one is due and the table is not
    /// rebuilt.
    pub(crate) fn watch(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let term = if node.stopping {
            None
        } else {
            node.raft.leader_term()
        };
        if term != node.speaking {
            node.speaking = term;
            node.moved.clear();
            node.attempt = None;
            node.retry = Retry::new(t);
            self.drop_table(n);
            match term {
                Some(term) => self.note(|| format!("node {n}: leads term {term}, rebuilding")),
                None => self.note(|| format!("node {n}: not the speaker")),
            }
        }
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(term) = node.speaking else {
            return;
        };
        if let Some(Phase::Done(outcome)) = node.attempt.as_ref().map(|a| &a.phase) {
            let outcome = *outcome;
            node.attempt = None;
            match outcome {
                Outcome::Rebuilt => node.retry = Retry::new(t),
                Outcome::Failed(why) => {
                    node.retry.failed(t);
                    self.report.failed_rebuilds += 1;
                    let failures = node.retry.failures;
                    self.note(|| {
                        format!(
                            "node {n}: rebuild of term {term} failed ({why}), {failures} so far"
                        )
                    });
                    let node = self.nodes.get_mut(&n).expect("member");
                    if self.config.sabotaged(Sabotage::NoRebuildRetry) {
                        // As before issue 10: rebuilt only on a change of term.
                        node.retry.next = u64::MAX;
                    } else if node.retry.hopeless(t) {
                        self.step_down(n, term);
                        self.nodes.get_mut(&n).expect("member").retry = Retry::new(t);
                    }
                }
            }
        }
        let node = self.nodes.get_mut(&n).expect("member");
        if node.attempt.is_none() && node.retry.due(t) && !node.table.is_rebuilt() {
            self.start_attempt(n, term);
        }
    }

    /// Drops the table, then hands leadership to another member
    /// (`step_down`): openraft's transfer lets the target win at once.
    fn step_down(&mut self, n: NodeId, term: u64) {
        self.report.step_downs += 1;
        self.drop_table(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let to = node.raft.transfer_target();
        if let Some(to) = to {
            node.raft.transfer_leader(to);
        }
        self.note(|| format!("node {n}: steps down from term {term}, hands over to {to:?}"));
        self.flush_raft(n);
    }

    /// Drops node `n`'s table: waiting requests are answered `not_rebuilt`
    /// and its grants are kept as `Granted`.
    pub(crate) fn drop_table(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.table.drop_table(now);
        self.dispatch(n);
    }

    fn start_attempt(&mut self, n: NodeId, term: u64) {
        let t = self.t;
        self.next_attempt += 1;
        let id = self.next_attempt;
        let node = self.nodes.get_mut(&n).expect("member");
        let generation = node.table.generation();
        // The blank entry of this term committed and a quorum still knows
        // this leader: openraft's ReadIndex.
        let phase = if node.raft.start_read(id, t) {
            Phase::Confirming
        } else {
            Phase::Done(Outcome::Failed("not the leader, or handing over"))
        };
        node.attempt = Some(Attempt {
            id,
            term,
            generation,
            phase,
        });
        self.flush_raft(n);
    }

    /// ReadIndex of attempt `id` ended: read every member, or fail. A
    /// member whose read fails is read again every `READ_AGAIN_AFTER_MS`
    /// until the rebuild timeout (`read_check`).
    pub(crate) fn read_confirmed(&mut self, n: NodeId, id: u64, confirmed: bool) {
        let t = self.t;
        let nodes = self.config.nodes;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) else {
            return;
        };
        if !matches!(attempt.phase, Phase::Confirming) {
            return;
        }
        if !confirmed {
            attempt.phase = Phase::Done(Outcome::Failed("no quorum confirmed this leader"));
            return;
        }
        let term = attempt.term;
        node.read_by = node.read_by.max(term);
        let (locks, restarted) = node.report(t);
        let mut reports = BTreeMap::new();
        reports.insert(n, (locks, restarted, t));
        let deadline = t + REBUILD_TIMEOUT_MS;
        let unread = (1..=nodes)
            .filter(|&m| m != n)
            .map(|m| (m, Unread::default()))
            .collect();
        node.attempt.as_mut().expect("checked").phase = Phase::Reading(Reads {
            reports,
            unread,
            deadline,
        });
        for member in 1..=nodes {
            if member != n {
                self.read_member(n, term, id, member);
            }
        }
        if !self.config.sabotaged(Sabotage::ReadOnce) {
            self.at(t + READ_AGAIN_AFTER_MS, Event::ReadCheck(n, id));
        }
        self.at(deadline, Event::ReadDeadline(n, id));
    }

    fn read_member(&mut self, n: NodeId, term: u64, attempt: u64, member: NodeId) {
        let msg = Msg::ReadReport {
            leader: n,
            term,
            attempt,
        };
        self.send(Some(n), To::Node(member), msg);
    }

    /// The read of `member` by node `n`'s rebuild attempt `id` failed: the
    /// network lost it or its answer, or the member was down.
    pub(crate) fn read_lost(&mut self, n: NodeId, id: u64, member: NodeId) {
        let Some(node) = self.nodes.get_mut(&n) else {
            return;
        };
        if let Some(Attempt {
            phase: Phase::Reading(reads),
            ..
        }) = node.attempt.as_mut().filter(|a| a.id == id)
        {
            if let Some(unread) = reads.unread.get_mut(&member) {
                unread.lost = true;
                self.note(|| format!("node {n}'s read of node {member} fails"));
            }
        }
    }

    /// Every `READ_AGAIN_AFTER_MS` of attempt `id`'s reads: the members
    /// whose reads failed since are failing, and read again (the node
    /// learns of a failed read at once and reads again that much later;
    /// the simulated network loses messages silently, so a failure is
    /// noticed here); the reads end early once every member's first read
    /// has ended and the members failing, with those restarted lately, are
    /// fewer than `copies`, as the node's do.
    pub(crate) fn read_check(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        let copies = self.config.copies;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(Attempt {
            term,
            phase: Phase::Reading(reads),
            ..
        }) = node.attempt.as_mut().filter(|a| a.id == id)
        else {
            return;
        };
        let term = *term;
        let mut again = Vec::new();
        for (&member, unread) in &mut reads.unread {
            if std::mem::take(&mut unread.lost) {
                unread.failing = true;
                if t < reads.deadline {
                    again.push(member);
                }
            }
        }
        let enough = reads.enough(copies);
        let next = t + READ_AGAIN_AFTER_MS;
        let more = next < reads.deadline;
        if enough {
            self.note(|| format!("node {n}: reads end early, enough members read"));
            self.finish_reads(n, id);
            return;
        }
        if !again.is_empty() {
            self.note(|| format!("node {n}: reads {again:?} again"));
        }
        for member in again {
            self.read_member(n, term, id, member);
        }
        if more {
            self.at(next, Event::ReadCheck(n, id));
        }
    }

    /// A member's report for attempt `id` arrived.
    fn report_arrived(
        &mut self,
        n: NodeId,
        from: NodeId,
        id: u64,
        report: (Vec<locktable::LockInTransit>, bool),
    ) {
        let t = self.t;
        let copies = self.config.copies;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(Attempt {
            phase: Phase::Reading(reads),
            ..
        }) = node.attempt.as_mut().filter(|a| a.id == id)
        else {
            return;
        };
        if reads.unread.remove(&from).is_none() {
            return;
        }
        reads.reports.insert(from, (report.0, report.1, t));
        if reads.enough(copies) {
            self.finish_reads(n, id);
        }
    }

    /// Every member answered, enough did (`Reads::enough`), or the rebuild
    /// timeout passed: rebuild the table for the attempt's term, unless
    /// leadership moved on. Every member not read is missing.
    pub(crate) fn finish_reads(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        let strict = self.config.strict;
        let nodes = self.config.nodes;
        let skip = self.config.sabotaged(Sabotage::SkipRebuild);
        let count_from_send = self.config.sabotaged(Sabotage::CountFromSend);
        let hold_ms = if self.config.sabotaged(Sabotage::ShortStrictHold) {
            MAX_LEASE_MS
        } else {
            STRICT_HOLD_MS
        };
        let node = self.nodes.get_mut(&n).expect("member");
        // The deadline of reads that all came in finds the attempt done.
        let Some(attempt) = node
            .attempt
            .as_mut()
            .filter(|a| a.id == id && matches!(a.phase, Phase::Reading(_)))
        else {
            return;
        };
        let Phase::Reading(Reads {
            reports, unread, ..
        }) = std::mem::replace(
            &mut attempt.phase,
            Phase::Done(Outcome::Failed("leadership moved on during the rebuild")),
        )
        else {
            unreachable!("matched above");
        };
        let (term, generation) = (attempt.term, attempt.generation);
        let still_leader = node.raft.leader_term() == Some(term) && node.speaking == Some(term);
        if !still_leader {
            return;
        }
        let now = node.mono(t);
        let mut locks = Vec::new();
        let mut absent: Vec<NodeId> = (1..=nodes).filter(|m| !reports.contains_key(m)).collect();
        debug_assert_eq!(absent, unread.keys().copied().collect::<Vec<_>>());
        // This node's own report went in when the reads were sent.
        let sent = reports.get(&n).map_or(t, |own| own.2);
        for (member, (report, restarted, arrived)) in reports {
            if restarted {
                absent.push(member);
            }
            // Counted from the report's arrival: the speaker's table must
            // not end a lease before its holder's own count does.
            let arrived = node.mono(if count_from_send { sent } else { arrived });
            locks.extend(report.into_iter().map(|l| l.arrive(arrived)));
        }
        let mut missing = absent.len() as u64;
        if skip {
            locks.clear();
            missing = 0;
        }
        // Every grant answered to a client is on record with `copies`
        // members: a rebuild that missed fewer has read every one of them.
        let seen_all = missing < self.config.copies as u64;
        // Otherwise the longest lease, and an old speaker's guard tail.
        let hold = (strict && !seen_all).then(|| now + Duration::from_millis(hold_ms));
        let from = RebuildFrom {
            generation,
            epoch: term,
            locks,
            hold_new_grants_until: hold,
            seen_all,
        };
        let outcome = match node.table.rebuild(from, now) {
            Ok(rebuilt) => {
                if !seen_all {
                    self.history.missing_rebuilds.push(t);
                }
                let mut by_node: BTreeMap<NodeId, Vec<LockId>> = BTreeMap::new();
                for lock in rebuilt.lost {
                    by_node.entry(lock.node).or_default().push(lock.id);
                }
                for (owner, ids) in by_node {
                    self.send(Some(n), To::Node(owner), Msg::Lost { ids });
                }
                absent.sort_unstable();
                self.note(|| format!("node {n}: rebuilt for term {term}, missing {absent:?}"));
                Outcome::Rebuilt
            }
            Err(locktable::RebuildError::Stale(_)) => {
                Outcome::Failed("the table was dropped again during the rebuild")
            }
            Err(_) => Outcome::Failed("cannot speak in this term"),
        };
        let node = self.nodes.get_mut(&n).expect("member");
        if let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) {
            attempt.phase = Phase::Done(outcome);
        }
    }

    /// The expiry task: ends leases and waits while this node may speak;
    /// turns waiters away when it may not.
    pub(crate) fn poll(&mut self, n: NodeId) {
        let t = self.t;
        let ignore = self.ignores_lease();
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        if node.may_speak(t, ignore) {
            node.table.poll(now);
        } else if node.table.is_rebuilt() && node.table.waiting() > 0 {
            node.table.turn_away_waiters();
        }
        node.held.expire(now);
        node.copies.expire(now);
        self.dispatch(n);
    }

    /// Hands the table's answers to whoever waits for them: a grant once
    /// it is on record with enough members.
    pub(crate) fn dispatch(&mut self, n: NodeId) {
        let node = self.nodes.get_mut(&n).expect("member");
        let term = node.speaking.unwrap_or(0);
        let fresh = node.table.take_answers();
        let granted = fresh.iter().filter(|a| a.result.is_ok()).count();
        let mut answers = std::mem::take(&mut node.undelivered);
        answers.extend(fresh);
        // The table hands out some answers in its hash maps' order, which
        // is seeded at random: sorted, a seed replays exactly.
        answers.sort_by_key(|a| a.waiter);
        let mut out = Vec::new();
        for answer in answers {
            let Some((origin, made)) = node.waiters.remove(&answer.waiter) else {
                continue;
            };
            if let (Ok(lock), Origin::Local { .. }) = (&answer.result, origin) {
                node.held.record(lock.clone());
            }
            out.push((origin, made, answer.result));
        }
        for _ in 0..granted {
            self.note(|| format!("node {n} hands a waiting request its lock"));
            self.granted(n, term);
        }
        for (origin, made, result) in out {
            match result {
                Ok(lock) => self.answer_on_record(n, lock, origin, made, true),
                Err(AcquireError::Held(_)) => self.answer(n, origin, Err(Refusal::Held)),
                Err(_) => self.answer(n, origin, Err(Refusal::Unavailable)),
            }
        }
    }

    /// A grant or refusal as the speaker, for a client of `from`.
    fn speak_acquire(&mut self, n: NodeId, from: NodeId, client: ClientId, req: ReqId, ask: Ask) {
        let t = self.t;
        let ignore = self.ignores_lease();
        self.next_lock += 1;
        let id = LockId::from_u128(self.next_lock);
        let node = self.nodes.get_mut(&n).expect("member");
        let origin = if from == n {
            Origin::Local {
                client,
                req,
                arrived: t,
            }
        } else {
            Origin::Forwarded {
                node: from,
                client,
                req,
                arrived: t,
            }
        };
        if !node.may_speak(t, ignore) {
            self.answer(n, origin, Err(Refusal::Unavailable));
            return;
        }
        let term = node.speaking.unwrap_or(0);
        let now = node.mono(t);
        let request = Request {
            name: ask.name,
            id,
            node: from,
            holder: String::new(),
            lease: Some(Duration::from_millis(ask.lease_ms)),
            wait: Duration::from_millis(ask.wait_ms),
            data: None,
        };
        let outcome = node.table.acquire(request, now);
        let made = node.made();
        // A lease that ran out is handed to a waiting request inside
        // `acquire`; the node tells that request at its next dispatch.
        let handed = node.table.take_answers();
        let handed_over = handed.iter().filter(|a| a.result.is_ok()).count();
        node.undelivered.extend(handed);
        for _ in 0..handed_over {
            self.granted(n, term);
        }
        let node = self.nodes.get_mut(&n).expect("member");
        match outcome {
            Ok(Acquired::Granted(lock)) => {
                if from == n {
                    node.held.record(lock.clone());
                }
                self.granted(n, term);
                self.answer_on_record(n, lock, origin, made, true);
            }
            Ok(Acquired::Waiting(w)) => {
                node.waiters.insert(w, (origin, made));
            }
            Err(AcquireError::Held(_)) => self.answer(n, origin, Err(Refusal::Held)),
            Err(_) => self.answer(n, origin, Err(Refusal::Unavailable)),
        }
    }

    fn speak_release(&mut self, n: NodeId, name: &str, id: LockId) {
        let t = self.t;
        let ignore = self.ignores_lease();
        let node = self.nodes.get_mut(&n).expect("member");
        if !node.may_speak(t, ignore) {
            return;
        }
        let now = node.mono(t);
        if let Ok(lock) = node.table.release(name, id, now) {
            node.held.remove(id);
            node.copies.remove(id);
            let to = self.forget_to(n, &lock);
            self.send_forgets(n, name, &lock, to);
        }
        self.dispatch(n);
    }

    /// A message arrives at node `n`, which runs.
    pub(crate) fn node_message(&mut self, n: NodeId, msg: Msg) {
        let t = self.t;
        match msg {
            Msg::Raft { from, msg } => {
                self.nodes
                    .get_mut(&n)
                    .expect("member")
                    .raft
                    .handle(from, msg, t);
                self.flush_raft(n);
            }
            Msg::Acquire { client, req, ask } => match self.nodes[&n].raft.current_leader() {
                Some(l) if l == n => self.speak_acquire(n, n, client, req, ask),
                Some(l) => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    let read_before = node.read_by;
                    node.pending.insert(
                        req,
                        Forwarded {
                            sent: t,
                            read_before,
                            renewing: None,
                        },
                    );
                    let from = n;
                    self.send(
                        Some(n),
                        To::Node(l),
                        Msg::Forward {
                            from,
                            client,
                            req,
                            ask,
                        },
                    );
                }
                None => self.send(
                    Some(n),
                    To::Client(client),
                    Msg::Reply {
                        req,
                        result: Err(Refusal::Unavailable),
                    },
                ),
            },
            Msg::Forward {
                from,
                client,
                req,
                ask,
            } => self.speak_acquire(n, from, client, req, ask),
            Msg::ForwardReply {
                client,
                req,
                result,
            } => self.forward_answered(n, client, req, result),
            Msg::Renew {
                client,
                req,
                name,
                id,
                lease_ms,
            } => self.renew(n, client, req, (name, id, lease_ms)),
            Msg::ForwardRenew {
                from,
                client,
                req,
                name,
                id,
                lease_ms,
                record,
            } => {
                let now = self.nodes[&n].mono(t);
                let record = record.map(|r| r.arrive(now));
                self.speak_renew(n, from, client, req, (name, id, lease_ms), record);
            }
            Msg::Copy {
                from,
                key,
                term,
                lock,
            } => self.take_copy(n, from, key, term, lock),
            Msg::CopyAck { from, key, ok } => self.copy_answered(n, key, from, ok),
            Msg::Release { name, id } => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.held.remove(id);
                node.copies.remove(id);
                match node.raft.current_leader() {
                    Some(l) if l == n => self.speak_release(n, &name, id),
                    Some(l) => self.send(Some(n), To::Node(l), Msg::ForwardRelease { name, id }),
                    None => {}
                }
            }
            Msg::ForwardRelease { name, id } => self.speak_release(n, &name, id),
            Msg::Forget { name, id, left } => {
                let node = self.nodes.get_mut(&n).expect("member");
                let now = node.mono(t);
                node.held.remove(id);
                node.copies.remove(id);
                node.table.forget(&name, id, left, now);
                self.dispatch(n);
            }
            Msg::ReadReport {
                leader,
                term,
                attempt,
            } => {
                // `deposed_by`: a member still speaking for an older term
                // drops its table before it answers.
                let read_term = !self.config.sabotaged(Sabotage::NoReadTerm);
                let node = self.nodes.get_mut(&n).expect("member");
                if read_term {
                    node.read_by = node.read_by.max(term);
                }
                if read_term && node.speaking.is_some_and(|own| own < term) {
                    self.note(|| {
                        format!("node {n}: read by the speaker of term {term}, drops its table")
                    });
                    self.drop_table(n);
                }
                let (locks, restarted) = self.nodes[&n].report(t);
                self.send(
                    Some(n),
                    To::Node(leader),
                    Msg::Report {
                        from: n,
                        attempt,
                        locks,
                        restarted,
                    },
                );
            }
            Msg::Report {
                from,
                attempt,
                locks,
                restarted,
            } => self.report_arrived(n, from, attempt, (locks, restarted)),
            Msg::Lost { ids } => {
                let node = self.nodes.get_mut(&n).expect("member");
                for id in ids {
                    node.held.remove(id);
                    node.copies.remove(id);
                }
            }
            Msg::Reply { .. } => {}
        }
    }
}
