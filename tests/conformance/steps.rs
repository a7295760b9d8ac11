//! The Rust client's runner: each step of clients/conformance/README.md
//! performed with `leasehold_client`, the outcome compared with the one
//! the scenario expects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use leasehold_client::{
    AcquireOptions, CampaignOptions, Client, Error, Kind, Leadership, Lock, LockGuard, LockSet,
    Loss, Session, SessionLock, SessionOptions, TransportKind,
};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::support::up::UpCluster;

/// What a step bound a name to.
enum Bound {
    Guard(LockGuard),
    Set(LockSet),
    Leader(Leadership),
    InSession(SessionLock),
    Session(Arc<Session>),
    /// A background acquire or campaign, not awaited yet.
    Pending(JoinHandle<Result<Bound, Error>>),
    /// The leaders an observer was told of, oldest first.
    Observer(Arc<Mutex<Vec<Option<String>>>>, JoinHandle<()>),
    /// A lock handed back by `await`, or released: still readable.
    Gone(Lock),
}

impl Bound {
    fn lock(&self) -> Result<Lock, String> {
        match self {
            Bound::Guard(g) => Ok(g.lock()),
            Bound::Set(s) => Ok(s.locks()[0].clone()),
            Bound::Leader(l) => Ok(l.lock()),
            Bound::InSession(l) => Ok(l.lock().clone()),
            Bound::Gone(lock) => Ok(lock.clone()),
            _ => Err("not a lock".into()),
        }
    }

    fn is_lost(&self) -> Result<bool, String> {
        match self {
            Bound::Guard(g) => Ok(g.is_lost()),
            Bound::Set(s) => Ok(s.is_lost()),
            Bound::Leader(l) => Ok(l.is_lost()),
            Bound::InSession(l) => Ok(l.is_lost()),
            _ => Err("not a held lock".into()),
        }
    }

    fn loss(&self) -> Option<Loss> {
        match self {
            Bound::Guard(g) => g.loss(),
            Bound::Leader(l) => l.loss(),
            Bound::Set(s) => s.guards().iter().find_map(LockGuard::loss),
            _ => None,
        }
    }
}

/// The name of an error's kind, as the scenarios write it.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Held(_) => "Held",
        Error::Reserved(_) => "Reserved",
        Error::NotHeld => "NotHeld",
        Error::KindMismatch(_) => "KindMismatch",
        Error::Lost => "Lost",
        Error::ArrivedLate => "ArrivedLate",
        Error::Unavailable(_) => "Unavailable",
        Error::NoAnswer(_) => "NoAnswer",
        Error::Unauthorized(_) => "Unauthorized",
        Error::Forbidden(_) => "Forbidden",
        Error::Server(_) => "Server",
        Error::BadRequest(_) => "BadRequest",
        Error::Membership(..) => "Membership",
        Error::UnknownRoute(_) => "UnknownRoute",
        _ => "unknown",
    }
}

/// Whether `outcome` is what `step` expects (`"ok"` unless it says).
fn expected<T>(step: &Value, outcome: &Result<T, Error>) -> Result<(), String> {
    let want = step["expect"].as_str().unwrap_or("ok");
    match outcome {
        Ok(_) if want == "ok" => Ok(()),
        Ok(_) => Err(format!("succeeded; expected {want}")),
        Err(e) if kind(e) == want => Ok(()),
        Err(e) => Err(format!("failed with {} ({e}); expected {want}", kind(e))),
    }
}

fn ms(step: &Value, field: &str) -> Option<Duration> {
    step[field].as_u64().map(Duration::from_millis)
}

fn text(step: &Value, field: &str) -> Result<String, String> {
    step[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("no {field}"))
}

/// One scenario under way: its cluster, clients and bindings.
pub(super) struct Run {
    cluster: UpCluster,
    clients: HashMap<String, Client>,
    bound: HashMap<String, Bound>,
    /// When each step bound to a name (or each mark) began.
    began: HashMap<String, Instant>,
    vars: HashMap<String, Value>,
    /// The scenario's `env`, where `token_env` is looked up first (tests
    /// run side by side share one process environment).
    env: HashMap<String, String>,
    /// How every client of the run talks to the nodes.
    transport: TransportKind,
}

impl Run {
    pub(super) fn new(
        cluster: UpCluster,
        env: HashMap<String, String>,
        transport: TransportKind,
    ) -> Run {
        Run {
            env,
            transport,
            cluster,
            clients: HashMap::new(),
            bound: HashMap::new(),
            began: HashMap::new(),
            vars: HashMap::new(),
        }
    }

    fn client(&self, step: &Value) -> Result<Client, String> {
        let name = text(step, "client")?;
        self.clients
            .get(&name)
            .cloned()
            .ok_or_else(|| format!("no client {name}"))
    }

    fn get(&self, name: &str) -> Result<&Bound, String> {
        self.bound
            .get(name)
            .ok_or_else(|| format!("nothing bound to {name}"))
    }

    fn bound_of(&self, step: &Value, field: &str) -> Result<&Bound, String> {
        self.get(&text(step, field)?)
    }

    /// A value with its `{...}` forms resolved (README, "Values in arguments").
    async fn resolve(&self, value: &Value) -> Result<Value, String> {
        let Some(s) = value.as_str() else {
            return Ok(value.clone());
        };
        if let Some(name) = s.strip_prefix("{node:").and_then(|r| r.strip_suffix('}')) {
            return Ok(json!(self.get(name)?.lock()?.node));
        }
        if let Some(name) = s.strip_prefix("{var:").and_then(|r| r.strip_suffix('}')) {
            return self
                .vars
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no var {name}"));
        }
        match s {
            "{nodes}" => Ok(json!(self.cluster.addrs.keys().collect::<Vec<_>>())),
            "{speaker}" => Ok(json!(self.speaker().await?)),
            "{followers}" => {
                let speaker = self.speaker().await?;
                let ids: Vec<u64> = self
                    .cluster
                    .addrs
                    .keys()
                    .copied()
                    .filter(|id| *id != speaker)
                    .collect();
                Ok(json!(ids))
            }
            _ => Ok(value.clone()),
        }
    }

    async fn speaker(&self) -> Result<u64, String> {
        let client = self.endpoint_client(&[self.cluster.addrs[&1].clone()], None, None)?;
        let start = Instant::now();
        loop {
            if let Ok(Some(leader)) = client.cluster().await.map(|c| c.leader) {
                return Ok(leader);
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err("no speaker named in 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn endpoint_client(
        &self,
        endpoints: &[String],
        token: Option<String>,
        tls: Option<&std::path::Path>,
    ) -> Result<Client, String> {
        let mut builder = Client::builder(endpoints.to_vec()).transport(self.transport);
        if let Some(token) = token {
            builder = builder.token(token);
        }
        if let Some(ca) = tls.or(self.cluster.ca.as_deref()) {
            builder = builder.tls_ca_file(ca).map_err(|e| e.to_string())?;
        }
        builder.build().map_err(|e| e.to_string())
    }

    fn options(step: &Value) -> AcquireOptions {
        AcquireOptions {
            lease: ms(step, "lease_ms"),
            wait: ms(step, "wait_ms").unwrap_or_default(),
            holder: step["holder"].as_str().map(str::to_string),
            data: step["data"].as_str().map(str::to_string),
            renew_every: ms(step, "renew_every_ms"),
            lapse_margin: ms(step, "lapse_margin_ms"),
            kind: match (step["shared"].as_bool(), step["permits"].as_u64()) {
                (Some(true), _) => Kind::Shared,
                (_, Some(n)) => Kind::Permit(n as u32),
                _ => Kind::Exclusive,
            },
            lock_delay: ms(step, "lock_delay_ms").unwrap_or_default(),
            ..AcquireOptions::default()
        }
    }

    /// Performs `step`; why it did not go as expected, if it did not.
    pub(super) async fn step(&mut self, step: &Value) -> Result<(), String> {
        let started = Instant::now();
        if let Some(name) = step["as"].as_str() {
            self.began.insert(name.to_string(), started);
        }
        match step["do"].as_str().unwrap_or("") {
            "client" => {
                let endpoints = match &step["endpoints"] {
                    Value::String(all) if all == "all" => {
                        self.cluster.addrs.values().cloned().collect()
                    }
                    Value::Array(list) => {
                        let mut out = Vec::new();
                        for e in list {
                            let e = e.as_str().ok_or("an endpoint is not a string")?;
                            out.push(match e.strip_prefix("node:") {
                                Some(id) => self.cluster.addrs
                                    [&id.parse::<u64>().map_err(|e| e.to_string())?]
                                    .clone(),
                                None if e == "dead" => dead_endpoint(),
                                None => return Err(format!("endpoint {e}?")),
                            });
                        }
                        out
                    }
                    other => return Err(format!("endpoints {other}?")),
                };
                let token = match step["token_env"].as_str() {
                    Some(var) => Some(
                        self.env
                            .get(var)
                            .cloned()
                            .or_else(|| std::env::var(var).ok())
                            .ok_or_else(|| format!("{var} is not set"))?,
                    ),
                    None => None,
                };
                let tls = step["tls"].as_bool() == Some(true);
                if tls && self.cluster.ca.is_none() {
                    return Err("tls asked of a cluster without it".into());
                }
                let mut client = self.endpoint_client(&endpoints, token, None)?;
                if let Some(window) = ms(step, "retry_for_ms") {
                    client = client.with_retry_for(window);
                }
                self.clients.insert(text(step, "as")?, client);
                Ok(())
            }
            "acquire" => {
                let client = self.client(step)?;
                let options = Self::options(step);
                let names: Option<Vec<String>> = step["names"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                });
                let name = step["name"].as_str().map(str::to_string);
                let session = match step["session"].as_str() {
                    Some(s) => match self.get(s)? {
                        Bound::Session(session) => Some(Arc::clone(session)),
                        _ => return Err(format!("{s} is not a session")),
                    },
                    None => None,
                };
                let call = async move {
                    if let Some(names) = names {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        client.acquire_all(&names, options).await.map(Bound::Set)
                    } else {
                        let name = name.expect("a name");
                        match session {
                            Some(session) => {
                                session.acquire(&name, options).await.map(Bound::InSession)
                            }
                            None => client.acquire(&name, options).await.map(Bound::Guard),
                        }
                    }
                };
                self.call(step, started, call).await
            }
            "campaign" => {
                let client = self.client(step)?;
                let name = text(step, "name")?;
                let value = text(step, "value")?;
                let options = CampaignOptions {
                    lease: ms(step, "lease_ms"),
                    give_up_after: ms(step, "give_up_after_ms"),
                };
                let call = async move {
                    client
                        .campaign(&name, &value, options)
                        .await
                        .map(Bound::Leader)
                };
                self.call(step, started, call).await
            }
            "await" => {
                let name = text(step, "as")?;
                let Some(Bound::Pending(handle)) = self.bound.remove(&name) else {
                    return Err(format!("{name} is not under way"));
                };
                let within = ms(step, "within_ms").unwrap_or(Duration::from_secs(30));
                let outcome = tokio::time::timeout(within, handle)
                    .await
                    .map_err(|_| format!("{name} not done within {within:?}"))?
                    .map_err(|e| e.to_string())?;
                expected(step, &outcome)?;
                if let Ok(bound) = outcome {
                    self.bound.insert(name, bound);
                }
                Ok(())
            }
            "release" => {
                let name = text(step, "lock")?;
                let bound = self
                    .bound
                    .remove(&name)
                    .ok_or_else(|| format!("no {name}"))?;
                let lock = bound.lock()?;
                let outcome = match bound {
                    Bound::Guard(g) => g.release().await,
                    Bound::Set(s) => s.release().await,
                    Bound::Leader(l) => l.resign().await,
                    _ => return Err(format!("{name} cannot be released by its holder")),
                };
                self.bound.insert(name, Bound::Gone(lock));
                expected(step, &outcome)
            }
            "resign" => {
                let name = text(step, "lock")?;
                let bound = self
                    .bound
                    .remove(&name)
                    .ok_or_else(|| format!("no {name}"))?;
                let lock = bound.lock()?;
                let Bound::Leader(leadership) = bound else {
                    return Err(format!("{name} is no leadership"));
                };
                let outcome = leadership.resign().await;
                self.bound.insert(name, Bound::Gone(lock));
                expected(step, &outcome)
            }
            "release_by_id" => {
                let client = self.client(step)?;
                let lock = self.bound_of(step, "lock")?.lock()?;
                let outcome = client.release(&lock.name, &lock.id).await;
                expected(step, &outcome)
            }
            "held" => match self.bound_of(step, "lock")?.is_lost()? {
                false => Ok(()),
                true => Err(format!("lost ({:?})", self.bound_of(step, "lock")?.loss())),
            },
            "lost" => self.lost(step).await,
            "mark" => Ok(()),
            "remember" => {
                let value = self.resolve(&step["value"]).await?;
                self.vars.insert(text(step, "as")?, value);
                Ok(())
            }
            "get" => {
                // With `for_ms`, the get and its checks are repeated
                // every 100 ms for that long.
                let client = self.client(step)?;
                let name = text(step, "name")?;
                let until = started + ms(step, "for_ms").unwrap_or_default();
                loop {
                    let lock = client
                        .get(&name)
                        .await
                        .map_err(|e| format!("get {name}: {e}"))?;
                    self.check_get(step, &name, &lock)?;
                    if Instant::now() >= until {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            "same_fence" | "fence_above" => {
                let a = self.bound_of(step, "a")?.lock()?.fence;
                let b = self.bound_of(step, "b")?.lock()?.fence;
                let ok = match step["do"].as_str() {
                    Some("same_fence") => a == b,
                    _ => a > b,
                };
                ok.then_some(())
                    .ok_or_else(|| format!("fences {a} and {b}"))
            }
            "node_is_not" => {
                let node = self.resolve(&step["node"]).await?;
                let now = self.bound_of(step, "lock")?.lock()?.node;
                match json!(now) == node {
                    true => Err(format!("still at node {now}")),
                    false => Ok(()),
                }
            }
            "sleep" => {
                tokio::time::sleep(ms(step, "ms").unwrap_or_default()).await;
                Ok(())
            }
            "list" => {
                // Asked again every 100 ms until it shows what the step
                // expects, for at most `within_ms`.
                let client = self.client(step)?;
                let prefix = text(step, "prefix")?;
                let until = started + ms(step, "within_ms").unwrap_or_default();
                loop {
                    let listing = client
                        .listing(&prefix, 1000)
                        .await
                        .map_err(|e| format!("listing {prefix}: {e}"))?;
                    let shown = json!({
                        "locks": listing.locks.iter().map(|l| &l.name).collect::<Vec<_>>(),
                        "awaited": listing.awaited.iter().map(|a| json!({
                            "name": a.name,
                            "waiters": a.waiters,
                            "first": a.queue.first().map(|q| &q.holder),
                        })).collect::<Vec<_>>(),
                    });
                    if shown["locks"] == step["locks"] && shown["awaited"] == step["awaited"] {
                        return Ok(());
                    }
                    if Instant::now() >= until {
                        return Err(format!("the listing shows {shown}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            "with_lock" => self.with_lock(step).await,
            "open_session" => {
                let client = self.client(step)?;
                let options = SessionOptions {
                    ttl: ms(step, "ttl_ms"),
                    holder: None,
                    ..Default::default()
                };
                let session = client.open_session(options).await;
                expected(step, &session)?;
                if let Ok(session) = session {
                    self.bound
                        .insert(text(step, "as")?, Bound::Session(Arc::new(session)));
                }
                Ok(())
            }
            "close_session" => {
                let name = text(step, "session")?;
                let Some(Bound::Session(session)) = self.bound.remove(&name) else {
                    return Err(format!("{name} is not a session"));
                };
                let session = Arc::try_unwrap(session)
                    .map_err(|_| format!("{name} is still in use by an acquire"))?;
                expected(step, &session.close().await)
            }
            "leader" => {
                let client = self.client(step)?;
                let name = text(step, "name")?;
                let leader = client.leader(&name).await.map_err(|e| e.to_string())?;
                let value = leader.and_then(|l| l.data);
                match json!(value) == step["value"] {
                    true => Ok(()),
                    false => Err(format!("leader {value:?}, expected {}", step["value"])),
                }
            }
            "observe" => {
                let client = self.client(step)?;
                let name = text(step, "name")?;
                let seen = Arc::new(Mutex::new(Vec::new()));
                let noted = Arc::clone(&seen);
                let task = tokio::spawn(async move {
                    let mut leaders = std::pin::pin!(client.observe(&name));
                    while let Some(item) = leaders.next().await {
                        if let Ok(leader) = item {
                            noted.lock().unwrap().push(leader.and_then(|l| l.data));
                        }
                    }
                });
                self.bound
                    .insert(text(step, "as")?, Bound::Observer(seen, task));
                Ok(())
            }
            "observed" => {
                let Bound::Observer(seen, _) = self.bound_of(step, "as")? else {
                    return Err("not an observer".into());
                };
                let want: Vec<Option<String>> = step["values"]
                    .as_array()
                    .ok_or("no values")?
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect();
                let within = ms(step, "within_ms").unwrap_or(Duration::from_secs(5));
                loop {
                    let mut noted: Vec<Option<String>> = seen.lock().unwrap().clone();
                    // Repeats in a row are one; `None` between leaders is allowed.
                    noted.dedup();
                    let leaders: Vec<Option<String>> = noted
                        .iter()
                        .filter(|v| v.is_some() || want.contains(v))
                        .cloned()
                        .collect();
                    if leaders.ends_with(&want) {
                        return Ok(());
                    }
                    if started.elapsed() > within {
                        return Err(format!("observed {noted:?}, expected to end with {want:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            "chaos" => {
                let mut runs: Vec<Vec<String>> = vec![Vec::new()];
                for arg in step["args"].as_array().ok_or("no args")? {
                    let arg = self.resolve(arg).await?;
                    let values: Vec<String> = match &arg {
                        Value::Array(list) => list.iter().map(plain).collect(),
                        one => vec![plain(one)],
                    };
                    runs = runs
                        .into_iter()
                        .flat_map(|run| {
                            values.iter().map(move |v| {
                                let mut run = run.clone();
                                run.push(v.clone());
                                run
                            })
                        })
                        .collect();
                }
                for args in runs {
                    self.cluster.chaos(&args)?;
                }
                Ok(())
            }
            other => Err(format!("no such step {other:?}")),
        }
    }

    /// `get`'s checks of one answer (`lock`: what the name is held under).
    fn check_get(&self, step: &Value, name: &str, lock: &Option<Lock>) -> Result<(), String> {
        if step["free"].as_bool() == Some(true) && lock.is_some() {
            return Err(format!("{name} is held: {lock:?}"));
        }
        if let Some(holder) = step["holder_lock"].as_str() {
            let want = self.get(holder)?.lock()?.id;
            match &lock {
                Some(l) if l.id == want || l.others.iter().any(|o| o.id == want) => {}
                _ => return Err(format!("{name} not held by {holder}: {lock:?}")),
            }
        }
        if let Some(n) = step["holders"].as_u64() {
            let count = lock.as_ref().map_or(0, |l| 1 + l.others.len() as u64);
            if count != n {
                return Err(format!("{name} has {count} holders, not {n}"));
            }
        }
        if let Some(least) = step["ttl_at_least_ms"].as_u64() {
            match lock {
                Some(l) if l.ttl_ms >= least => {}
                Some(l) => {
                    return Err(format!(
                        "{name} has {} ms left, less than {least}",
                        l.ttl_ms
                    ))
                }
                None => return Err(format!("{name} is free")),
            }
        }
        Ok(())
    }

    /// Runs an acquire or a campaign: in the background, or now, checked
    /// against `expect` and `max_ms`, and bound to `as`.
    async fn call(
        &mut self,
        step: &Value,
        started: Instant,
        call: impl std::future::Future<Output = Result<Bound, Error>> + Send + 'static,
    ) -> Result<(), String> {
        if step["background"].as_bool() == Some(true) {
            self.bound
                .insert(text(step, "as")?, Bound::Pending(tokio::spawn(call)));
            return Ok(());
        }
        let outcome = call.await;
        if let Some(max) = ms(step, "max_ms") {
            let took = started.elapsed();
            if took > max {
                return Err(format!("took {took:?}, more than {max:?}"));
            }
        }
        expected(step, &outcome)?;
        if let (Ok(bound), Some(name)) = (outcome, step["as"].as_str()) {
            self.bound.insert(name.to_string(), bound);
        }
        Ok(())
    }

    /// `lost`: the guard's loss signal, its reason, and when it came.
    async fn lost(&self, step: &Value) -> Result<(), String> {
        let bound = self.bound_of(step, "lock")?;
        let within = ms(step, "within_ms").unwrap_or(Duration::from_secs(10));
        let signal = async {
            match bound {
                Bound::Guard(g) => g.lost().await,
                Bound::Leader(l) => l.lost().await,
                Bound::Set(s) => s.lost().await,
                _ => std::future::pending().await,
            }
        };
        tokio::time::timeout(within, signal)
            .await
            .map_err(|_| format!("no loss signalled within {within:?}"))?;
        let at = Instant::now();
        if let Some(want) = step["loss"].as_str() {
            let loss = bound.loss();
            if format!("{loss:?}") != format!("Some({want})") {
                return Err(format!("lost as {loss:?}, expected {want}"));
            }
        }
        if let Some(since) = step["since"].as_str() {
            let from = *self
                .began
                .get(since)
                .ok_or_else(|| format!("no time for {since}"))?;
            let after = at - from;
            if ms(step, "at_least_ms").is_some_and(|least| after < least) {
                return Err(format!("lost {after:?} after {since}: too soon"));
            }
            if ms(step, "at_most_ms").is_some_and(|most| after > most) {
                return Err(format!("lost {after:?} after {since}: too late"));
            }
        }
        Ok(())
    }

    async fn with_lock(&self, step: &Value) -> Result<(), String> {
        let client = self.client(step)?;
        let name = text(step, "name")?;
        let options = Self::options(step);
        let work = step["work"].clone();
        let (releaser, lock_name) = (client.clone(), name.clone());
        let outcome = client
            .with_lock(&name, options, |cancel| async move {
                if work.as_str() == Some("return") {
                    return Ok(());
                }
                if work["release_elsewhere"].as_bool() == Some(true) {
                    let lock = releaser
                        .get(&lock_name)
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("not held")?;
                    releaser
                        .release(&lock_name, &lock.id)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let wait = Duration::from_millis(work["wait_cancel_ms"].as_u64().unwrap_or(0));
                tokio::time::timeout(wait, cancel.cancelled())
                    .await
                    .map_err(|_| "the work was not cancelled".to_string())
            })
            .await;
        match outcome {
            Ok(Err(work_failed)) => Err(work_failed),
            Ok(Ok(())) => expected(step, &Ok::<(), Error>(())),
            Err(e) => expected(step, &Err::<(), Error>(e)),
        }
    }
}

/// A chaos argument as the command line takes it.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A `127.0.0.1` port nothing listens on.
fn dead_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

impl Drop for Run {
    fn drop(&mut self) {
        for bound in self.bound.values() {
            if let Bound::Observer(_, task) = bound {
                task.abort();
            }
        }
    }
}
