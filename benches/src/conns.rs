//! `rpc-bench tcp-conns`: the threads an `ours` TCP server runs while it holds many
//! connections (the figure `server_threads_2000_conns` of the benchmark report).
//!
//! The server runs in a child process (this binary re-executed as `rpc-bench serve --system
//! ours` with small rings: 4 slots of 1 KiB, so thousands of connections cost little memory)
//! and has one handler worker. This process raises its `RLIMIT_NOFILE` soft limit to the hard
//! limit (the child does the same), opens `--conns` raw TCP connections, and on each does the
//! HELLO exchange and one unary echo call by hand (`rpc_core::protocol` encodes the frames),
//! keeping every connection open. With all of them open it reads `Threads:` from
//! `/proc/PID/status` of the child. Since the TCP transport serves every connection of an
//! endpoint from one event-loop thread, the figure does not depend on `--conns`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use prost::Message as _;
use rpc_core::protocol::v2::{flags, HELLO_LEN};
use rpc_core::protocol::{Header, Hello, Kind, HEADER_LEN};
use rpc_core::RingConfig;

use crate::cli::ConnsArgs;
use crate::echo::{EchoReply, EchoRequest};
use crate::idle::spawn_ours_server;

/// The child server's ring.
pub const SERVER_RING: RingConfig = RingConfig {
    slot_count: 4,
    slot_size: 1024,
    ..RingConfig::DEFAULT
};

/// Handler workers of the child server (`rpc-bench serve --system ours` runs one).
pub const WORKERS: usize = 1;

/// How long to keep trying to connect while the child server starts.
const STARTUP: Duration = Duration::from_secs(15);

/// What `rpc-bench tcp-conns` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnsResult {
    /// Connections held open during the measurement.
    pub conns: usize,
    /// Threads of the server process with all of them open.
    pub server_threads: usize,
    /// Handler workers among them.
    pub workers: usize,
}

impl ConnsResult {
    /// The one-line JSON object, e.g. `{"server_threads_2000_conns":6,"workers":1}`.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"server_threads_{}_conns\":{},\"workers\":{}}}",
            self.conns, self.server_threads, self.workers
        )
    }
}

/// Raises this process's `RLIMIT_NOFILE` soft limit to its hard limit; returns it.
pub fn raise_nofile() -> Result<u64, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill and setrlimit to read.
    let rc = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            -1
        } else {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim)
        }
    };
    if rc != 0 {
        return Err(format!(
            "cannot raise RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(lim.rlim_cur)
}

/// The number that follows `name` (e.g. `Threads:`) in `/proc/PID/status`, its unit (`kB`)
/// dropped.
pub(crate) fn status_number(pid: u32, name: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {name} line in {path}"))
}

/// The `Threads:` count of `/proc/PID/status`.
pub fn threads_of(pid: u32) -> Result<usize, String> {
    status_number(pid, "Threads:").map(|n| n as usize)
}

/// One raw connection: HELLO exchange, then one echo call, checked; the stream stays open.
fn raw_echo(addr: &str, seq: usize) -> Result<TcpStream, String> {
    let io = |e: std::io::Error| format!("{addr}: {e}");
    let mut stream = TcpStream::connect(addr).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io)?;
    let hello = Hello {
        slot_count: 8,
        slot_size: 4096,
        ..RingConfig::DEFAULT.hello()
    };
    stream.write_all(&hello.to_frame()).map_err(io)?;
    let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
    stream.read_exact(&mut theirs).map_err(io)?;
    Hello::from_frame(&theirs).map_err(|e| format!("the server's HELLO: {e}"))?;

    let payload = format!("connection {seq}").into_bytes();
    let message = EchoRequest {
        payload: payload.clone(),
    }
    .encode_to_vec();
    let frame = Header {
        flags: flags::OPEN | flags::END,
        call_id: 1,
        code: rpc_core::codegen::method_id("/echo.Echo/Echo"),
        message_len: message.len() as u32,
        ..Header::new(Kind::Message)
    }
    .to_frame(&message);
    stream.write_all(&frame).map_err(io)?;
    loop {
        let mut header = [0u8; HEADER_LEN];
        stream.read_exact(&mut header).map_err(io)?;
        let h = Header::decode(&header).map_err(|e| format!("a reply frame: {e}"))?;
        let mut body = vec![0u8; h.segment_len as usize];
        stream.read_exact(&mut body).map_err(io)?;
        if h.kind == Kind::End {
            return Err(format!(
                "connection {seq}: the call ended with status {}",
                h.code
            ));
        }
        if h.kind == Kind::Message && h.has(flags::END) {
            let reply = EchoReply::decode(&body[..]).map_err(|e| format!("the reply: {e}"))?;
            if reply.payload != payload {
                return Err(format!(
                    "connection {seq}: the reply differs from the request"
                ));
            }
            return Ok(stream);
        }
    }
}

/// Runs the measurement.
pub fn run(args: &ConnsArgs) -> Result<ConnsResult, String> {
    raise_nofile()?;
    let (slot_count, slot_size) = (
        SERVER_RING.slot_count.to_string(),
        SERVER_RING.slot_size.to_string(),
    );
    let (addr, mut child) = spawn_ours_server(
        "127.0.0.1",
        &["--slot-count", &slot_count, "--slot-size", &slot_size],
    )?;
    let pid = child.0.id();

    let start = Instant::now();
    let mut conns = Vec::with_capacity(args.conns);
    while conns.is_empty() {
        match raw_echo(&addr, 0) {
            Ok(stream) => conns.push(stream),
            Err(err) => {
                if let Ok(Some(status)) = child.0.try_wait() {
                    return Err(format!("the server exited ({status}) before accepting"));
                }
                if start.elapsed() > STARTUP {
                    return Err(format!("cannot reach the server at {addr}: {err}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    for seq in 1..args.conns {
        conns.push(raw_echo(&addr, seq)?);
    }
    let server_threads = threads_of(pid)?;
    drop(conns);
    Ok(ConnsResult {
        conns: args.conns,
        server_threads,
        workers: WORKERS,
    })
}
