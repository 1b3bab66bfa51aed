//! The end-to-end scenarios over TCP on loopback (run everywhere; the verbs suite runs the
//! same scenarios inside the Soft-RoCE VM).

use std::time::{Duration, Instant};

use rpc_core::protocol::v2::flags;
use rpc_core::protocol::{Header, Kind};
use rpc_core::{Code, RingConfig, Server, SharedRings, TransportKind};
use rpc_tests::attack::{TcpWire, Wire};
use rpc_tests::scenarios::{self, connect, serve, TortureService};
use rpc_tests::testing::torture_server::TortureServer;

const T: TransportKind = TransportKind::Tcp;

#[test]
fn eight_threads_with_32_outstanding_calls_each_get_their_own_replies() {
    let server = serve("127.0.0.1:0", T);
    let client = connect(&server, T);
    scenarios::concurrent_calls(&client, 8, 32, 400);
    assert_eq!(client.inner().stats().errors, 0);
}

#[test]
fn message_sizes_round_trip_and_oversized_is_refused() {
    let server = serve("127.0.0.1:0", T);
    scenarios::message_sizes(&connect(&server, T));
}

#[test]
fn deadline_exceeded() {
    let server = serve("127.0.0.1:0", T);
    scenarios::deadline(&connect(&server, T));
}

#[test]
fn statuses_and_handler_panics() {
    let server = serve("127.0.0.1:0", T);
    scenarios::statuses(&connect(&server, T));
}

#[test]
fn server_stopped_mid_run_gives_unavailable() {
    let server = serve("127.0.0.1:0", T);
    let client = connect(&server, T);
    scenarios::server_stopped_mid_run(server, &client);
}

/// The hang of issue 7: blocking callers with a 1 ms timeout against a handler that takes
/// about as long. A watchdog fails the test instead of letting it hang.
#[test]
fn replies_racing_their_deadlines_never_hang() {
    scenarios::with_watchdog("deadline races over TCP", Duration::from_secs(120), || {
        let server = scenarios::serve_for_deadline_races("127.0.0.1:0", T);
        let client = connect(&server, T);
        let (ok, late) = scenarios::deadline_races(&client, 4, 3000);
        eprintln!("deadline races over TCP: {ok} ok, {late} deadline exceeded");
    });
}

/// A TCP server's connections share its slots (PROTOCOL.md §22.4): 1,000 connections, each
/// having made a call and staying open, hold no receive or send slot of their own. So a
/// 64 MiB memory budget admits them all (with rings of their own, 1 MiB each at the defaults,
/// it admits about 60), and the server goes on serving new calls.
#[test]
fn a_tcp_server_holds_1000_idle_connections_in_shared_slots() {
    const CONNS: usize = 1000;
    let server = Server::builder()
        .memory_budget(64 << 20)
        // The raw peers answer no PING.
        .keepalive(None)
        .workers(1)
        .add_service(TortureServer::new(TortureService::default()))
        .start("127.0.0.1:0", T)
        .expect("server starts");
    let mut wires = Vec::with_capacity(CONNS);
    for n in 0..CONNS {
        let (mut wire, hello) = TcpWire::connect(server.local_addr(), RingConfig::DEFAULT);
        // A plain version 2 peer: the base grant (§22.4).
        assert_eq!(hello.slot_count, SharedRings::DEFAULT.base_grant);
        let call = Header {
            flags: flags::OPEN | flags::END,
            call_id: 1,
            code: 0xdead_beef,
            message_len: 2,
            ..Header::new(Kind::Message)
        };
        wire.send(&call.to_frame(b"hi"))
            .unwrap_or_else(|e| panic!("connection {n}: {e}"));
        let end = loop {
            let frame = wire
                .recv()
                .unwrap_or_else(|e| panic!("connection {n} closed: {e}"));
            let h = Header::decode(&frame).unwrap();
            if h.kind == Kind::End {
                break h;
            }
        };
        assert_eq!(end.code, Code::Unimplemented as u32, "connection {n}");
        wires.push(wire);
    }
    let until = Instant::now() + Duration::from_secs(30);
    while server.connections() < CONNS {
        assert!(
            Instant::now() < until,
            "{} connections",
            server.connections()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let used = server.memory().used();
    eprintln!("{CONNS} idle TCP connections: memory budget in use {used} bytes");
    assert!(
        used <= CONNS * 64 * 1024,
        "{used} bytes of budget for {CONNS} idle connections"
    );
    let client = connect(&server, T);
    scenarios::concurrent_calls(&client, 2, 16, 200);
    assert_eq!(
        server.connections(),
        CONNS + 1,
        "every idle connection is still open"
    );
    drop(wires);
}

#[test]
fn connections_waiting_for_a_shared_send_slot_are_all_served() {
    scenarios::callers_waiting_for_shared_send_slots("127.0.0.1:0", T);
}
