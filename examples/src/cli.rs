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
        let Some(value) = self.take(opt) else {
            return Ok(default.to_owned());
        };
        match value.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(value),
            _ => Err(invalid(format!(
                "invalid value `{value}` for --{}: expected ADDR:PORT, e.g. 127.0.0.1:50051",
                opt.name
            ))),
        }
    }

    fn transport(&mut self) -> Result<Transport, CliError> {
        match self.take(TRANSPORT) {
            None => Ok(Transport::default()),
            Some(value) => value
                .parse()
                .map_err(|e| invalid(format!("invalid value `{value}` for --transport: {e}"))),
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
