//! Whole requests (PROTOCOL.md §22) as a peer sees them on the wire: our client offers the
//! extension in a PING; a server that accepts it then gets a unary call with metadata as one
//! MESSAGE (OPEN, END, METADATA), and a server of plain version 2, which echoes the offer,
//! keeps getting HEADERS and MESSAGE. The "servers" here are raw sockets; a watchdog fails
//! the test instead of hanging.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

mod common;

use common::{raw_hello, with_watchdog, Blob, METHODS};
use rpc_core::codegen::{self, IncomingRequest, ReplySink, Service, ServiceDescriptor};
use rpc_core::protocol::v2::{extension, flags, metadata, Header, Kind};
use rpc_core::protocol::HEADER_LEN;
use rpc_core::{Client, MetadataValue, Request, Response, Server, TransportKind};

/// One frame off the stream: its header and payload.
fn read_frame(stream: &mut TcpStream) -> Option<(Header, Vec<u8>)> {
    let mut head = [0u8; HEADER_LEN];
    stream.read_exact(&mut head).ok()?;
    let h = Header::decode(&head).expect("our client sends valid headers");
    let mut payload = vec![0u8; h.segment_len as usize];
    stream.read_exact(&mut payload).ok()?;
    Some((h, payload))
}

/// What the raw server saw of one call.
#[derive(Debug, Default)]
struct SeenCall {
    /// The flags of each frame of the call, in order.
    frames: Vec<(Kind, u16)>,
    /// The request metadata, wherever it came from.
    metadata: Vec<(String, Vec<u8>)>,
}

/// A server that completes the handshake, answers PINGs (`accept`: offers with the
/// acceptance of whole requests; otherwise with the echo of plain version 2) and echoes
/// each unary request; returns what it saw of each call.
fn raw_server(listener: TcpListener, accept: bool, calls: usize) -> Vec<SeenCall> {
    let (mut stream, _) = listener.accept().unwrap();
    raw_hello(&mut stream);
    let mut seen: Vec<SeenCall> = Vec::new();
    let mut owed: u16 = 0;
    let send = |stream: &mut TcpStream, owed: &mut u16, h: Header, payload: &[u8]| {
        let frame = Header {
            credits: std::mem::take(owed),
            ..h
        }
        .to_frame(payload);
        stream.write_all(&frame).unwrap();
    };
    while seen
        .iter()
        .filter(|c| c.frames.iter().any(|f| f.1 & flags::END != 0))
        .count()
        < calls
    {
        let (h, payload) = read_frame(&mut stream).expect("the client keeps the connection");
        owed += 1;
        match h.kind {
            Kind::Ping => {
                let answer = match extension::offered(h.call_id) {
                    Some(bits) if accept => extension::acceptance(bits & extension::WHOLE_REQUESTS),
                    _ => h.call_id,
                };
                let ack = Header {
                    flags: flags::ACK,
                    call_id: answer,
                    ..Header::new(Kind::Ping)
                };
                send(&mut stream, &mut owed, ack, b"");
            }
            Kind::Headers | Kind::Message => {
                if h.has(flags::OPEN) {
                    seen.push(SeenCall::default());
                }
                let call = seen.last_mut().expect("a call opened first");
                call.frames.push((h.kind, h.flags));
                let (block, message) = match (h.kind, h.has(flags::METADATA)) {
                    (Kind::Headers, _) => (&payload[..], &[][..]),
                    (_, true) => {
                        let len = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
                        (&payload[4..4 + len], &payload[4 + len..])
                    }
                    (_, false) => (&[][..], &payload[..]),
                };
                for entry in metadata::entries(block) {
                    let (name, value) = entry.expect("a valid block");
                    call.metadata.push((name.to_owned(), value.to_vec()));
                }
                if h.has(flags::END) {
                    let reply = Header {
                        flags: flags::END,
                        call_id: h.call_id,
                        message_len: message.len() as u32,
                        ..Header::new(Kind::Message)
                    };
                    send(&mut stream, &mut owed, reply, message);
                }
            }
            _ => {}
        }
    }
    seen
}

/// Makes a call without metadata, then `calls - 1` with two entries, against a raw server.
fn calls_against(accept: bool, calls: usize) -> Vec<SeenCall> {
    with_watchdog(Duration::from_secs(30), || {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || raw_server(listener, accept, calls));
        let client = Client::builder()
            .transport(TransportKind::Tcp)
            .connect(&addr)
            .unwrap();
        for i in 0..calls {
            let blob = Blob {
                data: format!("call {i}").into_bytes(),
            };
            let mut request = Request::new(blob.clone());
            if i > 0 {
                request
                    .metadata_mut()
                    .insert("x-user", MetadataValue::from_static("alice"));
                request
                    .metadata_mut()
                    .insert("x-call", MetadataValue::from(i));
            }
            let reply = client.unary::<Blob, Blob>(&METHODS[0], request).unwrap();
            assert_eq!(reply.into_inner(), blob);
        }
        drop(client);
        server.join().unwrap()
    })
}

#[test]
fn a_server_that_accepts_gets_each_call_with_metadata_as_one_frame() {
    let seen = calls_against(true, 3);
    // The first call may leave before the acceptance arrives; its reply comes after it.
    for (i, call) in seen.iter().enumerate().skip(1) {
        let whole = flags::OPEN | flags::END | flags::METADATA;
        assert_eq!(call.frames, vec![(Kind::Message, whole)], "call {i}");
        let expected = vec![
            ("x-user".to_owned(), b"alice".to_vec()),
            ("x-call".to_owned(), i.to_string().into_bytes()),
        ];
        assert_eq!(call.metadata, expected, "call {i}");
    }
}

#[test]
fn a_plain_version_2_server_gets_headers_and_message() {
    let seen = calls_against(false, 3);
    for (i, call) in seen.iter().enumerate().skip(1) {
        let frames = vec![(Kind::Headers, flags::OPEN), (Kind::Message, flags::END)];
        assert_eq!(call.frames, frames, "call {i}");
        assert_eq!(call.metadata.len(), 2, "call {i}");
    }
}

/// Answers each request with its `x-user` metadata, then its data.
struct MetadataEcho;

impl Service for MetadataEcho {
    fn descriptor(&self) -> &'static ServiceDescriptor {
        &METADATA_ECHO
    }
    fn call(&self, _: usize, request: IncomingRequest, reply: ReplySink) {
        codegen::unary(request, reply, |r: Request<Blob>| {
            let mut data = r
                .metadata()
                .get("x-user")
                .map_or(&[][..], |v| v.as_bytes())
                .to_vec();
            data.extend_from_slice(&r.into_inner().data);
            Ok(Response::new(Blob { data }))
        })
    }
}

static METADATA_ECHO: ServiceDescriptor = ServiceDescriptor {
    name: "t.Echo",
    methods: &METHODS,
};

#[test]
fn a_whole_request_larger_than_a_slot_reaches_the_handler_whole() {
    with_watchdog(Duration::from_secs(30), || {
        let server = Server::builder()
            .add_service(MetadataEcho)
            .start("127.0.0.1:0", TransportKind::Tcp)
            .unwrap();
        let client = Client::builder()
            .transport(TransportKind::Tcp)
            .connect(server.local_addr())
            .unwrap();
        // Bigger than an 8 KiB slot: the frame is built in a buffer and sent in segments.
        let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        for _ in 0..3 {
            let mut request = Request::new(Blob { data: data.clone() });
            request
                .metadata_mut()
                .insert("x-user", MetadataValue::from_static("alice"));
            let reply = client.unary::<Blob, Blob>(&METHODS[0], request).unwrap();
            assert_eq!(
                reply.into_inner().data,
                [b"alice".as_slice(), &data].concat()
            );
        }
        server.shutdown();
    });
}
