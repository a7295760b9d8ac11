//! `leasehold locks` and `leasehold status`: what is held, who speaks.

use std::process::ExitCode;
use std::time::Duration;

use leasehold_api::ClusterAnswer;
use leasehold_client::Client;

use crate::hold::refused;

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `leasehold locks`: a table of the locks held.
pub async fn locks(client: Client, prefix: &str, limit: usize) -> ExitCode {
    let locks = match client.list(prefix, limit).await {
        Ok(locks) => locks,
        Err(e) => return refused("could not list the locks", &e),
    };
    let name_width = locks.iter().map(|l| l.name.len()).max().unwrap_or(0).max(4);
    let holder_width = locks
        .iter()
        .map(|l| l.holder.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<name_width$}  {:<holder_width$}  {:>4}  {:>20}  {:>9}",
        "NAME", "HOLDER", "NODE", "FENCE", "TIME LEFT"
    );
    for l in &locks {
        println!("{}", row(l, name_width, holder_width));
    }
    if locks.is_empty() {
        eprintln!("(no locks held)");
    }
    ExitCode::SUCCESS
}

/// One lock as `locks` and `get` print it: name, holder, node, fence,
/// time left.
fn row(lock: &leasehold_client::Lock, name_width: usize, holder_width: usize) -> String {
    format!(
        "{:<name_width$}  {:<holder_width$}  {:>4}  {:>20}  {:>9}",
        lock.name,
        lock.holder,
        lock.node,
        lock.fence,
        seconds(lock.ttl_ms)
    )
}

/// `leasehold get NAME`: the lock's row, or exit 1 if nobody holds it.
pub async fn get(client: Client, name: &str) -> ExitCode {
    match client.get(name).await {
        Ok(Some(lock)) => {
            println!("{}", row(&lock, lock.name.len(), lock.holder.len()));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("leasehold: {name} is not held");
            ExitCode::from(crate::hold::exit::NOT_HELD)
        }
        Err(e) => refused(&format!("could not get {name}"), &e),
    }
}

/// `leasehold unlock NAME`: releases whoever holds it (an operator's
/// call); exit 1 if nobody does.
pub async fn unlock(client: Client, name: &str) -> ExitCode {
    let lock = match client.get(name).await {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            eprintln!("leasehold: {name} is not held");
            return ExitCode::from(crate::hold::exit::NOT_HELD);
        }
        Err(e) => return refused(&format!("could not get {name}"), &e),
    };
    if lock.id.is_empty() {
        eprintln!("leasehold: could not unlock {name}: this token may read it but not lock it");
        return ExitCode::from(crate::hold::exit::NO_PERMISSION);
    }
    match client.release(name, &lock.id).await {
        Ok(released) => {
            println!(
                "released {name} (held by {} through node {}, fence {})",
                released.holder, released.node, released.fence
            );
            ExitCode::SUCCESS
        }
        Err(leasehold_client::Error::NotHeld) => {
            eprintln!("leasehold: {name} was released or expired meanwhile");
            ExitCode::from(crate::hold::exit::NOT_HELD)
        }
        Err(e) => refused(&format!("could not unlock {name}"), &e),
    }
}

/// `leasehold elect --observe NAME`: the leader now, then each new one,
/// a line each, until interrupted.
pub async fn observe(client: Client, name: &str) -> ExitCode {
    use futures::StreamExt;
    let mut leaders = std::pin::pin!(client.observe(name));
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let next = tokio::select! {
            next = leaders.next() => next,
            _ = &mut interrupted => return ExitCode::SUCCESS,
        };
        match next {
            Some(Ok(Some(leader))) => println!(
                "leader: {} (fence {}, node {}, {} left)",
                leader.data.as_deref().unwrap_or(&leader.holder),
                leader.fence,
                leader.node,
                seconds(leader.ttl_ms)
            ),
            Some(Ok(None)) => println!("leader: none"),
            Some(Err(e)) => eprintln!("leasehold: observing {name}: {e}"),
            None => return ExitCode::SUCCESS,
        }
    }
}

/// How long `status` waits for a node's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// Node `client`'s view of the cluster, or why none came within
/// [`ANSWER_WITHIN`].
async fn view(client: Client) -> Result<ClusterAnswer, String> {
    match tokio::time::timeout(ANSWER_WITHIN, client.cluster()).await {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {ANSWER_WITHIN:?}")),
    }
}

/// `leasehold status`: members, speaker, term, rebuilt, last rebuild.
/// Every endpoint is asked at once and the first to answer is shown
/// (within a second, whichever nodes are down); then the speaker it names
/// is asked, as what it rebuilt is the speaker's to say.
pub async fn status(
    endpoints: &[String],
    client_to: impl Fn(String) -> Option<Client>,
) -> ExitCode {
    let mut asks = tokio::task::JoinSet::new();
    for endpoint in endpoints {
        match client_to(endpoint.clone()) {
            Some(client) => {
                asks.spawn(view(client));
            }
            None => {
                eprintln!("leasehold: {endpoint:?} is not an endpoint");
                return ExitCode::from(crate::hold::exit::USAGE);
            }
        }
    }
    let mut last = String::from("no endpoint given");
    let mut info = None;
    while let Some(answer) = asks.join_next().await {
        match answer {
            Ok(Ok(answer)) => {
                info = Some(answer);
                break;
            }
            Ok(Err(e)) => last = e,
            Err(e) => last = e.to_string(),
        }
    }
    asks.abort_all();
    let Some(mut info) = info else {
        eprintln!("leasehold: could not reach the cluster: {last}");
        return ExitCode::from(crate::hold::exit::UNAVAILABLE);
    };
    let mut note = None;
    if let Some(leader) = info.leader.filter(|l| *l != info.node) {
        let addr = info
            .members
            .iter()
            .find(|m| m.id == leader)
            .map(|m| m.addr.clone());
        match addr.and_then(&client_to).map(view) {
            Some(asked) => match asked.await {
                Ok(from_speaker) => info = from_speaker,
                Err(e) => {
                    note = Some(format!(
                        "node {} names node {leader} the speaker, but it did not answer ({e}): \
                         it may be down, and the cluster electing another",
                        info.node
                    ))
                }
            },
            None => note = Some(format!("node {leader}'s address is not known")),
        }
    }
    print_cluster(&info);
    if let Some(note) = note {
        println!("note: {note}");
    }
    ExitCode::SUCCESS
}

/// Prints the cluster as `leasehold status` shows it.
pub fn print_cluster(info: &ClusterAnswer) {
    let speaker = info
        .leader
        .map_or("none".to_string(), |l| format!("node {l}"));
    println!(
        "speaker: {speaker}   term: {}   answered by node {}",
        info.term, info.node
    );
    println!(
        "rebuilt: {}   generation: {}   protocol: {}",
        info.rebuilt, info.generation, info.protocol
    );
    let changing = if info.changing {
        "   (a membership change is under way)"
    } else {
        ""
    };
    println!("members:{changing}");
    for m in &info.members {
        let lag = m
            .lag
            .map_or(String::new(), |lag| format!("   {lag} entries behind"));
        let contact = match (m.reachable, m.last_contact_ms) {
            (Some(false), Some(ms)) => format!("   last answered {} ago", seconds(ms)),
            (Some(false), None) => "   never answered".to_string(),
            _ => String::new(),
        };
        // A member offering less than another shows it: an upgrade under way.
        let behind = match m.protocol {
            Some(p) if p < info.protocol_offered => format!("   offers protocol {p}"),
            _ => String::new(),
        };
        println!(
            "  {:>3}  {:<22} {:<8} {:<11}{lag}{contact}{behind}",
            m.id, m.addr, m.role, m.state
        );
    }
    match &info.last_rebuild {
        Some(r) => println!(
            "last rebuild: term {}, read {:?}, missing {:?}{}, {} locks, {} conflicts, {} ms",
            r.term,
            r.members_read,
            r.members_missing,
            if r.members_restarted.is_empty() {
                String::new()
            } else {
                format!(" (restarted lately: {:?})", r.members_restarted)
            },
            r.locks,
            r.conflicts,
            r.took_ms
        ),
        None => println!("last rebuild: none on this node"),
    }
}
