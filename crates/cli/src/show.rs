//! `leasehold locks` and `leasehold status`: what is held, who speaks.

use std::process::ExitCode;

use leasehold_api::ClusterAnswer;
use leasehold_client::Client;

use crate::hold::refused;

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `leasehold locks`: a table of the locks held.
pub async fn locks(client: Client, prefix: &str, limit: usize, json: bool) -> ExitCode {
    let (locks, awaited) = match client.listing(prefix, limit).await {
        Ok(listing) => (listing.locks, listing.awaited),
        Err(e) => return refused("could not list the locks", &e),
    };
    if json {
        let mut shown = serde_json::json!({ "locks": locks });
        if !awaited.is_empty() {
            shown["awaited"] = serde_json::json!(awaited);
        }
        println!("{shown}");
        return ExitCode::SUCCESS;
    }
    let name_width = locks
        .iter()
        .map(|l| l.name.len())
        .chain(awaited.iter().map(|a| a.name.len()))
        .max()
        .unwrap_or(0)
        .max(4);
    let holder_width = locks
        .iter()
        .map(|l| l.holder.len())
        .max()
        .unwrap_or(0)
        .max(6);
    // A column for sessions only when a lock hangs off one.
    let in_sessions = locks
        .iter()
        .flat_map(|l| std::iter::once(l).chain(&l.others))
        .any(|l| l.session.is_some());
    let session = |lock: &leasehold_client::Lock| match in_sessions {
        true => format!("  {}", lock.session.as_deref().unwrap_or("-")),
        false => String::new(),
    };
    println!(
        "{:<name_width$}  {:<holder_width$}  {:>4}  {:>20}  {:>9}  {:<11}  {:>7}{}",
        "NAME",
        "HOLDER",
        "NODE",
        "FENCE",
        "TIME LEFT",
        "MODE",
        "WAITING",
        if in_sessions { "  SESSION" } else { "" }
    );
    for l in &locks {
        let waiting = match l.waiters {
            0 => String::new(),
            n => n.to_string(),
        };
        let held = 1 + l.others.len();
        println!(
            "{}  {:<11}  {waiting:>7}{}",
            row(l, name_width, holder_width),
            mode(l, held),
            session(l)
        );
        for other in &l.others {
            println!(
                "{}  {:<11}  {:>7}{}",
                row(other, name_width, holder_width),
                mode(other, held),
                "",
                session(other)
            );
        }
        for line in queue_lines(&l.queue, l.waiters) {
            println!("{line}");
        }
    }
    for a in &awaited {
        println!(
            "{:<name_width$}  {:<width$}  {:>7}",
            a.name,
            "(free, kept for the requests waiting for it)",
            a.waiters,
            width = holder_width + 4 + 20 + 9 + 11 + 8,
        );
        for line in queue_lines(&a.queue, a.waiters) {
            println!("{line}");
        }
    }
    if locks.is_empty() && awaited.is_empty() {
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
        time_left(lock)
    )
}

/// The lease left, or, once it ran out and a lock-delay keeps the name
/// closed, `closed` and how much longer.
fn time_left(lock: &leasehold_client::Lock) -> String {
    match lock.delay_left_ms {
        0 => seconds(lock.ttl_ms),
        left => format!("closed {}", seconds(left)),
    }
}

/// What a grant holds of its name: `exclusive`, `shared`, or `permit 2/5`
/// (`held` of the name's 5 permits held).
fn mode(lock: &leasehold_client::Lock, held: usize) -> String {
    match (lock.mode, lock.permits) {
        (leasehold_api::Mode::Permit, Some(n)) => format!("permit {held}/{n}"),
        (leasehold_api::Mode::Shared, _) => "shared".into(),
        (leasehold_api::Mode::Permit, None) => "permit".into(),
        (leasehold_api::Mode::Exclusive, _) => "exclusive".into(),
    }
}

/// The requests waiting for a name (`queue`, the first of `waiters`), a
/// line each in the order they will be served: who, through which node,
/// for how long, and what they ask.
fn queue_lines(queue: &[leasehold_api::QueuedView], waiters: u64) -> Vec<String> {
    let mut lines: Vec<String> = queue
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let holder = if q.holder.is_empty() { "-" } else { &q.holder };
            format!(
                "    {}. {holder} (node {}) waiting {}, {} left to wait, for a lease of {}{}{}",
                i + 1,
                q.node,
                seconds(q.waited_ms),
                seconds(q.wait_left_ms),
                seconds(q.lease_ms),
                match (q.mode, q.permits) {
                    (leasehold_api::Mode::Shared, _) => ", shared".to_string(),
                    (leasehold_api::Mode::Permit, Some(n)) => format!(", one of {n} permits"),
                    _ => String::new(),
                },
                match q.with.is_empty() {
                    true => String::new(),
                    false => format!(", together with {}", q.with.join(" ")),
                }
            )
        })
        .collect();
    let more = (waiters as usize).saturating_sub(queue.len());
    if more > 0 && !queue.is_empty() {
        lines.push(format!("    ... and {more} more"));
    }
    lines
}

/// `leasehold get NAME`: the lock's row, or exit 1 if nobody holds it.
pub async fn get(client: Client, name: &str, json: bool) -> ExitCode {
    let found = client.get(name).await;
    let awaited = match &found {
        Ok(None) => awaited(&client, name).await,
        _ => None,
    };
    if let (true, Ok(lock)) = (json, &found) {
        let mut shown = serde_json::json!({ "lock": lock });
        if let Some(awaited) = &awaited {
            shown["awaited"] = serde_json::json!(awaited);
        }
        println!("{shown}");
        return match lock {
            Some(_) => ExitCode::SUCCESS,
            None => ExitCode::from(crate::hold::exit::NOT_HELD),
        };
    }
    match found {
        Ok(Some(lock)) => {
            let holder_width = lock
                .others
                .iter()
                .map(|o| o.holder.len())
                .fold(lock.holder.len(), usize::max);
            let held = 1 + lock.others.len();
            let shown = |l: &leasehold_client::Lock| match l.mode {
                leasehold_api::Mode::Exclusive => row(l, l.name.len(), holder_width),
                _ => format!("{}  {}", row(l, l.name.len(), holder_width), mode(l, held)),
            };
            println!("{}", shown(&lock));
            for other in &lock.others {
                println!("{}", shown(other));
            }
            for line in queue_lines(&lock.queue, lock.waiters) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Ok(None) => {
            match awaited {
                Some(a) => {
                    let requests = match a.waiters {
                        1 => "1 request waits".to_string(),
                        n => format!("{n} requests wait"),
                    };
                    eprintln!(
                        "leasehold: {name} is not held, but {requests} for it (kept free for them):"
                    );
                    for line in queue_lines(&a.queue, a.waiters) {
                        eprintln!("{line}");
                    }
                }
                None => eprintln!("leasehold: {name} is not held"),
            }
            ExitCode::from(crate::hold::exit::NOT_HELD)
        }
        Err(e) => refused(&format!("could not get {name}"), &e),
    }
}

/// The requests waiting for `name`, which nobody holds, if any wait (a
/// set waiting for its other names keeps it free): a listing's entry for
/// it, the first of the free names under it in name order. `None` too if
/// the listing cannot be read: the name is shown as not held.
async fn awaited(client: &Client, name: &str) -> Option<leasehold_api::AwaitedView> {
    let listing = client.listing(name, 1).await.ok()?;
    listing.awaited.into_iter().find(|a| a.name == name)
}

/// `leasehold unlock NAME`: releases whoever holds it (an operator's
/// call; every holder of a name held shared or as permits); exit 1 if
/// nobody does.
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
    // A name held shared or as permits: every holder is released.
    let mut released_any = false;
    let mut all = vec![lock.clone()];
    all.extend(lock.others.iter().cloned());
    for held in &all {
        match client.release(name, &held.id).await {
            Ok(released) => {
                released_any = true;
                println!(
                    "released {name} (held by {} through node {}, fence {})",
                    released.holder, released.node, released.fence
                );
            }
            Err(leasehold_client::Error::NotHeld) => {}
            Err(e) => return refused(&format!("could not unlock {name}"), &e),
        }
    }
    if released_any {
        ExitCode::SUCCESS
    } else {
        eprintln!("leasehold: {name} was released or expired meanwhile");
        ExitCode::from(crate::hold::exit::NOT_HELD)
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

/// Prints the cluster as one node answered it (after a membership
/// change: the speaker's answer).
pub fn print_cluster(info: &ClusterAnswer) {
    let speaker = info
        .leader
        .map_or("none".to_string(), |l| format!("node {l}"));
    println!(
        "speaker: {speaker}   term: {}   answered by node {}",
        info.term, info.node
    );
    print_view(info);
}

/// The answering node's state, its members and its last rebuild.
pub fn print_view(info: &ClusterAnswer) {
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
