//! Command-line parsing for the demo binaries: a few `--flag VALUE` options (also written
//! `--flag=VALUE`), `--help`, and clear errors for anything else.
//!
//! ```
//! use rpc_examples::cli::{EchoClientArgs, Transport};
//!
//! let args = EchoClientArgs::parse(
//!     ["--connect", "10.0.0.2:7000", "--transport=verbs", "--size", "4k"].map(String::from),
//!     "127.0.0.1:50052",
//! )
//! .unwrap();
//! assert_eq!(args.client.connect, "10.0.0.2:7000");
//! assert_eq!(args.client.transport, Transport::Verbs);
//! assert_eq!(args.size, 4096);
//! assert_eq!(args.count, 10_000);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::interop::Case;

/// The transport named by `--transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// RDMA verbs when a usable device is present, TCP otherwise.
    #[default]
    Auto,
    /// TCP only.
    Tcp,
    /// RDMA verbs only; fails if no device can be used.
    Verbs,
}

impl Transport {
    /// The name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Tcp => "tcp",
            Transport::Verbs => "verbs",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Transport, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Transport::Auto),
            "tcp" => Ok(Transport::Tcp),
            "verbs" | "rdma" => Ok(Transport::Verbs),
            _ => Err("expected auto, tcp or verbs".to_owned()),
        }
    }
}

impl From<Transport> for rpc_core::TransportKind {
    fn from(t: Transport) -> rpc_core::TransportKind {
        match t {
            Transport::Auto => rpc_core::TransportKind::Auto,
            Transport::Tcp => rpc_core::TransportKind::Tcp,
            Transport::Verbs => rpc_core::TransportKind::Verbs,
        }
    }
}

/// The transport named by `interop-client --transport`: one of this framework's, or gRPC
/// (HTTP/2), which talks to stock gRPC servers through the framework's gRPC face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteropTransport {
    /// This framework's own protocol, over TCP or RDMA verbs.
    Rpc(Transport),
    /// Standard gRPC over HTTP/2.
    Grpc,
}

impl InteropTransport {
    /// The name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            InteropTransport::Rpc(t) => t.name(),
            InteropTransport::Grpc => "grpc",
        }
    }
}

impl fmt::Display for InteropTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for InteropTransport {
    type Err = String;

    fn from_str(s: &str) -> Result<InteropTransport, String> {
        if s.eq_ignore_ascii_case("grpc") {
            return Ok(InteropTransport::Grpc);
        }
        s.parse()
            .map(InteropTransport::Rpc)
            .map_err(|_| "expected tcp, verbs, auto or grpc".to_owned())
    }
}

/// Why the command line was not turned into arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// `--help` (or `-h`) was given: print the usage and exit successfully.
    Help,
    /// The command line is wrong; the message says how.
    Invalid(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Help => f.write_str("help requested"),
            CliError::Invalid(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CliError {}

/// The options of the servers: `--listen ADDR:PORT --transport auto|tcp|verbs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerArgs {
    /// Address to listen on.
    pub listen: String,
    /// Transport to serve on.
    pub transport: Transport,
}

/// The options of the calculator client: `--connect ADDR:PORT --transport auto|tcp|verbs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientArgs {
    /// Server address.
    pub connect: String,
    /// Transport to connect with.
    pub transport: Transport,
}

/// The options of the echo client: [`ClientArgs`] plus the load to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoClientArgs {
    /// Where and how to connect.
    pub client: ClientArgs,
    /// Payload size in bytes (default 64).
    pub size: usize,
    /// Number of measured calls, over all threads (default 10 000).
    pub count: u64,
    /// Number of threads issuing calls, each one at a time (default 1).
    pub concurrency: usize,
}

/// The largest `--size` accepted: 64 MiB.
pub const MAX_SIZE: usize = 64 << 20;
/// The largest `--count` accepted (every call's latency is kept in memory).
pub const MAX_COUNT: u64 = 100_000_000;
/// The largest `--concurrency` accepted.
pub const MAX_CONCURRENCY: usize = 1024;

const TRANSPORT_HELP: &str = "  --transport T         auto (verbs if an RDMA device is usable, else tcp), tcp or\n                        verbs [default: auto]\n";

impl ServerArgs {
    /// Parses the arguments after the program name; `default_listen` is used without
    /// `--listen`.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        default_listen: &str,
    ) -> Result<ServerArgs, CliError> {
        let mut flags = Flags::scan(args, &[LISTEN, TRANSPORT])?;
        Ok(ServerArgs {
            listen: flags.address(LISTEN, default_listen)?,
            transport: flags.transport()?,
        })
    }

    /// The usage text.
    pub fn usage(program: &str, default_listen: &str) -> String {
        format!(
            "usage: {program} [--listen ADDR:PORT] [--transport auto|tcp|verbs]\n\n\
             options:\n\
             \x20 --listen ADDR:PORT    address to listen on [default: {default_listen}]\n\
             {TRANSPORT_HELP}\
             \x20 -h, --help            print this help\n"
        )
    }
}

impl ClientArgs {
    /// Parses the arguments after the program name; `default_connect` is used without
    /// `--connect`.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        default_connect: &str,
    ) -> Result<ClientArgs, CliError> {
        let mut flags = Flags::scan(args, &[CONNECT, TRANSPORT])?;
        Ok(ClientArgs {
            connect: flags.address(CONNECT, default_connect)?,
            transport: flags.transport()?,
        })
    }

    /// The usage text.
    pub fn usage(program: &str, default_connect: &str) -> String {
        format!(
            "usage: {program} [--connect ADDR:PORT] [--transport auto|tcp|verbs]\n\n\
             options:\n\
             \x20 --connect ADDR:PORT   server address [default: {default_connect}]\n\
             {TRANSPORT_HELP}\
             \x20 -h, --help            print this help\n"
        )
    }
}

impl EchoClientArgs {
    /// Parses the arguments after the program name; `default_connect` is used without
    /// `--connect`.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        default_connect: &str,
    ) -> Result<EchoClientArgs, CliError> {
        let mut flags = Flags::scan(args, &[CONNECT, TRANSPORT, SIZE, COUNT, CONCURRENCY])?;
        let size = flags.number(SIZE, 64, 0, MAX_SIZE as u64)?;
        let count = flags.number(COUNT, 10_000, 1, MAX_COUNT)?;
        let concurrency = flags.number(CONCURRENCY, 1, 1, MAX_CONCURRENCY as u64)?;
        Ok(EchoClientArgs {
            client: ClientArgs {
                connect: flags.address(CONNECT, default_connect)?,
                transport: flags.transport()?,
            },
            // Both bounded above by constants that fit in a usize.
            size: size as usize,
            count,
            concurrency: concurrency as usize,
        })
    }

    /// The usage text.
    pub fn usage(program: &str, default_connect: &str) -> String {
        format!(
            "usage: {program} [--connect ADDR:PORT] [--transport auto|tcp|verbs] [--size N]\n\
             \x20      [--count N] [--concurrency N]\n\n\
             options:\n\
             \x20 --connect ADDR:PORT   server address [default: {default_connect}]\n\
             {TRANSPORT_HELP}\
             \x20 --size N              payload bytes per call; k and M suffixes allowed\n\
             \x20                       (4k = 4096) [default: 64, at most 64M]\n\
             \x20 --count N             measured calls, over all threads [default: 10000,\n\
             \x20                       at most 100000000]; about 1% more are made first as\n\
             \x20                       an unmeasured warm-up\n\
             \x20 --concurrency N       threads, each making one call at a time [default: 1]\n\
             \x20 -h, --help            print this help\n"
        )
    }
}

/// The options of `interop-server`: where to listen (`--listen ADDR:PORT`, or `--port N` for
/// every address), over which transport, and the gRPC face (`--grpc-listen ADDR:PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InteropServerArgs {
    /// Where this framework's transport listens (`--listen`); `None` when only the gRPC
    /// face was asked for (it then listens on a free port of 127.0.0.1).
    pub listen: Option<String>,
    /// The transport of `listen`: `--transport`, by default `auto` (`tcp` without
    /// `--listen`).
    pub transport: Transport,
    /// Where the standard gRPC (HTTP/2) face listens, if anywhere: `--grpc-listen`, or
    /// `0.0.0.0:N` from `--port N` (gRPC's interop runners pass `--port` and connect stock
    /// gRPC clients).
    pub grpc_listen: Option<String>,
}

/// The options of `interop-client`: the server, the transport, the cases and their deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct InteropClientArgs {
    /// Server address: `--connect`, or `--server_host` (default 127.0.0.1) with
    /// `--server_port`.
    pub connect: String,
    /// `--transport`, by default `auto` with `--connect` and `grpc` with `--server_port`.
    pub transport: InteropTransport,
    /// The cases to run, in order (`--test_case`: `all`, a name, or `a,b,c`).
    pub cases: Vec<Case>,
    /// Each case's deadline (`--case_timeout_s`, default 10 s).
    pub case_timeout: Duration,
    /// `--extensions=false`: speak plain protocol version 2, offering no extension
    /// (PROTOCOL.md §22), as a peer that knows none would.
    pub extensions: bool,
}

/// The default of `interop-client --case_timeout_s`: 10 s per case.
pub const DEFAULT_CASE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `--case_timeout_s` accepted: an hour.
pub const MAX_CASE_TIMEOUT_S: f64 = 3600.0;

const USE_TLS_HELP: &str = "  --use_tls BOOL         only false is accepted: the interop binaries speak plaintext\n                         (for gRPC's interop runners, which pass --use_tls=false)\n";

impl InteropServerArgs {
    /// Parses the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<InteropServerArgs, CliError> {
        let mut flags = Flags::scan(args, &[LISTEN, PORT, TRANSPORT, USE_TLS, GRPC_LISTEN])?;
        if flags.boolean(USE_TLS)? == Some(true) {
            return Err(invalid(
                "--use_tls=true is not supported: the interop server serves plaintext (the \
                 gRPC face's TLS is ServerBuilder::grpc_tls, and tests/data/tls has test \
                 certificates for it)"
                    .to_owned(),
            ));
        }
        let listen = flags.optional_address(LISTEN)?;
        let port = flags.port(PORT)?;
        let grpc_listen = flags.optional_address(GRPC_LISTEN)?;
        let given_transport = flags.optional_transport()?;
        let grpc_listen = match (grpc_listen, port) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give either --grpc-listen ADDR:PORT or --port N, not both".to_owned(),
                ))
            }
            (Some(addr), None) => Some(addr),
            (None, Some(port)) => Some(format!("0.0.0.0:{port}")),
            (None, None) => None,
        };
        let (listen, transport) = match listen {
            Some(listen) => (Some(listen), given_transport.unwrap_or(Transport::Auto)),
            None if grpc_listen.is_some() => {
                if given_transport.is_some() {
                    return Err(invalid(
                        "--transport applies to --listen, which was not given".to_owned(),
                    ));
                }
                (None, Transport::Tcp)
            }
            None => {
                return Err(invalid(
                    "nothing to serve: give --listen ADDR:PORT, --grpc-listen ADDR:PORT or \
                     --port N"
                        .to_owned(),
                ))
            }
        };
        Ok(InteropServerArgs {
            listen,
            transport,
            grpc_listen,
        })
    }

    /// The usage text.
    pub fn usage(program: &str) -> String {
        format!(
            "usage: {program} [--listen ADDR:PORT] [--transport auto|tcp|verbs]\n\
             \x20      [--grpc-listen ADDR:PORT | --port N] [--use_tls=false]\n\n\
             Serves grpc.testing.TestService (gRPC's interop test server) over this\n\
             framework's protocol and/or standard gRPC (HTTP/2), and prints\n\
             `listening on ADDR:PORT` (and `grpc listening on ADDR:PORT`) once it serves.\n\n\
             options:\n\
             \x20 --listen ADDR:PORT     where this framework's protocol listens (port 0 picks a\n\
             \x20                        free port) [default: 127.0.0.1:0, tcp]\n\
             {TRANSPORT_HELP}\
             \x20 --grpc-listen ADDR:PORT\n\
             \x20                        also serve standard gRPC (HTTP/2) there\n\
             \x20 --port N               serve standard gRPC on every address (0.0.0.0:N), as\n\
             \x20                        gRPC's interop runners expect\n\
             {USE_TLS_HELP}\
             \x20 -h, --help             print this help\n"
        )
    }
}

impl InteropClientArgs {
    /// Parses the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<InteropClientArgs, CliError> {
        let mut flags = Flags::scan(
            args,
            &[
                CONNECT,
                SERVER_HOST,
                SERVER_PORT,
                INTEROP_TRANSPORT,
                TEST_CASE,
                USE_TLS,
                CASE_TIMEOUT,
                EXTENSIONS,
            ],
        )?;
        if flags.boolean(USE_TLS)? == Some(true) {
            return Err(invalid(
                "--use_tls=true is not supported: the interop client speaks plaintext".to_owned(),
            ));
        }
        let connect = flags.optional_address(CONNECT)?;
        let host = flags.take(SERVER_HOST);
        let port = flags.port(SERVER_PORT)?;
        let transport =
            match flags.take(INTEROP_TRANSPORT) {
                None => None,
                Some(value) => Some(value.parse::<InteropTransport>().map_err(|e| {
                    invalid(format!("invalid value `{value}` for --transport: {e}"))
                })?),
            };
        let (connect, transport) = match (connect, host, port) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(invalid(
                    "give either --connect ADDR:PORT or --server_host/--server_port, not both"
                        .to_owned(),
                ))
            }
            (Some(connect), None, None) => (
                connect,
                transport.unwrap_or(InteropTransport::Rpc(Transport::Auto)),
            ),
            (None, host, Some(port)) => {
                let host = host.unwrap_or_else(|| DEFAULT_SERVER_HOST.to_owned());
                // An IPv6 literal needs brackets in front of a port.
                let connect = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                // gRPC's interop runners pass --server_port and run stock gRPC servers.
                (connect, transport.unwrap_or(InteropTransport::Grpc))
            }
            (None, Some(_), None) => {
                return Err(invalid("--server_host needs --server_port N".to_owned()))
            }
            (None, None, None) => return Err(invalid(
                "no server given: --connect ADDR:PORT, or --server_port N (and --server_host H)"
                    .to_owned(),
            )),
        };
        let cases = match flags.take(TEST_CASE) {
            None => Case::ALL.to_vec(),
            Some(value) => parse_cases(&value)?,
        };
        let case_timeout = flags.seconds(CASE_TIMEOUT, DEFAULT_CASE_TIMEOUT, MAX_CASE_TIMEOUT_S)?;
        let extensions = flags.boolean(EXTENSIONS)?.unwrap_or(true);
        Ok(InteropClientArgs {
            connect,
            transport,
            cases,
            case_timeout,
            extensions,
        })
    }

    /// The usage text.
    pub fn usage(program: &str) -> String {
        let names: Vec<&str> = Case::ALL.iter().map(|c| c.name()).collect();
        let names = wrap(&names.join(","), 52, "\n                         ");
        format!(
            "usage: {program} (--connect ADDR:PORT | [--server_host H] --server_port N)\n\
             \x20      [--transport tcp|verbs|auto|grpc] [--test_case all|NAME[,NAME...]]\n\
             \x20      [--case_timeout_s S] [--use_tls=false] [--extensions=false]\n\n\
             Runs gRPC's interop test cases against a grpc.testing.TestService server and\n\
             prints `case NAME: PASS` or `case NAME: FAIL reason` for each, then\n\
             `summary: N passed, M failed`. Exit status: 0 if every case passed, 1 if one\n\
             failed or the server was unreachable, 2 for a bad command line.\n\n\
             options:\n\
             \x20 --connect ADDR:PORT    server address\n\
             \x20 --server_host H        server host name or address [default: {DEFAULT_SERVER_HOST}]\n\
             \x20 --server_port N        server port (with --server_host instead of --connect)\n\
             \x20 --transport T          tcp, verbs, auto (verbs if an RDMA device serves the\n\
             \x20                        address, else tcp) or grpc (standard gRPC over HTTP/2,\n\
             \x20                        to any gRPC server) [default: auto with --connect,\n\
             \x20                        grpc with --server_port]\n\
             \x20 --test_case CASES      all, one case or a comma-separated list [default: all]:\n\
             \x20                        {names}\n\
             \x20 --case_timeout_s S     each case's deadline in seconds; every call of the case\n\
             \x20                        gets what is left of it [default: 10]\n\
             {USE_TLS_HELP}\
             \x20 --extensions BOOL      false: offer no protocol extension (plain version 2)\n\
             \x20                        [default: true]\n\
             \x20 -h, --help             print this help\n"
        )
    }
}

/// The default of `interop-client --server_host`: the IPv4 loopback address. Not
/// `localhost`: the framework's transports connect to the first address a name resolves
/// to, which may be `::1` while the server listens on IPv4 only.
pub const DEFAULT_SERVER_HOST: &str = "127.0.0.1";

/// `all`, or a comma-separated list of case names (in the order given, repeats allowed).
fn parse_cases(value: &str) -> Result<Vec<Case>, CliError> {
    if value == "all" {
        return Ok(Case::ALL.to_vec());
    }
    let mut cases = Vec::new();
    let mut unknown = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name.parse::<Case>() {
            Ok(case) => cases.push(case),
            Err(_) => unknown.push(name),
        }
    }
    if !unknown.is_empty() || cases.is_empty() {
        let known: Vec<&str> = Case::ALL.iter().map(|c| c.name()).collect();
        let what = if unknown.is_empty() {
            "no test case given".to_owned()
        } else {
            format!("unknown test case `{}`", unknown.join("`, `"))
        };
        return Err(invalid(format!(
            "{what} in --test_case; known: all, {}",
            known.join(", ")
        )));
    }
    Ok(cases)
}

/// `text` broken at commas so that no line is longer than `width`, lines joined by `sep`.
fn wrap(text: &str, width: usize, sep: &str) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_inclusive(',') {
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() && line.len() + word.len() > width {
            lines.push(word.to_owned());
        } else {
            line.push_str(word);
        }
    }
    lines.join(sep)
}

/// Parses this process's arguments with `parse` (which gets the arguments after the program
/// name). On `--help` prints `usage` to stdout and exits with status 0; on an error prints it
/// with a hint to stderr and exits with status 2.
pub fn parse_or_exit<T>(usage: &str, parse: impl FnOnce(Vec<String>) -> Result<T, CliError>) -> T {
    let mut args = std::env::args();
    let program = args.next().unwrap_or_default();
    let program = program.rsplit('/').next().unwrap_or_default().to_owned();
    match parse(args.collect()) {
        Ok(parsed) => parsed,
        Err(CliError::Help) => {
            print!("{usage}");
            std::process::exit(0)
        }
        Err(CliError::Invalid(msg)) => {
            eprintln!("{program}: error: {msg}\n(see {program} --help)");
            std::process::exit(2)
        }
    }
}

/// A known option: its name (without `--`) and the placeholder of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Opt {
    name: &'static str,
    value: &'static str,
}

const LISTEN: Opt = Opt {
    name: "listen",
    value: "ADDR:PORT",
};
const CONNECT: Opt = Opt {
    name: "connect",
    value: "ADDR:PORT",
};
const TRANSPORT: Opt = Opt {
    name: "transport",
    value: "auto|tcp|verbs",
};
const SIZE: Opt = Opt {
    name: "size",
    value: "N",
};
const COUNT: Opt = Opt {
    name: "count",
    value: "N",
};
const CONCURRENCY: Opt = Opt {
    name: "concurrency",
    value: "N",
};
const PORT: Opt = Opt {
    name: "port",
    value: "N",
};
const USE_TLS: Opt = Opt {
    name: "use_tls",
    value: "false",
};
const GRPC_LISTEN: Opt = Opt {
    name: "grpc-listen",
    value: "ADDR:PORT",
};
const SERVER_HOST: Opt = Opt {
    name: "server_host",
    value: "H",
};
const SERVER_PORT: Opt = Opt {
    name: "server_port",
    value: "N",
};
const INTEROP_TRANSPORT: Opt = Opt {
    name: "transport",
    value: "tcp|verbs|auto|grpc",
};
const TEST_CASE: Opt = Opt {
    name: "test_case",
    value: "all|NAME[,NAME...]",
};
const CASE_TIMEOUT: Opt = Opt {
    name: "case_timeout_s",
    value: "SECONDS",
};
const EXTENSIONS: Opt = Opt {
    name: "extensions",
    value: "false",
};

/// The options given, each with its value.
struct Flags {
    given: Vec<(Opt, String)>,
}

impl Flags {
    fn scan(args: impl IntoIterator<Item = String>, known: &[Opt]) -> Result<Flags, CliError> {
        let mut given: Vec<(Opt, String)> = Vec::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "-h" || arg == "--help" {
                return Err(CliError::Help);
            }
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(invalid(if arg.starts_with('-') {
                    format!("unknown option `{arg}`")
                } else {
                    format!("unexpected argument `{arg}`: all options are of the form --name VALUE")
                }));
            };
            let (name, inline_value) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (flag, None),
            };
            let Some(opt) = known.iter().copied().find(|o| o.name == name) else {
                return Err(invalid(format!("unknown option `--{name}`")));
            };
            if given.iter().any(|(o, _)| *o == opt) {
                return Err(invalid(format!("option `--{name}` given more than once")));
            }
            let value = match inline_value {
                Some(v) => v,
                None => match args.next() {
                    Some(v) if !v.starts_with("--") => v,
                    _ => {
                        return Err(invalid(format!(
                            "option `--{name}` needs a value: --{name} {}",
                            opt.value
                        )))
                    }
                },
            };
            if value.is_empty() {
                return Err(invalid(format!(
                    "option `--{name}` needs a value: --{name} {}",
                    opt.value
                )));
            }
            given.push((opt, value));
        }
        Ok(Flags { given })
    }

    fn take(&mut self, opt: Opt) -> Option<String> {
        let i = self.given.iter().position(|(o, _)| *o == opt)?;
        Some(self.given.swap_remove(i).1)
    }

    fn address(&mut self, opt: Opt, default: &str) -> Result<String, CliError> {
        Ok(self
            .optional_address(opt)?
            .unwrap_or_else(|| default.to_owned()))
    }

    /// An `ADDR:PORT` value, if the option was given.
    fn optional_address(&mut self, opt: Opt) -> Result<Option<String>, CliError> {
        let Some(value) = self.take(opt) else {
            return Ok(None);
        };
        match value.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Some(value))
            }
            _ => Err(invalid(format!(
                "invalid value `{value}` for --{}: expected ADDR:PORT, e.g. 127.0.0.1:50051",
                opt.name
            ))),
        }
    }

    fn transport(&mut self) -> Result<Transport, CliError> {
        Ok(self.optional_transport()?.unwrap_or_default())
    }

    fn optional_transport(&mut self) -> Result<Option<Transport>, CliError> {
        match self.take(TRANSPORT) {
            None => Ok(None),
            Some(value) => value
                .parse()
                .map(Some)
                .map_err(|e| invalid(format!("invalid value `{value}` for --transport: {e}"))),
        }
    }

    /// A port number (0 to 65535), if the option was given.
    fn port(&mut self, opt: Opt) -> Result<Option<u16>, CliError> {
        let Some(value) = self.take(opt) else {
            return Ok(None);
        };
        match value.parse::<u16>() {
            Ok(port) if value.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(port)),
            _ => Err(invalid(format!(
                "invalid value `{value}` for --{}: expected a port number from 0 to 65535",
                opt.name
            ))),
        }
    }

    /// `true` or `false` (also `1`/`0`, `yes`/`no`), if the option was given.
    fn boolean(&mut self, opt: Opt) -> Result<Option<bool>, CliError> {
        let Some(value) = self.take(opt) else {
            return Ok(None);
        };
        match value.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(Some(true)),
            "false" | "0" | "no" => Ok(Some(false)),
            _ => Err(invalid(format!(
                "invalid value `{value}` for --{}: expected true or false",
                opt.name
            ))),
        }
    }

    /// A positive number of seconds (fractions allowed) up to `max`.
    fn seconds(&mut self, opt: Opt, default: Duration, max: f64) -> Result<Duration, CliError> {
        let Some(value) = self.take(opt) else {
            return Ok(default);
        };
        let name = opt.name;
        match value.parse::<f64>() {
            Ok(s) if s > 0.0 && s <= max => Ok(Duration::from_secs_f64(s)),
            Ok(_) => Err(invalid(format!(
                "invalid value `{value}` for --{name}: must be more than 0 and at most {max}"
            ))),
            Err(_) => Err(invalid(format!(
                "invalid value `{value}` for --{name}: expected a number of seconds such as 10 or 0.5"
            ))),
        }
    }

    /// A whole number with an optional binary `k`/`M` suffix, within `min..=max`.
    fn number(&mut self, opt: Opt, default: u64, min: u64, max: u64) -> Result<u64, CliError> {
        let Some(value) = self.take(opt) else {
            return Ok(default);
        };
        let name = opt.name;
        let (digits, multiplier) = match value.char_indices().last() {
            Some((i, 'k' | 'K')) => (&value[..i], 1 << 10),
            Some((i, 'm' | 'M')) => (&value[..i], 1 << 20),
            _ => (value.as_str(), 1),
        };
        let n = digits
            .parse::<u64>()
            .ok()
            .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.checked_mul(multiplier))
            .ok_or_else(|| {
                invalid(format!(
                    "invalid value `{value}` for --{name}: expected a whole number such as 100, 4k or 1M"
                ))
            })?;
        if n < min {
            return Err(invalid(format!(
                "invalid value `{value}` for --{name}: must be at least {min}"
            )));
        }
        if n > max {
            return Err(invalid(format!(
                "invalid value `{value}` for --{name}: must be at most {max}"
            )));
        }
        Ok(n)
    }
}

fn invalid(msg: String) -> CliError {
    CliError::Invalid(msg)
}

/// Connects a client as the demo clients do: over `args.transport`, with [`CALL_TIMEOUT`](crate::CALL_TIMEOUT) as
/// the default per-call timeout.
pub fn connect(args: &ClientArgs) -> Result<rpc_core::Client, rpc_core::Error> {
    rpc_core::Client::builder()
        .transport(args.transport.into())
        .timeout(crate::CALL_TIMEOUT)
        .connect(&args.connect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn server(s: &str) -> Result<ServerArgs, CliError> {
        ServerArgs::parse(args(s), "127.0.0.1:50051")
    }

    fn echo(s: &str) -> Result<EchoClientArgs, CliError> {
        EchoClientArgs::parse(args(s), "127.0.0.1:50052")
    }

    fn error(r: Result<impl fmt::Debug, CliError>) -> String {
        match r {
            Err(CliError::Invalid(msg)) => msg,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        assert_eq!(
            server("").unwrap(),
            ServerArgs {
                listen: "127.0.0.1:50051".into(),
                transport: Transport::Auto
            }
        );
        let e = echo("").unwrap();
        assert_eq!(e.client.connect, "127.0.0.1:50052");
        assert_eq!((e.size, e.count, e.concurrency), (64, 10_000, 1));
    }

    #[test]
    fn both_value_forms_and_suffixes() {
        let s = server("--listen=0.0.0.0:7000 --transport TCP").unwrap();
        assert_eq!(s.listen, "0.0.0.0:7000");
        assert_eq!(s.transport, Transport::Tcp);
        let e = echo("--connect [::1]:9 --size 1M --count 2k --concurrency=8 --transport verbs")
            .unwrap();
        assert_eq!(e.client.connect, "[::1]:9");
        assert_eq!(e.client.transport, Transport::Verbs);
        assert_eq!((e.size, e.count, e.concurrency), (1 << 20, 2048, 8));
        assert_eq!(echo("--size 0").unwrap().size, 0);
    }

    #[test]
    fn help() {
        assert_eq!(server("--help"), Err(CliError::Help));
        assert_eq!(echo("--size 5 -h").unwrap_err(), CliError::Help);
        let usage = EchoClientArgs::usage("echo-client", "127.0.0.1:50052");
        for flag in [
            "--connect",
            "--transport",
            "--size",
            "--count",
            "--concurrency",
        ] {
            assert!(usage.contains(flag), "{flag}");
        }
    }

    fn interop_server(s: &str) -> Result<InteropServerArgs, CliError> {
        InteropServerArgs::parse(args(s))
    }

    fn interop_client(s: &str) -> Result<InteropClientArgs, CliError> {
        InteropClientArgs::parse(args(s))
    }

    #[test]
    fn interop_server_flags() {
        // --port is the gRPC face's, as stock interop runners expect.
        let a = interop_server("--port 8080 --use_tls=false").unwrap();
        assert_eq!(a.listen, None);
        assert_eq!(a.transport, Transport::Tcp);
        assert_eq!(a.grpc_listen.as_deref(), Some("0.0.0.0:8080"));
        let a = interop_server("--port=0 --listen 192.0.2.1:7 --transport verbs").unwrap();
        assert_eq!(a.listen.as_deref(), Some("192.0.2.1:7"));
        assert_eq!(a.grpc_listen.as_deref(), Some("0.0.0.0:0"));
        assert_eq!(a.transport, Transport::Verbs);
        let a = interop_server("--listen 192.0.2.1:7000").unwrap();
        assert_eq!(a.listen.as_deref(), Some("192.0.2.1:7000"));
        assert_eq!(a.transport, Transport::Auto);
        let a = interop_server("--grpc-listen [::]:50051").unwrap();
        assert_eq!(a.listen, None);
        assert_eq!(a.grpc_listen.as_deref(), Some("[::]:50051"));
        let a = interop_server("--listen=127.0.0.1:1 --grpc-listen=127.0.0.1:2").unwrap();
        assert_eq!(a.grpc_listen.as_deref(), Some("127.0.0.1:2"));

        assert!(error(interop_server("--port 1 --use_tls=true"))
            .starts_with("--use_tls=true is not supported"));
        assert_eq!(
            error(interop_server("--port 1 --use_tls maybe")),
            "invalid value `maybe` for --use_tls: expected true or false"
        );
        assert_eq!(
            error(interop_server("--port 65536")),
            "invalid value `65536` for --port: expected a port number from 0 to 65535"
        );
        assert_eq!(
            error(interop_server("--port +5")),
            "invalid value `+5` for --port: expected a port number from 0 to 65535"
        );
        assert_eq!(
            error(interop_server("--port 1 --grpc-listen 127.0.0.1:2")),
            "give either --grpc-listen ADDR:PORT or --port N, not both"
        );
        assert!(error(interop_server("")).starts_with("nothing to serve"));
        assert!(error(interop_server("--use_tls=false")).starts_with("nothing to serve"));
        assert!(
            error(interop_server("--grpc-listen 127.0.0.1:1 --transport tcp"))
                .starts_with("--transport applies to --listen")
        );
        assert_eq!(
            error(interop_server("--transport grpc --port 1")),
            "invalid value `grpc` for --transport: expected auto, tcp or verbs"
        );
    }

    #[test]
    fn interop_client_flags() {
        // --server_port is how stock interop runners call a client: of a gRPC server.
        let a = interop_client("--server_port 5000").unwrap();
        assert_eq!(a.connect, "127.0.0.1:5000");
        assert_eq!(a.transport, InteropTransport::Grpc);
        assert_eq!(a.cases, Case::ALL);
        assert_eq!(a.case_timeout, DEFAULT_CASE_TIMEOUT);
        let a = interop_client(
            "--server_host ::1 --server_port=5 --test_case=ping_pong,empty_unary \
             --use_tls=false --case_timeout_s 0.5",
        )
        .unwrap();
        assert_eq!(a.connect, "[::1]:5");
        assert_eq!(a.cases, [Case::PingPong, Case::EmptyUnary]);
        assert_eq!(a.case_timeout, Duration::from_millis(500));
        let a = interop_client("--server_host [::1] --server_port 5").unwrap();
        assert_eq!(a.connect, "[::1]:5");
        let a = interop_client("--connect 192.0.2.2:9 --transport verbs --test_case all").unwrap();
        assert_eq!(a.connect, "192.0.2.2:9");
        assert_eq!(a.transport, InteropTransport::Rpc(Transport::Verbs));
        assert_eq!(a.cases.len(), 14);
        let a = interop_client("--connect 192.0.2.2:9").unwrap();
        assert_eq!(a.transport, InteropTransport::Rpc(Transport::Auto));
        assert!(a.extensions, "extensions are offered unless told otherwise");
        let a = interop_client("--connect 192.0.2.2:9 --extensions=false").unwrap();
        assert!(!a.extensions, "a plain version-2 client");
        let a = interop_client("--connect h:9 --transport GRPC").unwrap();
        assert_eq!(a.transport, InteropTransport::Grpc);
        assert_eq!(a.transport.to_string(), "grpc");

        assert!(error(interop_client("--server_port 1 --use_tls=true"))
            .starts_with("--use_tls=true is not supported"));
        assert!(error(interop_client("")).starts_with("no server given"));
        assert_eq!(
            error(interop_client("--server_host h")),
            "--server_host needs --server_port N"
        );
        assert_eq!(
            error(interop_client("--connect h:1 --server_port 2")),
            "give either --connect ADDR:PORT or --server_host/--server_port, not both"
        );
        assert_eq!(
            error(interop_client("--connect h:1 --transport udp")),
            "invalid value `udp` for --transport: expected tcp, verbs, auto or grpc"
        );
        assert!(error(interop_client(
            "--server_port 1 --test_case empty_unary,bogus,x"
        ))
        .starts_with("unknown test case `bogus`, `x` in --test_case; known: all, empty_unary, "));
        assert!(error(interop_client("--server_port 1 --test_case=,"))
            .starts_with("no test case given"));
        for bad in ["0", "-1", "nan", "inf", "3601", "ten"] {
            let e = error(interop_client(&format!(
                "--server_port 1 --case_timeout_s {bad}"
            )));
            assert!(
                e.starts_with(&format!("invalid value `{bad}` for --case_timeout_s")),
                "{e}"
            );
        }
        let usage = InteropClientArgs::usage("interop-client");
        for case in Case::ALL {
            assert!(usage.contains(case.name()), "{case}");
        }
        assert!(usage.lines().all(|l| l.len() <= 90), "{usage}");
    }

    #[test]
    fn clear_errors() {
        assert_eq!(error(server("--port 5")), "unknown option `--port`");
        assert_eq!(error(server("-l 5")), "unknown option `-l`");
        assert_eq!(
            error(server("127.0.0.1:5")),
            "unexpected argument `127.0.0.1:5`: all options are of the form --name VALUE"
        );
        assert_eq!(
            error(server("--listen")),
            "option `--listen` needs a value: --listen ADDR:PORT"
        );
        assert_eq!(
            error(server("--listen --transport tcp")),
            "option `--listen` needs a value: --listen ADDR:PORT"
        );
        assert_eq!(
            error(server("--listen=")),
            "option `--listen` needs a value: --listen ADDR:PORT"
        );
        assert_eq!(
            error(server("--listen localhost")),
            "invalid value `localhost` for --listen: expected ADDR:PORT, e.g. 127.0.0.1:50051"
        );
        assert_eq!(
            error(server("--listen :80")),
            "invalid value `:80` for --listen: expected ADDR:PORT, e.g. 127.0.0.1:50051"
        );
        assert_eq!(
            error(server("--listen h:99999")),
            "invalid value `h:99999` for --listen: expected ADDR:PORT, e.g. 127.0.0.1:50051"
        );
        assert_eq!(
            error(server("--transport udp")),
            "invalid value `udp` for --transport: expected auto, tcp or verbs"
        );
        assert_eq!(
            error(server("--transport tcp --transport verbs")),
            "option `--transport` given more than once"
        );
        assert_eq!(
            error(echo("--size -5")),
            "invalid value `-5` for --size: expected a whole number such as 100, 4k or 1M"
        );
        assert_eq!(
            error(echo("--size +5")),
            "invalid value `+5` for --size: expected a whole number such as 100, 4k or 1M"
        );
        assert_eq!(
            error(echo("--count ten")),
            "invalid value `ten` for --count: expected a whole number such as 100, 4k or 1M"
        );
        assert_eq!(
            error(echo("--count 0")),
            "invalid value `0` for --count: must be at least 1"
        );
        assert_eq!(
            error(echo("--concurrency 5000")),
            "invalid value `5000` for --concurrency: must be at most 1024"
        );
        assert_eq!(
            error(echo("--size 65M")),
            format!("invalid value `65M` for --size: must be at most {MAX_SIZE}")
        );
        assert_eq!(
            error(echo("--count 99999999999999999999")),
            "invalid value `99999999999999999999` for --count: expected a whole number such as 100, 4k or 1M"
        );
        // Options of other programs are unknown here.
        assert_eq!(error(server("--size 5")), "unknown option `--size`");
    }
}
