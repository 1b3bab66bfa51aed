//! The runtime: one poller thread per endpoint drains the completion queue and drives each
//! link's protocol core; requests go to handlers (inline or on the worker pool), responses to
//! the waiting calls.

pub(crate) mod call;
pub mod client;
pub mod conn;
pub(crate) mod endpoint;
pub(crate) mod grpc;
pub(crate) mod held_sends;
pub(crate) mod pool;
pub(crate) mod port;
pub mod server;
pub(crate) mod service;
pub(crate) mod stream;
pub mod streaming;
pub(crate) mod tls_config;
pub(crate) mod transport_select;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Runs blocking `work` on a thread of its own named `name`, for an async caller that must
/// not block its executor (connecting, a graceful shutdown): the future gives `work`'s
/// result, or `None` if the thread ended without one (it panicked). Dropping the future
/// leaves `work` running. If no thread can be started, `work` is dropped unrun.
pub(crate) fn on_own_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<impl std::future::Future<Output = Option<T>>, crate::Error> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _ = done.send(work());
        })?;
    Ok(async move { result.await.ok() })
}

/// A duration in microseconds from the environment variable `name`, else `default`. Lets the
/// spin budgets be tuned per deployment without rebuilding (`RPC_SPIN_US`,
/// `RPC_IDLE_SPIN_US`); builder calls override both.
pub(crate) fn micros_from_env(name: &str, default: u64) -> Duration {
    let us = std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(default);
    Duration::from_micros(us)
}

/// The default memory budget of a server or client (PROTOCOL.md §15): a quarter of the
/// machine's physical memory, at most 1 GiB (1 GiB where the memory cannot be read).
pub fn default_memory_budget() -> usize {
    const GIB: usize = 1 << 30;
    let physical = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    physical.map_or(GIB, |bytes| (bytes / 4).min(GIB))
}

/// How long a message in reassembly may make no progress before it is dropped with
/// RESOURCE_EXHAUSTED (PROTOCOL.md §15): 10 s.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Most keepalive PINGs an endpoint (a server with all its connections, or a client) sends
/// a second: past 1,000 connections each one's keepalive interval stretches to `connections /
/// 1,000` seconds ([`Keepalive::paced`](crate::protocol::v2::Keepalive::paced)), and so does
/// the time to detect a silent peer (that interval plus the keepalive timeout, itself at
/// least the stretched interval).
pub const KEEPALIVE_PINGS_PER_SECOND: u32 = 1000;

/// Counts one wake-up the runtime issues (kept in `rpc_sync`, below the transports, so that
/// every layer counts without reaching up).
pub(crate) use rpc_sync::woke_a_thread;

/// Thread wake-ups the runtime has issued in this process so far (parked callers unparked,
/// sleeping pollers woken, requests handed to the worker pool): what `make bench` reports as
/// `wakeups_per_call`. Not a stable API.
#[doc(hidden)]
pub fn wakeups_issued() -> u64 {
    rpc_sync::wakeups_issued()
}

/// Counters of an endpoint (client or server).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    errors: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    /// Connections of the endpoint whose core watches some call's deadline: a server's
    /// poller then sleeps no longer than a deadline tick.
    watching_deadlines: AtomicUsize,
}

impl Counters {
    /// A connection started (`true`) or stopped watching deadlines.
    pub(crate) fn watching_deadlines(&self, watching: bool) {
        if watching {
            self.watching_deadlines.fetch_add(1, Ordering::Relaxed);
        } else {
            self.watching_deadlines.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether some connection of the endpoint watches a deadline.
    pub(crate) fn deadlines_watched(&self) -> bool {
        self.watching_deadlines.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn sent(&self, n: usize) {
        self.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn received(&self, n: usize) {
        self.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            connect_retries: 0,
        }
    }
}

/// A snapshot of an endpoint's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls made (client) or served (server).
    pub calls: u64,
    /// Calls that ended with a status other than OK.
    pub errors: u64,
    /// Frame bytes posted, headers included.
    pub bytes_sent: u64,
    /// Frame bytes received, headers included.
    pub bytes_received: u64,
    /// Client only: connection attempts its transport started over while connecting and
    /// reconnecting, because set-up packets were lost or a step timed out (verbs: see
    /// `VerbsEndpoint::connect`). Always 0
    /// for servers and for the TCP and in-process transports, which do not retry.
    pub connect_retries: u64,
}

#[cfg(test)]
mod tests;
