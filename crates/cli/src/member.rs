//! `leasehold member add` and `leasehold member remove`: membership
//! changes, sent with the cluster token to whichever endpoint answers (any
//! node forwards them to the speaker).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use leasehold_api::{AddMemberBody, ClusterAnswer, ErrorBody, ErrorCode};

use crate::hold::exit;
use crate::show::print_cluster;

/// How long one node may take to answer: the speaker waits up to 10 s for
/// a new member to catch up, and up to 20 s for a change to commit.
const CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// How long a change is tried, over the endpoints in turn, while none can
/// make it (no speaker yet, none reachable), unless `--timeout` says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The HTTP client for a change: verifying the nodes against `tls_ca`
/// (and only it) when given.
fn http_client(tls_ca: Option<&Path>) -> Result<reqwest::Client, String> {
    let mut http = reqwest::Client::builder().no_proxy();
    if let Some(path) = tls_ca {
        let pem = std::fs::read(path).map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
        http = leasehold_client::trust_only(http, &pem)
            .map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
    }
    http.build().map_err(|e| format!("http client: {e}"))
}

/// One change, as the CLI sends it.
pub enum Change {
    /// `POST /v1/cluster/members`.
    Add(AddMemberBody),
    /// `DELETE /v1/cluster/members/{id}`.
    Remove(u64),
}

/// Sends `change` to the first of `endpoints` that can serve it, with the
/// cluster `token`, and prints the membership after it; gives up, saying
/// why, after `timeout`.
pub async fn change(
    endpoints: &[String],
    token: &str,
    tls_ca: Option<&Path>,
    change: Change,
    json: bool,
    timeout: Duration,
) -> ExitCode {
    let deadline = tokio::time::Instant::now() + timeout;
    let http = match http_client(tls_ca) {
        Ok(http) => http,
        Err(e) => {
            eprintln!("leasehold: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let scheme = if tls_ca.is_some() { "https" } else { "http" };
    let mut last = String::from("no endpoint given");
    let mut round = 0u32;
    'rounds: while tokio::time::Instant::now() < deadline {
        if round > 0 {
            tokio::time::sleep_until(
                deadline.min(tokio::time::Instant::now() + Duration::from_secs(1)),
            )
            .await;
        }
        round += 1;
        for endpoint in endpoints {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break 'rounds;
            }
            let base = if endpoint.contains("://") {
                endpoint.trim_end_matches('/').to_string()
            } else {
                format!("{scheme}://{endpoint}")
            };
            let request = match &change {
                Change::Add(body) => http.post(format!("{base}/v1/cluster/members")).json(body),
                Change::Remove(id) => http.delete(format!("{base}/v1/cluster/members/{id}")),
            };
            let answer = request
                .header(leasehold_raft::TOKEN_HEADER, token)
                .timeout(left.min(CALL_TIMEOUT))
                .send()
                .await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    last = format!("{endpoint}: {}", leasehold_client::request_failure(&e));
                    continue;
                }
            };
            let ok = answer.status().is_success();
            let bytes = answer.bytes().await.unwrap_or_default();
            if ok {
                return match serde_json::from_slice::<ClusterAnswer>(&bytes) {
                    Ok(cluster) if json => {
                        println!("{}", serde_json::json!(cluster));
                        ExitCode::SUCCESS
                    }
                    Ok(cluster) => {
                        print_cluster(&cluster);
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!(
                            "leasehold: the change was made, but its answer is unreadable: {e}"
                        );
                        ExitCode::SUCCESS
                    }
                };
            }
            let Ok(refused) = serde_json::from_slice::<ErrorBody>(&bytes) else {
                last = format!("{endpoint}: an answer that is not leasehold's");
                continue;
            };
            if refused.error.retryable() {
                last = format!("{endpoint}: {refused}");
                continue;
            }
            eprintln!("leasehold: the change was refused: {refused}");
            return ExitCode::from(match refused.error {
                ErrorCode::BadRequest | ErrorCode::Unauthorized => exit::USAGE,
                _ => exit::UNAVAILABLE,
            });
        }
    }
    eprintln!(
        "leasehold: no node could make the change within {}: {last}",
        humantime::format_duration(timeout)
    );
    ExitCode::from(exit::UNAVAILABLE)
}
