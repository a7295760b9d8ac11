//! `leasehold lock` and `leasehold elect`: run a command while holding a
//! lock, or while leading, and stop it when that ends.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, CampaignOptions, Client, Error, Loss};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::{getpid, getppid, Pid};
use tokio::process::Command;
use tokio::signal::unix;
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
    /// The token was refused (`401`), or may not do this (`403`).
    pub const NO_PERMISSION: u8 = 77;
    /// `get` or `unlock` of a lock nobody holds.
    pub const NOT_HELD: u8 = 1;
}

/// Says why nothing was run, as an exit status.
pub fn refused(what: &str, e: &Error) -> ExitCode {
    refused_held_as(what, e, exit::HELD)
}

/// As [`refused`], with `held` the status for a lock held by another.
fn refused_held_as(what: &str, e: &Error, held: u8) -> ExitCode {
    eprintln!("leasehold: {what}: {e}");
    ExitCode::from(match e {
        Error::Held(_) | Error::Reserved(_) | Error::KindMismatch(_) => held,
        Error::BadRequest(_) | Error::UnknownRoute(_) => exit::USAGE,
        Error::Unauthorized(_) | Error::Forbidden(_) => exit::NO_PERMISSION,
        _ => exit::UNAVAILABLE,
    })
}

/// How long `lock` and `elect` wait for the lock, as flock(1), `etcdctl
/// lock` and `consul lock` do: until granted unless bounded, and the status
/// to exit with if it is still held at the end.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    /// The longest wait (`None`: until granted).
    pub bound: Option<Duration>,
    /// The exit status when the lock is held at the end of the wait.
    pub conflict_exit: u8,
}

impl Wait {
    /// From `--wait`, `--no-wait` and `--conflict-exit`.
    pub fn from_flags(wait_ms: Option<u64>, no_wait: bool, conflict_exit: u8) -> Wait {
        let bound = match no_wait {
            true => Some(Duration::ZERO),
            false => wait_ms.map(Duration::from_millis),
        };
        Wait {
            bound,
            conflict_exit,
        }
    }
}

/// The longest single wait of an unbounded `lock`: it asks again after.
const ONE_WAIT: Duration = Duration::from_secs(3600);

/// The shortest `--lease` the commands take: the guard renews at least
/// twice a lease, and at most every 10 ms.
pub const SHORTEST_LEASE_MS: u64 = 20;

/// Refuses a `--lease` the guard cannot keep renewed.
pub fn check_lease(lease_ms: u64) -> Result<(), String> {
    if lease_ms < SHORTEST_LEASE_MS {
        return Err(format!(
            "--lease {lease_ms}: a lease must be at least {SHORTEST_LEASE_MS} ms (renewed twice a lease)"
        ));
    }
    Ok(())
}

/// Says so when the cluster granted a shorter lease than asked (its
/// `--max-lease`).
fn note_clamped(asked: Option<std::time::Duration>, lock: &leasehold_client::Lock) {
    if let Some(asked) = asked {
        let asked_ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX);
        if lock.lease_ms < asked_ms {
            eprintln!(
                "leasehold: the cluster granted a {} ms lease, not the {asked_ms} ms asked (its --max-lease)",
                lock.lease_ms
            );
        }
    }
}

/// `leasehold lock`.
pub async fn lock(
    client: Client,
    name: &str,
    options: AcquireOptions,
    wait: Wait,
    command: &[String],
) -> ExitCode {
    let asked = options.lease;
    let acquired = loop {
        let options = options.clone().wait(wait.bound.unwrap_or(ONE_WAIT));
        match client.acquire(name, options).await {
            Err(e) if e.is_taken() && wait.bound.is_none() => continue,
            acquired => break acquired,
        }
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(e) => {
            return refused_held_as(&format!("could not lock {name}"), &e, wait.conflict_exit)
        }
    };
    eprintln!("leasehold: holding {name} (fence {})", guard.fence());
    note_clamped(asked, &guard.lock());
    let held = Held {
        lost: guard.lost_token(),
        lapse_margin: guard.lapse_margin(),
        lease_ends: &|| guard.lease_ends(),
        loss: &|| guard.loss(),
    };
    let code = match command.is_empty() {
        true => hold_until_interrupted(&[guard.lock()], held).await,
        false => run(command, held).await,
    };
    let _ = guard.release().await;
    code
}

/// `leasehold lock A B ...`: every name at once, or none.
pub async fn lock_all(
    client: Client,
    names: &[String],
    options: AcquireOptions,
    wait: Wait,
    command: &[String],
) -> ExitCode {
    let asked = options.lease;
    let list: Vec<&str> = names.iter().map(String::as_str).collect();
    let acquired = loop {
        let options = options.clone().wait(wait.bound.unwrap_or(ONE_WAIT));
        match client.acquire_all(&list, options).await {
            Err(e) if e.is_taken() && wait.bound.is_none() => continue,
            acquired => break acquired,
        }
    };
    let what = list.join(" ");
    let set = match acquired {
        Ok(set) => set,
        Err(e) => {
            return refused_held_as(&format!("could not lock {what}"), &e, wait.conflict_exit)
        }
    };
    let fences: Vec<String> = set.fences().iter().map(u64::to_string).collect();
    eprintln!("leasehold: holding {what} (fences {})", fences.join(" "));
    for lock in set.locks() {
        note_clamped(asked, &lock);
    }
    let guards = set.guards();
    let held = Held {
        lost: set.lost_token(),
        lapse_margin: guards[0].lapse_margin(),
        lease_ends: &|| {
            guards
                .iter()
                .map(leasehold_client::LockGuard::lease_ends)
                .min()
                .expect("a set has a lock")
        },
        loss: &|| guards.iter().find_map(leasehold_client::LockGuard::loss),
    };
    let code = match command.is_empty() {
        true => hold_until_interrupted(&set.locks(), held).await,
        false => run(command, held).await,
    };
    let _ = set.release().await;
    code
}

/// `lock NAME..` without a command: prints the locks, then holds them
/// until interrupted (exit 0) or one is lost (exit 75).
async fn hold_until_interrupted(locks: &[leasehold_client::Lock], held: Held<'_>) -> ExitCode {
    let mut interrupts = match Interrupts::listen() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("leasehold: cannot listen for signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    for lock in locks {
        println!(
            "{} {} (holder {}, fence {}, lease {} ms)",
            lock.name, lock.id, lock.holder, lock.fence, lock.lease_ms
        );
    }
    let (what, lost) = match locks {
        [lock] => (lock.name.as_str(), "the lock was lost"),
        _ => ("them", "a lock of the set was lost"),
    };
    eprintln!("leasehold: holding {what} until interrupted (Ctrl-C)");
    tokio::select! {
        _ = interrupts.next() => ExitCode::SUCCESS,
        _ = held.lost.cancelled() => {
            eprintln!("leasehold: {lost}");
            ExitCode::from(exit::LOST)
        }
    }
}

/// `leasehold elect`.
pub async fn elect(
    client: Client,
    name: &str,
    value: &str,
    options: CampaignOptions,
    wait: Wait,
    command: &[String],
) -> ExitCode {
    let leadership = match client.campaign(name, value, options).await {
        Ok(l) => l,
        Err(e) => {
            return refused_held_as(&format!("could not lead {name}"), &e, wait.conflict_exit)
        }
    };
    eprintln!(
        "leasehold: leading {name} as {value:?} (fence {})",
        leadership.fence()
    );
    let held = Held {
        lost: leadership.lost_token(),
        lapse_margin: leadership.lapse_margin(),
        lease_ends: &|| leadership.lease_ends(),
        loss: &|| leadership.loss(),
    };
    let code = run(command, held).await;
    let _ = leadership.resign().await;
    code
}

/// The least time before the lease's end at which the command's process
/// group is SIGKILLed.
const MIN_KILL_MARGIN: Duration = Duration::from_millis(10);

/// How long before the lease's end the command's process group is
/// SIGKILLed: half the client's lapse margin (so a lapsed lock gives the
/// command the other half to stop after SIGTERM), and at least 10 ms.
fn kill_margin(lapse_margin: Duration) -> Duration {
    (lapse_margin / 2).max(MIN_KILL_MARGIN)
}

/// What the command runs under: a lock, or a leadership.
struct Held<'a> {
    /// Cancelled when it is lost, or about to lapse (the loss signal).
    lost: CancellationToken,
    /// How long before the lease's end the client counts it lost.
    lapse_margin: Duration,
    /// When the lease ends on this client's clock.
    lease_ends: &'a (dyn Fn() -> Instant + Sync),
    /// Why it was lost, if known.
    loss: &'a (dyn Fn() -> Option<Loss> + Sync),
}

impl Held<'_> {
    /// When the command's group is SIGKILLed at the latest: the lease's
    /// end less the kill margin.
    fn kill_at(&self) -> Instant {
        let ends = (self.lease_ends)();
        ends.checked_sub(kill_margin(self.lapse_margin))
            .unwrap_or(ends)
    }

    /// Why it was lost, once the loss signal came.
    fn loss_now(&self) -> Loss {
        (self.loss)().unwrap_or(Loss::Lapsed)
    }
}

/// Why the command is being stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stopping {
    /// The lock was lost (or is about to lapse).
    Lost,
    /// This process was interrupted (SIGINT, SIGTERM, SIGHUP).
    Interrupted,
}

/// The signals that ask this process to stop: passed on to the command as
/// SIGTERM (a second one as SIGKILL). The command runs in a process group
/// of its own, so a terminal's Ctrl-C reaches this process only.
struct Interrupts {
    interrupt: unix::Signal,
    terminate: unix::Signal,
    hangup: unix::Signal,
}

impl Interrupts {
    fn listen() -> std::io::Result<Interrupts> {
        Ok(Interrupts {
            interrupt: unix::signal(unix::SignalKind::interrupt())?,
            terminate: unix::signal(unix::SignalKind::terminate())?,
            hangup: unix::signal(unix::SignalKind::hangup())?,
        })
    }

    /// Waits for the next one.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }
}

/// The command's process group (its pid: it leads the group).
#[derive(Clone, Copy)]
struct Group(Pid);

impl Group {
    fn signal(self, sig: Signal) {
        // The group cannot have been reused: its leader is not reaped
        // before the last signal (see `exited`).
        let _ = killpg(self.0, sig);
    }

    /// Waits until the leader has exited, without reaping it: while it is
    /// a zombie its pid, and so the group's id, cannot be reused.
    async fn exited(self) {
        let wait = tokio::task::spawn_blocking(move || loop {
            match waitid(Id::Pid(self.0), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(nix::errno::Errno::EINTR) => continue,
                _ => return,
            }
        });
        let _ = wait.await;
    }
}

/// Runs `command` in a process group of its own until it exits, the lock
/// is lost, or this process is interrupted. Then: SIGTERM to the group at
/// once, and SIGKILL to it at `lease_ends - kill_margin` at the latest (at
/// once after a refused renewal, or a second interrupt). Whatever of the
/// group is left when the command exits is SIGKILLed too.
async fn run(command: &[String], held: Held<'_>) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("leasehold: no command given (put it after --)");
        return ExitCode::from(exit::USAGE);
    };
    let mut interrupts = match Interrupts::listen() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("leasehold: cannot listen for signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true).process_group(0);
    die_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("leasehold: cannot run {program}: {e}");
            return ExitCode::from(127);
        }
    };
    let Some(pid) = child.id() else {
        return status_code(child.wait().await);
    };
    let group = Group(Pid::from_raw(pid as i32));
    let exited = group.exited();
    tokio::pin!(exited);
    let why = tokio::select! {
        _ = &mut exited => None,
        _ = held.lost.cancelled() => Some(Stopping::Lost),
        _ = interrupts.next() => Some(Stopping::Interrupted),
    };
    if let Some(why) = why {
        stop(group, why, &held, &mut interrupts, exited).await;
    }
    // Nothing of the group runs on after the command: the lock is released
    // (or lost) now.
    group.signal(Signal::SIGKILL);
    let status = child.wait().await;
    if held.lost.is_cancelled() {
        ExitCode::from(exit::LOST)
    } else {
        status_code(status)
    }
}

/// Stops the command's group: SIGTERM now, SIGKILL before the lease ends
/// (now if the lock was refused, or on a second interrupt); returns once
/// the group's leader has exited.
async fn stop(
    group: Group,
    mut why: Stopping,
    held: &Held<'_>,
    interrupts: &mut Interrupts,
    mut exited: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) {
    // The deadline as it stands now is the latest one, interrupted or lost
    // (renewals may move it later; a suspend moves it earlier, so it is
    // looked at again while waiting).
    let kill_at = held.kill_at();
    let mut kill_now = false;
    loop {
        match why {
            Stopping::Lost if held.loss_now() == Loss::Refused => {
                eprintln!(
                    "leasehold: the cluster refused to renew the lock: it is gone and another may hold it already; killing the command now"
                );
                kill_now = true;
            }
            Stopping::Lost => eprintln!(
                "leasehold: the lock was lost (no renewal got through in time); stopping the command (SIGTERM), SIGKILL in {} ms if it has not exited ({} ms before the lease ends)",
                held.kill_at().saturating_duration_since(Instant::now()).as_millis(),
                kill_margin(held.lapse_margin).as_millis()
            ),
            Stopping::Interrupted => eprintln!(
                "leasehold: interrupted; stopping the command (SIGTERM), SIGKILL in {} ms if it has not exited (the lock is renewed meanwhile)",
                kill_at.saturating_duration_since(Instant::now()).as_millis()
            ),
        }
        group.signal(Signal::SIGTERM);
        if kill_now {
            break;
        }
        let lost = held.lost.clone();
        let already_lost = lost.is_cancelled();
        tokio::select! {
            _ = &mut exited => return,
            _ = kill_due(held, kill_at) => break,
            _ = lost.cancelled(), if !already_lost => why = Stopping::Lost,
            _ = interrupts.next() => {
                eprintln!("leasehold: interrupted again; killing the command now");
                kill_now = true;
                break;
            }
        }
    }
    if !kill_now {
        eprintln!("leasehold: the command did not stop after SIGTERM");
    }
    group.signal(Signal::SIGKILL);
    let now = Instant::now();
    let ends = (held.lease_ends)();
    match ends.checked_duration_since(now) {
        Some(left) if !left.is_zero() => eprintln!(
            "leasehold: killed the command's process group {} ms before the lease ends",
            left.as_millis()
        ),
        _ => eprintln!(
            "leasehold: killed the command's process group {} ms after the lease ended (this process was held up)",
            now.saturating_duration_since(ends).as_millis()
        ),
    }
    exited.await;
}

/// Resolves at `first`, or earlier if the lease's end (less the kill
/// margin) has moved earlier since (a suspend): looked at every 100 ms.
async fn kill_due(held: &Held<'_>, first: Instant) {
    loop {
        let at = first.min(held.kill_at());
        let now = Instant::now();
        if now >= at {
            return;
        }
        tokio::time::sleep_until(at.min(now + Duration::from_millis(100)).into()).await;
    }
}

/// Has the kernel kill the command if this process dies without stopping
/// it (SIGKILL, a crash): the command must never outlive the lock's keeper.
/// This reaches the command itself only, not what it started (see
/// docs/client.md).
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    let parent = getpid();
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes the prctl(2) and getppid(2) system calls, which are
    // async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            if getppid() != parent {
                // This process died before the signal was asked for.
                return Err(std::io::Error::other("leasehold exited"));
            }
            Ok(())
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
