//! Keeps `docs/PROTOCOL.md` honest: its violation table lists exactly [`Violation::ALL`], in
//! order, and every hex dump of its worked examples (section 17, each after a line
//! `<!-- example: NAME -->`) is byte for byte what the encoders build, and, for the calls, what
//! two [`Connection`]s driven against each other put on the wire.

use std::collections::BTreeMap;

use rpc_core::protocol::v2::conn::status_block;
use rpc_core::protocol::v2::metadata::push_entry;
use rpc_core::protocol::v2::{
    extension, flags, Connection, Event, Header, Hello, Kind, Outgoing, Payload, Role, SendError,
    Violation, HEADER_LEN, HELLO_LEN,
};
use rpc_core::{Code, RingConfig, Status};

const DOC: &str = include_str!("../../docs/PROTOCOL.md");

/// The parameters of section 17: this implementation's defaults, so the examples fail if the
/// defaults change and the document does not.
const HELLO: Hello = RingConfig::DEFAULT.hello();
const SLOT: usize = RingConfig::DEFAULT.slot_size as usize;

/// FNV-1a method ids of section 5.
const ADD: u32 = 0x79c7_16c3;
const ECHO: u32 = 0x0274_1ef6;
const NO_SUCH_METHOD: u32 = 0x1234_5678;

// ----- reading the document -----------------------------------------------------------------

/// The stable names in the first column of the table after `<!-- violation-table -->`.
fn violation_table() -> Vec<String> {
    let start = DOC
        .find("<!-- violation-table -->")
        .expect("the violation table's marker");
    let rows: Vec<&str> = DOC[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(rows.len() > 2, "a header, a separator and rows");
    rows[2..]
        .iter()
        .map(|row| {
            let first = row.split('|').nth(1).expect("a first column").trim();
            first
                .strip_prefix('`')
                .and_then(|s| s.strip_suffix('`'))
                .unwrap_or_else(|| panic!("first column is not a `name`: {row}"))
                .to_string()
        })
        .collect()
}

/// Every example dump: the frames of the code block after each `<!-- example: NAME -->` line.
/// A dump line is a 4-digit hex offset, two spaces, up to 16 bytes as `xx` separated by
/// spaces (columns 6..53), then an annotation from column 56; offset 0000 starts a new frame.
fn examples() -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- example: ")
            .and_then(|s| s.strip_suffix(" -->"))
        else {
            continue;
        };
        assert_eq!(
            lines.next().map(str::trim),
            Some("```"),
            "example `{name}`: a code block must follow its marker"
        );
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            if line.trim().is_empty() {
                continue;
            }
            let offset = usize::from_str_radix(&line[..4], 16)
                .unwrap_or_else(|_| panic!("example `{name}`: no offset in {line:?}"));
            let area = line.get(6..line.len().min(53)).unwrap_or("");
            let bytes: Vec<u8> = area
                .split_whitespace()
                .map(|t| {
                    assert_eq!(t.len(), 2, "example `{name}`: {t:?} in {line:?}");
                    u8::from_str_radix(t, 16)
                        .unwrap_or_else(|_| panic!("example `{name}`: {t:?} in {line:?}"))
                })
                .collect();
            if offset == 0 {
                frames.push(Vec::new());
            }
            let frame = frames
                .last_mut()
                .unwrap_or_else(|| panic!("example `{name}` does not start at 0000"));
            assert_eq!(offset, frame.len(), "example `{name}`: offset of {line:?}");
            assert!(
                frame.len() % 16 == 0 && !bytes.is_empty(),
                "example `{name}`: only a frame's last line may be short: {line:?}"
            );
            frame.extend_from_slice(&bytes);
        }
        assert!(!frames.is_empty(), "example `{name}` is empty");
        assert!(
            out.insert(name.to_string(), frames).is_none(),
            "example `{name}` twice"
        );
    }
    out
}

/// A frame in the document's dump format (printed when a dump is wrong, to fix it from).
fn dump(frame: &[u8]) -> String {
    frame
        .chunks(16)
        .enumerate()
        .map(|(i, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            format!("{:04x}  {}\n", i * 16, hex.join(" "))
        })
        .collect()
}

fn assert_example(docs: &BTreeMap<String, Vec<Vec<u8>>>, name: &str, built: &[Vec<u8>]) {
    let Some(dumped) = docs.get(name) else {
        panic!("no example `{name}` in the document");
    };
    let wanted: String = built.iter().map(|f| dump(f)).collect::<Vec<_>>().join("\n");
    assert_eq!(
        dumped.len(),
        built.len(),
        "example `{name}`: number of frames; the code builds\n{wanted}"
    );
    for (i, (d, b)) in dumped.iter().zip(built).enumerate() {
        assert!(
            d == b,
            "example `{name}`, frame {i}: the document says\n{}the code builds\n{}",
            dump(d),
            dump(b)
        );
    }
}

// ----- building the examples with the encoders ----------------------------------------------

/// A whole frame: `h` with `message_len` and `segment_len` set to the payload's length.
fn frame(h: Header, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![0u8; HEADER_LEN + payload.len()];
    Header {
        message_len: len,
        segment_len: len,
        ..h
    }
    .encode(&mut f);
    f[HEADER_LEN..].copy_from_slice(payload);
    f
}

fn header_only(h: Header) -> Vec<u8> {
    let mut f = vec![0u8; HEADER_LEN];
    h.encode(&mut f);
    f
}

fn call_frame(kind: Kind, fl: u16, credits: u16, call_id: u64) -> Header {
    Header {
        flags: fl,
        credits,
        call_id,
        ..Header::new(kind)
    }
}

fn opening(kind: Kind, fl: u16, credits: u16, call_id: u64, method: u32, timeout: u32) -> Header {
    Header {
        code: method,
        timeout_us: timeout,
        ..call_frame(kind, flags::OPEN | fl, credits, call_id)
    }
}

fn block(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in entries {
        push_entry(&mut b, name, value);
    }
    b
}

const ADD_REQUEST: &[u8] = &[0x08, 0x02, 0x10, 0x03];
const ADD_REPLY: &[u8] = &[0x08, 0x05];
const ECHO_HI: &[u8] = &[0x0a, 0x02, b'h', b'i'];
const BIG: usize = 10_000;

fn request_headers() -> Vec<u8> {
    block(&[("x-user", b"alice"), ("trace-bin", &[0xde, 0xad])])
}

fn unimplemented() -> Status {
    Status::unimplemented(format!(
        "no service on this server has a method with id {NO_SUCH_METHOD:#010x}"
    ))
}

/// The status the core answers an opening with after its GOODBYE (conn.rs).
fn going_away() -> Status {
    Status::unavailable("the server is going away (GOODBYE sent)")
}

/// Every example, as the encoders build it from the annotations.
fn encoded_examples() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let limit = HELLO.max_metadata_size as usize;
    let ok = Status::new(Code::Ok, "");
    let segment = |credits, offset: u32, len: u32| {
        header_only(Header {
            message_len: BIG as u32,
            segment_offset: offset,
            segment_len: len,
            ..opening(Kind::Message, flags::END, credits, 4, ECHO, 0)
        })
    };
    vec![
        ("hello", vec![HELLO.to_frame().to_vec()]),
        (
            "unary-request",
            vec![frame(
                opening(Kind::Message, flags::END, 0, 1, ADD, 5_000_000),
                ADD_REQUEST,
            )],
        ),
        (
            "unary-reply",
            vec![frame(
                call_frame(Kind::Message, flags::END, 1, 1),
                ADD_REPLY,
            )],
        ),
        (
            "metadata-request",
            vec![
                frame(
                    opening(Kind::Headers, 0, 1, 2, ECHO, 250_000),
                    &request_headers(),
                ),
                frame(call_frame(Kind::Message, flags::END, 0, 2), ECHO_HI),
            ],
        ),
        (
            "extension-offer",
            vec![header_only(Header {
                call_id: extension::offer(extension::WHOLE_REQUESTS),
                ..Header::new(Kind::Ping)
            })],
        ),
        (
            "extension-acceptance",
            vec![header_only(Header {
                flags: flags::ACK,
                credits: 1,
                call_id: extension::acceptance(extension::WHOLE_REQUESTS),
                ..Header::new(Kind::Ping)
            })],
        ),
        (
            "whole-request",
            vec![frame(
                opening(
                    Kind::Message,
                    flags::END | flags::METADATA,
                    0,
                    2,
                    ECHO,
                    250_000,
                ),
                &[
                    &(request_headers().len() as u32).to_le_bytes()[..],
                    &request_headers(),
                    ECHO_HI,
                ]
                .concat(),
            )],
        ),
        (
            "metadata-response",
            vec![
                frame(
                    call_frame(Kind::Headers, 0, 2, 2),
                    &block(&[("x-served-by", b"s1")]),
                ),
                frame(call_frame(Kind::Message, 0, 0, 2), ECHO_HI),
                frame(
                    call_frame(Kind::End, 0, 0, 2),
                    &status_block(&ok, &[("x-cost", b"7")], limit),
                ),
            ],
        ),
        (
            "error-call",
            vec![
                frame(
                    opening(Kind::Message, flags::END, 3, 3, NO_SUCH_METHOD, 0),
                    &[],
                ),
                frame(
                    Header {
                        code: Code::Unimplemented as u32,
                        ..call_frame(Kind::End, 0, 1, 3)
                    },
                    &status_block(&unimplemented(), &[], limit),
                ),
            ],
        ),
        (
            "segmented-request-headers",
            vec![segment(1, 0, 8152), segment(0, 8152, 1848)],
        ),
        (
            "goodbye",
            vec![
                header_only(Header {
                    credits: 2,
                    call_id: 4,
                    ..Header::new(Kind::Goodbye)
                }),
                frame(opening(Kind::Message, flags::END, 0, 5, ECHO, 0), ECHO_HI),
                frame(
                    Header {
                        code: Code::Unavailable as u32,
                        ..call_frame(Kind::End, 0, 1, 5)
                    },
                    &status_block(&going_away(), &[], limit),
                ),
            ],
        ),
        (
            "control-frames",
            vec![
                header_only(Header {
                    call_id: 6,
                    code: Code::DeadlineExceeded as u32,
                    ..Header::new(Kind::Cancel)
                }),
                header_only(Header {
                    call_id: 7,
                    code: 32768,
                    ..Header::new(Kind::Window)
                }),
                header_only(Header {
                    credits: 32,
                    ..Header::new(Kind::Credit)
                }),
                header_only(Header {
                    call_id: 0x0123_4567_89ab_cdef,
                    ..Header::new(Kind::Ping)
                }),
                header_only(Header {
                    flags: flags::ACK,
                    call_id: 0x0123_4567_89ab_cdef,
                    ..Header::new(Kind::Ping)
                }),
            ],
        ),
    ]
}

// ----- driving two connections through the examples -----------------------------------------

type Core = Connection<u32, Vec<u8>>;

/// Everything `core` can send now, in order.
fn transmit(core: &mut Core) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while let Some((mut buf, len)) = core.poll_transmit(&mut || Some(vec![0u8; SLOT])) {
        buf.truncate(len);
        frames.push(buf);
    }
    frames
}

/// Delivers `frames` to `core`, releasing each slot at once (as the runtime does once a frame
/// is handled); returns a short description of each event that is not `None`.
fn deliver(core: &mut Core, frames: &[Vec<u8>]) -> Vec<String> {
    let mut events = Vec::new();
    for f in frames {
        let e = core.on_frame(f).expect("a valid frame");
        let described = match e {
            Event::None => None,
            Event::Opened { call, method, .. } => Some(format!("opened {call} {method:#x}")),
            Event::Headers { call, .. } => Some(format!("headers {call}")),
            Event::Message {
                call, end, opened, ..
            } => Some(format!(
                "message {call} opened={} end={end}",
                opened.is_some()
            )),
            Event::HalfClosed { call } => Some(format!("half-closed {call}")),
            Event::Ended { call, code, .. } => Some(format!("ended {call} {}", code.name())),
            Event::Cancelled { call, .. } => Some(format!("cancelled {call}")),
            Event::Refused { call, .. } => Some(format!("refused {call}")),
            Event::Goodbye {
                last_call,
                unprocessed,
            } => Some(format!(
                "goodbye {last_call} unprocessed {:?}",
                unprocessed.iter().map(|(id, _)| *id).collect::<Vec<_>>()
            )),
            Event::Pong { data } => Some(format!("pong {data:#x}")),
        };
        events.extend(described);
        core.released(1);
    }
    events
}

fn send(core: &mut Core, call: u64, kind: Kind, fl: u16, payload: &[u8], method: u32, t: u32) {
    let out = Outgoing {
        kind,
        flags: fl,
        code: 0,
        payload: Payload::Bytes(payload.to_vec()),
    };
    assert!(
        core.send(call, out, method, t).expect("accepted").is_none(),
        "byte payloads are queued"
    );
}

/// The calls of section 17, as a client and a server with the section's parameters exchange
/// them: the dumps by example name.
fn exchanged_examples() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
    let mut client: Core = Connection::new(Role::Client, HELLO, HELLO, SLOT);
    let mut server: Core = Connection::new(Role::Server, HELLO, HELLO, SLOT);
    let mut out = BTreeMap::new();

    // Call 1: unary, the fast path.
    let call = client.open_call(1).unwrap();
    assert_eq!(call, 1);
    send(
        &mut client,
        call,
        Kind::Message,
        flags::END,
        ADD_REQUEST,
        ADD,
        5_000_000,
    );
    let request = transmit(&mut client);
    assert_eq!(
        deliver(&mut server, &request),
        ["message 1 opened=true end=true"]
    );
    send(
        &mut server,
        call,
        Kind::Message,
        flags::END,
        ADD_REPLY,
        0,
        0,
    );
    let reply = transmit(&mut server);
    assert_eq!(
        deliver(&mut client, &reply),
        ["message 1 opened=false end=true"]
    );
    out.insert("unary-request", request);
    out.insert("unary-reply", reply);

    // Call 2: metadata both ways, a response stream of one message, trailers.
    let call = client.open_call(2).unwrap();
    assert_eq!(call, 2);
    send(
        &mut client,
        call,
        Kind::Headers,
        0,
        &request_headers(),
        ECHO,
        250_000,
    );
    send(&mut client, call, Kind::Message, flags::END, ECHO_HI, 0, 0);
    let request = transmit(&mut client);
    assert_eq!(
        deliver(&mut server, &request),
        ["opened 2 0x2741ef6", "message 2 opened=false end=true"]
    );
    let served_by = block(&[("x-served-by", b"s1")]);
    send(&mut server, call, Kind::Headers, 0, &served_by, 0, 0);
    send(&mut server, call, Kind::Message, 0, ECHO_HI, 0, 0);
    let ok = Status::new(Code::Ok, "");
    server
        .end_call(call, &ok, &[("x-cost", b"7")])
        .expect("ended");
    let response = transmit(&mut server);
    assert_eq!(
        deliver(&mut client, &response),
        [
            "headers 2",
            "message 2 opened=false end=false",
            "ended 2 OK"
        ]
    );
    out.insert("metadata-request", request);
    out.insert("metadata-response", response);

    // Call 3: an unknown method, answered with a trailers-only END.
    let call = client.open_call(3).unwrap();
    send(
        &mut client,
        call,
        Kind::Message,
        flags::END,
        &[],
        NO_SUCH_METHOD,
        0,
    );
    let mut frames = transmit(&mut client);
    deliver(&mut server, &frames);
    server.end_call(call, &unimplemented(), &[]).expect("ended");
    let end = transmit(&mut server);
    assert_eq!(deliver(&mut client, &end), ["ended 3 UNIMPLEMENTED"]);
    frames.extend(end);
    out.insert("error-call", frames);

    // Call 4: a request of two segments.
    let call = client.open_call(4).unwrap();
    send(
        &mut client,
        call,
        Kind::Message,
        flags::END,
        &[7; BIG],
        ECHO,
        0,
    );
    let segments = transmit(&mut client);
    assert_eq!(
        segments.iter().map(Vec::len).collect::<Vec<_>>(),
        [8192, 40 + 1848]
    );
    assert_eq!(
        deliver(&mut server, &segments),
        ["message 4 opened=true end=true"]
    );
    out.insert(
        "segmented-request-headers",
        segments.iter().map(|s| s[..HEADER_LEN].to_vec()).collect(),
    );

    // GOODBYE, crossed by call 5's opening: refused, reported to the client as not processed.
    server.goodbye();
    let goodbye = transmit(&mut server);
    let call = client.open_call(5).unwrap();
    send(
        &mut client,
        call,
        Kind::Message,
        flags::END,
        ECHO_HI,
        ECHO,
        0,
    );
    let crossing = transmit(&mut client);
    assert!(deliver(&mut server, &crossing).is_empty(), "not dispatched");
    let refusal = transmit(&mut server);
    assert_eq!(
        deliver(&mut client, &goodbye),
        ["goodbye 4 unprocessed [5]"]
    );
    assert!(
        deliver(&mut client, &refusal).is_empty(),
        "the END of a call given back is discarded"
    );
    assert_eq!(client.open_call(6), Err(SendError::GoingAway));
    // Call 4, at or below the GOODBYE's call id, still completes.
    send(&mut server, 4, Kind::Message, flags::END, ECHO_HI, 0, 0);
    let reply = transmit(&mut server);
    assert_eq!(
        deliver(&mut client, &reply),
        ["message 4 opened=false end=true"]
    );
    assert_eq!((client.open_calls(), server.open_calls()), (0, 0));
    out.insert(
        "goodbye",
        goodbye.into_iter().chain(crossing).chain(refusal).collect(),
    );
    out
}

// ----- the tests ----------------------------------------------------------------------------

#[test]
fn the_violation_table_lists_every_violation_in_order() {
    let names: Vec<&str> = Violation::ALL.iter().map(|v| v.name()).collect();
    assert_eq!(violation_table(), names);
}

#[test]
fn every_example_dump_is_what_the_encoders_build() {
    let docs = examples();
    let built = encoded_examples();
    for (name, frames) in &built {
        assert_example(&docs, name, frames);
    }
    for name in docs.keys() {
        assert!(
            built.iter().any(|(n, _)| n == name),
            "example `{name}` is not checked by this test"
        );
    }
}

#[test]
fn the_call_examples_are_what_two_connections_exchange() {
    let docs = examples();
    for (name, frames) in exchanged_examples() {
        assert_example(&docs, name, &frames);
    }
}

#[test]
fn the_hello_example_decodes_to_the_parameters() {
    let frame = &examples()["hello"][0];
    assert_eq!(frame.len(), HEADER_LEN + HELLO_LEN);
    assert_eq!(Hello::from_frame(frame).expect("valid"), HELLO);
    assert_eq!(frame[HEADER_LEN..], HELLO.encode(), "the RDMA private data");
}

#[test]
fn the_control_examples_follow_the_thresholds() {
    // CREDIT: 64 slots, so a CREDIT goes once 32 credits are owed, not before.
    let mut side: Core = Connection::new(Role::Server, HELLO, HELLO, SLOT);
    side.released(31);
    assert!(transmit(&mut side).is_empty());
    side.released(1);
    assert_eq!(transmit(&mut side), examples()["control-frames"][2..3]);

    // WINDOW: half the 64 KiB window consumed (two messages of 16368 bytes, 16384 each).
    let mut client: Core = Connection::new(Role::Client, HELLO, HELLO, SLOT);
    let mut server: Core = Connection::new(Role::Server, HELLO, HELLO, SLOT);
    let call = client.open_call(1).unwrap();
    send(&mut client, call, Kind::Headers, 0, &[], ECHO, 0);
    send(&mut client, call, Kind::Message, 0, &[1; 16368], 0, 0);
    send(&mut client, call, Kind::Message, 0, &[2; 16368], 0, 0);
    let frames = transmit(&mut client);
    deliver(&mut server, &frames);
    server.consumed(call, Core::message_cost(16368));
    assert!(transmit(&mut server).is_empty(), "a quarter of the window");
    server.consumed(call, Core::message_cost(16368));
    let window = transmit(&mut server);
    assert_eq!(window.len(), 1);
    let h = Header::decode(&window[0]).unwrap();
    assert_eq!((h.kind, h.call_id, h.code), (Kind::Window, call, 32768));
}
