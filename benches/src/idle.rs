//! `rpc-bench idle`: what an `ours` server costs while its connections are open but quiet.
//!
//! The server runs in a child process (this binary re-executed as `rpc-bench serve --system
//! ours`) so that its CPU time can be read apart from the clients'. This process opens the
//! connections (one [`rpc_core::Client`] each, each with its own poller thread), makes one
//! checked echo call on each, waits [`SETTLE`] so that the pollers' post-work busy-polling
//! (1 ms by default) is over, and then reads the child's `utime + stime` from
//! `/proc/PID/stat` before and after `seconds` of idleness. The clock-tick rate comes from
//! `sysconf(_SC_CLK_TCK)` (100 on Linux in practice), so the resolution is 10 ms of CPU time.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rpc_core::{Client, TransportKind};

use crate::cli::IdleArgs;
use crate::echo::echo_client::blocking::EchoClient;
use crate::echo::EchoRequest;
use crate::payload::Payload;

/// Pause between the last call and the start of the measurement.
pub const SETTLE: Duration = Duration::from_millis(500);

/// How long to keep trying to connect while the child server starts.
const STARTUP: Duration = Duration::from_secs(15);

/// The measurement `rpc-bench idle` prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleResult {
    /// The server's CPU time over the idle period, as a percentage of one CPU.
    pub cpu_percent: f64,
    /// This process's (the idle clients') CPU time over the same period, in % of one CPU.
    pub clients_cpu_percent: f64,
    /// How often the clients' poller threads woke (slept again), per second, all together.
    pub client_poller_wakeups_per_second: f64,
    /// Open connections.
    pub connections: usize,
    /// The idle period asked for, in seconds.
    pub seconds: f64,
}

impl IdleResult {
    /// The one-line JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"idle_server_cpu_percent\":{:.3},\"idle_clients_cpu_percent\":{:.3},\"idle_client_poller_wakeups_per_second\":{:.1},\"connections\":{},\"seconds\":{}}}",
            self.cpu_percent,
            self.clients_cpu_percent,
            self.client_poller_wakeups_per_second,
            self.connections,
            self.seconds
        )
    }
}

/// Kills and reaps the child server however the measurement ends.
pub(crate) struct ChildGuard(pub(crate) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on `ip` (bound, read, released: the child binds it right after).
fn free_port(ip: &str) -> Result<u16, String> {
    let listener = TcpListener::bind((ip, 0)).map_err(|e| format!("cannot bind {ip}:0: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot read the bound port: {e}"))
}

/// Clock ticks per second of `/proc/PID/stat` times.
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no memory-safety
    // preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// `utime + stime` of process `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_cpu_ticks(&stat).ok_or_else(|| format!("cannot parse {path}: {stat:?}"))
}

/// `utime + stime` from the text of a `/proc/PID/stat` file (fields 14 and 15; the command
/// name in field 2 may contain spaces and parentheses, so fields are counted after its
/// closing parenthesis).
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 (state), so field k is fields[k - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn transport_arg(kind: TransportKind) -> &'static str {
    kind.as_str()
}

/// Connects, retrying while the child server starts up (or until it has exited).
fn connect_when_up(
    addr: &str,
    transport: TransportKind,
    child: &mut Child,
) -> Result<Client, String> {
    let start = Instant::now();
    loop {
        match crate::ours::connect(addr, transport) {
            Ok(client) => return Ok(client),
            Err(err) => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("the server exited ({status}) before accepting"));
                }
                if start.elapsed() > STARTUP {
                    return Err(format!("cannot connect to the server at {addr}: {err}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Starts `rpc-bench serve --system ours` (this executable) with `extra` arguments as a child
/// listening on a free port of `ip`; returns its address and the child. The port is free
/// when picked, but another socket may take it before the child binds it (the kernel hands
/// the same ephemeral ports out again): a child that exits at once is started again on
/// another port, up to [`BIND_ATTEMPTS`] times.
pub(crate) fn spawn_ours_server(ip: &str, extra: &[&str]) -> Result<(String, ChildGuard), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut failed = String::new();
    for _ in 0..BIND_ATTEMPTS {
        let addr = format!("{ip}:{}", free_port(ip)?);
        let child = Command::new(&exe)
            .args(["serve", "--system", "ours", "--listen", &addr])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the server process: {e}"))?;
        let mut child = ChildGuard(child);
        match exit_at_start(&mut child.0) {
            Some(status) => failed = format!("the server on {addr} exited at once ({status})"),
            None => return Ok((addr, child)),
        }
    }
    Err(failed)
}

/// Times [`spawn_ours_server`] starts a server whose port was taken meanwhile.
const BIND_ATTEMPTS: usize = 5;

/// The child's exit status if it exits within its first 300 ms (it failed to bind).
fn exit_at_start(child: &mut Child) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Sleeps of this process's client poller threads so far (`rpc-poller-client`, cut to 15
/// bytes in `/proc`); 0 where `/proc` cannot be read.
fn client_poller_sleeps() -> u64 {
    crate::thread_sleeps("rpc-poller-clie").unwrap_or(0)
}

/// Runs the measurement.
pub fn run(args: &IdleArgs) -> Result<IdleResult, String> {
    let (addr, mut child) =
        spawn_ours_server(&args.addr, &["--transport", transport_arg(args.transport)])?;
    let pid = child.0.id();

    let payload = Payload::new(64);
    let mut clients = Vec::with_capacity(args.connections);
    for i in 0..args.connections {
        let client = if i == 0 {
            connect_when_up(&addr, args.transport, &mut child.0)?
        } else {
            crate::ours::connect(&addr, args.transport)
                .map_err(|e| format!("connection {i}: cannot connect to {addr}: {e}"))?
        };
        let echo = EchoClient::new(client);
        let seq = i as u64;
        let reply = echo
            .echo(EchoRequest {
                payload: payload.request(seq),
            })
            .map_err(|status| format!("connection {i}: the call failed: {status}"))?
            .into_inner();
        if !payload.matches(seq, &reply.payload) {
            return Err(format!(
                "connection {i}: the reply differs from the request"
            ));
        }
        clients.push(echo);
    }

    std::thread::sleep(SETTLE);
    let ticks_per_s = clock_ticks_per_second();
    let own = std::process::id();
    let (before, own_before, sleeps_before) =
        (cpu_ticks(pid)?, cpu_ticks(own)?, client_poller_sleeps());
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let (after, own_after, sleeps_after) =
        (cpu_ticks(pid)?, cpu_ticks(own)?, client_poller_sleeps());
    let wall = start.elapsed().as_secs_f64();
    if let Ok(Some(status)) = child.0.try_wait() {
        return Err(format!(
            "the server exited ({status}) during the measurement"
        ));
    }
    drop(clients);

    let percent = |ticks: u64| ticks as f64 / ticks_per_s / wall * 100.0;
    Ok(IdleResult {
        cpu_percent: percent(after.saturating_sub(before)),
        clients_cpu_percent: percent(own_after.saturating_sub(own_before)),
        client_poller_wakeups_per_second: sleeps_after.saturating_sub(sleeps_before) as f64 / wall,
        connections: args.connections,
        seconds: args.seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_command_name() {
        let stat = "4242 (rpc bench) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 11 0 0 20 0 \
                    5 0 1000 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(48));
        assert_eq!(parse_cpu_ticks("1 (a) S 1"), None);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(cpu_ticks(std::process::id()).is_ok());
        assert!(clock_ticks_per_second() >= 1.0);
    }
}
