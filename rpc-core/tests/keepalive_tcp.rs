//! Keepalive over TCP: a peer that goes silent without closing its socket is detected on both
//! sides and its calls fail UNAVAILABLE; a healthy idle connection is kept. Short keepalive
//! settings keep the test fast; a watchdog fails it instead of hanging.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

mod common;

use common::{closed_by_server, raw_hello, with_watchdog, Blob, EchoService, METHODS};
use rpc_core::{Client, Code, Keepalive, Request, Server, TransportKind};

const FAST: Keepalive = Keepalive {
    interval: Duration::from_millis(200),
    timeout: Duration::from_millis(800),
};

/// For the healthy connection: a PING every 100 ms as well, but a timeout that a loaded test
/// machine's scheduling delays do not reach (one of 800 ms did, once, with every core busy).
const PATIENT: Keepalive = Keepalive {
    interval: Duration::from_millis(100),
    timeout: Duration::from_secs(2),
};

fn server() -> Server {
    server_with(FAST)
}

fn server_with(keepalive: Keepalive) -> Server {
    Server::builder()
        .keepalive(Some(keepalive))
        .add_service(EchoService)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap()
}

#[test]
fn a_silent_client_is_disconnected_by_the_server() {
    with_watchdog(Duration::from_secs(30), || {
        let server = server();
        let mut raw = TcpStream::connect(server.local_addr()).unwrap();
        raw_hello(&mut raw);
        // Silent from now on: never answers the server's PINGs, never closes.
        raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let started = Instant::now();
        // Reads (and drops) the server's PINGs until it hangs up.
        let eof = closed_by_server(&mut raw);
        assert!(
            eof,
            "the server kept a silent peer for {:?}",
            started.elapsed()
        );
        server.shutdown();
    });
}

#[test]
fn calls_to_a_silent_server_fail_unavailable() {
    with_watchdog(Duration::from_secs(30), || {
        // A "server" that completes the handshake, then neither reads nor writes.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let silent = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            raw_hello(&mut stream);
            // Longer than the client needs to give up (about 1 s), shorter than the watchdog.
            std::thread::sleep(Duration::from_secs(4));
            drop(stream);
        });
        let client = Client::builder()
            .transport(TransportKind::Tcp)
            .keepalive(Some(FAST))
            .connect(&addr)
            .unwrap();
        let result = client.unary::<Blob, Blob>(&METHODS[0], Request::new(Blob::default()));
        let status = result.expect_err("nobody answers");
        assert_eq!(status.code(), Code::Unavailable, "{status}");
        assert!(status.message().contains("keepalive"), "{status}");
        drop(client);
        silent.join().unwrap();
    });
}

#[test]
fn a_healthy_idle_connection_is_kept() {
    with_watchdog(Duration::from_secs(30), || {
        let server = server_with(PATIENT);
        let client = Client::builder()
            .transport(TransportKind::Tcp)
            .keepalive(Some(PATIENT))
            .connect(server.local_addr())
            .unwrap();
        let blob = Blob {
            data: b"still here".to_vec(),
        };
        let call = || client.unary::<Blob, Blob>(&METHODS[0], Request::new(blob.clone()));
        assert_eq!(call().unwrap().into_inner(), blob);
        // Idle for twice what it takes to declare a peer dead: 40 rounds of PINGs.
        std::thread::sleep(2 * (PATIENT.interval + PATIENT.timeout));
        assert_eq!(server.connections(), 1, "the idle connection was kept");
        assert_eq!(call().unwrap().into_inner(), blob);
        assert_eq!(server.connections(), 1, "no reconnect was needed");
        server.shutdown();
    });
}

/// A client that offers the keepalive pace (PROTOCOL.md §22.5) is told the server's: after the
/// acceptance naming bit 2, a PING `RP-K` with the server's keepalive interval in
/// milliseconds (200 here; its clients then PING it no more often).
#[test]
fn the_server_announces_its_keepalive_pace_after_accepting_it() {
    use rpc_core::protocol::{extension, flags, Header, Kind, HEADER_LEN};
    use std::io::{Read, Write};
    with_watchdog(Duration::from_secs(30), || {
        let server = server();
        let mut raw = TcpStream::connect(server.local_addr()).unwrap();
        raw_hello(&mut raw);
        let offer = Header {
            call_id: extension::offer(extension::KEEPALIVE_PACE),
            ..Header::new(Kind::Ping)
        };
        raw.write_all(&offer.to_frame(&[])).unwrap();
        let mut next = || {
            let mut header = [0u8; HEADER_LEN];
            raw.read_exact(&mut header).unwrap();
            let h = Header::decode(&header).unwrap();
            let mut payload = vec![0u8; h.segment_len as usize];
            raw.read_exact(&mut payload).unwrap();
            h
        };
        let acceptance = next();
        assert!(acceptance.kind == Kind::Ping && acceptance.has(flags::ACK));
        assert_eq!(
            extension::accepted(acceptance.call_id),
            Some(extension::KEEPALIVE_PACE)
        );
        let pace = next();
        assert!(pace.kind == Kind::Ping && !pace.has(flags::ACK));
        assert_eq!(
            extension::paced(pace.call_id),
            Some(FAST.interval.as_millis() as u32)
        );
        server.shutdown();
    });
}
