//! Race stress tests over TCP, each looping many times through a race and each under a
//! watchdog (a hang fails the test process with a message instead of stalling CI):
//!
//! - replies racing their deadlines end OK or DEADLINE_EXCEEDED;
//! - a client cancel (a dropped call future or response stream) racing the handler's
//!   completion leaves no handler behind;
//! - a disconnect mid-call and mid-stream (the server aborted or shut down, the client
//!   dropped, the client's process killed) ends every pending call with an error, and leaves
//!   no handler behind on the server;
//! - a slow reader of an endless stream holds the server's producer to a window's worth of
//!   messages.
//!
//! "No handler behind" is checked with the server's handler census (`rpc_tests::race`):
//! every handler future (a Flood call's response stream) is counted from its start to its
//! drop, so a future that was neither finished nor dropped shows as live.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use futures::future::{self, Either};
use futures_timer::Delay;
use rpc_core::protocol::Connection;
use rpc_core::{Client, Code, Request, RingConfig, Server, Status, Streaming, TransportKind};
use rpc_tests::race::{
    check_message, flood, read_to_end, restart_at_the_same_address, serve_again,
    until_a_call_gets_through, Census, RaceService,
};
use rpc_tests::scenarios::{payload, with_watchdog};
use rpc_tests::testing::race_client::blocking::RaceClient;
use rpc_tests::testing::race_server::RaceServer;
use rpc_tests::testing::{Payload, SleepRequest};

const T: TransportKind = TransportKind::Tcp;

/// How long handlers may take to be finished or dropped once their calls ended: a bound for
/// a leak (it takes microseconds), generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(20);

fn serve(census: &Arc<Census>) -> Server {
    Server::builder()
        .workers(4)
        .add_service(RaceServer::new(RaceService::new(census)))
        .start("127.0.0.1:0", T)
        .expect("a server starts")
}

fn connect_with(server: &Server, ring: RingConfig) -> RaceClient {
    let client = Client::builder()
        .transport(T)
        .ring(ring)
        .connect(server.local_addr())
        .expect("connects");
    RaceClient::new(client)
}

fn connect(server: &Server) -> RaceClient {
    connect_with(server, RingConfig::DEFAULT)
}

fn nap(micros: u32) -> SleepRequest {
    SleepRequest { millis: 0, micros }
}

/// The connection serves calls: a nap and a whole short stream.
fn still_works(client: &RaceClient) {
    client.nap(nap(100)).expect("a nap after the races");
    let mut stream = client
        .flood(flood(10, 3, 0))
        .expect("a stream after the races")
        .into_inner();
    assert_eq!(read_to_end(&mut stream, 0, 10), (3, Ok(())));
}

/// Waits until `done()`; fails with `what` if that takes longer than `SETTLE` (what it waits
/// for takes milliseconds).
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < SETTLE, "not within {SETTLE:?}: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A spread of durations from `base` to `base + spread` µs, different for each `i`.
fn jitter(i: usize, base: u32, spread: u32) -> u32 {
    base + (i as u32).wrapping_mul(7919) % (spread + 1)
}

// ----- (a) replies racing their deadlines ----------------------------------------------

/// Unary calls with a 2 ms timeout to handlers napping 1.5 to 2.5 ms (32 futures in flight
/// per thread on two threads), blocking calls with a 1 ms timeout to 0.9 to 1.1 ms naps, and
/// streams of 6 messages 300 µs apart with a 2 ms timeout: replies, stream ends and deadline
/// expiry interleave in every order. Every call must end OK or DEADLINE_EXCEEDED (a stream:
/// all 6 messages in order then OK, or a prefix of them then DEADLINE_EXCEEDED); afterwards
/// no handler is left on the server, the client still has its one connection, and it works.
#[test]
fn replies_racing_their_deadlines_end_ok_or_deadline_exceeded() {
    with_watchdog("replies racing deadlines", Duration::from_secs(120), || {
        let census = Census::new();
        let server = serve(&census);
        let client = connect(&server);
        let (ok, late) = (AtomicU64::new(0), AtomicU64::new(0));
        let tally = |what: &str, result: Result<(), Status>| match result {
            Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
            Err(s) if s.code() == Code::DeadlineExceeded => late.fetch_add(1, Ordering::Relaxed),
            Err(s) => panic!("{what}: neither OK nor DEADLINE_EXCEEDED: {s}"),
        };
        const ROUNDS: usize = 250;
        const WINDOW: usize = 32;
        const BLOCKING: usize = 2000;
        const STREAMS: usize = 1000;
        std::thread::scope(|s| {
            for t in 0..2 {
                let (client, tally) = (&client, &tally);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        let calls = (0..WINDOW).map(|i| {
                            let micros = jitter((t * ROUNDS + round) * WINDOW + i, 1500, 1000);
                            let request =
                                Request::new(nap(micros)).with_timeout(Duration::from_millis(2));
                            rpc_tests::testing::race_client::RaceClient::from(client.clone())
                                .nap(request)
                        });
                        for result in block_on(future::join_all(calls)) {
                            tally("an async call", result.map(drop));
                        }
                    }
                });
            }
            let (client, tally) = (&client, &tally);
            s.spawn(move || {
                for i in 0..BLOCKING {
                    let request = Request::new(nap(jitter(i, 900, 200)))
                        .with_timeout(Duration::from_millis(1));
                    tally("a blocking call", client.nap(request).map(drop));
                }
            });
            s.spawn(move || {
                for i in 0..STREAMS {
                    let request = Request::new(flood(100, 6, jitter(i, 250, 100)))
                        .with_timeout(Duration::from_millis(2));
                    let result = block_on(async {
                        let mut stream =
                            rpc_tests::testing::race_client::RaceClient::from(client.clone())
                                .flood(request)
                                .await?
                                .into_inner();
                        let mut n = 0;
                        while let Some(message) = stream.message().await? {
                            check_message(&message, n, 100);
                            n += 1;
                        }
                        assert_eq!(n, 6, "a stream that ended OK has all its messages");
                        Ok(())
                    });
                    tally("a stream", result);
                }
            });
        });
        let (ok, late) = (ok.into_inner(), late.into_inner());
        assert_eq!(ok + late, (2 * ROUNDS * WINDOW + BLOCKING + STREAMS) as u64);
        census.wait_until_idle(SETTLE);
        assert_eq!(server.connections(), 1, "the races kept their connection");
        still_works(&client);
        eprintln!(
            "deadline races: {ok} ok, {late} deadline exceeded; server handlers: {} finished, \
             {} dropped",
            census.finished(),
            census.dropped()
        );
    });
}

// ----- (b) client cancels racing completion --------------------------------------------

/// Unary calls whose futures are dropped at about the time their handler answers (a call
/// races a timer of 0.3 to 2.7 ms against a 0.5 to 1.5 ms nap, and a quarter of them are
/// dropped at once), streams dropped after a few messages (some just as they end) and
/// stream futures dropped before their headers: every call that completes is OK, every
/// handler future is dropped or finished (none left live), the connection survives and
/// works.
#[test]
fn cancels_racing_completion_leave_no_handler_behind() {
    with_watchdog(
        "cancels racing completion",
        Duration::from_secs(120),
        || {
            let census = Census::new();
            let server = serve(&census);
            let client = connect(&server);
            let (completed, cancelled) = (AtomicU64::new(0), AtomicU64::new(0));
            const ROUNDS: usize = 200;
            const WINDOW: usize = 32;
            const STREAMS: usize = 1500;
            std::thread::scope(|s| {
                for t in 0..2 {
                    let (client, completed, cancelled) = (&client, &completed, &cancelled);
                    s.spawn(move || {
                        for round in 0..ROUNDS {
                            let calls = (0..WINDOW).map(|i| {
                                let n = (t * ROUNDS + round) * WINDOW + i;
                                let call = rpc_tests::testing::race_client::RaceClient::from(
                                    client.clone(),
                                )
                                .nap(nap(jitter(n, 500, 1000)));
                                let patience =
                                    Duration::from_micros(u64::from(jitter(n, 300, 2400)));
                                async move {
                                    if i < WINDOW / 4 {
                                        // Dropped at once: maybe before its request left.
                                        drop(call);
                                        return None;
                                    }
                                    match future::select(call, Delay::new(patience)).await {
                                        Either::Left((result, _)) => Some(result),
                                        // The call future is dropped here: the call is cancelled.
                                        Either::Right(_) => None,
                                    }
                                }
                            });
                            for outcome in block_on(future::join_all(calls)) {
                                match outcome {
                                    Some(result) => {
                                        result.expect("a call that was not cancelled");
                                        completed.fetch_add(1, Ordering::Relaxed);
                                    }
                                    None => {
                                        cancelled.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                        }
                    });
                }
                let client = &client;
                s.spawn(move || {
                    for i in 0..STREAMS {
                        let keep = (i % 5) as u64;
                        // Every other stream ends with the message after which it is dropped.
                        let count = if i % 2 == 0 { keep + 1 } else { 0 };
                        let mut stream = client
                            .flood(flood(64, count, jitter(i, 0, 300)))
                            .expect("a stream opens")
                            .into_inner();
                        for n in 0..keep {
                            let message = stream
                                .blocking_message()
                                .expect("a message before the cancel")
                                .expect("the stream goes on");
                            check_message(&message, n, 64);
                        }
                        drop(stream);
                    }
                    // Response-stream futures dropped before the headers came.
                    for i in 0..STREAMS / 4 {
                        let patience = Duration::from_micros(u64::from(jitter(i, 0, 500)));
                        let opening =
                            rpc_tests::testing::race_client::RaceClient::from(client.clone())
                                .flood(flood(64, 0, 100));
                        let opened = block_on(async {
                            let opening = std::pin::pin!(opening);
                            match future::select(opening, Delay::new(patience)).await {
                                Either::Left((result, _)) => Some(result),
                                Either::Right(_) => None,
                            }
                        });
                        if let Some(result) = opened {
                            drop(result.expect("a stream opens"));
                        }
                    }
                });
            });
            census.wait_until_idle(SETTLE);
            assert_eq!(server.connections(), 1, "the cancels kept their connection");
            still_works(&client);
            eprintln!(
                "cancel races: {} completed, {} cancelled by the client; server handlers: {} \
             finished, {} dropped",
                completed.into_inner(),
                cancelled.into_inner(),
                census.finished(),
                census.dropped()
            );
        },
    );
}

// ----- (c) disconnects mid-call and mid-stream -----------------------------------------

/// The server aborted (as if its process died) while calls are outstanding and streams are
/// flowing as fast as they can, at a different moment in each of 30 rounds: each nap ends OK
/// (it ended before the abort) or UNAVAILABLE, and the long ones UNAVAILABLE; each endless
/// stream ends UNAVAILABLE after its messages in order; the server's handlers are all dropped
/// (their calls are cancelled when the server closes their connection); a new call finds
/// nobody (UNAVAILABLE).
#[test]
fn server_abort_ends_calls_and_streams_in_flight_unavailable() {
    // Large messages without pause keep the connection busy while it is closed, so that the
    // abort meets stream handlers in every state (waiting for window, woken, being polled).
    const BIG: u32 = 8000;
    with_watchdog("server abort mid-call", Duration::from_secs(120), || {
        for round in 0..30u32 {
            let census = Census::new();
            let server = serve(&census);
            let client = connect(&server);
            let naps: Vec<_> = (0..16u32)
                .map(|i| {
                    let request = if i % 2 == 0 {
                        nap(jitter(i as usize, 0, round * 400))
                    } else {
                        SleepRequest {
                            millis: 60_000,
                            micros: 0,
                        }
                    };
                    rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(request)
                })
                .collect();
            let mut streams: Vec<_> = (0..4)
                .map(|_| {
                    let mut stream = client
                        .flood(flood(BIG, 0, 0))
                        .expect("a stream opens")
                        .into_inner();
                    let first = stream.blocking_message().expect("a first message");
                    check_message(&first.expect("an endless stream"), 0, BIG);
                    stream
                })
                .collect();
            let delay = Duration::from_micros(u64::from(round) * 200);
            let aborter = std::thread::spawn(move || {
                std::thread::sleep(delay);
                server.abort();
            });
            for stream in &mut streams {
                let (n, end) = read_to_end(stream, 1, BIG);
                let status = end.expect_err("an endless stream ends only by the abort");
                assert_eq!(
                    status.code(),
                    Code::Unavailable,
                    "after {n} messages: {status}"
                );
            }
            for (i, call) in naps.into_iter().enumerate() {
                match call.wait() {
                    Ok(_) => assert!(i % 2 == 0, "a 60 s nap cannot end OK"),
                    Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status}"),
                }
            }
            aborter.join().expect("the abort");
            census.wait_until_idle(SETTLE);
            let status = client.nap(nap(1)).expect_err("nobody serves any more");
            assert_eq!(status.code(), Code::Unavailable, "{status}");
        }
    });
}

/// A graceful shutdown while naps are in flight and a 40-message stream is being read: the
/// calls the server has started finish OK and the stream delivers all its messages, then new
/// calls fail UNAVAILABLE.
#[test]
fn server_shutdown_lets_calls_and_streams_in_flight_finish() {
    with_watchdog(
        "graceful shutdown mid-call",
        Duration::from_secs(60),
        || {
            let census = Census::new();
            let server = serve(&census);
            let client = connect(&server);
            let naps: Vec<_> = (0..8)
                .map(|_| {
                    rpc_tests::testing::race_client::RaceClient::from(client.clone())
                        .nap(nap(30_000))
                })
                .collect();
            let mut stream = client
                .flood(flood(64, 40, 1000))
                .expect("a stream opens")
                .into_inner();
            // Shut down only once the server has all nine calls.
            wait_for("the server started all 9 calls", || census.started() == 9);
            let stopper = std::thread::spawn(move || server.shutdown());
            assert_eq!(read_to_end(&mut stream, 0, 64), (40, Ok(())));
            for call in naps {
                call.wait()
                    .expect("a call in flight at a graceful shutdown");
            }
            stopper.join().expect("the shutdown");
            assert_eq!((census.finished(), census.dropped()), (9, 0));
            let status = client.nap(nap(1)).expect_err("nobody serves any more");
            assert_eq!(status.code(), Code::Unavailable, "{status}");
        },
    );
}

/// A server restarted at the same address: see [`restart_at_the_same_address`].
fn restart(async_calls: bool, client_transport: TransportKind) {
    with_watchdog(
        "restart at the same address",
        Duration::from_secs(60),
        move || restart_at_the_same_address("127.0.0.1:0", T, client_transport, async_calls),
    );
}

#[test]
fn after_a_goodbye_new_calls_go_to_a_new_connection() {
    restart(false, T);
}

#[test]
fn after_a_goodbye_new_futures_go_to_a_new_connection() {
    restart(true, T);
}

#[test]
fn after_a_goaway_new_grpc_calls_go_to_a_new_connection() {
    restart(false, TransportKind::Grpc);
}

/// Blocking calls from 4 threads while the server restarts 20 times at the same address:
/// a call its server did not process, one that met a GOODBYE before it went out or one the
/// GOODBYE gave back, is made again on the next connection, so none fails for it. (Calls
/// fail UNAVAILABLE otherwise while no server listens: those are counted, not asserted.)
#[test]
fn calls_a_goodbye_gives_back_are_made_again_on_the_next_connection() {
    made_again_across_restarts("calls given back by GOODBYEs", |client| {
        vec![client.nap(nap(1)).map(drop)]
    });
}

/// The same with futures, 8 in flight from each of the 4 threads: a future keeps its request
/// while its call is in flight, and makes the call again when its server gives it back.
#[test]
fn futures_a_goodbye_gives_back_are_made_again_on_the_next_connection() {
    use rpc_tests::testing::race_client::RaceClient as FutureClient;
    made_again_across_restarts("futures given back by GOODBYEs", |client| {
        let calls = (0..8).map(|_| FutureClient::from(client.clone()).nap(nap(1)));
        block_on(future::join_all(calls))
            .into_iter()
            .map(|result| result.map(drop))
            .collect()
    });
}

/// Rounds of `calls` from 4 threads while the server restarts 20 times at the same address:
/// none fails for a GOODBYE (see the tests above).
fn made_again_across_restarts(
    what: &'static str,
    calls: impl Fn(&RaceClient) -> Vec<Result<(), Status>> + Send + Sync + 'static,
) {
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    with_watchdog(what, Duration::from_secs(120), move || {
        let census = Census::new();
        let first = serve(&census);
        let addr = first.local_addr().to_string();
        let client = connect(&first);
        let stop = AtomicBool::new(false);
        let (served, given_back) = (AtomicU64::new(0), Mutex::new(Vec::new()));
        let last = std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        for result in calls(&client) {
                            match result {
                                Ok(()) => {
                                    served.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(status)
                                    if status.message().contains("accepts no new calls")
                                        || status.message().contains("not processed") =>
                                {
                                    given_back.lock().unwrap().push(status.to_string());
                                }
                                // No server listens for a moment: not what this test is about.
                                Err(status) => {
                                    assert_eq!(status.code(), Code::Unavailable, "{status}");
                                    std::thread::sleep(Duration::from_micros(200));
                                }
                            }
                        }
                    }
                });
            }
            let mut server = first;
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(30));
                server.shutdown();
                server = serve_again(&addr, T, &census, std::time::Instant::now());
            }
            std::thread::sleep(Duration::from_millis(30));
            stop.store(true, Ordering::Relaxed);
            server
        });
        assert!(served.load(Ordering::Relaxed) > 0, "calls were served");
        let given_back = given_back.into_inner().unwrap();
        assert!(
            given_back.is_empty(),
            "{} calls the servers did not process failed instead of going to the next \
             connection, the first: {:?}",
            given_back.len(),
            &given_back[..given_back.len().min(3)]
        );
        last.shutdown();
    });
}

/// Dropping the client after a GOODBYE made it reconnect: the stream still open on the old
/// connection ends at once with an error (the client closes every connection it has, the one
/// left after the GOODBYE included), instead of running on for the old server's grace and
/// then waiting forever for a close that no thread handles any more.
#[test]
fn dropping_the_client_after_a_reconnect_ends_the_old_connections_streams() {
    with_watchdog("drop after reconnect", Duration::from_secs(60), || {
        let old_census = Census::new();
        let old = serve(&old_census);
        let addr = old.local_addr().to_string();
        let client = connect(&old);
        let mut stream = client
            .flood(flood(64, 0, 1000))
            .expect("a stream opens")
            .into_inner();
        let first = stream.blocking_message().expect("a message");
        check_message(&first.expect("an endless stream"), 0, 64);
        let stopper = std::thread::spawn(move || old.shutdown());
        let new_census = Census::new();
        let start = std::time::Instant::now();
        let new = serve_again(&addr, T, &new_census, start);
        // A call on a new connection: the GOODBYE reached the client.
        until_a_call_gets_through(start, || client.nap(nap(1)));
        assert_eq!(new_census.finished(), 1, "the new server served the call");
        drop(client);
        // (Before, it hung here: the watchdog fails the test then.)
        let (_, end) = read_to_end(&mut stream, 1, 64);
        let status = end.expect_err("the client is gone");
        assert!(
            matches!(status.code(), Code::Unavailable | Code::Cancelled),
            "{status}"
        );
        stopper.join().expect("the old server's shutdown");
        new.shutdown();
    });
}

/// Dropping the client (every handle) while its response streams flow: the streams end with
/// an error (the connection is gone) instead of waiting forever, and the server drops their
/// handlers and the connection. 30 rounds against one server, which keeps serving.
#[test]
fn dropping_the_client_mid_stream_ends_its_streams_and_frees_the_servers_handlers() {
    with_watchdog("client dropped mid-stream", Duration::from_secs(60), || {
        let census = Census::new();
        let server = serve(&census);
        for round in 0..30u64 {
            let client = connect(&server);
            let mut streams: Vec<_> = (0..3)
                .map(|_| {
                    client
                        .flood(flood(64, 0, 200))
                        .expect("a stream opens")
                        .into_inner()
                })
                .collect();
            for stream in &mut streams {
                for n in 0..=round % 3 {
                    let message = stream.blocking_message().expect("a message");
                    check_message(&message.expect("an endless stream"), n, 64);
                }
            }
            drop(client);
            for stream in &mut streams {
                let (_, end) = read_to_end(stream, round % 3 + 1, 64);
                let status = end.expect_err("the client is gone");
                assert!(
                    matches!(status.code(), Code::Unavailable | Code::Cancelled),
                    "{status}"
                );
            }
            drop(streams);
            census.wait_until_idle(SETTLE);
            wait_for("the server closed the dropped client's connection", || {
                server.connections() == 0
            });
        }
        still_works(&connect(&server));
    });
}

/// Set in the environment of the client process that `race_client_process` runs as: the
/// server's address.
const CLIENT_ENV: &str = "RPC_TEST_RACE_CLIENT";

/// The client process of `a_killed_client_process_leaves_no_handler_behind`: 8 long naps
/// outstanding and 2 endless streams read without end, until it is killed (or its stdin
/// closes, or the server goes away). Does nothing unless started by that test.
#[test]
#[ignore = "the client process of a_killed_client_process_leaves_no_handler_behind"]
fn race_client_process() {
    let Ok(addr) = std::env::var(CLIENT_ENV) else {
        return;
    };
    // The test holds our stdin: its end means the test is over (or died).
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let client = RaceClient::new(
        Client::builder()
            .transport(T)
            .connect(&addr)
            .expect("connects"),
    );
    let _naps: Vec<_> = (0..8)
        .map(|_| {
            rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(SleepRequest {
                millis: 60_000,
                micros: 0,
            })
        })
        .collect();
    let mut streams: Vec<_> = (0..2)
        .map(|_| {
            client
                .flood(flood(64, 0, 500))
                .expect("a stream opens")
                .into_inner()
        })
        .collect();
    loop {
        for stream in &mut streams {
            if !matches!(stream.blocking_message(), Ok(Some(_))) {
                std::process::exit(0);
            }
        }
    }
}

/// A client process killed (SIGKILL: no CANCEL, no goodbye, just the TCP connection gone)
/// with 8 naps outstanding and 2 streams flowing, in 6 rounds at different depths of the
/// streams: the server drops every handler of the dead connection and the connection itself,
/// and keeps serving.
#[test]
fn a_killed_client_process_leaves_no_handler_behind() {
    with_watchdog("client process killed", Duration::from_secs(90), || {
        let census = Census::new();
        let server = serve(&census);
        let exe = std::env::current_exe().expect("the test executable");
        for round in 0..6u64 {
            let (started, produced) = (census.started(), census.produced());
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "race_client_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CLIENT_ENV, server.local_addr())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("start the client process");
            wait_for("the client process's 10 calls flowing", || {
                census.started() >= started + 10 && census.produced() >= produced + 10 * round
            });
            assert_eq!(server.connections(), 1);
            child.kill().expect("kill the client process");
            child.wait().expect("the killed client process");
            census.wait_until_idle(SETTLE);
            wait_for("the server closed the killed client's connection", || {
                server.connections() == 0
            });
        }
        assert_eq!(census.finished(), 0, "nothing ran to its end");
        still_works(&connect(&server));
    });
}

// ----- (d) a slow reader ----------------------------------------------------------------

/// An endless stream of 1,000-byte messages produced as fast as the server may, read by a
/// client that stops reading, then reads slowly. The server's producer is asked for a
/// message only once the previous one left the send queue, and a message leaves it only
/// within the call's window (16 KiB, the client's ring): so at any time the producer is at
/// most a window's worth of messages, plus the one waiting in the send queue, ahead of the
/// reader. It stalls there (pending, not failed), resumes as the reader reads, and every
/// message arrives once and in order.
#[test]
fn a_slow_reader_holds_an_endless_stream_to_its_window() {
    with_watchdog("slow reader", Duration::from_secs(60), || {
        const SIZE: u32 = 1000;
        let window: u32 = 16 << 10;
        let census = Census::new();
        let server = serve(&census);
        let client = connect_with(
            &server,
            RingConfig {
                call_window: window,
                ..RingConfig::DEFAULT
            },
        );
        // The cheapest message (id 0, whose field proto3 leaves out) makes the most of them.
        let cost = Connection::<(), Vec<u8>>::message_cost(prost::Message::encoded_len(&payload(
            0,
            SIZE as usize,
        )));
        // A message goes while the call's window is positive (the last may overdraw it), so
        // the window covers ceil(window / cost) messages unread; one more may wait in the
        // send queue. The producer is asked for a message only once that one has gone.
        let bound = u64::from(window.div_ceil(cost)) + 1;
        let mut stream = client
            .flood(flood(SIZE, 0, 0))
            .expect("a stream opens")
            .into_inner();
        let mut read = 0u64;
        let next = |stream: &mut Streaming<Payload>, read: &mut u64| {
            let message = stream
                .blocking_message()
                .expect("a message")
                .expect("an endless stream");
            check_message(&message, *read, SIZE);
            *read += 1;
            let ahead = census.produced() - *read;
            assert!(
                ahead <= bound,
                "the server produced {ahead} messages beyond the {read} read (bound {bound})"
            );
        };
        for _ in 0..10 {
            next(&mut stream, &mut read);
        }
        // The reader stops: the producer must stop within the bound, and stay stopped. A
        // second without a message is stopped (a producer merely descheduled on a loaded
        // machine would go on later and fail the look below).
        let (mut last, mut unchanged) = (census.produced(), 0);
        while unchanged < 500 {
            std::thread::sleep(Duration::from_millis(2));
            let produced = census.produced();
            assert!(
                produced - read <= bound,
                "with the reader stopped at {read}, the server produced {produced} (bound \
                 {bound} ahead)"
            );
            if produced == last {
                unchanged += 1;
            } else {
                (last, unchanged) = (produced, 0);
            }
        }
        assert_eq!(
            census.live(),
            1,
            "the stalled producer is pending, not gone"
        );
        let bytes_stalled = server.stats().bytes_sent;
        std::thread::sleep(Duration::from_millis(50));
        // A PING of the keepalive may go (a bare frame header); no message does.
        let more = server.stats().bytes_sent - bytes_stalled;
        assert!(
            more < u64::from(SIZE),
            "{more} bytes sent while the reader read nothing"
        );
        // A slow reader: a pause every 10 messages; the producer keeps to the bound.
        for i in 0..300 {
            if i % 10 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            next(&mut stream, &mut read);
        }
        drop(stream);
        census.wait_until_idle(SETTLE);
        assert_eq!(
            census.dropped(),
            1,
            "the endless stream was dropped with its call"
        );
        still_works(&client);
        eprintln!(
            "slow reader: read {read}, the producer at most {bound} ahead ({last} produced \
             when stalled)"
        );
    });
}

// ----- messages in order on a busy connection -----------------------------------------

/// Eight streams of 20,000 1,000-byte messages at once on one connection, each read as fast
/// as its thread can: every stream delivers all its messages, each once and in the order
/// they were sent, as gRPC promises. (The other stream tests check the order too; this one
/// is the busiest. On a connection, the thread that handled a frame passes it to its stream
/// after letting go of the connection's state, while another thread may already be handling
/// the next frame: the order must survive that.)
#[test]
fn stream_messages_arrive_in_order_on_a_busy_connection() {
    const STREAMS: usize = 8;
    const MESSAGES: u64 = 20_000;
    const SIZE: u32 = 1000;
    with_watchdog("streams in order", Duration::from_secs(120), || {
        let census = Census::new();
        let server = serve(&census);
        let client = connect(&server);
        std::thread::scope(|s| {
            for stream_no in 0..STREAMS {
                let client = &client;
                s.spawn(move || {
                    let mut stream = client
                        .flood(flood(SIZE, MESSAGES, 0))
                        .expect("a stream opens")
                        .into_inner();
                    let mut ids = Vec::with_capacity(MESSAGES as usize);
                    while let Some(message) = stream.blocking_message().expect("a message") {
                        assert_eq!(message, payload(message.id, SIZE as usize));
                        ids.push(message.id);
                    }
                    if let Some(at) = ids.windows(2).position(|w| w[1] != w[0] + 1) {
                        let around = &ids[at.saturating_sub(2)..(at + 6).min(ids.len())];
                        panic!(
                            "stream {stream_no}: message {} came after message {} (ids around \
                             there: {around:?})",
                            ids[at + 1],
                            ids[at]
                        );
                    }
                    assert_eq!(
                        ids.len() as u64,
                        MESSAGES,
                        "stream {stream_no}: all messages"
                    );
                });
            }
        });
        census.wait_until_idle(SETTLE);
        assert_eq!(census.finished(), STREAMS as u64);
    });
}

/// A listener that takes connections and never answers: each is closed `HOLD` after it came,
/// so a client's connect attempt there fails after about that long. Counts them.
struct SilentListener {
    accepted: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentListener {
    const HOLD: Duration = Duration::from_secs(1);

    /// Binds `addr` once the server that had it lets go of it.
    fn bind(addr: &str) -> SilentListener {
        let since = std::time::Instant::now();
        let listener = loop {
            match std::net::TcpListener::bind(addr) {
                Ok(listener) => break listener,
                Err(e) => {
                    assert!(since.elapsed() < SETTLE, "{addr} stays taken: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        listener.set_nonblocking(true).expect("non-blocking");
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (accepted, stop) = (accepted.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            held.push((std::time::Instant::now(), stream));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                    held.retain(|(at, _)| at.elapsed() < Self::HOLD);
                }
            })
        };
        SilentListener {
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// Connections taken since the last look.
    fn take_accepted(&self) -> u64 {
        self.accepted.swap(0, Ordering::Relaxed)
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A client whose server went away and whose connection it knows lost, and the listener
/// that now holds the server's address and never answers; and that address.
fn lost_to_a_silent_listener() -> (RaceClient, SilentListener, String) {
    let census = Census::new();
    let server = serve(&census);
    let addr = server.local_addr().to_string();
    let client = connect(&server);
    client.nap(nap(1)).expect("served");
    server.abort();
    // The connection is known lost once a call failed (nothing listens now).
    client.nap(nap(1)).expect_err("the server is gone");
    let silent = SilentListener::bind(&addr);
    (client, silent, addr)
}

/// `callers` threads make a call each at the same moment; every one fails UNAVAILABLE.
fn fail_together(client: &RaceClient, callers: usize) {
    let start = std::sync::Barrier::new(callers);
    std::thread::scope(|s| {
        for _ in 0..callers {
            s.spawn(|| {
                start.wait();
                let status = client.nap(nap(1)).expect_err("nothing serves");
                assert_eq!(status.code(), Code::Unavailable, "{status}");
            });
        }
    });
}

/// Callers that find the connection gone at the same moment share one reconnect instead of
/// each making one (after a server's restart, a storm of connections of which all but one
/// would be closed at once): 8 callers whose server went away, where a listener now takes
/// connections and never answers, make one connection attempt there, not 8. The same for a
/// lazy client's first calls.
#[test]
fn callers_that_find_the_connection_gone_share_one_reconnect() {
    const CALLERS: usize = 8;
    with_watchdog("a shared reconnect", Duration::from_secs(60), || {
        let (client, silent, addr) = lost_to_a_silent_listener();
        fail_together(&client, CALLERS);
        let attempts = silent.take_accepted();
        assert!(
            (1..=2).contains(&attempts),
            "{CALLERS} callers made {attempts} connection attempts"
        );

        let lazy = RaceClient::new(Client::builder().transport(T).connect_lazy(&addr));
        fail_together(&lazy, CALLERS);
        let attempts = silent.take_accepted();
        assert!(
            (1..=2).contains(&attempts),
            "{CALLERS} first calls made {attempts} connection attempts"
        );
    });
}

/// Threads of this process named `name` (a thread's name as the kernel keeps it).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// Futures that find the connection gone at the same moment share one connecting thread (a
/// thread each would be thousands of them when a busy async client loses its connection):
/// 64 futures whose server went away, where a listener now takes connections and never
/// answers, make one connection attempt there from one thread, and all fail UNAVAILABLE.
#[test]
fn futures_that_find_the_connection_gone_share_one_connecting_thread() {
    use rpc_tests::testing::race_client::RaceClient as FutureClient;
    use std::sync::atomic::AtomicBool;
    const FUTURES: usize = 64;
    with_watchdog(
        "a shared connecting thread",
        Duration::from_secs(60),
        || {
            let (blocking, silent, _) = lost_to_a_silent_listener();
            let (done, peak) = (AtomicBool::new(false), AtomicU64::new(0));
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        peak.fetch_max(threads_named("rpc-connect") as u64, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                let calls = (0..FUTURES).map(|_| FutureClient::from(blocking.clone()).nap(nap(1)));
                for result in block_on(future::join_all(calls)) {
                    let status = result.expect_err("nothing serves");
                    assert_eq!(status.code(), Code::Unavailable, "{status}");
                }
                done.store(true, Ordering::Relaxed);
            });
            let (threads, attempts) = (peak.load(Ordering::Relaxed), silent.take_accepted());
            assert!(
                threads <= 2,
                "{FUTURES} futures had {threads} connecting threads at once"
            );
            assert!(
                (1..=2).contains(&attempts),
                "{FUTURES} futures made {attempts} connection attempts"
            );
        },
    );
}
