//! # rpc-benches: rpc-core measured side by side with a raw TCP ping-pong and tonic
//!
//! The `rpc-bench` binary serves and loads the same echo service (`proto/echo.proto`: a
//! request's `bytes payload` comes back unchanged) in three implementations:
//!
//! | `--system` | what it is | server | load generator |
//! |---|---|---|---|
//! | `ours` | rpc-core, stubs from rpc-codegen ([`ours`]) | handler inline on the completion poller | blocking calls (1 in flight) or a window of `echo_async` futures from one thread |
//! | `tcp` | length-prefixed frames over a blocking socket ([`raw_tcp`]) | one thread per connection | blocking write + read (1 in flight) or a writer and a reader thread |
//! | `tonic` | gRPC over HTTP/2 ([`grpc`]) | multi-threaded tokio runtime | current-thread tokio runtime, N tasks on one channel |
//!
//! Every run uses **one connection**, verifies **every reply** against its request (the
//! payload is pseudo-random with the call's sequence number stamped in, see [`payload`]),
//! makes `--warmup` unmeasured calls first, and keeps `--outstanding` calls in flight. A
//! call's latency runs from just before it is issued until its reply has been read and
//! decoded by the caller. With several calls in flight, the `ours` and `tcp` load
//! generators take replies oldest first, so a reply that overtakes an older one is charged
//! the wait (their servers answer a connection's requests in order, so this is rare);
//! tonic's tasks each await their own call. The percentiles are exact
//! nearest-rank values over all measured calls; `calls_per_s` is successful measured calls
//! over the measured phase's wall time ([`report`]).
//!
//! The wait mode is each system's default: rpc-core's callers park while its poller thread
//! busy-polls for 1 ms after each completion and then sleeps; raw TCP blocks in `read`;
//! tokio parks in `epoll_wait`. Each client sets a 10 s per-call timeout (a read timeout for
//! raw TCP), so a dead server fails the run instead of hanging it.
//!
//! Besides latency and rate:
//!
//! * `rpc-bench idle` ([`idle`]): the CPU an `ours` server (in a child process) burns while
//!   64 connections stay open and quiet, from `/proc/PID/stat`.
//! * `rpc-bench tcp-conns` ([`conns`]): the threads of an `ours` TCP server (in a child
//!   process) holding 2,000 connections, each of which made one call, from
//!   `/proc/PID/status`.
//! * `rpc-bench stream` ([`stream`]): the message rate of one server stream of an `ours`
//!   server with async handlers (`serve --system ours --async`), read by a blocking client.
//! * `serve --system ours --grpc-listen ADDR` also serves the echo service on rpc-core's
//!   standard gRPC face (HTTP/2), which `load --system tonic` (tonic's client) measures like
//!   tonic's own server.
//! * `rpc-bench inproc` ([`inproc`]): N round trips over the in-process transport with
//!   pollers that never busy-poll, to be run under `valgrind --tool=callgrind` twice: the
//!   difference in instructions over the difference in N is the instruction cost of one call.
//! * `cargo bench -p rpc-benches --bench micro`: Criterion micro-benchmarks of the protocol
//!   core's per-message work: `encode` (frame header + prost encoding of a 64-byte request
//!   into a send slot), `decode` (header validation + prost decoding), `dispatch` (a request
//!   frame through `Connection::on_frame` on a server-side core and the response header from
//!   `direct_header`).
//!
//! ```text
//! cargo build --release -p rpc-benches
//! target/release/rpc-bench serve --system ours --listen 127.0.0.1:50060 &
//! target/release/rpc-bench load --system ours --connect 127.0.0.1:50060 \
//!     --size 64 --outstanding 1 --count 20000
//! {"system":"ours","transport":"tcp","size":64,"outstanding":1,"count":20000,"p50_us":..}
//! ```

pub mod cli;
pub mod conns;
pub mod grpc;
pub mod idle;
pub mod inproc;
pub mod ours;
pub mod payload;
pub mod raw_tcp;
pub mod report;
pub mod stream;
pub mod tcp_idle;
pub mod verbs_conns;

/// The `echo` package as rpc-codegen generates it: messages, `echo_client::EchoClient` (and its
/// `blocking` form) and
/// `echo_server::{Echo, EchoServer}` for rpc-core.
pub mod echo {
    include!(concat!(env!("OUT_DIR"), "/ours/echo.rs"));
}

/// The `echo` package as rpc-codegen generates it by default, with async handlers
/// (`echo_server::Echo` has `async fn`s and a `Stream` of responses): the servers of
/// `--async`, `rpc-bench stream` and the gRPC face.
pub mod echo_async {
    include!(concat!(env!("OUT_DIR"), "/ours_async/echo.rs"));
}

/// The `echo` package as tonic-prost-build generates it: messages, `echo_client::EchoClient`
/// and `echo_server::{Echo, EchoServer}` for tonic.
pub mod tonic_echo {
    include!(concat!(env!("OUT_DIR"), "/tonic/echo.rs"));
}

/// Voluntary context switches (each a thread going to sleep, and a wake-up after) so far of
/// this process's threads whose name starts with `prefix` (all of them for `""`; `/proc`
/// cuts names to 15 bytes). A thread that exits during the walk is skipped; `None` where
/// `/proc` cannot be read.
pub fn thread_sleeps(prefix: &str) -> Option<u64> {
    let sleeps = thread_sleeps_by_name()?
        .into_iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, sleeps)| sleeps)
        .sum();
    Some(sleeps)
}

/// Voluntary context switches so far of this process's threads, summed by thread name with
/// its trailing digits cut (`rpc-worker-3` counts as `rpc-worker-`; `/proc` cuts names to 15
/// bytes): which threads sleep, and so cost a wake-up. A thread that exits during the walk
/// is skipped; `None` where `/proc` cannot be read.
pub fn thread_sleeps_by_name() -> Option<std::collections::BTreeMap<String, u64>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut by_name = std::collections::BTreeMap::new();
    for task in tasks.flatten() {
        let (Ok(name), Ok(status)) = (
            std::fs::read_to_string(task.path().join("comm")),
            std::fs::read_to_string(task.path().join("status")),
        ) else {
            continue;
        };
        let sleeps = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse::<u64>().ok());
        if let Some(sleeps) = sleeps {
            let name = name
                .trim_end()
                .trim_end_matches(|c: char| c.is_ascii_digit());
            *by_name.entry(name.to_string()).or_insert(0) += sleeps;
        }
    }
    Some(by_name)
}
