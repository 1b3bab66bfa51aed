//! `rpc-bench inproc`: echo round trips inside one process, for instruction counting.
//!
//! An `ours` echo server listens on `mem:bench` (rpc-core's in-process transport: slot
//! rings in memory, completions through a channel, no system calls on the data path except
//! the wake-ups of sleeping threads), its handler inline on the poller; a client in the same
//! process makes `calls` blocking echo calls and checks every reply.
//!
//! `--async-client` makes the calls through the async client instead, awaited one after
//! another inside a tokio multi-thread runtime's `block_on`, as an async application's
//! `main` makes them.
//!
//! `--pool` runs the handler on the worker pool instead; `--async` serves the async handler
//! rpc-codegen generates by default ([`crate::ours::AsyncEchoService`]: an `async fn` run
//! as a task, whose future finishes on its first poll) instead of the synchronous one. The calls after `--warmup` form the
//! counted window: allocations (through the binary's counting allocator) and the wake-ups the
//! runtime issued (`rpc_core::wakeups_issued`), per call. For those counts `--default-spin`
//! keeps the default spin settings; without it (for callgrind) both pollers are given an idle
//! spin of 0, so they sleep as soon as their queue is empty:
//! with the default 1 ms of busy-polling, the instructions spent spinning would swamp the
//! ones spent working and vary from run to run. The calls carry no timeout (no deadline
//! bookkeeping, no timer wake-ups), and nothing is printed per call. Under
//! `valgrind --tool=callgrind`, `(I(N2) - I(N1)) / (N2 - N1)` over two runs then is the
//! cost of one round trip: building the request, encoding, both protocol cores, the memory
//! transport, dispatch, the handler, the reply and waking the caller.

use std::time::Duration;

use rpc_core::{Client, Execution, MetadataValue, TransportKind};

use crate::cli::InprocArgs;
use crate::echo::echo_client::blocking::EchoClient;
use crate::echo::echo_client::EchoClient as AsyncEchoClient;
use crate::echo::echo_server::EchoServer;
use crate::echo::EchoRequest;
use crate::payload::Payload;

/// The in-process address used.
pub const ADDR: &str = "mem:bench";

/// What a run measured over its window (the calls after the warm-up).
#[derive(Debug, Clone, PartialEq)]
pub struct InprocResult {
    /// Calls that failed or came back mismatched.
    pub failed: u64,
    /// Calls in the counted window.
    pub window: u64,
    /// Heap allocations per call in the window (needs the binary's counting allocator;
    /// `None` without one).
    pub allocations_per_call: Option<f64>,
    /// Thread wake-ups the runtime issued per call in the window.
    pub wakeups_per_call: f64,
    /// Times a thread of the process went to sleep (voluntary context switches, from
    /// `/proc`), per call in the window: each is a wake-up someone paid for, the kernel's
    /// (a completion channel, a timer) included. `None` where `/proc` cannot be read.
    pub sleeps_per_call: Option<f64>,
    /// `sleeps_per_call` by thread name (digits cut, as [`crate::thread_sleeps_by_name`]
    /// gives them), the threads that slept at all in the window.
    pub sleeps_by_thread: Vec<(String, f64)>,
    /// Over verbs: `ibv_post_send` calls and completion-queue polls that returned work, per
    /// message (a call is two: its request and its reply).
    pub verbs_per_message: Option<(f64, f64)>,
}

impl InprocResult {
    /// One flat JSON object.
    pub fn to_json(&self, calls: u64) -> String {
        let allocs = self
            .allocations_per_call
            .map_or("null".to_owned(), |a| format!("{a:.6}"));
        let sleeps = self
            .sleeps_per_call
            .map_or("null".to_owned(), |s| format!("{s:.4}"));
        let verbs = self
            .verbs_per_message
            .map_or(String::new(), |(posts, polls)| {
                format!(",\"posts_per_message\":{posts:.4},\"polls_per_message\":{polls:.4}")
            });
        // Flat keys, one a thread name: `sleeps_per_call_rpc_poller_serv`, say.
        let by_thread: String = self
            .sleeps_by_thread
            .iter()
            .map(|(name, sleeps)| {
                let key: String = name
                    .chars()
                    .map(|c| match c.is_ascii_alphanumeric() {
                        true => c.to_ascii_lowercase(),
                        false => '_',
                    })
                    .collect();
                format!(",\"sleeps_per_call_{}\":{sleeps:.4}", key.trim_matches('_'))
            })
            .collect();
        format!(
            "{{\"calls\":{calls},\"window\":{},\"failed\":{},\"allocations_per_call\":{allocs},\"wakeups_per_call\":{:.4},\"sleeps_per_call\":{sleeps}{by_thread}{verbs}}}",
            self.window, self.failed, self.wakeups_per_call
        )
    }
}

/// Makes `args.calls` echo calls of `args.size` bytes; `allocations` reads the process's
/// allocation count (the binary's global allocator), if it has one.
// Not inlined into `main` (the release profile's LTO would): a stage of the instruction counts
// is measured from its inclusive cost (`bench-report callgrind-stages`).
#[inline(never)]
pub fn run(args: &InprocArgs, allocations: Option<fn() -> u64>) -> Result<InprocResult, String> {
    let spin = |d: Duration| if args.default_spin { None } else { Some(d) };
    let mut server_builder = rpc_core::Server::builder();
    let mut client_builder = Client::builder();
    if let Some(zero) = spin(Duration::ZERO) {
        server_builder = server_builder.idle_spin(zero);
        client_builder = client_builder.idle_spin(zero).spin(zero);
    }
    let execution = if args.pool {
        Execution::WorkerPool
    } else {
        Execution::Inline
    };
    let server_builder = server_builder.workers(1);
    let server_builder = if args.async_handlers {
        server_builder.add_service_with(
            crate::echo_async::echo_server::EchoServer::new(crate::ours::AsyncEchoService),
            execution,
        )
    } else {
        server_builder.add_service_with(EchoServer::new(crate::ours::EchoService), execution)
    };
    // `mem:` always means the memory transport, whatever the kind says.
    let (addr, kind) = match &args.verbs {
        Some(addr) => (addr.as_str(), TransportKind::Verbs),
        None => (ADDR, TransportKind::Tcp),
    };
    let server = server_builder
        .start(addr, kind)
        .map_err(|e| format!("cannot serve on {addr}: {e}"))?;
    let client = client_builder
        .transport(kind)
        .connect(addr)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let echo = EchoClient::new(client);
    let payload = Payload::new(args.size);
    let mut calls = Calls {
        args,
        payload: &payload,
        allocations,
        failed: 0,
        start: None,
    };
    if args.async_client {
        // An async application's main: the calls awaited one after another on the runtime's
        // `block_on` thread, the runtime's workers idle.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
        let mut client = AsyncEchoClient::from(echo.clone());
        runtime.block_on(async {
            for seq in 0..args.calls {
                let request = calls.request(seq);
                let outcome = client.echo(request).await;
                calls.check(seq, outcome);
            }
        });
    } else {
        for seq in 0..args.calls {
            let request = calls.request(seq);
            calls.check(seq, echo.echo(request));
        }
    }
    let Calls { failed, start, .. } = calls;
    let window = args.calls - args.warmup;
    let end = Snapshot::end(allocations);
    let start = start.unwrap_or_else(|| end.clone());
    let per_call = |n: u64| n as f64 / window.max(1) as f64;
    let per_message = |n: u64| n as f64 / (2 * window).max(1) as f64;
    let result = InprocResult {
        failed,
        window,
        allocations_per_call: start
            .allocations
            .zip(end.allocations)
            .map(|(a, b)| per_call(b - a)),
        wakeups_per_call: per_call(end.wakeups - start.wakeups),
        sleeps_per_call: start
            .sleeps()
            .zip(end.sleeps())
            .map(|(a, b)| per_call(b.saturating_sub(a))),
        sleeps_by_thread: end
            .sleeps
            .iter()
            .flatten()
            .map(|(name, &after)| {
                let before = start.sleeps.as_ref().and_then(|s| s.get(name)).copied();
                (
                    name.clone(),
                    per_call(after.saturating_sub(before.unwrap_or(0))),
                )
            })
            .filter(|&(_, per)| per > 0.0)
            .collect(),
        verbs_per_message: args.verbs.as_ref().map(|_| {
            (
                per_message(end.verbs.posts - start.verbs.posts),
                per_message(end.verbs.polls - start.verbs.polls),
            )
        }),
    };
    drop(echo);
    server.shutdown();
    Ok(result)
}

/// The process's counters at the edge of the counted window.
#[derive(Clone)]
struct Snapshot {
    allocations: Option<u64>,
    wakeups: u64,
    /// By thread name ([`crate::thread_sleeps_by_name`]).
    sleeps: Option<std::collections::BTreeMap<String, u64>>,
    verbs: rpc_core::transport::verbs::VerbsStats,
}

impl Snapshot {
    /// The counters at the start of the window: reading `/proc` allocates, so the allocation
    /// count is read after it, and outside the window.
    fn start(allocations: Option<fn() -> u64>) -> Snapshot {
        let sleeps = crate::thread_sleeps_by_name();
        Snapshot {
            wakeups: rpc_core::wakeups_issued(),
            verbs: rpc_core::transport::verbs::verbs_stats(),
            sleeps,
            allocations: allocations.map(|f| f()),
        }
    }

    /// The counters at the end of the window: the allocation count first, before `/proc`.
    fn end(allocations: Option<fn() -> u64>) -> Snapshot {
        let allocations = allocations.map(|f| f());
        Snapshot {
            allocations,
            wakeups: rpc_core::wakeups_issued(),
            verbs: rpc_core::transport::verbs::verbs_stats(),
            sleeps: crate::thread_sleeps_by_name(),
        }
    }

    /// The sleeps of all threads.
    fn sleeps(&self) -> Option<u64> {
        Some(self.sleeps.as_ref()?.values().sum())
    }
}

/// The calls of a run: each one's request, and the tally of their outcomes.
struct Calls<'a> {
    args: &'a InprocArgs,
    payload: &'a Payload,
    allocations: Option<fn() -> u64>,
    failed: u64,
    /// The counters when the window began (at call `args.warmup`).
    start: Option<Snapshot>,
}

impl Calls<'_> {
    /// Call `seq`'s request; the window's counters start before the first counted one.
    fn request(&mut self, seq: u64) -> rpc_core::Request<EchoRequest> {
        if seq == self.args.warmup {
            self.start = Some(Snapshot::start(self.allocations));
        }
        let mut request = rpc_core::Request::new(EchoRequest {
            payload: self.payload.request(seq),
        });
        if self.args.realistic {
            realistic(&mut request, seq);
        }
        request
    }

    /// Counts call `seq` as failed unless it echoed its payload.
    fn check(
        &mut self,
        seq: u64,
        outcome: Result<rpc_core::Response<crate::echo::EchoReply>, rpc_core::Status>,
    ) {
        match outcome.map(rpc_core::Response::into_inner) {
            Ok(reply) if self.payload.matches(seq, &reply.payload) => {}
            Ok(_) => self.failed += 1,
            Err(status) => {
                if self.failed == 0 {
                    eprintln!("rpc-bench inproc: call {seq} failed: {status}");
                }
                self.failed += 1;
            }
        }
    }
}

/// What an application's call usually carries: a deadline, a request id and a credential.
fn realistic(request: &mut rpc_core::Request<EchoRequest>, seq: u64) {
    request.set_timeout(crate::ours::CALL_TIMEOUT);
    let metadata = request.metadata_mut();
    // The id as an application would have it at hand (not formatted through `fmt`).
    let mut id = [b'0'; 16];
    for (i, digit) in id.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[((seq >> (60 - 4 * i)) & 0xf) as usize];
    }
    let id = std::str::from_utf8(&id).expect("hex digits");
    // tonic's way: a value parsed from the id, and the credential's made once.
    metadata.insert("x-request-id", id.parse().expect("hex digits are ASCII"));
    metadata.insert(
        "authorization",
        MetadataValue::from_static("Bearer 3q2+7w=="),
    );
}

#[cfg(test)]
mod tests {
    // One test: every run binds the same in-process address.
    #[test]
    fn round_trips_in_process() {
        for (pool, default_spin, async_handlers, realistic, async_client) in [
            (false, false, false, false, false),
            (false, false, false, true, false),
            (false, true, true, false, false),
            (true, true, true, true, false),
            (false, false, false, false, true),
            (true, true, true, true, true),
        ] {
            let args = crate::cli::InprocArgs {
                calls: 50,
                size: 100,
                warmup: 10,
                pool,
                default_spin,
                async_handlers,
                realistic,
                async_client,
                verbs: None,
            };
            let result = super::run(&args, None).unwrap();
            assert_eq!(result.failed, 0, "{args:?}");
            assert_eq!(result.window, 40);
        }
    }
}
