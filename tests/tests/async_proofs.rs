//! Async handlers hold no thread while they wait: proved by structure, not by timing.
//!
//! - A handler awaiting a call to a second server leaves its server's only worker free: the
//!   second server answers only after the first has served another call on that worker, so a
//!   handler that blocked the worker would deadlock (a watchdog turns that into a failure).
//! - 10,000 concurrent calls whose handlers each await a 100 ms timer all complete, while the
//!   server process (a child process of the test, so that its thread count is the server's
//!   alone) never has 50 threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures::channel::oneshot;
use futures::future::{FutureExt, Shared};
use rpc_core::{Client, Request, Response, RingConfig, Server, Status, TransportKind};
use rpc_tests::race::{Census, RaceService};
use rpc_tests::scenarios::with_watchdog;
use rpc_tests::testing::gate_client::blocking::GateClient;
use rpc_tests::testing::gate_server::{Gate, GateServer};
use rpc_tests::testing::race_client::blocking::RaceClient;
use rpc_tests::testing::race_server::RaceServer;
use rpc_tests::testing::{SleepRequest, Ticket};

const T: TransportKind = TransportKind::Tcp;

// ----- a handler awaiting a second server ------------------------------------------------

/// What the Gate services of both servers share: the gate, and what the test watches.
struct GateShared {
    /// Completes once `opener` fires; every Hold awaits a clone.
    gate: Shared<oneshot::Receiver<()>>,
    opener: Mutex<Option<oneshot::Sender<()>>>,
    /// Hold handlers that reached the gate.
    holding: AtomicU64,
    /// The threads that polled Relay and Open handlers for the first time.
    threads: Mutex<Vec<String>>,
}

impl GateShared {
    fn new() -> Arc<GateShared> {
        let (opener, gate) = oneshot::channel();
        Arc::new(GateShared {
            gate: gate.shared(),
            opener: Mutex::new(Some(opener)),
            holding: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        })
    }

    fn note_thread(&self) {
        let name = std::thread::current()
            .name()
            .unwrap_or("(unnamed)")
            .to_string();
        self.threads.lock().unwrap().push(name);
    }
}

struct GateService {
    shared: Arc<GateShared>,
    /// Where Relay forwards to.
    downstream: Option<GateClient>,
}

impl Gate for GateService {
    async fn hold(&self, request: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        self.shared.holding.fetch_add(1, Ordering::SeqCst);
        match self.shared.gate.clone().await {
            Ok(()) => Ok(Response::new(request.into_inner())),
            Err(_) => Err(Status::aborted("the gate was dropped unopened")),
        }
    }

    async fn open(&self, request: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        self.shared.note_thread();
        let opener = self.shared.opener.lock().unwrap().take();
        match opener {
            Some(opener) => {
                let _ = opener.send(());
                Ok(Response::new(request.into_inner()))
            }
            None => Err(Status::failed_precondition("the gate is open already")),
        }
    }

    async fn relay(&self, request: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        self.shared.note_thread();
        let Some(downstream) = &self.downstream else {
            return Err(Status::failed_precondition(
                "this server forwards to no one",
            ));
        };
        let answer = rpc_tests::testing::gate_client::GateClient::from(downstream.clone())
            .hold(request.into_inner())
            .await?;
        Ok(Response::new(answer.into_inner()))
    }
}

/// A Gate server with one worker thread: a handler that blocked would block it all.
fn serve_gate(shared: &Arc<GateShared>, downstream: Option<GateClient>) -> Server {
    Server::builder()
        .workers(1)
        .add_service(GateServer::new(GateService {
            shared: Arc::clone(shared),
            downstream,
        }))
        .start("127.0.0.1:0", T)
        .expect("a gate server starts")
}

fn gate_client(server: &Server) -> GateClient {
    GateClient::new(
        Client::builder()
            .transport(T)
            .connect(server.local_addr())
            .expect("connects to a gate server"),
    )
}

/// Server A (one worker) relays 32 calls to server B (one worker), whose handlers answer
/// only once the gate opens; only A's Open opens it, and the test sends Open only once B
/// holds all 32, that is once all 32 relay handlers are suspended in their calls to B. Open
/// then needs A's only worker: it runs only if no relay handler holds that worker. A handler
/// that blocked would deadlock A, and the watchdog fails the test instead of hanging.
#[test]
fn a_handler_awaiting_a_call_to_a_second_server_leaves_the_only_worker_free() {
    with_watchdog(
        "32 relays to a second server on one worker (a hang: a waiting handler kept the worker)",
        Duration::from_secs(30),
        || {
            let shared = GateShared::new();
            let b = serve_gate(&shared, None);
            let a = serve_gate(&shared, Some(gate_client(&b)));
            let client = gate_client(&a);

            const RELAYS: u64 = 32;
            let relays: Vec<_> = (0..RELAYS)
                .map(|id| {
                    rpc_tests::testing::gate_client::GateClient::from(client.clone())
                        .relay(Ticket { id })
                })
                .collect();
            while shared.holding.load(Ordering::SeqCst) < RELAYS {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Every relay handler is now waiting for B, and B for the gate.
            assert_eq!(shared.threads.lock().unwrap().len(), RELAYS as usize);
            client
                .open(Ticket { id: u64::MAX })
                .expect("Open, served by A's only worker while 32 relay handlers wait");
            for (id, relay) in (0..RELAYS).zip(relays) {
                let answer = relay.wait().expect("a relayed call, once the gate opened");
                assert_eq!(answer.into_inner().id, id);
            }
            // Every first poll of a relay handler and Open itself ran on one thread: A's one
            // worker served Open while it had 32 handlers suspended.
            let threads = shared.threads.lock().unwrap().clone();
            assert_eq!(threads.len(), RELAYS as usize + 1);
            assert!(
                threads.iter().all(|t| *t == threads[0]),
                "A's handlers ran on more than its one worker: {threads:?}"
            );
            drop(client);
            a.shutdown();
            b.shutdown();
        },
    );
}

// ----- 10,000 calls awaiting timers, few threads ------------------------------------------

/// Set in the environment of the server process that `timer_server_process` runs as.
const CHILD_ENV: &str = "RPC_TEST_TIMER_SERVER";
/// What the server process prints before its address.
const LISTENING: &str = "timer server listening on ";
/// What it prints before `started finished dropped peak` of its handlers, at its end.
const CENSUS: &str = "timer server census: ";

const CALLS: usize = 10_000;
const CONNECTIONS: usize = 4;
const MAX_THREADS: u64 = 50;

/// The server process of `ten_thousand_concurrent_calls_awaiting_timers_...`: serves Race on
/// 127.0.0.1 over TCP until its stdin closes (the test closes it, or dies), then prints its
/// handlers' census. Does nothing unless started by that test.
#[test]
#[ignore = "the server process of ten_thousand_concurrent_calls_awaiting_timers_need_fewer_than_50_server_threads"]
fn timer_server_process() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let census = Census::new();
    let server = Server::builder()
        // Every call of every connection open at once: 10,000 concurrent calls.
        .ring(RingConfig {
            max_calls: (CALLS / CONNECTIONS) as u32,
            ..RingConfig::DEFAULT
        })
        .workers(2)
        // All 10,000 requests may arrive before a worker picks the first one up; the default
        // bound (4,096) would answer the rest UNAVAILABLE, as documented.
        .max_queued(CALLS)
        .add_service(RaceServer::new(RaceService::new(&census)))
        .start("127.0.0.1:0", T)
        .expect("the timer server starts");
    println!("{LISTENING}{}", server.local_addr());
    std::io::stdout().flush().expect("stdout");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    server.shutdown();
    println!(
        "{CENSUS}{} {} {} {}",
        census.started(),
        census.finished(),
        census.dropped(),
        census.peak()
    );
    std::io::stdout().flush().expect("stdout");
}

/// The `Threads:` line of /proc/PID/status (`None` once the process is gone).
fn threads_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Waits for the line with `marker` (the server process's output is read on a thread; the
/// watchdog bounds the wait) and returns what follows it. The marker may not start the line:
/// libtest prints `test NAME ... ` before the test's first output.
fn line_after(lines: &mpsc::Receiver<String>, marker: &str) -> String {
    loop {
        match lines.recv() {
            Ok(line) => {
                if let Some((_, rest)) = line.split_once(marker) {
                    return rest.trim().to_string();
                }
            }
            Err(_) => panic!("the server process ended without printing {marker:?}"),
        }
    }
}

/// 10,000 calls to handlers that each await a 100 ms futures-timer timer, all outstanding at
/// once over 4 TCP connections, driven by the test thread alone (one `join_all` of the
/// calls' futures). The server is a child process, so /proc shows its threads alone: sampled
/// throughout the load, they stay below 50, whereas handlers that blocked a thread for their
/// 100 ms would need either 10,000 threads or, on its 2 workers, 500 s (past the watchdog).
#[test]
fn ten_thousand_concurrent_calls_awaiting_timers_need_fewer_than_50_server_threads() {
    with_watchdog(
        "10,000 calls awaiting 100 ms timers",
        Duration::from_secs(90),
        || {
            let exe = std::env::current_exe().expect("the test executable");
            let mut child = Command::new(exe)
                .args([
                    "--exact",
                    "timer_server_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, "1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start the server process");
            // Dropped when this closure ends, even by a panic: the server process then reads
            // the end of its stdin and exits.
            let stdin = child.stdin.take().expect("piped stdin");
            let stdout = child.stdout.take().expect("piped stdout");
            let (tx, lines) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            let addr = line_after(&lines, LISTENING);
            let pid = child.id();
            let idle_threads = threads_of(pid).expect("the server process's thread count");

            let clients: Vec<RaceClient> = (0..CONNECTIONS)
                .map(|_| {
                    let client = Client::builder()
                        .transport(T)
                        // A call that never ends fails instead of hanging.
                        .timeout(Duration::from_secs(60))
                        .connect(&addr)
                        .expect("connects to the server process");
                    RaceClient::new(client)
                })
                .collect();

            let sampling = Arc::new(AtomicBool::new(true));
            let sampler = {
                let sampling = Arc::clone(&sampling);
                std::thread::spawn(move || {
                    let mut max = 0;
                    while sampling.load(Ordering::SeqCst) {
                        max = max.max(threads_of(pid).unwrap_or(0));
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    max
                })
            };
            let nap = SleepRequest {
                millis: 100,
                micros: 0,
            };
            let calls: Vec<_> = (0..CALLS)
                .map(|i| {
                    rpc_tests::testing::race_client::RaceClient::from(
                        clients[i % CONNECTIONS].clone(),
                    )
                    .nap(nap)
                })
                .collect();
            let results = futures::executor::block_on(futures::future::join_all(calls));
            sampling.store(false, Ordering::SeqCst);
            let max_threads = sampler.join().expect("the sampler");

            let failed: Vec<&Status> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            assert!(
                failed.is_empty(),
                "{} of {CALLS} calls failed, the first with {}",
                failed.len(),
                failed[0]
            );
            assert!(
                max_threads < MAX_THREADS,
                "the server process had {max_threads} threads under load \
                 ({idle_threads} idle): async handlers must not take a thread each"
            );

            drop(clients);
            drop(stdin);
            let census = line_after(&lines, CENSUS);
            let counts: Vec<u64> = census
                .split_whitespace()
                .map(|n| n.parse().expect("a count"))
                .collect();
            let [started, finished, dropped, peak] = counts[..] else {
                panic!("a census of four counts, not {census:?}");
            };
            assert_eq!(
                (started, finished, dropped),
                (CALLS as u64, CALLS as u64, 0),
                "every handler started once and ran to its end"
            );
            let status = child.wait().expect("the server process ends");
            assert!(status.success(), "the server process failed: {status}");
            eprintln!(
                "{CALLS} calls: server threads {idle_threads} idle, at most {max_threads} \
                 under load; at most {peak} handlers waiting at once"
            );
        },
    );
}
