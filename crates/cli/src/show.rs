//! `leasehold locks` and `leasehold status`: what is held, who speaks.

use std::process::ExitCode;

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
        println!(
            "{:<name_width$}  {:<holder_width$}  {:>4}  {:>20}  {:>9}",
            l.name,
            l.holder,
            l.node,
            l.fence,
            seconds(l.ttl_ms)
        );
    }
    if locks.is_empty() {
        eprintln!("(no locks held)");
    }
    ExitCode::SUCCESS
}

/// `leasehold status`: members, speaker, term, rebuilt, last rebuild.
pub async fn status(client: Client, client_to: impl Fn(String) -> Option<Client>) -> ExitCode {
    let mut info = match client.cluster().await {
        Ok(info) => info,
        Err(e) => return refused("could not reach the cluster", &e),
    };
    // Whether the speaker is rebuilt, and its last rebuild, are the
    // speaker's to say: ask it when another node answered.
    if info.leader.is_some_and(|l| l != info.node) {
        let addr = info
            .members
            .iter()
            .find(|m| Some(m.id) == info.leader)
            .map(|m| m.addr.clone());
        let speaker = addr.and_then(client_to);
        if let Some(from_speaker) = match speaker {
            Some(speaker) => speaker.cluster().await.ok(),
            None => None,
        } {
            info = from_speaker;
        }
    }
    print_cluster(&info);
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
        "rebuilt: {}   generation: {}",
        info.rebuilt, info.generation
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
        println!(
            "  {:>3}  {:<22} {:<8} {:<9}{lag}",
            m.id, m.addr, m.role, m.state
        );
    }
    match &info.last_rebuild {
        Some(r) => println!(
            "last rebuild: term {}, read {:?}, missing {:?}, {} locks, {} conflicts, {} ms",
            r.term, r.members_read, r.members_missing, r.locks, r.conflicts, r.took_ms
        ),
        None => println!("last rebuild: none on this node"),
    }
}
