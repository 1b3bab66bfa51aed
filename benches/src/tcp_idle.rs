//! `rpc-bench tcp-idle`: what an `ours` TCP server at its defaults costs while it holds many
//! idle connections (the figure `idle_server_cpu_percent_10k` of the benchmark report).
//!
//! The server runs in a child process (this binary re-executed as `rpc-bench serve --system
//! ours --transport tcp`, every setting at its default). This process opens `--conns` raw
//! links on one [`TcpEndpoint`] (one I/O thread), `--in-flight` connects at a time, each
//! driven by a protocol core of its own as `rpc-bench verbs-conns` does: one call each (a
//! method the server does not have), the server's keepalive PINGs answered, credits
//! returned. With every link open and [`crate::idle::SETTLE`] past, it reads the child's
//! `utime + stime` before and after `--seconds` of idleness (the links still driven, so the
//! server's paced keepalive runs as it would with live clients) and its resident memory.

use std::time::{Duration, Instant};

use rpc_core::transport::tcp::TcpEndpoint;
use rpc_core::RingConfig;

use crate::cli::TcpIdleArgs;
use crate::conns::status_number;
use crate::idle::{clock_ticks_per_second, cpu_ticks, spawn_ours_server, SETTLE};
use crate::verbs_conns::open_links;

/// The clients' ring: 4 slots of 4 KiB, so that this process holds 10,000 links in little
/// memory.
pub const CLIENT_RING: RingConfig = RingConfig {
    slot_count: 4,
    slot_size: 4096,
    ..RingConfig::DEFAULT
};

/// How long one connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to keep trying to connect while the child server starts.
const STARTUP: Duration = Duration::from_secs(15);

/// What `rpc-bench tcp-idle` prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpIdleResult {
    /// Links open, their call answered, at the end of the idle period.
    pub conns: usize,
    /// Connects that failed.
    pub failed: usize,
    /// Links the server closed.
    pub lost: usize,
    /// Seconds from the first connect to the last call answered.
    pub connect_seconds: f64,
    /// The server's CPU time over the idle period, as a percentage of one CPU.
    pub cpu_percent: f64,
    /// The idle period, in seconds.
    pub seconds: f64,
    /// The server's resident memory with every link open, in bytes.
    pub server_rss: u64,
}

impl TcpIdleResult {
    /// The one-line JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"conns\":{},\"failed\":{},\"lost\":{},\"connect_seconds\":{:.3},\
             \"idle_server_cpu_percent\":{:.3},\"seconds\":{:.3},\"server_rss\":{}}}",
            self.conns,
            self.failed,
            self.lost,
            self.connect_seconds,
            self.cpu_percent,
            self.seconds,
            self.server_rss
        )
    }
}

/// `VmRSS` of `/proc/PID/status`, in bytes.
fn rss_of(pid: u32) -> Result<u64, String> {
    status_number(pid, "VmRSS:").map(|kb| kb * 1024)
}

/// Runs the measurement.
pub fn run(args: &TcpIdleArgs) -> Result<TcpIdleResult, String> {
    let (addr, mut child) = spawn_ours_server("127.0.0.1", &["--transport", "tcp"])?;
    let pid = child.0.id();
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let ep = std::sync::Arc::new(TcpEndpoint::new().map_err(|e| e.to_string())?);
    // The first connect waits for the child to listen.
    let up = Instant::now();
    while let Err(e) = std::net::TcpStream::connect(addr) {
        if let Ok(Some(status)) = child.0.try_wait() {
            return Err(format!("the server exited ({status}) before accepting"));
        }
        if up.elapsed() > STARTUP {
            return Err(format!("the server at {addr} does not accept: {e}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cq = ep.cq();
    let connector = ep.clone();
    let connect = move |id| {
        (connector.connect(addr, CLIENT_RING, id, CONNECT_TIMEOUT)).map_err(|e| e.to_string())
    };
    let start = Instant::now();
    let (mut driver, failed, links) =
        open_links("tcp-idle", cq, (args.conns, args.in_flight), connect)?;
    let connect_seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "rpc-bench tcp-idle: {} links open after {connect_seconds:.1} s ({failed} failed); \
         idle for {} s",
        driver.peers.len(),
        args.seconds
    );
    let settle = Instant::now() + SETTLE;
    driver.drive_until(&links, |_| Instant::now() >= settle)?;
    let before = cpu_ticks(pid)?;
    let began = Instant::now();
    let period = Duration::from_secs_f64(args.seconds);
    driver.drive_until(&links, |_| began.elapsed() >= period)?;
    let after = cpu_ticks(pid)?;
    let seconds = began.elapsed().as_secs_f64();
    let server_rss = rss_of(pid)?;
    let cpu = (after - before) as f64 / clock_ticks_per_second();
    let result = TcpIdleResult {
        conns: driver.peers.len(),
        failed,
        lost: driver.lost,
        connect_seconds,
        cpu_percent: 100.0 * cpu / seconds,
        seconds,
        server_rss,
    };
    eprintln!("rpc-bench tcp-idle: {}", result.to_json());
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_is_one_json_object() {
        let r = TcpIdleResult {
            conns: 10_000,
            failed: 0,
            lost: 1,
            connect_seconds: 12.5,
            cpu_percent: 0.75,
            seconds: 10.0,
            server_rss: 1 << 30,
        };
        assert_eq!(
            r.to_json(),
            "{\"conns\":10000,\"failed\":0,\"lost\":1,\"connect_seconds\":12.500,\
             \"idle_server_cpu_percent\":0.750,\"seconds\":10.000,\"server_rss\":1073741824}"
        );
    }
}
