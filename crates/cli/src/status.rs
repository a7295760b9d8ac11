//! `leasehold status`: one truth about who speaks. Every endpoint given,
//! and every member their answers name, is asked at once; the speaker
//! shown is the one of the highest term that a quorum of the voters
//! answering backs (a cut-off old speaker still answers, alone, with its
//! older term), and its own view is what is printed. No serving speaker
//! (none backed, or it has not rebuilt, or did not answer) exits 69, as
//! `etcdctl endpoint health` fails, so a script can test health.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_api::ClusterAnswer;
use leasehold_client::Client;

use crate::hold::exit;
use crate::show::print_view;

/// What each node that answered said, by node id, and when.
type Answers = BTreeMap<u64, (ClusterAnswer, Instant)>;

/// The speaker a quorum backs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The speaker.
    pub leader: u64,
    /// Its term.
    pub term: u64,
    /// The answering voters that name it, in that term (itself included).
    pub backers: BTreeSet<u64>,
    /// The voters of the configuration the verdict is judged against.
    pub voters: usize,
}

/// The speaker of the highest term that a quorum of the voters backs,
/// among `answers`; the voters are those of the highest-term answer's
/// configuration. `None`: no quorum names one speaker in one term.
pub fn judge(answers: &[&ClusterAnswer]) -> Option<Verdict> {
    let newest = answers.iter().max_by_key(|a| a.term)?;
    let voters: BTreeSet<u64> = newest
        .members
        .iter()
        .filter(|m| m.role == "voter")
        .map(|m| m.id)
        .collect();
    let quorum = voters.len() / 2 + 1;
    let mut named: BTreeMap<(u64, u64), BTreeSet<u64>> = BTreeMap::new();
    for a in answers {
        if let Some(leader) = a.leader {
            if voters.contains(&a.node) {
                named.entry((a.term, leader)).or_default().insert(a.node);
            }
        }
    }
    named
        .into_iter()
        .rev()
        .find(|(_, backers)| backers.len() >= quorum)
        .map(|((term, leader), backers)| Verdict {
            leader,
            term,
            backers,
            voters: voters.len(),
        })
}

/// Asks every client at once, each within `within`; answers by node, and
/// the failures by endpoint.
async fn ask_all(
    asks: Vec<(String, Client)>,
    within: Duration,
    answers: &mut Answers,
    failed: &mut BTreeMap<String, String>,
) {
    let mut set = tokio::task::JoinSet::new();
    for (endpoint, client) in asks {
        set.spawn(async move {
            let answer = match tokio::time::timeout(within, client.cluster()).await {
                Ok(Ok(info)) => Ok(info),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {within:?}")),
            };
            (endpoint, answer)
        });
    }
    while let Some(done) = set.join_next().await {
        match done {
            Ok((_, Ok(info))) => {
                answers.insert(info.node, (info, Instant::now()));
            }
            Ok((endpoint, Err(e))) => {
                failed.insert(endpoint, e);
            }
            Err(e) => {
                failed.insert("?".to_string(), e.to_string());
            }
        }
    }
}

/// `leasehold status`: the cluster as its quorum-backed speaker sees it,
/// with whose view it is and how fresh; exit 69 with why when no speaker
/// serves. `json` prints one JSON document instead.
pub async fn status(
    endpoints: &[String],
    client_to: impl Fn(String) -> Option<Client>,
    within: Duration,
    json: bool,
) -> ExitCode {
    let started = Instant::now();
    let mut asks = Vec::new();
    for endpoint in endpoints {
        match client_to(endpoint.clone()) {
            Some(client) => asks.push((endpoint.clone(), client)),
            None => {
                eprintln!("leasehold: {endpoint:?} is not an endpoint");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    let (mut answers, mut failed) = (Answers::new(), BTreeMap::new());
    ask_all(asks, within, &mut answers, &mut failed).await;
    // Then every member the answers name that was not asked yet.
    let asked: BTreeSet<String> = endpoints.iter().cloned().collect();
    let more: BTreeSet<(u64, String)> = answers
        .values()
        .flat_map(|(a, _)| a.members.iter().map(|m| (m.id, m.addr.clone())))
        .filter(|(id, addr)| !answers.contains_key(id) && !asked.contains(addr))
        .collect();
    let more: Vec<(String, Client)> = more
        .into_iter()
        .filter_map(|(_, addr)| client_to(addr.clone()).map(|c| (addr, c)))
        .collect();
    ask_all(more, within, &mut answers, &mut failed).await;
    if answers.is_empty() {
        let why = failed
            .iter()
            .map(|(e, why)| format!("{e}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        eprintln!("leasehold: could not reach the cluster: {why}");
        return ExitCode::from(exit::UNAVAILABLE);
    }
    let all: Vec<&ClusterAnswer> = answers.values().map(|(a, _)| a).collect();
    let verdict = judge(&all);
    // The speaker's own view if it answered, else the newest answer.
    let (view, at) = verdict
        .as_ref()
        .and_then(|v| answers.get(&v.leader))
        .or_else(|| answers.values().max_by_key(|(a, _)| a.term))
        .expect("some answered");
    let serving = verdict
        .as_ref()
        .is_some_and(|v| view.node == v.leader && view.leader == Some(v.leader) && view.rebuilt);
    let problem = match &verdict {
        None => Some(format!(
            "no speaker: no quorum of the voters names one in one term ({} of the members answered)",
            answers.len()
        )),
        Some(v) if view.node != v.leader => Some(format!(
            "node {} speaks in term {} (backed by nodes {:?} of {} voters) but did not answer",
            v.leader, v.term, v.backers, v.voters
        )),
        Some(v) if !view.rebuilt => Some(format!(
            "node {} speaks in term {} but has not rebuilt its table yet: it serves nothing",
            v.leader, v.term
        )),
        Some(_) => None,
    };
    if json {
        let document = serde_json::json!({
            "serving": serving,
            "speaker": verdict.as_ref().map(|v| v.leader),
            "term": verdict.as_ref().map(|v| v.term),
            "backed_by": verdict.as_ref().map(|v| v.backers.clone()),
            "voters": verdict.as_ref().map(|v| v.voters),
            "problem": problem,
            "view": {
                "node": view.node,
                "age_ms": started.elapsed().saturating_sub(at.elapsed()).as_millis() as u64,
                "cluster": view,
            },
            "unanswered": failed,
        });
        println!("{document}");
    } else {
        match &verdict {
            Some(v) => println!(
                "speaker: node {} in term {}, backed by nodes {:?} of {} voters",
                v.leader, v.term, v.backers, v.voters
            ),
            None => println!("speaker: none backed by a quorum"),
        }
        println!(
            "view: node {}'s own (term {}), as it answered {} ms ago",
            view.node,
            view.term,
            at.elapsed().as_millis()
        );
        print_view(view);
        for (endpoint, why) in &failed {
            println!("unanswered: {endpoint}: {why}");
        }
    }
    match problem {
        None => ExitCode::SUCCESS,
        Some(why) => {
            eprintln!("leasehold: {why}");
            ExitCode::from(exit::UNAVAILABLE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::Member;

    fn answer(node: u64, term: u64, leader: Option<u64>) -> ClusterAnswer {
        let member = |id: u64| Member {
            id,
            addr: format!("127.0.0.1:{}", 7700 + id),
            state: "follower".into(),
            role: "voter".into(),
            lag: None,
            reachable: None,
            last_contact_ms: None,
            protocol: None,
        };
        ClusterAnswer {
            node,
            leader,
            term,
            rebuilt: leader == Some(node),
            generation: 1,
            members: (1..=3).map(member).collect(),
            changing: false,
            last_rebuild: None,
            version: "test".into(),
            protocol: 1,
            protocol_offered: 1,
            view: String::new(),
            through: None,
            speaker_error: None,
            at_ms: 0,
            grants: 0,
        }
    }

    /// A cut-off old speaker still answers that it speaks, in its older
    /// term, alone: the two that elected another win, whoever answers
    /// first.
    #[test]
    fn the_highest_term_a_quorum_backs_wins_over_a_cut_off_old_speaker() {
        let old = answer(3, 3, Some(3));
        let (a, b) = (answer(1, 4, Some(1)), answer(2, 4, Some(1)));
        let verdict = judge(&[&old, &a, &b]).unwrap();
        assert_eq!((verdict.leader, verdict.term), (1, 4));
        assert_eq!(verdict.backers, BTreeSet::from([1, 2]));
        // Alone, the old speaker is backed by no quorum.
        assert_eq!(judge(&[&old]), None);
        // Nor is a speaker one voter of three names, however new its term.
        assert_eq!(judge(&[&old, &answer(1, 5, Some(1))]), None);
        // No leader named: none.
        assert_eq!(judge(&[&answer(1, 4, None), &answer(2, 4, None)]), None);
    }
}
