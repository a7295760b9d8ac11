//! The systems measured, each behind the same two calls: acquire a name,
//! release it. One `Session` is one client with its own connection.

use std::time::Duration;

use base64::Engine;
use leasehold_api::wire::{Answer, Request};
use leasehold_api::{AcquireBody, ErrorCode, ReleaseBody};
use serde_json::{json, Value};

/// A failed call.
pub type Failure = String;

/// What a client talks to.
#[derive(Debug, Clone)]
pub enum System {
    /// leasehold's HTTP API at one node.
    Leasehold { endpoint: String },
    /// leasehold's binary transport at one node (`host:port`).
    LeaseholdFrames { addr: String },
    /// A minimal axum handler: the floor of any HTTP lock API.
    Bare { endpoint: String },
    /// Redis: `SET NX PX` and a compare-and-delete script.
    Redis { url: String },
    /// PostgreSQL advisory locks.
    PgAdvisory { url: String },
    /// The statements of pglock: a lock table with a record version number.
    Pglock { url: String },
    /// etcd's lock API through its JSON gateway, with a lease per lock
    /// (`per_lock`) or one lease per client.
    Etcd { endpoint: String, per_lock: bool },
}

/// One client's connection.
pub enum Session {
    /// HTTP (leasehold, bare, etcd).
    Http {
        http: reqwest::Client,
        endpoint: String,
        kind: System,
        lease: Option<i64>,
    },
    /// leasehold's binary transport.
    Frames(crate::frames::FrameConn),
    /// Redis.
    Redis {
        conn: redis::aio::MultiplexedConnection,
        script: redis::Script,
    },
    /// PostgreSQL (advisory or pglock).
    Pg {
        client: tokio_postgres::Client,
        pglock: bool,
    },
}

/// The lease asked for: 1 s, as the failover workload asks (a lost
/// release then blocks the name for a second, not thirty).
const LEASE_MS: u64 = 1000;
/// [`LEASE_MS`] as a duration.
pub const LEASE: Duration = Duration::from_millis(LEASE_MS);

/// What a grant returned, to release it by.
pub type Token = String;

/// The environment variable naming a CA file (PEM) that `https://`
/// targets are verified against (`scripts/bench-tls`).
pub const CA_ENV: &str = "LEASEHOLD_BENCH_CA";

fn http_client() -> reqwest::Client {
    let mut http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4)
        .timeout(Duration::from_secs(60));
    if let Some(path) = std::env::var_os(CA_ENV) {
        let pem = std::fs::read(&path).expect("read the CA of LEASEHOLD_BENCH_CA");
        let ca = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
        http = http.tls_built_in_root_certs(false).add_root_certificate(ca);
    }
    http.build().expect("http client")
}

async fn post(http: &reqwest::Client, url: String, body: &Value) -> Result<(u16, Value), Failure> {
    let r = http
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, v))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

impl System {
    /// Opens one client's session.
    pub async fn connect(&self) -> Result<Session, Failure> {
        match self {
            System::Leasehold { endpoint } | System::Bare { endpoint } => Ok(Session::Http {
                http: http_client(),
                endpoint: endpoint.clone(),
                kind: self.clone(),
                lease: None,
            }),
            System::Etcd { endpoint, per_lock } => {
                let http = http_client();
                let lease = if *per_lock {
                    None
                } else {
                    Some(etcd_lease(&http, endpoint, 60).await?)
                };
                Ok(Session::Http {
                    http,
                    endpoint: endpoint.clone(),
                    kind: self.clone(),
                    lease,
                })
            }
            System::LeaseholdFrames { addr } => {
                let addr = addr.trim_start_matches("http://");
                Ok(Session::Frames(crate::frames::FrameConn::open(addr).await?))
            }
            System::Redis { url } => {
                let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                let script = redis::Script::new(
                    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
                );
                Ok(Session::Redis { conn, script })
            }
            System::PgAdvisory { url } | System::Pglock { url } => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                Ok(Session::Pg {
                    client,
                    pglock: matches!(self, System::Pglock { .. }),
                })
            }
        }
    }

    /// Prepares the system (the pglock table).
    pub async fn prepare(&self) -> Result<(), Failure> {
        if let System::Pglock { url } = self {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, record_version_number BIGINT, \
                     data BYTEA, owner TEXT); TRUNCATE locks;",
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

async fn etcd_lease(http: &reqwest::Client, endpoint: &str, ttl: i64) -> Result<i64, Failure> {
    let (_, v) = post(
        http,
        format!("{endpoint}/v3/lease/grant"),
        &json!({"TTL": ttl}),
    )
    .await?;
    v["ID"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("lease grant: {v}"))
}

impl Session {
    /// Acquires `name`, waiting up to `wait` if the system can; `None` when
    /// held by another.
    pub async fn acquire(&mut self, name: &str, wait: Duration) -> Result<Option<Token>, Failure> {
        match self {
            Session::Http {
                http,
                endpoint,
                kind,
                lease,
            } => match kind {
                System::Leasehold { .. } => {
                    let body = json!({"name": name, "lease_ms": LEASE_MS, "wait_ms": wait.as_millis() as u64});
                    let (status, v) =
                        post(http, format!("{endpoint}/v1/locks/acquire"), &body).await?;
                    match status {
                        200 => Ok(Some(
                            v["lock"]["id"].as_str().unwrap_or_default().to_string(),
                        )),
                        409 => Ok(None),
                        _ => Err(format!("acquire: {status} {v}")),
                    }
                }
                System::Bare { .. } => {
                    let (status, v) =
                        post(http, format!("{endpoint}/acquire"), &json!({"name": name})).await?;
                    if status != 200 {
                        return Err(format!("bare: {status}"));
                    }
                    Ok(Some(
                        v["lock"]["id"].as_str().unwrap_or_default().to_string(),
                    ))
                }
                System::Etcd { .. } => {
                    let lease_id = match lease {
                        Some(id) => *id,
                        None => etcd_lease(http, endpoint, 1).await?,
                    };
                    let body = json!({"name": b64(name), "lease": lease_id.to_string()});
                    let (status, v) = post(http, format!("{endpoint}/v3/lock/lock"), &body).await?;
                    if status != 200 {
                        return Err(format!("etcd lock: {status} {v}"));
                    }
                    let key = v["key"].as_str().ok_or_else(|| format!("etcd lock: {v}"))?;
                    Ok(Some(format!("{key} {lease_id}")))
                }
                _ => unreachable!("http session"),
            },
            Session::Frames(conn) => {
                let body = AcquireBody {
                    name: Some(name.to_string()),
                    lease_ms: Some(LEASE_MS),
                    wait_ms: Some(wait.as_millis() as u64),
                    ..AcquireBody::default()
                };
                match conn.call(&Request::Acquire(body)).await? {
                    Answer::Lock(a) => Ok(Some(a.lock.id)),
                    Answer::Error(e) if e.error == ErrorCode::Held => Ok(None),
                    other => Err(format!("acquire: {other:?}")),
                }
            }
            Session::Redis { conn, .. } => {
                let token = format!("{:x}", rand::random::<u64>());
                let set: Option<String> = redis::cmd("SET")
                    .arg(name)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30000)
                    .query_async(conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(set.map(|_| token))
            }
            Session::Pg { client, pglock } => {
                if *pglock {
                    let rvn: i64 = rand::random::<i64>().abs();
                    let n = client
                        .execute(
                            "INSERT INTO locks (name, record_version_number, owner) VALUES ($1, $2, 'bench') \
                             ON CONFLICT (name) DO UPDATE SET record_version_number = $2, owner = 'bench' \
                             WHERE locks.record_version_number IS NULL",
                            &[&name, &rvn],
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok((n == 1).then(|| rvn.to_string()))
                } else {
                    let row = client
                        .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&name])
                        .await
                        .map_err(|e| e.to_string())?;
                    let got: bool = row.get(0);
                    Ok(got.then(String::new))
                }
            }
        }
    }

    /// Releases `name` held under `token`.
    pub async fn release(&mut self, name: &str, token: &str) -> Result<(), Failure> {
        match self {
            Session::Http {
                http,
                endpoint,
                kind,
                lease,
            } => match kind {
                System::Leasehold { .. } => {
                    let (status, v) = post(
                        http,
                        format!("{endpoint}/v1/locks/release"),
                        &json!({"name": name, "id": token}),
                    )
                    .await?;
                    // 404: the grant is gone already (released, or its
                    // lease ended); nothing is left to release.
                    if status == 200 || status == 404 {
                        Ok(())
                    } else {
                        Err(format!("release: {status} {v}"))
                    }
                }
                System::Bare { .. } => {
                    let (status, _) = post(
                        http,
                        format!("{endpoint}/release"),
                        &json!({"name": name, "id": token}),
                    )
                    .await?;
                    if status == 200 {
                        Ok(())
                    } else {
                        Err(format!("bare: {status}"))
                    }
                }
                System::Etcd { .. } => {
                    let (key, lease_id) = token.split_once(' ').unwrap_or((token, "0"));
                    let (status, v) = post(
                        http,
                        format!("{endpoint}/v3/lock/unlock"),
                        &json!({"key": key}),
                    )
                    .await?;
                    if status != 200 {
                        return Err(format!("etcd unlock: {status} {v}"));
                    }
                    if lease.is_none() {
                        post(
                            http,
                            format!("{endpoint}/v3/lease/revoke"),
                            &json!({"ID": lease_id}),
                        )
                        .await?;
                    }
                    Ok(())
                }
                _ => unreachable!("http session"),
            },
            Session::Frames(conn) => {
                let body = ReleaseBody::one(name, token);
                match conn.call(&Request::Release(body)).await? {
                    // not_held: the grant is gone already.
                    Answer::Lock(_) => Ok(()),
                    Answer::Error(e) if e.error == ErrorCode::NotHeld => Ok(()),
                    other => Err(format!("release: {other:?}")),
                }
            }
            Session::Redis { conn, script } => {
                let _: i64 = script
                    .key(name)
                    .arg(token)
                    .invoke_async(conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
            Session::Pg { client, pglock } => {
                if *pglock {
                    let rvn: i64 = token.parse().unwrap_or(0);
                    client
                        .execute(
                            "UPDATE locks SET record_version_number = NULL WHERE name = $1 AND record_version_number = $2",
                            &[&name, &rvn],
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                } else {
                    client
                        .query_one("SELECT pg_advisory_unlock(hashtext($1))", &[&name])
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
        }
    }
}
