//! `leasehold lock` and `leasehold elect`: run a command while holding a
//! lock, or while leading, and stop it when that ends.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, CampaignOptions, Client, Error};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Exit statuses of their own (sysexits.h): the command's status otherwise.
pub mod exit {
    /// Bad usage.
    pub const USAGE: u8 = 64;
    /// The cluster was unavailable.
    pub const UNAVAILABLE: u8 = 69;
    /// The lock was held by another at the end of the wait.
    pub const HELD: u8 = 73;
    /// The lock (or leadership) was lost while the command ran.
    pub const LOST: u8 = 75;
}

/// Says why nothing was run, as an exit status.
pub fn refused(what: &str, e: &Error) -> ExitCode {
    eprintln!("leasehold: {what}: {e}");
    ExitCode::from(match e {
        Error::Held(_) => exit::HELD,
        Error::BadRequest(_) => exit::USAGE,
        _ => exit::UNAVAILABLE,
    })
}

/// `leasehold lock`.
pub async fn lock(
    client: Client,
    name: &str,
    options: AcquireOptions,
    command: &[String],
) -> ExitCode {
    let guard = match client.acquire(name, options).await {
        Ok(guard) => guard,
        Err(e) => return refused(&format!("could not lock {name}"), &e),
    };
    eprintln!("leasehold: holding {name} (fence {})", guard.fence());
    let code = run(command, guard.lost_token(), &|| guard.lease_ends()).await;
    let _ = guard.release().await;
    code
}

/// `leasehold elect`.
pub async fn elect(
    client: Client,
    name: &str,
    value: &str,
    options: CampaignOptions,
    command: &[String],
) -> ExitCode {
    let leadership = match client.campaign(name, value, options).await {
        Ok(l) => l,
        Err(e) => return refused(&format!("could not lead {name}"), &e),
    };
    eprintln!(
        "leasehold: leading {name} as {value:?} (fence {})",
        leadership.fence()
    );
    let code = run(command, leadership.lost_token(), &|| {
        leadership.lease_ends()
    })
    .await;
    let _ = leadership.resign().await;
    code
}

/// Runs `command` until it exits, or the lock is lost (then: SIGTERM, and
/// SIGKILL if it is still running when the lease ends).
async fn run(
    command: &[String],
    lost: CancellationToken,
    lease_ends: &(dyn Fn() -> Instant + Sync),
) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("leasehold: no command given (put it after --)");
        return ExitCode::from(exit::USAGE);
    };
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true);
    die_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("leasehold: cannot run {program}: {e}");
            return ExitCode::from(127);
        }
    };
    let pid = child.id().map(|id| Pid::from_raw(id as i32));
    let terminate = |sig: Signal| {
        if let Some(pid) = pid {
            let _ = kill(pid, sig);
        }
    };
    tokio::select! {
        status = child.wait() => return status_code(status),
        _ = lost.cancelled() => {}
        _ = tokio::signal::ctrl_c() => {
            terminate(Signal::SIGTERM);
            return status_code(child.wait().await);
        }
    }
    eprintln!("leasehold: the lock was lost; stopping the command");
    terminate(Signal::SIGTERM);
    let deadline = lease_ends().max(Instant::now() + Duration::from_millis(100));
    if tokio::time::timeout_at(deadline.into(), child.wait())
        .await
        .is_err()
    {
        terminate(Signal::SIGKILL);
        let _ = child.wait().await;
    }
    ExitCode::from(exit::LOST)
}

/// Has the kernel kill the command if this process dies without stopping
/// it (SIGKILL, a crash): the command must never outlive the lock's keeper.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes the prctl(2) system call, which is async-signal-safe, and
    // allocates nothing.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

fn status_code(status: std::io::Result<std::process::ExitStatus>) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => ExitCode::from(code as u8),
            (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
            _ => ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!("leasehold: waiting for the command: {e}");
            ExitCode::FAILURE
        }
    }
}
