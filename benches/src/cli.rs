//! The `rpc-bench` command line: one subcommand (`serve`, `load`, `stream`, `idle`, `inproc`,
//! `tcp-conns`) followed
//! by `--flag VALUE` options (also `--flag=VALUE`), `--help` for each, and errors that name
//! the offending option.
//!
//! ```
//! use rpc_benches::cli::{parse, Command, System};
//!
//! let cmd = parse(
//!     ["load", "--system", "tcp", "--connect", "127.0.0.1:7000", "--size", "4k",
//!      "--outstanding", "8", "--count", "1000"].map(String::from),
//! )
//! .unwrap();
//! let Command::Load(load) = cmd else { panic!("not a load command") };
//! assert_eq!(load.system, System::Tcp);
//! assert_eq!(load.params.size, 4096);
//! assert_eq!(load.params.warmup, 10); // count / 100 by default
//! ```

use std::fmt;

use crate::report::LoadParams;
use crate::stream::StreamParams;

/// Which implementation serves or is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// rpc-core with the generated `echo.Echo` stubs.
    Ours,
    /// The raw TCP ping-pong of [`crate::raw_tcp`].
    Tcp,
    /// tonic: gRPC over HTTP/2.
    Tonic,
}

impl System {
    /// The name used on the command line and in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            System::Ours => "ours",
            System::Tcp => "tcp",
            System::Tonic => "tonic",
        }
    }

    fn parse(s: &str) -> Result<System, String> {
        match s {
            "ours" => Ok(System::Ours),
            "tcp" => Ok(System::Tcp),
            "tonic" => Ok(System::Tonic),
            other => Err(format!(
                "--system: unknown system `{other}` (expected ours, tcp or tonic)"
            )),
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `rpc-bench serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    /// What to serve.
    pub system: System,
    /// `ADDR:PORT` to listen on.
    pub listen: String,
    /// Transport of `ours` (`tcp`, `verbs` or `auto`).
    pub transport: rpc_core::TransportKind,
    /// Ring of `ours` (`--slot-count`, `--slot-size`; the rest default).
    pub ring: rpc_core::RingConfig,
    /// `ours`: the async handlers (rpc-codegen's default) instead of the synchronous ones.
    pub async_handlers: bool,
    /// `ours`: also serve the standard gRPC face (HTTP/2) on this `ADDR:PORT`.
    pub grpc_listen: Option<String>,
    /// `ours`: rewrite this file every second with the server's connections, registered
    /// bytes and resident memory (one JSON object).
    pub stats: Option<String>,
}

/// `rpc-bench load`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadArgs {
    /// What to measure.
    pub system: System,
    /// `ADDR:PORT` of the server.
    pub connect: String,
    /// Transport of `ours` (`tcp`, `verbs` or `auto`).
    pub transport: rpc_core::TransportKind,
    /// Size, concurrency and number of calls.
    pub params: LoadParams,
    /// `ours` at 1 outstanding: the async client, each call awaited in a tokio multi-thread
    /// runtime's `block_on`, instead of the blocking one.
    pub async_client: bool,
}

/// `rpc-bench stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamArgs {
    /// `ADDR:PORT` of an `ours` server started with `--async`.
    pub connect: String,
    /// Transport (`tcp`, `verbs` or `auto`).
    pub transport: rpc_core::TransportKind,
    /// Message size, messages of the measured and of the warm-up stream.
    pub params: StreamParams,
}

/// `rpc-bench idle`.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleArgs {
    /// Number of client connections to open (and leave idle).
    pub connections: usize,
    /// Seconds of idleness over which the server's CPU time is measured.
    pub seconds: f64,
    /// Transport of the `ours` server and its clients.
    pub transport: rpc_core::TransportKind,
    /// IP address the child server listens on (a free port is picked).
    pub addr: String,
}

/// `rpc-bench inproc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InprocArgs {
    /// Number of blocking echo calls.
    pub calls: u64,
    /// Payload size in bytes.
    pub size: usize,
    /// Calls before the counted window (allocations, wake-ups).
    pub warmup: u64,
    /// The handler runs on the worker pool instead of inline on the poller.
    pub pool: bool,
    /// Keep the default spin settings (for counting wake-ups) instead of none (for callgrind).
    pub default_spin: bool,
    /// Serve the async handlers (rpc-codegen's default) instead of the synchronous ones.
    pub async_handlers: bool,
    /// Each call as an application makes it: with a deadline and two metadata entries.
    pub realistic: bool,
    /// Call through the async client, awaited inside a tokio multi-thread runtime's
    /// `block_on`, instead of the blocking one.
    pub async_client: bool,
    /// Serve and call over RDMA verbs on this address (`--verbs ADDR:PORT`) instead of the
    /// in-process transport; the result then counts posts and polls per message.
    pub verbs: Option<String>,
}

/// `rpc-bench tcp-conns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnsArgs {
    /// Connections to hold open at once.
    pub conns: usize,
}

/// `rpc-bench tcp-idle`.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpIdleArgs {
    /// Links to open and hold.
    pub conns: usize,
    /// Connects in flight at once.
    pub in_flight: usize,
    /// Seconds of idleness over which the server's CPU time is measured.
    pub seconds: f64,
}

/// `rpc-bench verbs-conns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsConnsArgs {
    /// The verbs server's `ADDR:PORT`.
    pub connect: String,
    /// Links to open.
    pub conns: usize,
    /// Connects in flight at once.
    pub in_flight: usize,
    /// Where to write the result, once every link is open and its call answered.
    pub out: Option<String>,
    /// Keep the links open until this file exists.
    pub hold: Option<String>,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run an echo server until killed.
    Serve(ServeArgs),
    /// Measure latency and call rate against a server.
    Load(LoadArgs),
    /// Measure the message rate of one server stream of ours.
    Stream(StreamArgs),
    /// Measure an idle `ours` server's CPU use.
    Idle(IdleArgs),
    /// Make echo calls over the in-process transport (for instruction counting).
    Inproc(InprocArgs),
    /// Count an `ours` TCP server's threads while it holds many connections.
    TcpConns(ConnsArgs),
    /// Open many verbs links to one server and hold them.
    VerbsConns(VerbsConnsArgs),
    /// Measure an idle `ours` TCP server's CPU use with many connections.
    TcpIdle(TcpIdleArgs),
}

/// Why the command line did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// `--help` was asked for; the text is the usage to print (exit status 0).
    Help(String),
    /// The command line is wrong: the message, then the usage to print (exit status 2).
    Invalid(String, String),
}

/// Top-level usage.
pub const USAGE: &str = "\
rpc-bench: rpc-core next to a raw TCP ping-pong and tonic (gRPC over HTTP/2)

usage:
  rpc-bench serve  --system ours|tcp|tonic --listen ADDR:PORT [--transport tcp|verbs]
                   [--slot-count N --slot-size N] [--async] [--grpc-listen ADDR:PORT]
  rpc-bench load   --system ours|tcp|tonic --connect ADDR:PORT [--transport tcp|verbs]
                   --size N --outstanding N --count N [--warmup N]
  rpc-bench stream --connect ADDR:PORT [--transport tcp|verbs] --size N --count N [--warmup N]
  rpc-bench idle   [--connections 64] [--seconds 10] [--transport tcp] [--addr 127.0.0.1]
  rpc-bench inproc --calls N [--size 64] [--warmup 1000] [--pool] [--default-spin] [--async]
                   [--realistic] [--async-client] [--verbs ADDR:PORT]
  rpc-bench tcp-conns [--conns 2000]
  rpc-bench verbs-conns --connect ADDR:PORT --conns N [--in-flight 16] [--out FILE]
                        [--hold FILE]
  rpc-bench tcp-idle [--conns 10000] [--seconds 10] [--in-flight 16]

`rpc-bench COMMAND --help` describes each command.
";

const SERVE_USAGE: &str = "\
usage: rpc-bench serve --system ours|tcp|tonic --listen ADDR:PORT [--transport tcp|verbs]
                       [--slot-count N --slot-size N] [--async] [--grpc-listen ADDR:PORT]
                       [--stats FILE]

Runs an echo server until it is killed (SIGTERM, SIGKILL, Ctrl-C).
  ours   rpc-core's Server with the generated echo.Echo service, handler inline on the
         completion poller (Execution::Inline); --transport tcp (default), verbs or auto
  tcp    a raw TCP echo: u32 little-endian length + payload frames, one thread per
         connection, blocking reads and writes, TCP_NODELAY
  tonic  tonic's gRPC server (HTTP/2) on a multi-threaded tokio runtime (one worker per CPU)
--slot-count and --slot-size set ours' ring (default 64 slots of 8 KiB).
--async (ours): the handlers rpc-codegen generates by default, `async fn`s (still inline: a
         handler's task is first polled on the poller), with an EchoRepeat that streams
         as fast as flow control allows (what `rpc-bench stream` measures)
--grpc-listen (ours): also serve the standard gRPC face (HTTP/2, plaintext) on ADDR:PORT,
         for stock gRPC clients such as `rpc-bench load --system tonic`
--stats FILE (ours): rewrite FILE every second with one JSON object:
         {\"connections\":..,\"registered_bytes\":..,\"rss_bytes\":..}
A line on stderr says where it listens (port 0 picks a free port).
";

const STREAM_USAGE: &str = "\
usage: rpc-bench stream --connect ADDR:PORT [--transport tcp|verbs] --size N --count N
                        [--warmup N]

Against `rpc-bench serve --system ours --async`: one connection, an unmeasured EchoRepeat
stream of --warmup messages (default count/10), then the measured stream of --count
messages of --size bytes, read with the blocking API; every message is checked against the
request's payload. Prints one JSON line on stdout:
  {\"system\":\"ours\",\"transport\":..,\"kind\":\"server_stream\",\"size\":..,\"count\":..,
   \"received\":..,\"messages_per_s\":..,\"first_message_us\":..,\"errors\":..}
messages_per_s is the measured stream's messages over the time from issuing the call to its
end. Exits with status 1 if a stream failed, ended early or carried a wrong message.
";

const LOAD_USAGE: &str = "\
usage: rpc-bench load --system ours|tcp|tonic --connect ADDR:PORT [--transport tcp|verbs]
                      --size N --outstanding N --count N [--warmup N] [--async-client]

Makes --warmup unmeasured calls (default count/100), then --count measured echo calls of
--size bytes (4k, 64k, 1M accepted) with --outstanding calls in flight on one connection,
checks that every reply equals its request, and prints one JSON line on stdout:
  {\"system\":..,\"transport\":..,\"size\":..,\"outstanding\":..,\"count\":..,\"p50_us\":..,
   \"p99_us\":..,\"p999_us\":..,\"calls_per_s\":..,\"errors\":..}
The percentiles are null if no measured call succeeded. Exits with status 1 if any call
failed or any reply differed from its request.
  ours   outstanding 1: blocking calls (--async-client: the async client's calls awaited
         one after another in a tokio multi-thread runtime's block_on); more: async calls'
         futures from one thread, waiting for the oldest and issuing a new one (a window of N)
  tcp    outstanding 1: blocking write, then blocking read; more: a writer thread keeps N
         requests in flight, a reader thread takes the replies
  tonic  one tokio current-thread runtime; N tasks share one channel (HTTP/2 connection)
--transport applies to ours only (default tcp).
";

const IDLE_USAGE: &str = "\
usage: rpc-bench idle [--connections 64] [--seconds 10] [--transport tcp] [--addr 127.0.0.1]

Starts `rpc-bench serve --system ours` as a child process on a free port of --addr, opens
--connections clients from this process, makes one echo call on each, waits 0.5 s, then
leaves them idle for --seconds and measures the child's CPU time (utime + stime from
/proc/PID/stat). Prints one JSON line:
  {\"idle_server_cpu_percent\":..,\"connections\":..,\"seconds\":..}
where the percentage is CPU seconds / wall seconds x 100.
";

const INPROC_USAGE: &str = "\
usage: rpc-bench inproc --calls N [--size 64] [--warmup 1000] [--pool] [--default-spin]
                       [--async] [--realistic] [--async-client] [--verbs ADDR:PORT]

In one process: an `ours` echo server on mem:bench (the in-process transport), handler
inline (--pool: on the worker pool; --async: the async handler rpc-codegen generates by
default), and a client making N blocking calls of --size bytes (--realistic: each with a
deadline of 10 s and two metadata entries, a request id and a bearer token; --async-client:
the async client, its calls awaited one after another inside a tokio multi-thread runtime's
block_on, as an async application's main makes them). --verbs serves
and calls over RDMA verbs on ADDR:PORT instead (an RDMA device must serve ADDR), and counts
the process's ibv_post_send calls and completion-queue polls per message. Both pollers sleep as soon as
their queue is empty (idle spin 0), so no busy-polling is counted. Prints {\"calls\":N}.
Meant to run under `valgrind --tool=callgrind` with two values of N: the difference of
the instruction counts divided by the difference of N is the cost of one round trip.
";

const CONNS_USAGE: &str = "\
usage: rpc-bench tcp-conns [--conns 2000]

Starts `rpc-bench serve --system ours` with 4 slots of 1 KiB (one handler worker) as a child
process, raises RLIMIT_NOFILE to its hard limit in both processes, opens --conns raw TCP
connections that each do the HELLO exchange and one echo call and stay open, then reads the
child's thread count (Threads: of /proc/PID/status). Prints one JSON line:
  {\"server_threads_2000_conns\":..,\"workers\":1}
(the key names the --conns given).
";

const VERBS_CONNS_USAGE: &str = "\
usage: rpc-bench verbs-conns --connect ADDR:PORT --conns N [--in-flight 16] [--out FILE]
                             [--hold FILE]

Opens --conns verbs links (4 slots of 4 KiB) to the server at ADDR:PORT from one endpoint,
--in-flight connects at a time; on each makes one call (to a method the server does not
have: answered UNIMPLEMENTED), answers the server's keepalive PINGs and returns its credits,
each link driven by the protocol core. When every link is open and answered, prints (and
writes to --out) one JSON line:
  {\"conns\":..,\"failed\":..,\"lost\":..,\"seconds\":..,\"client_registered_bytes\":..}
then, with --hold, keeps the links open until FILE exists.
";

const TCP_IDLE_USAGE: &str = "\
usage: rpc-bench tcp-idle [--conns 10000] [--seconds 10] [--in-flight 16]

Starts `rpc-bench serve --system ours --transport tcp` (every setting at its default) as a
child process and opens --conns raw TCP links to it from one endpoint (4 slots of 4 KiB),
--in-flight connects at a time, each driven by the protocol core: one call (to a method the
server does not have), the server's keepalive PINGs answered, credits returned. With every
link open, measures the child's CPU time over --seconds of idleness (the links still
answering PINGs) and its resident memory. Prints one JSON line:
  {\"conns\":..,\"failed\":..,\"lost\":..,\"connect_seconds\":..,
   \"idle_server_cpu_percent\":..,\"seconds\":..,\"server_rss\":..}
";

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, CliError> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        return Err(CliError::Invalid(
            "no command given".to_owned(),
            USAGE.to_owned(),
        ));
    };
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "-h" | "--help" | "help" => Err(CliError::Help(USAGE.to_owned())),
        "serve" => with_usage(SERVE_USAGE, parse_serve(&rest)),
        "load" => with_usage(LOAD_USAGE, parse_load(&rest)),
        "stream" => with_usage(STREAM_USAGE, parse_stream(&rest)),
        "idle" => with_usage(IDLE_USAGE, parse_idle(&rest)),
        "inproc" => with_usage(INPROC_USAGE, parse_inproc(&rest)),
        "tcp-conns" => with_usage(CONNS_USAGE, parse_conns(&rest)),
        "verbs-conns" => with_usage(VERBS_CONNS_USAGE, parse_verbs_conns(&rest)),
        "tcp-idle" => with_usage(TCP_IDLE_USAGE, parse_tcp_idle(&rest)),
        other => Err(CliError::Invalid(
            format!("unknown command `{other}`"),
            USAGE.to_owned(),
        )),
    }
}

/// Parse failures of one command, before the usage is attached.
enum Failure {
    Help,
    Invalid(String),
}

fn with_usage(usage: &str, result: Result<Command, Failure>) -> Result<Command, CliError> {
    result.map_err(|f| match f {
        Failure::Help => CliError::Help(usage.to_owned()),
        Failure::Invalid(msg) => CliError::Invalid(msg, usage.to_owned()),
    })
}

/// `--flag VALUE` pairs of one command, each flag at most once, only from `allowed`.
struct Options {
    values: Vec<(String, String)>,
}

impl Options {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Options, Failure> {
        let mut values: Vec<(String, String)> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            if arg == "-h" || arg == "--help" {
                return Err(Failure::Help);
            }
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(Failure::Invalid(format!("unexpected argument `{arg}`")));
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name.to_owned(), value.to_owned()),
                None => {
                    i += 1;
                    match args.get(i) {
                        Some(value) => (flag.to_owned(), value.clone()),
                        None => return Err(Failure::Invalid(format!("--{flag} needs a value"))),
                    }
                }
            };
            if !allowed.contains(&name.as_str()) {
                return Err(Failure::Invalid(format!("unknown option --{name}")));
            }
            if values.iter().any(|(n, _)| *n == name) {
                return Err(Failure::Invalid(format!("--{name} given twice")));
            }
            values.push((name, value));
            i += 1;
        }
        Ok(Options { values })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, Failure> {
        self.get(name)
            .ok_or_else(|| Failure::Invalid(format!("--{name} is required")))
    }

    fn number(&self, name: &str) -> Result<Option<u64>, Failure> {
        self.get(name)
            .map(|v| parse_number(v).map_err(|e| Failure::Invalid(format!("--{name}: {e}"))))
            .transpose()
    }

    fn required_number(&self, name: &str) -> Result<u64, Failure> {
        self.required(name)?;
        Ok(self.number(name)?.expect("checked above"))
    }
}

/// A count or size: digits with an optional `k`/`K` (x1024) or `m`/`M` (x1024²) suffix.
fn parse_number(s: &str) -> Result<u64, String> {
    let (digits, factor) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1024),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    n.checked_mul(factor)
        .ok_or_else(|| format!("`{s}` is too large"))
}

fn parse_transport(
    opts: &Options,
    system: Option<System>,
) -> Result<rpc_core::TransportKind, Failure> {
    let Some(name) = opts.get("transport") else {
        return Ok(rpc_core::TransportKind::Tcp);
    };
    let kind: rpc_core::TransportKind = name
        .parse()
        .map_err(|e| Failure::Invalid(format!("--transport: {e}")))?;
    if let Some(system) = system {
        if system != System::Ours && kind != rpc_core::TransportKind::Tcp {
            return Err(Failure::Invalid(format!(
                "--transport {name} applies to --system ours only ({system} runs over TCP)"
            )));
        }
    }
    Ok(kind)
}

fn parse_serve(args: &[String]) -> Result<Command, Failure> {
    let (flags, rest): (Vec<String>, Vec<String>) =
        args.iter().cloned().partition(|a| a == "--async");
    let opts = Options::parse(
        &rest,
        &[
            "system",
            "listen",
            "transport",
            "slot-count",
            "slot-size",
            "grpc-listen",
            "stats",
        ],
    )?;
    let system = System::parse(opts.required("system")?).map_err(Failure::Invalid)?;
    let async_handlers = !flags.is_empty();
    let grpc_listen = opts.get("grpc-listen").map(str::to_owned);
    if system != System::Ours && (async_handlers || grpc_listen.is_some()) {
        return Err(Failure::Invalid(format!(
            "--async and --grpc-listen apply to --system ours only, not {system}"
        )));
    }
    let default = rpc_core::RingConfig::DEFAULT;
    let ring = rpc_core::RingConfig {
        slot_count: ring_value(&opts, "slot-count", default.slot_count)?,
        slot_size: ring_value(&opts, "slot-size", default.slot_size)?,
        ..default
    };
    ring.validate()
        .map_err(|e| Failure::Invalid(e.to_string()))?;
    Ok(Command::Serve(ServeArgs {
        system,
        listen: opts.required("listen")?.to_owned(),
        transport: parse_transport(&opts, Some(system))?,
        ring,
        async_handlers,
        grpc_listen,
        stats: opts.get("stats").map(str::to_owned),
    }))
}

fn ring_value(opts: &Options, name: &str, default: u32) -> Result<u32, Failure> {
    match opts.number(name)? {
        None => Ok(default),
        Some(v) => u32::try_from(v).map_err(|_| Failure::Invalid(format!("--{name} is too large"))),
    }
}

fn parse_verbs_conns(args: &[String]) -> Result<Command, Failure> {
    let opts = Options::parse(args, &["connect", "conns", "in-flight", "out", "hold"])?;
    let conns = opts.required_number("conns")?;
    let in_flight = opts.number("in-flight")?.unwrap_or(16);
    if conns == 0 || in_flight == 0 || in_flight > 1024 {
        return Err(Failure::Invalid(
            "--conns must be at least 1 and --in-flight between 1 and 1024".to_owned(),
        ));
    }
    Ok(Command::VerbsConns(VerbsConnsArgs {
        connect: opts.required("connect")?.to_owned(),
        conns: conns as usize,
        in_flight: in_flight as usize,
        out: opts.get("out").map(str::to_owned),
        hold: opts.get("hold").map(str::to_owned),
    }))
}

fn parse_conns(args: &[String]) -> Result<Command, Failure> {
    let opts = Options::parse(args, &["conns"])?;
    let conns = opts.number("conns")?.unwrap_or(2000);
    if conns == 0 || conns > 100_000 {
        return Err(Failure::Invalid(
            "--conns must be between 1 and 100000".to_owned(),
        ));
    }
    Ok(Command::TcpConns(ConnsArgs {
        conns: conns as usize,
    }))
}

fn parse_load(args: &[String]) -> Result<Command, Failure> {
    let (flags, args): (Vec<String>, Vec<String>) =
        args.iter().cloned().partition(|a| a == "--async-client");
    let async_client = !flags.is_empty();
    let opts = Options::parse(
        &args,
        &[
            "system",
            "connect",
            "transport",
            "size",
            "outstanding",
            "count",
            "warmup",
        ],
    )?;
    let system = System::parse(opts.required("system")?).map_err(Failure::Invalid)?;
    let connect = opts.required("connect")?.to_owned();
    let transport = parse_transport(&opts, Some(system))?;
    let size = usize::try_from(opts.required_number("size")?)
        .map_err(|_| Failure::Invalid("--size is too large".to_owned()))?;
    if size > u32::MAX as usize / 2 {
        return Err(Failure::Invalid("--size is too large".to_owned()));
    }
    let outstanding = opts.required_number("outstanding")?;
    if outstanding == 0 || outstanding > 65_536 {
        return Err(Failure::Invalid(
            "--outstanding must be between 1 and 65536".to_owned(),
        ));
    }
    let count = opts.required_number("count")?;
    if count == 0 {
        return Err(Failure::Invalid("--count must be at least 1".to_owned()));
    }
    let warmup = opts.number("warmup")?.unwrap_or(count / 100);
    if async_client && (system != System::Ours || outstanding != 1) {
        return Err(Failure::Invalid(
            "--async-client is for --system ours at --outstanding 1".to_owned(),
        ));
    }
    Ok(Command::Load(LoadArgs {
        system,
        connect,
        transport,
        params: LoadParams {
            size,
            outstanding: outstanding as usize,
            count,
            warmup,
        },
        async_client,
    }))
}

fn parse_stream(args: &[String]) -> Result<Command, Failure> {
    let opts = Options::parse(args, &["connect", "transport", "size", "count", "warmup"])?;
    let connect = opts.required("connect")?.to_owned();
    let transport = parse_transport(&opts, Some(System::Ours))?;
    let size = usize::try_from(opts.required_number("size")?)
        .map_err(|_| Failure::Invalid("--size is too large".to_owned()))?;
    if size > u32::MAX as usize / 2 {
        return Err(Failure::Invalid("--size is too large".to_owned()));
    }
    let count = opts.required_number("count")?;
    if count == 0 || count > crate::stream::MAX_COUNT {
        return Err(Failure::Invalid(format!(
            "--count must be between 1 and {}",
            crate::stream::MAX_COUNT
        )));
    }
    let warmup = opts
        .number("warmup")?
        .unwrap_or(count / 10)
        .min(crate::stream::MAX_COUNT);
    Ok(Command::Stream(StreamArgs {
        connect,
        transport,
        params: StreamParams {
            size,
            count,
            warmup,
        },
    }))
}

/// `--seconds`, 10 by default.
fn idle_seconds(opts: &Options) -> Result<f64, Failure> {
    match opts.get("seconds") {
        None => Ok(10.0),
        Some(s) => match s.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            _ => Err(Failure::Invalid(format!(
                "--seconds: `{s}` is not a positive number"
            ))),
        },
    }
}

fn parse_tcp_idle(args: &[String]) -> Result<Command, Failure> {
    let opts = Options::parse(args, &["conns", "seconds", "in-flight"])?;
    let conns = opts.number("conns")?.unwrap_or(10_000);
    let in_flight = opts.number("in-flight")?.unwrap_or(16);
    if conns == 0 || conns > 100_000 || in_flight == 0 || in_flight > 1024 {
        return Err(Failure::Invalid(
            "--conns must be between 1 and 100000 and --in-flight between 1 and 1024".to_owned(),
        ));
    }
    Ok(Command::TcpIdle(TcpIdleArgs {
        conns: conns as usize,
        in_flight: in_flight as usize,
        seconds: idle_seconds(&opts)?,
    }))
}

fn parse_idle(args: &[String]) -> Result<Command, Failure> {
    let opts = Options::parse(args, &["connections", "seconds", "transport", "addr"])?;
    let connections = opts.number("connections")?.unwrap_or(64);
    if connections == 0 || connections > 4096 {
        return Err(Failure::Invalid(
            "--connections must be between 1 and 4096".to_owned(),
        ));
    }
    let seconds = idle_seconds(&opts)?;
    Ok(Command::Idle(IdleArgs {
        connections: connections as usize,
        seconds,
        transport: parse_transport(&opts, None)?,
        addr: opts.get("addr").unwrap_or("127.0.0.1").to_owned(),
    }))
}

fn parse_inproc(args: &[String]) -> Result<Command, Failure> {
    let (flags, rest): (Vec<String>, Vec<String>) = args.iter().cloned().partition(|a| {
        [
            "--pool",
            "--default-spin",
            "--async",
            "--realistic",
            "--async-client",
        ]
        .contains(&a.as_str())
    });
    let opts = Options::parse(&rest, &["calls", "size", "warmup", "verbs"])?;
    let size = usize::try_from(opts.number("size")?.unwrap_or(64))
        .map_err(|_| Failure::Invalid("--size is too large".to_owned()))?;
    let calls = opts.required_number("calls")?;
    let warmup = opts.number("warmup")?.unwrap_or(1000).min(calls);
    Ok(Command::Inproc(InprocArgs {
        calls,
        size,
        warmup,
        pool: flags.iter().any(|f| f == "--pool"),
        default_spin: flags.iter().any(|f| f == "--default-spin"),
        async_handlers: flags.iter().any(|f| f == "--async"),
        realistic: flags.iter().any(|f| f == "--realistic"),
        async_client: flags.iter().any(|f| f == "--async-client"),
        verbs: opts.get("verbs").map(str::to_owned),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn serve_defaults_to_tcp() {
        let cmd = parse(args("serve --system ours --listen 127.0.0.1:0")).unwrap();
        assert_eq!(
            cmd,
            Command::Serve(ServeArgs {
                system: System::Ours,
                listen: "127.0.0.1:0".to_owned(),
                transport: rpc_core::TransportKind::Tcp,
                ring: rpc_core::RingConfig::DEFAULT,
                async_handlers: false,
                grpc_listen: None,
                stats: None,
            })
        );
    }

    #[test]
    fn verbs_conns_options() {
        let cmd = parse(args(
            "verbs-conns --connect 192.0.2.2:7 --conns 5000 --in-flight 8 --hold /tmp/h",
        ))
        .unwrap();
        assert_eq!(
            cmd,
            Command::VerbsConns(VerbsConnsArgs {
                connect: "192.0.2.2:7".to_owned(),
                conns: 5000,
                in_flight: 8,
                out: None,
                hold: Some("/tmp/h".to_owned()),
            })
        );
        assert!(
            parse(args("verbs-conns --connect 1.2.3.4:5")).is_err(),
            "--conns needed"
        );
    }

    #[test]
    fn load_options() {
        let cmd = parse(args(
            "load --system=ours --connect 1.2.3.4:5 --transport verbs --size 64k \
             --outstanding 32 --count 20000 --warmup 0",
        ))
        .unwrap();
        let Command::Load(load) = cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(load.transport, rpc_core::TransportKind::Verbs);
        assert_eq!(
            load.params,
            LoadParams {
                size: 65536,
                outstanding: 32,
                count: 20000,
                warmup: 0
            }
        );
    }

    #[test]
    fn errors_and_help() {
        assert!(matches!(
            parse(args("load --system tonic --connect a:1 --transport verbs --size 1 --outstanding 1 --count 1")),
            Err(CliError::Invalid(msg, _)) if msg.contains("--system ours only")
        ));
        assert!(matches!(
            parse(args("load --system ours --connect a:1 --size 1 --count 1")),
            Err(CliError::Invalid(msg, _)) if msg == "--outstanding is required"
        ));
        assert!(matches!(
            parse(args("serve --system grpc --listen a:1")),
            Err(CliError::Invalid(msg, _)) if msg.contains("unknown system")
        ));
        assert!(matches!(
            parse(args("inproc --calls")),
            Err(CliError::Invalid(msg, _)) if msg == "--calls needs a value"
        ));
        assert!(matches!(parse(args("idle --help")), Err(CliError::Help(u)) if u.contains("idle")));
        assert!(matches!(parse(args("--help")), Err(CliError::Help(_))));
        assert!(matches!(parse(args("bench")), Err(CliError::Invalid(..))));
        let Ok(Command::Idle(idle)) = parse(args("idle")) else {
            panic!("idle with defaults")
        };
        assert_eq!((idle.connections, idle.seconds), (64, 10.0));
        assert_eq!(
            parse(args("tcp-conns")),
            Ok(Command::TcpConns(ConnsArgs { conns: 2000 }))
        );
        assert_eq!(
            parse(args("tcp-idle --seconds 5")),
            Ok(Command::TcpIdle(TcpIdleArgs {
                conns: 10_000,
                in_flight: 16,
                seconds: 5.0
            }))
        );
        let Ok(Command::Serve(serve)) = parse(args(
            "serve --system ours --listen a:1 --slot-count 4 --slot-size 1024",
        )) else {
            panic!("serve with a ring")
        };
        assert_eq!((serve.ring.slot_count, serve.ring.slot_size), (4, 1024));
    }

    #[test]
    fn async_face_and_stream() {
        let Ok(Command::Serve(serve)) = parse(args(
            "serve --system ours --async --listen a:1 --grpc-listen 127.0.0.1:0",
        )) else {
            panic!("serve --async --grpc-listen")
        };
        assert!(serve.async_handlers);
        assert_eq!(serve.grpc_listen.as_deref(), Some("127.0.0.1:0"));
        assert!(matches!(
            parse(args("serve --system tonic --listen a:1 --async")),
            Err(CliError::Invalid(msg, _)) if msg.contains("--system ours only")
        ));
        let Ok(Command::Stream(stream)) = parse(args(
            "stream --connect a:1 --transport verbs --size 64 --count 1000",
        )) else {
            panic!("stream")
        };
        assert_eq!(stream.transport, rpc_core::TransportKind::Verbs);
        assert_eq!(
            stream.params,
            StreamParams {
                size: 64,
                count: 1000,
                warmup: 100
            }
        );
        assert!(matches!(
            parse(args("stream --connect a:1 --size 64 --count 0")),
            Err(CliError::Invalid(msg, _)) if msg.starts_with("--count must be")
        ));
        let Ok(Command::Inproc(inproc)) = parse(args("inproc --calls 10 --async --pool")) else {
            panic!("inproc --async")
        };
        assert!(inproc.async_handlers && inproc.pool && !inproc.default_spin);
        assert!(!inproc.realistic);
        let Ok(Command::Inproc(inproc)) = parse(args("inproc --calls 10 --realistic")) else {
            panic!("inproc --realistic")
        };
        assert!(inproc.realistic && !inproc.pool && !inproc.async_handlers);
        assert!(!inproc.async_client);
        let Ok(Command::Inproc(inproc)) = parse(args("inproc --calls 10 --async-client")) else {
            panic!("inproc --async-client")
        };
        assert!(inproc.async_client && !inproc.async_handlers);
        assert_eq!(inproc.verbs, None);
        let Ok(Command::Inproc(inproc)) = parse(args("inproc --calls 10 --verbs 10.0.0.1:7"))
        else {
            panic!("inproc --verbs")
        };
        assert_eq!(inproc.verbs.as_deref(), Some("10.0.0.1:7"));
    }
}
