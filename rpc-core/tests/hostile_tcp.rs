//! A hostile raw-socket peer (garbage, truncated frames, huge declared lengths, unknown
//! methods, undecodable messages, credit floods, silence) against a TCP server, while a
//! well-behaved client calls it alongside: the server never crashes, answers what deserves
//! an answer, disconnects what breaks the protocol, and the good client never notices.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{closed_by_server, Blob, EchoService, METHODS};
use rpc_core::protocol::v2::{flags, HELLO_LEN};
use rpc_core::protocol::{Header, Hello, Kind, HEADER_LEN};
use rpc_core::{Client, Code, Request, RingConfig, Server, TransportKind};

const RING: RingConfig = RingConfig {
    slot_count: 8,
    slot_size: 4096,
    max_message_size: 64 * 1024,
    ..RingConfig::DEFAULT
};

fn echo_server() -> Server {
    Server::builder()
        .ring(RING)
        .add_service(EchoService)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap()
}

struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw { stream }
    }

    /// Connects and completes the HELLO exchange properly.
    fn handshake(addr: &str) -> Raw {
        let mut raw = Raw::connect(addr);
        let hello = Hello {
            slot_count: 16,
            slot_size: 4096,
            max_message_size: 1 << 20,
            ..RingConfig::DEFAULT.hello()
        };
        raw.stream.write_all(&hello.to_frame()).unwrap();
        let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
        raw.stream.read_exact(&mut theirs).unwrap();
        // The server's connections share its receive slots: a plain version 2 peer gets the
        // base grant of `SharedRings::DEFAULT` (§22.4).
        let expected = Hello {
            slot_count: rpc_core::SharedRings::DEFAULT.base_grant,
            ..RING.hello()
        };
        assert_eq!(Hello::from_frame(&theirs).unwrap(), expected);
        raw
    }

    fn send(&mut self, bytes: &[u8]) {
        // The server may already have hung up; that is what some cases expect.
        let _ = self.stream.write_all(bytes);
    }

    fn request(&mut self, id: u64, method_id: u32, message_len: u32, payload: &[u8]) {
        let h = Header {
            flags: flags::OPEN | flags::END,
            call_id: id,
            code: method_id,
            message_len,
            ..Header::new(Kind::Message)
        };
        self.send(&h.to_frame(payload));
    }

    /// Reads a call's final frame (an END, or a MESSAGE with END): (call id, status code,
    /// payload: the reply message, or the trailers block of an END).
    fn response(&mut self) -> (u64, u32, Vec<u8>) {
        loop {
            let mut hb = [0u8; HEADER_LEN];
            self.stream.read_exact(&mut hb).expect("a response frame");
            let h = Header::decode(&hb).unwrap();
            let mut payload = vec![0u8; h.segment_len as usize];
            self.stream.read_exact(&mut payload).unwrap();
            if h.kind == Kind::End || (h.kind == Kind::Message && h.has(flags::END)) {
                return (h.call_id, h.code, payload);
            }
        }
    }

    /// The next call to end is `id`, with status `code` (its payload is returned: the
    /// trailers block of an END).
    fn assert_ends(&mut self, id: u64, code: Code) -> Vec<u8> {
        let (ended, got, payload) = self.response();
        assert_eq!((ended, Code::from_u32(got)), (id, code));
        payload
    }

    /// An echo call `id` of `body` is answered OK with `body`: the connection serves.
    fn assert_echoes(&mut self, id: u64, body: &[u8]) {
        self.request(id, METHODS[0].id, body.len() as u32, body);
        let (answered, code, payload) = self.response();
        assert_eq!((answered, code), (id, 0));
        assert_eq!(payload, body);
    }

    /// Whether the server closed the connection (EOF or reset) within the read timeout.
    fn closed_by_server(&mut self) -> bool {
        closed_by_server(&mut self.stream)
    }
}

#[test]
fn hostile_peers_never_disturb_a_good_client() {
    let server = echo_server();
    let addr = server.local_addr().to_string();

    // The good client: calls continuously, every reply checked, until told to stop. The
    // hostile peers start once it made its first call (their whole sequence may take less
    // time than its connect).
    let stop = Arc::new(AtomicBool::new(false));
    let (first_call, first_call_done) = std::sync::mpsc::channel();
    let good = {
        let (addr, stop) = (addr.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let client = Client::builder()
                .transport(TransportKind::Tcp)
                .connect(&addr)
                .unwrap();
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let blob = Blob {
                    data: n.to_le_bytes().repeat((n % 50) as usize),
                };
                let r: Blob = client
                    .unary(&METHODS[0], Request::new(blob.clone()))
                    .expect("the good client's call")
                    .into_inner();
                assert_eq!(r, blob);
                if n == 0 {
                    let _ = first_call.send(());
                }
                n += 1;
            }
            n
        })
    };
    first_call_done
        .recv_timeout(Duration::from_secs(30))
        .expect("the good client's first call");

    // A silent peer that never says HELLO.
    let _silent = Raw::connect(&addr);

    // Garbage instead of a HELLO.
    let mut raw = Raw::connect(&addr);
    raw.send(&[0xAB; 200]);
    assert!(raw.closed_by_server(), "garbage instead of HELLO");

    // Garbage after a proper HELLO.
    let mut raw = Raw::handshake(&addr);
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n and more bytes to fill a header");
    assert!(raw.closed_by_server(), "bad magic");

    // A frame declaring a segment far beyond the slot: refused before anything is read.
    let mut raw = Raw::handshake(&addr);
    let mut h = [0u8; HEADER_LEN];
    Header {
        flags: flags::OPEN,
        call_id: 1,
        code: METHODS[0].id,
        message_len: u32::MAX,
        segment_len: u32::MAX,
        ..Header::new(Kind::Message)
    }
    .encode(&mut h);
    raw.send(&h);
    assert!(raw.closed_by_server(), "segment larger than the slot");

    // A truncated frame, then the peer goes away.
    let mut raw = Raw::handshake(&addr);
    raw.send(&h[..20]);
    drop(raw);

    // A message declaring 4 GiB in a valid first segment: RESOURCE_EXHAUSTED, and the
    // connection stays usable.
    let mut raw = Raw::handshake(&addr);
    raw.request(7, METHODS[0].id, u32::MAX - 1, &[0u8; 100]);
    raw.assert_ends(7, Code::ResourceExhausted);

    // Unknown method: UNIMPLEMENTED.
    raw.request(8, 0xdead_beef, 3, b"abc");
    let msg = raw.assert_ends(8, Code::Unimplemented);
    assert!(!msg.is_empty(), "the status carries a message");

    // Undecodable protobuf: INVALID_ARGUMENT.
    raw.request(9, METHODS[0].id, 3, &[0xff, 0xff, 0xff]);
    raw.assert_ends(9, Code::InvalidArgument);

    // A valid call on the same raw connection still works.
    let body = blob(b"hello");
    raw.assert_echoes(10, &body);

    // A credit flood: more frames than the server has slots, without waiting for credits.
    // A receiver can only tell once its ring is actually full: a server that keeps up answers
    // every request (UNIMPLEMENTED here), one that falls behind disconnects the peer. Either
    // way it stays up and the good client is undisturbed.
    let mut raw = Raw::handshake(&addr);
    // Beyond the server's 8 slots, but within the 15 responses the server may send back
    // before this peer (16 slots, never returning a credit) must return credits.
    let flood = RING.slot_count as u64 + 4;
    for i in 0..flood {
        raw.request(100 + i, 0xdead_beef, 0, b"");
    }
    let (mut answered, mut disconnected) = (0, false);
    while answered < flood {
        let mut hb = [0u8; HEADER_LEN];
        if let Err(e) = raw.stream.read_exact(&mut hb) {
            // Disconnected for exceeding its credits (not a read timeout).
            disconnected = matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            );
            break;
        }
        let h = Header::decode(&hb).unwrap();
        let mut payload = vec![0u8; h.segment_len as usize];
        raw.stream.read_exact(&mut payload).unwrap();
        if h.kind == Kind::End {
            assert_eq!(Code::from_u32(h.code), Code::Unimplemented);
            answered += 1;
        }
    }
    assert!(
        answered == flood || disconnected,
        "credit flood: {answered} of {flood} answered and the connection still open"
    );

    // A continuation segment for a call that was never opened is a protocol violation.
    let mut raw = Raw::handshake(&addr);
    let mut cont = [0u8; HEADER_LEN + 4];
    Header {
        call_id: 5,
        message_len: 8,
        segment_offset: 4,
        segment_len: 4,
        ..Header::new(Kind::Message)
    }
    .encode(&mut cont);
    raw.send(&cont);
    assert!(raw.closed_by_server(), "continuation for no message");

    stop.store(true, Ordering::Relaxed);
    let calls = good.join().expect("the good client never failed");
    assert!(calls > 0);
    // The server still accepts and serves new clients.
    let client = Client::builder()
        .transport(TransportKind::Tcp)
        .connect(&addr)
        .unwrap();
    let blob = Blob {
        data: vec![1, 2, 3],
    };
    assert_eq!(
        client
            .unary::<Blob, Blob>(&METHODS[0], Request::new(blob.clone()))
            .unwrap()
            .into_inner(),
        blob
    );
    server.shutdown();
}

/// PROTOCOL.md §16.1: a unary call takes exactly one request message. One sent without the
/// half-close is served at the half-close; a second one, or none, is answered INTERNAL; the
/// connection stays up throughout.
#[test]
fn a_unary_call_takes_exactly_one_request_message() {
    let server = echo_server();
    let mut raw = Raw::handshake(server.local_addr());
    let body = blob(b"one");
    let frame = |kind: Kind, flags: u16, call_id: u64, payload: &[u8]| {
        call_frame(kind, flags, call_id, 0, payload)
    };

    // The message, then an empty END as the half-close: served.
    raw.send(&frame(Kind::Message, flags::OPEN, 1, &body));
    raw.send(&frame(Kind::End, 0, 1, b""));
    let (id, code, payload) = raw.response();
    assert_eq!((id, code), (1, 0));
    assert_eq!(payload, body);

    // Two messages: INTERNAL.
    raw.send(&frame(Kind::Message, flags::OPEN, 2, &body));
    raw.send(&frame(Kind::Message, flags::END, 2, &body));
    raw.assert_ends(2, Code::Internal);

    // No message at all: INTERNAL.
    raw.send(&frame(Kind::Headers, flags::OPEN, 3, b""));
    raw.send(&frame(Kind::End, 0, 3, b""));
    raw.assert_ends(3, Code::Internal);

    // And the connection still serves a well-formed call.
    raw.assert_echoes(4, &body);
    server.shutdown();
}

/// PROTOCOL.md §12.2: the server ends a call still open at its deadline with
/// DEADLINE_EXCEEDED, also one whose request is still coming (a peer that never sends the
/// message, or never half-closes: such calls held a slot of `max_calls` for good); the
/// connection goes on serving.
#[test]
fn the_server_ends_calls_past_their_deadline() {
    let server = echo_server();
    let mut raw = Raw::handshake(server.local_addr());
    let body = blob(b"late");
    let opening = |kind: Kind, call_id: u64, payload: &[u8]| {
        call_frame(kind, flags::OPEN, call_id, 200_000, payload)
    };
    // Metadata only, never the message nor the half-close.
    raw.send(&opening(Kind::Headers, 1, b""));
    raw.assert_ends(1, Code::DeadlineExceeded);
    // The message, never the half-close.
    raw.send(&opening(Kind::Message, 2, &body));
    raw.assert_ends(2, Code::DeadlineExceeded);
    // A late half-close of an ended call is discarded, and the connection still serves.
    raw.send(
        &Header {
            call_id: 2,
            ..Header::new(Kind::End)
        }
        .to_frame(b""),
    );
    raw.assert_echoes(3, &body);
    server.shutdown();
}

/// A server without keepalive or stall ticks, where only the deadline tick ends calls.
fn server_with_deadline_ticks_only() -> Server {
    Server::builder()
        .ring(RING)
        .keepalive(None)
        .stall_timeout(None)
        .add_service(EchoService)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap()
}

/// A whole frame of `kind` on call `call_id`; an opening one names the echo method and
/// carries `timeout_us`.
fn call_frame(kind: Kind, flags: u16, call_id: u64, timeout_us: u32, payload: &[u8]) -> Vec<u8> {
    let opening = flags & flags::OPEN != 0;
    Header {
        flags,
        call_id,
        code: if opening { METHODS[0].id } else { 0 },
        timeout_us: if opening { timeout_us } else { 0 },
        message_len: payload.len() as u32,
        ..Header::new(kind)
    }
    .to_frame(payload)
}

/// The encoded echo request carrying `data`.
fn blob(data: &[u8]) -> Vec<u8> {
    prost::Message::encode_to_vec(&Blob {
        data: data.to_vec(),
    })
}

/// The server watches the deadline of a call whose message it holds for the half-close
/// (the application hears of the call only then), even as the connection's first: the call
/// ends at its deadline. (Unwatched, it would end only after the read timeout of 10 s, and
/// `response` panic.)
#[test]
fn a_held_request_ends_at_its_deadline() {
    let server = server_with_deadline_ticks_only();
    let mut raw = Raw::handshake(server.local_addr());
    let body = blob(b"held");
    raw.send(&call_frame(Kind::Message, flags::OPEN, 1, 200_000, &body));
    raw.assert_ends(1, Code::DeadlineExceeded);
    raw.assert_echoes(2, &body);
    server.shutdown();
}

/// The server keeps a later call's shorter deadline: its tick looks at a connection only
/// once the earliest deadline it watches is due, and a deadline of a minute, left behind by
/// a call answered at once, must not hide one of 200 ms that comes after it.
#[test]
fn a_short_deadline_behind_a_long_one_is_kept() {
    let server = server_with_deadline_ticks_only();
    let mut raw = Raw::handshake(server.local_addr());
    let body = blob(b"soon");
    // A whole request with a deadline of a minute, answered at once.
    let whole = flags::OPEN | flags::END;
    raw.send(&call_frame(Kind::Message, whole, 1, 60_000_000, &body));
    let (id, code, payload) = raw.response();
    assert_eq!((id, code, payload), (1, 0, body.clone()));
    // Then one of 200 ms whose half-close never comes: ended at its deadline.
    raw.send(&call_frame(Kind::Message, flags::OPEN, 2, 200_000, &body));
    raw.assert_ends(2, Code::DeadlineExceeded);
    raw.assert_echoes(3, &body);
    server.shutdown();
}

/// `ServerBuilder::max_connections`: a connection beyond the limit is closed once its
/// handshake is done (its call fails UNAVAILABLE), the connections within it go on, and a
/// new one is served once one went away.
#[test]
fn connections_beyond_the_limit_are_closed() {
    let server = Server::builder()
        .ring(RING)
        .max_connections(2)
        .add_service(EchoService)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap();
    let connect = || {
        Client::builder()
            .transport(TransportKind::Tcp)
            .connect(server.local_addr())
            .unwrap()
    };
    let echo = |client: &Client| {
        let blob = Blob {
            data: b"limit".to_vec(),
        };
        client
            .unary::<Blob, Blob>(&METHODS[0], Request::new(blob.clone()))
            .map(|r| assert_eq!(r.into_inner(), blob))
    };
    let (a, b) = (connect(), connect());
    echo(&a).expect("the first connection is served");
    echo(&b).expect("the second connection is served");
    let refused = connect();
    let status = echo(&refused).expect_err("the third connection is closed");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    echo(&a).expect("the first connection still is served");
    drop((a, refused));
    // Once the server has seen the first one go, a new connection is served.
    let started = std::time::Instant::now();
    loop {
        let c = connect();
        if echo(&c).is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no connection served after one of two went away"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    echo(&b).expect("the second connection still is served");
    server.shutdown();
}

/// PROTOCOL.md §4.4: a peer whose first bytes show another version (a version 1 HELLO frame
/// is 56 bytes, so a version 2 side waiting for 72 would wait for its deadline) or another
/// protocol is refused as soon as those bytes arrive, by a server and by a client alike.
#[test]
fn a_hello_of_another_version_is_refused_at_once() {
    // Well under the 5 s HELLO deadline, and well over a loaded machine's scheduling delays.
    const AT_ONCE: Duration = Duration::from_secs(2);
    // The start of a version 1 HELLO frame: `RP`, version 1, kind 1, message_len 16.
    let mut v1 = [0u8; HEADER_LEN + 16];
    v1[0..4].copy_from_slice(b"RP\x01\x01");
    v1[24] = 16;
    v1[32] = 16;

    let server = echo_server();
    for (what, bytes) in [
        ("a version 1 HELLO", &v1[..]),
        ("an HTTP request", &b"GET / HTTP/1.1\r\n"[..]),
    ] {
        let mut raw = Raw::connect(server.local_addr());
        let started = std::time::Instant::now();
        raw.send(bytes);
        // The server's own HELLO, then the end of the stream: the connection stays open.
        let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
        raw.stream.read_exact(&mut theirs).unwrap();
        assert!(raw.closed_by_server(), "{what}: not refused");
        assert!(
            started.elapsed() < AT_ONCE,
            "{what}: refused only after {:?}",
            started.elapsed()
        );
    }

    // A client facing a version 1 server, which sends its HELLO and waits for one it can read.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let v1_server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.write_all(&v1).unwrap();
        // Held open until the client gives up.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        closed_by_server(&mut stream)
    });
    let started = std::time::Instant::now();
    let err = match Client::builder()
        .transport(TransportKind::Tcp)
        .connect(&addr)
    {
        Ok(_) => panic!("connected to a version 1 server"),
        Err(e) => e,
    };
    assert!(
        started.elapsed() < AT_ONCE,
        "refused only after {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("version 1"), "{err}");
    assert!(
        v1_server.join().unwrap(),
        "the client did not close the connection"
    );
    server.shutdown();
}

/// The server's port serves HTTP/2 clients as standard gRPC (docs/PROTOCOL.md §4.5), judged
/// by the whole 24-byte preface within the HELLO deadline: a client that starts the preface
/// and stops is closed at the deadline, with nothing sent to it, as a dribbling HELLO is; a
/// whole preface is answered in HTTP/2 (the server's SETTINGS frame), not with our HELLO.
#[test]
fn an_http2_preface_is_served_as_grpc_and_half_of_one_is_closed_at_the_deadline() {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let server = echo_server();

    let mut stalled = Raw::connect(server.local_addr());
    let started = std::time::Instant::now();
    stalled.send(&PREFACE[..10]);
    assert!(stalled.closed_by_server(), "a half preface was not closed");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4),
        "closed after {waited:?}, before the 5 s HELLO deadline"
    );

    let mut h2 = Raw::connect(server.local_addr());
    h2.send(PREFACE);
    // An HTTP/2 frame header: a 24-bit length, then type 4 (SETTINGS), on stream 0.
    let mut frame = [0u8; 9];
    h2.stream.read_exact(&mut frame).unwrap();
    assert_eq!(frame[3], 4, "not a SETTINGS frame: {frame:02x?}");
    assert_eq!(&frame[5..9], &[0, 0, 0, 0], "not on stream 0: {frame:02x?}");

    // Our own clients are served all along.
    Raw::handshake(server.local_addr()).assert_echoes(1, &blob(b"abc"));
    server.shutdown();
}
