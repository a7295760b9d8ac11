//! `leasehold`: run nodes (`up`, `serve`), hold locks from the shell
//! (`lock`, `elect`), and look at the cluster (`locks`, `status`).

mod duration;
mod hold;
mod local;
mod member;
mod playground;
mod settings;
mod show;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold_api::AddMemberBody;
use leasehold_client::{AcquireOptions, CampaignOptions, Client, TransportKind};
use leasehold_node::ValidConfig;

/// A cluster lock service.
#[derive(Parser)]
#[command(name = "leasehold", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines look on stderr: `text` (coloured only on a terminal)
    /// or `json` (one object a line). `RUST_LOG` chooses which lines.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "LEASEHOLD_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines, with colour only when stderr is a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

/// The default log filter: openraft's own warnings repeat for every
/// heartbeat to a member that is down; the node logs a member's going and
/// coming back itself (`leasehold_raft::reach`).
const DEFAULT_LOG: &str = "info,openraft=error";

/// Sends log lines to stderr in `format`, filtered by `RUST_LOG` (default
/// [`DEFAULT_LOG`]). A node (`serve`, `up`) writes timestamped lines; a
/// command talking to nodes writes the library's lines as it writes its
/// own, `leasehold: warning: ...`.
fn init_logs(format: LogFormat, node: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_LOG.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text if node => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Text => logs.with_ansi(false).event_format(CommandLine).init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
}

/// A command's log line: `leasehold: LEVEL: message key=value ...`, as the
/// command's own messages read.
struct CommandLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for CommandLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "note",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "leasehold: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The cluster to talk to.
#[derive(clap::Args)]
struct Endpoints {
    /// Nodes to talk to, comma-separated host:port or URLs; the client moves
    /// to the next when one fails.
    #[arg(
        long,
        env = "LEASEHOLD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703"
    )]
    endpoints: Vec<String>,
    /// The token to show the cluster (`Authorization: Bearer`), for a
    /// cluster run with --acl; best given in the environment.
    #[arg(long, env = "LEASEHOLD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The CA (PEM) the nodes' certificates are verified against, for a
    /// cluster run with TLS; bare host:port endpoints are then reached
    /// with https://.
    #[arg(long, env = "LEASEHOLD_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// How long to keep trying while no node can serve, before failing
    /// with why (default 10s; for `member`, 60s; for `status`, how long
    /// each node has to answer, default 1s).
    #[arg(long, value_parser = duration::millis)]
    timeout: Option<u64>,
    /// How calls reach the nodes: `auto` (the binary transport, and HTTP
    /// to a node that does not serve it), `binary` (frames only) or `http`.
    /// `status` and `member` always call over HTTP.
    #[arg(long, value_enum, env = "LEASEHOLD_TRANSPORT", default_value = "auto")]
    transport: Transport,
}

/// `--transport`: which transport the client takes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Transport {
    /// Frames, and HTTP to a node that does not serve them.
    Auto,
    /// Frames only.
    Binary,
    /// HTTP only.
    Http,
}

impl From<Transport> for TransportKind {
    fn from(transport: Transport) -> TransportKind {
        match transport {
            Transport::Auto => TransportKind::Auto,
            Transport::Binary => TransportKind::Binary,
            Transport::Http => TransportKind::Http,
        }
    }
}

impl Endpoints {
    /// `--timeout`, or `default` without it.
    fn timeout_or(&self, default: Duration) -> Duration {
        self.timeout.map_or(default, Duration::from_millis)
    }

    fn client(&self) -> Result<Client, ExitCode> {
        let transport = self.transport.into();
        self.client_to(self.endpoints.clone(), transport)
            .map_err(|e| {
                eprintln!("leasehold: {e}");
                ExitCode::from(hold::exit::USAGE)
            })
    }

    /// A client to `endpoints` over `transport`, with this command's token
    /// and CA.
    fn client_to(
        &self,
        endpoints: Vec<String>,
        transport: TransportKind,
    ) -> Result<Client, String> {
        let mut builder = Client::builder(endpoints).transport(transport);
        if let Some(token) = &self.token {
            builder = builder.token(token);
        }
        if let Some(ca) = &self.tls_ca {
            builder = builder.tls_ca_file(ca).map_err(|e| e.to_string())?;
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(match self.timeout {
            Some(ms) => client.with_retry_for(Duration::from_millis(ms)),
            None => client,
        })
    }
}

/// `-o json`: one JSON document instead of the text for people.
#[derive(clap::Args)]
struct OutputFormat {
    /// The output: text, for people, or json (one document).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

impl OutputFormat {
    fn json(&self) -> bool {
        self.output == Output::Json
    }
}

#[derive(Subcommand)]
enum Command {
    /// Start a local cluster of N nodes on 127.0.0.1, as child processes
    /// that `leasehold chaos` can break, and run until Ctrl-C.
    Up {
        /// How many nodes.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
        nodes: u64,
        /// The first node's port; the others follow. 0: each node on a
        /// port the system chooses (up.json names them).
        #[arg(long, default_value_t = 7701)]
        base_port: u16,
        /// Where the nodes keep their Raft state (default: a temporary
        /// directory, removed on exit).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Arguments added to every node's `serve`, after `--`
        /// (`-- --acl acl.toml`, TLS files, timings).
        #[arg(last = true)]
        serve_args: Vec<String>,
    },
    /// Run one node.
    Serve(Box<local::ServeArgs>),
    /// Break the local cluster of `leasehold up` on purpose: partitions,
    /// slow links, kills, pauses, restarts (docs/harness.md).
    Chaos {
        #[command(subcommand)]
        command: playground::ChaosCommand,
    },
    /// Run a command while holding a lock, or several at once (all or
    /// nothing); stop it if a lock is lost.
    Lock {
        /// The lock's name; several names are granted together or not at
        /// all, first come first served on every name.
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        /// The lease (500ms, 10s, 2m; a bare number is milliseconds),
        /// renewed in the background.
        #[arg(long, default_value = "10000", value_parser = duration::millis)]
        lease: u64,
        /// Wait at most this long for the lock (default: until granted).
        #[arg(long, value_parser = duration::millis, conflicts_with = "no_wait")]
        wait: Option<u64>,
        /// Fail at once if the lock is held (as --wait 0).
        #[arg(short = 'n', long)]
        no_wait: bool,
        /// The exit status when the lock is still held by another at the
        /// end of the wait.
        #[arg(long, value_name = "N", default_value_t = hold::exit::HELD)]
        conflict_exit: u8,
        /// Who holds it, for listings (default: host and pid).
        #[arg(long)]
        holder: Option<String>,
        /// Hold it shared, beside other shared holders (a reader); a
        /// holder without it waits for every reader, and readers that come
        /// after a waiting writer wait behind it.
        #[arg(long, conflicts_with = "permits")]
        shared: bool,
        /// Hold one of N permits of the name (a semaphore: at most N hold
        /// it at once); every holder of the name must ask the same N.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(leasehold_client::Kind::MAX_PERMITS)))]
        permits: Option<u32>,
        /// The lock-delay (at most 1m): if the lease runs out unreleased
        /// (this process died or stalled), the name stays closed this much
        /// longer, so writes it had on their way land before anyone else
        /// starts. A clean exit releases at once.
        #[arg(long, value_name = "DURATION", value_parser = duration::millis)]
        lock_delay: Option<u64>,
        #[command(flatten)]
        endpoints: Endpoints,
        /// The command and its arguments, after `--`; without one, the
        /// lock is held until interrupted (Ctrl-C).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Run a command while this process leads an election.
    Elect {
        /// The election's name.
        name: String,
        /// The leadership lease (500ms, 10s, 2m; a bare number is
        /// milliseconds).
        #[arg(long, default_value = "10000", value_parser = duration::millis)]
        lease: u64,
        /// This candidate's value, shown to observers (default: host and pid).
        #[arg(long)]
        value: Option<String>,
        /// Campaign at most this long (default: until elected).
        #[arg(long, value_parser = duration::millis, conflicts_with = "no_wait")]
        wait: Option<u64>,
        /// Lead at once or give up (as --wait 0).
        #[arg(short = 'n', long)]
        no_wait: bool,
        /// The exit status when another still leads at the end of the wait.
        #[arg(long, value_name = "N", default_value_t = hold::exit::HELD)]
        conflict_exit: u8,
        /// Do not campaign: print the leader, then each new one, until
        /// interrupted.
        #[arg(long, conflicts_with_all = ["wait", "value", "no_wait"])]
        observe: bool,
        #[command(flatten)]
        endpoints: Endpoints,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required_unless_present = "observe")]
        command: Vec<String>,
    },
    /// Show one lock: its holder, node, fence and time left (exit 1 if not
    /// held).
    Get {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        endpoints: Endpoints,
        #[command(flatten)]
        output: OutputFormat,
    },
    /// Release a lock by name, whoever holds it: an operator's call (with
    /// --acl, a token that may lock the name).
    Unlock {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// List the locks held.
    Locks {
        /// Only names starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        #[command(flatten)]
        endpoints: Endpoints,
        #[command(flatten)]
        output: OutputFormat,
    },
    /// Show the speaker a quorum backs, its view of the members and its
    /// last rebuild; exit 69 when no speaker serves.
    Status {
        #[command(flatten)]
        endpoints: Endpoints,
        #[command(flatten)]
        output: OutputFormat,
    },
    /// Add or remove a member (docs/operations.md).
    #[command(subcommand)]
    Member(MemberCommand),
}

/// `leasehold member ...`.
#[derive(Subcommand)]
enum MemberCommand {
    /// Add a member: a learner until it caught up, then a voter. Start it
    /// with `serve --join`, before or after.
    Add {
        /// Its id: never one a member had before.
        id: u64,
        /// Where the members reach it, host:port.
        addr: String,
        #[command(flatten)]
        admin: Admin,
    },
    /// Remove a member (the speaker too: it hands over first).
    Remove {
        /// Its id.
        id: u64,
        #[command(flatten)]
        admin: Admin,
    },
}

/// Where an operator's call goes, and the secret it carries.
#[derive(clap::Args)]
struct Admin {
    #[command(flatten)]
    endpoints: Endpoints,
    /// The cluster token (better given in the environment).
    #[arg(long, env = "LEASEHOLD_CLUSTER_TOKEN", hide_env_values = true)]
    cluster_token: String,
    #[command(flatten)]
    output: OutputFormat,
}

fn whoami() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

async fn dispatch(command: Command) -> ExitCode {
    let result = match command {
        Command::Up {
            nodes,
            base_port,
            data_dir,
            serve_args,
        } => playground::up(nodes, base_port, data_dir, serve_args).await,
        Command::Chaos { command } => {
            if let Some(why) = command.misuse() {
                eprintln!("leasehold chaos: {why}");
                return ExitCode::from(hold::exit::USAGE);
            }
            return match playground::chaos(command).await {
                Ok(done) => {
                    println!("{done}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("leasehold chaos: {e}");
                    ExitCode::from(hold::exit::UNAVAILABLE)
                }
            };
        }
        Command::Serve(args) => {
            if let Err(e) = args.check_members() {
                eprintln!("leasehold: {e}");
                return ExitCode::from(hold::exit::USAGE);
            }
            // A flag value the node cannot run with is bad usage.
            let config = args
                .config()
                .and_then(|config| ValidConfig::try_from(config).map_err(|e| e.to_string()));
            let config = match config {
                Ok(config) => config,
                Err(e) => {
                    eprintln!("leasehold: {e}");
                    return ExitCode::from(hold::exit::USAGE);
                }
            };
            return match local::serve(&args, config).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => {
                    eprintln!("leasehold: {failure}");
                    ExitCode::from(failure.code)
                }
            };
        }
        Command::Lock {
            names,
            lease,
            wait,
            no_wait,
            conflict_exit,
            holder,
            shared,
            permits,
            lock_delay,
            endpoints,
            command,
        } => {
            let client = match endpoints.client() {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Err(e) = hold::check_lease(lease) {
                eprintln!("leasehold: {e}");
                return ExitCode::from(hold::exit::USAGE);
            }
            let mut options = AcquireOptions::default()
                .lease(Duration::from_millis(lease))
                .holder(holder.unwrap_or_else(whoami));
            if shared {
                options = options.shared();
            }
            if let Some(n) = permits {
                options = options.permits(n);
            }
            if let Some(delay) = lock_delay {
                if Duration::from_millis(delay) > leasehold_client::MAX_LOCK_DELAY {
                    eprintln!("leasehold: --lock-delay is at most 1m");
                    return ExitCode::from(hold::exit::USAGE);
                }
                options = options.lock_delay(Duration::from_millis(delay));
            }
            let wait = hold::Wait::from_flags(wait, no_wait, conflict_exit);
            if let [name] = names.as_slice() {
                return hold::lock(client, name, options, wait, &command).await;
            }
            return hold::lock_all(client, &names, options, wait, &command).await;
        }
        Command::Elect {
            name,
            lease,
            value,
            wait,
            no_wait,
            conflict_exit,
            observe,
            endpoints,
            command,
        } => {
            let client = match endpoints.client() {
                Ok(c) => c,
                Err(code) => return code,
            };
            if observe {
                return show::observe(client, &name).await;
            }
            if let Err(e) = hold::check_lease(lease) {
                eprintln!("leasehold: {e}");
                return ExitCode::from(hold::exit::USAGE);
            }
            let wait = hold::Wait::from_flags(wait, no_wait, conflict_exit);
            let options = CampaignOptions {
                lease: Some(Duration::from_millis(lease)),
                give_up_after: wait.bound,
            };
            let value = value.unwrap_or_else(whoami);
            return hold::elect(client, &name, &value, options, wait, &command).await;
        }
        Command::Get {
            name,
            endpoints,
            output,
        } => {
            return match endpoints.client() {
                Ok(c) => show::get(c, &name, output.json()).await,
                Err(code) => code,
            };
        }
        Command::Unlock { name, endpoints } => {
            return match endpoints.client() {
                Ok(c) => show::unlock(c, &name).await,
                Err(code) => code,
            };
        }
        Command::Locks {
            prefix,
            limit,
            endpoints,
            output,
        } => {
            return match endpoints.client() {
                Ok(c) => show::locks(c, &prefix, limit, output.json()).await,
                Err(code) => code,
            };
        }
        Command::Status { endpoints, output } => {
            // An operator's view of every node, as its HTTP routes give it.
            let client_to = |addr| endpoints.client_to(vec![addr], TransportKind::Http).ok();
            let within = Duration::from_millis(endpoints.timeout.unwrap_or(1000));
            return status::status(&endpoints.endpoints, client_to, within, output.json()).await;
        }
        Command::Member(MemberCommand::Add { id, addr, admin }) => {
            let body = AddMemberBody {
                id,
                addr,
                store: None,
            };
            if let Err(e) = leasehold_api::Body::validate(&body) {
                eprintln!("leasehold: {e}");
                return ExitCode::from(hold::exit::USAGE);
            }
            let ca = admin.endpoints.tls_ca.as_deref();
            let (endpoints, token) = (&admin.endpoints.endpoints, &admin.cluster_token);
            let json = admin.output.json();
            let timeout = admin.endpoints.timeout_or(member::DEFAULT_TIMEOUT);
            return member::change(
                endpoints,
                token,
                ca,
                member::Change::Add(body),
                json,
                timeout,
            )
            .await;
        }
        Command::Member(MemberCommand::Remove { id, admin }) => {
            let ca = admin.endpoints.tls_ca.as_deref();
            let (endpoints, token) = (&admin.endpoints.endpoints, &admin.cluster_token);
            let json = admin.output.json();
            let timeout = admin.endpoints.timeout_or(member::DEFAULT_TIMEOUT);
            let change = member::Change::Remove(id);
            return member::change(endpoints, token, ca, change, json, timeout).await;
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `up` could not start its cluster (a port in use, say).
            eprintln!("leasehold: {e}");
            ExitCode::from(hold::exit::UNAVAILABLE)
        }
    }
}

/// The command line, `serve`'s environment variables and `--config` file
/// applied (see [`settings`]).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = Cli::command();
    let usage = |e: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, e + "\n");
    settings::unknown_keys(&command, &args).map_err(usage)?;
    let command = settings::apply(command, &args).map_err(usage)?;
    let matches = command.try_get_matches_from(&args)?;
    Cli::from_arg_matches(&matches)
}

/// The node allocates a little for every request on every worker thread;
/// glibc's allocator serialises those threads on its arena locks (13 % of
/// a speaker's samples at 64 clients), mimalloc keeps a heap per thread.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; bad usage is sysexits' 64.
            return if e.use_stderr() {
                ExitCode::from(hold::exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let node = matches!(cli.command, Command::Serve(_) | Command::Up { .. });
    init_logs(cli.log_format, node);
    let threads = match &cli.command {
        Command::Serve(args) => args.threads,
        _ => None,
    };
    let runtime = match runtime(threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(dispatch(cli.command))
}

/// The process's runtime: `threads` worker threads, or tokio's default (one
/// per core, or `TOKIO_WORKER_THREADS`).
fn runtime(threads: Option<u16>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(usize::from(n));
    }
    builder.enable_all().build()
}
