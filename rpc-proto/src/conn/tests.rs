//! The connection core driven against itself (client and server in memory), and one test per
//! row of the violation table, each named after its row.

use super::*;
use crate::MemoryBudget;
use std::time::Duration;

type Core = Connection<u32, Vec<u8>>;

pub(crate) fn hello() -> Hello {
    Hello {
        slot_count: 8,
        slot_size: 256,
        max_message_size: 4096,
        max_calls: 4,
        call_window: 1024,
        max_metadata_size: 1024,
    }
}

fn pair() -> (Core, Core) {
    pair_with(hello(), hello())
}

fn pair_with(client: Hello, server: Hello) -> (Core, Core) {
    (
        Connection::new(Role::Client, client, server, server.slot_size as usize),
        Connection::new(Role::Server, server, client, client.slot_size as usize),
    )
}

/// What an event says, owned, for assertions.
#[derive(Debug, PartialEq, Eq)]
enum Ev {
    None,
    Opened(u64, u32, u32, Vec<(String, Vec<u8>)>),
    Headers(u64, Vec<(String, Vec<u8>)>),
    Message(u64, Option<(u32, u32)>, Vec<u8>, bool, Option<u32>),
    HalfClosed(u64),
    Ended(u64, Code, Vec<(String, Vec<u8>)>, u32),
    Cancelled(u64, Code, u32),
    Refused(u64, Code, u32),
    Goodbye(u64, Vec<u64>),
    Pong(u64),
}

fn block(b: &[u8]) -> Vec<(String, Vec<u8>)> {
    metadata::entries(b)
        .map(|e| e.map(|(n, v)| (n.to_string(), v.to_vec())).unwrap())
        .collect()
}

fn own(e: Event<'_, u32>) -> Ev {
    match e {
        Event::None => Ev::None,
        Event::Opened {
            call,
            method,
            timeout_us,
            headers,
        } => Ev::Opened(call, method, timeout_us, block(&headers)),
        Event::Headers { call, headers } => Ev::Headers(call, block(&headers)),
        Event::Message {
            call,
            opened,
            body,
            end,
            ended,
            ..
        } => Ev::Message(call, opened, body.to_vec(), end, ended),
        Event::HalfClosed { call } => Ev::HalfClosed(call),
        Event::Ended {
            call,
            code,
            trailers,
            user,
            ..
        } => Ev::Ended(call, code, block(&trailers), user),
        Event::Cancelled { call, reason, user } => Ev::Cancelled(call, reason, user),
        Event::Refused { call, status, user } => Ev::Refused(call, status.code(), user),
        Event::Goodbye {
            last_call,
            unprocessed,
        } => Ev::Goodbye(
            last_call,
            unprocessed.into_iter().map(|(id, _)| id).collect(),
        ),
        Event::Pong { data } => Ev::Pong(data),
    }
}

/// A wire between two cores: frames posted by one side, in order.
#[derive(Default)]
struct Wire {
    frames: VecDeque<Vec<u8>>,
}

impl Wire {
    fn post(&mut self, (mut buf, len): (Vec<u8>, usize)) {
        buf.truncate(len);
        self.frames.push_back(buf);
    }

    /// Moves everything `from` can transmit onto the wire.
    fn flush(&mut self, from: &mut Core) {
        let size = from.max_segment() + HEADER_LEN;
        while let Some(f) = from.poll_transmit(&mut || Some(vec![0; size])) {
            self.post(f);
        }
    }

    /// Delivers every frame on the wire to `to`, releasing each slot at once.
    fn deliver(&mut self, to: &mut Core) -> Vec<Ev> {
        let mut events = Vec::new();
        while let Some(f) = self.frames.pop_front() {
            let e = own(to.on_frame(&f).expect("valid frame"));
            to.released(1);
            if e != Ev::None {
                events.push(e);
            }
        }
        events
    }
}

pub(crate) fn out(
    core: &Core,
    kind: Kind,
    fl: u16,
    code: u32,
    payload: &[u8],
) -> Outgoing<Vec<u8>> {
    let payload = if payload.len() <= core.max_segment() {
        let mut buf = vec![0; HEADER_LEN + core.max_segment()];
        buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
        Payload::InBuffer(buf, payload.len())
    } else {
        Payload::Bytes(payload.to_vec())
    };
    Outgoing {
        kind,
        flags: fl,
        code,
        payload,
    }
}

type Spec<'a> = (Kind, u16, u32, &'a [u8]);

fn send(wire: &mut Wire, core: &mut Core, call: u64, spec: Spec<'_>, method: u32, t: u32) {
    let (kind, fl, code, payload) = spec;
    let o = out(core, kind, fl, code, payload);
    if let Some(f) = core.send(call, o, method, t).expect("send accepted") {
        wire.post(f);
    }
    wire.flush(core);
}

const ADD: u32 = 0x79c7_16c3;

#[test]
fn a_unary_call_is_one_frame_each_way() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(7).unwrap();
    assert_eq!(call, 1);
    let req = (Kind::Message, flags::END, 0, &[8, 2, 16, 3][..]);
    send(&mut up, &mut client, call, req, ADD, 5_000_000);
    assert_eq!(up.frames.len(), 1);
    assert_eq!(
        up.deliver(&mut server),
        vec![Ev::Message(
            1,
            Some((ADD, 5_000_000)),
            vec![8, 2, 16, 3],
            true,
            None
        )]
    );
    let reply = (Kind::Message, flags::END, 0, &[8, 5][..]);
    send(&mut down, &mut server, call, reply, 0, 0);
    assert_eq!(down.frames.len(), 1);
    assert_eq!(
        down.frames[0][6], 1,
        "the reply returns the request's credit"
    );
    assert_eq!(
        down.deliver(&mut client),
        vec![Ev::Message(1, None, vec![8, 5], true, Some(7))]
    );
    assert_eq!((client.open_calls(), server.open_calls()), (0, 0));
    assert_eq!(client.send_credits(), 8);
}

#[test]
fn a_call_with_metadata_streams_and_trailers() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(1).unwrap();
    let mut headers = Vec::new();
    metadata::push_entry(&mut headers, "x-user", b"alice");
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Headers, 0, 0, &headers),
        ADD,
        0,
    );
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, 0, 0, b"one"),
        0,
        0,
    );
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, 0, 0, b"two"),
        0,
        0,
    );
    send(&mut up, &mut client, call, (Kind::End, 0, 0, b""), 0, 0);
    assert_eq!(
        up.deliver(&mut server),
        vec![
            Ev::Opened(1, ADD, 0, vec![("x-user".into(), b"alice".to_vec())]),
            Ev::Message(1, None, b"one".to_vec(), false, None),
            Ev::Message(1, None, b"two".to_vec(), false, None),
            Ev::HalfClosed(1),
        ]
    );
    server.set_user(call, 1);
    send(
        &mut down,
        &mut server,
        call,
        (Kind::Headers, 0, 0, &headers),
        0,
        0,
    );
    send(
        &mut down,
        &mut server,
        call,
        (Kind::Message, 0, 0, b"r"),
        0,
        0,
    );
    let status = WireStatus::new(Code::NotFound, "no such key: 100%").with_details(vec![1, 2, 3]);
    if let Some(f) = server
        .end_call(call, &status, &[("x-trailer", b"t")])
        .unwrap()
    {
        down.post(f);
    }
    down.flush(&mut server);
    assert_eq!(
        down.deliver(&mut client),
        vec![
            Ev::Headers(1, vec![("x-user".into(), b"alice".to_vec())]),
            Ev::Message(1, None, b"r".to_vec(), false, None),
            Ev::Ended(
                1,
                Code::NotFound,
                vec![
                    ("grpc-message".into(), b"no such key: 100%25".to_vec()),
                    ("grpc-status-details-bin".into(), vec![1, 2, 3]),
                    ("x-trailer".into(), b"t".to_vec()),
                ],
                1
            ),
        ]
    );
    assert_eq!((client.open_calls(), server.open_calls()), (0, 0));
}

#[test]
fn large_messages_are_segmented_and_reassembled() {
    let (mut client, mut server) = pair();
    let mut up = Wire::default();
    let call = client.open_call(1).unwrap();
    let body: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, flags::END, 0, &body),
        3,
        0,
    );
    assert_eq!(up.frames.len(), 1000usize.div_ceil(216));
    assert_eq!(
        up.deliver(&mut server),
        vec![Ev::Message(1, Some((3, 0)), body, true, None)]
    );
}

#[test]
fn a_slow_call_does_not_block_others() {
    // Call 1 exhausts its window; call 2 still gets through.
    let (mut client, mut server) = pair();
    let mut up = Wire::default();
    let slow = client.open_call(1).unwrap();
    let fast = client.open_call(2).unwrap();
    let big = vec![1u8; 1100];
    send(
        &mut up,
        &mut client,
        slow,
        (Kind::Message, 0, 0, &big),
        1,
        0,
    );
    send(
        &mut up,
        &mut client,
        slow,
        (Kind::Message, 0, 0, b"queued"),
        0,
        0,
    );
    send(
        &mut up,
        &mut client,
        fast,
        (Kind::Message, flags::END, 0, b"x"),
        1,
        0,
    );
    let events = up.deliver(&mut server);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(&events[1], Ev::Message(2, _, b, true, None) if b == b"x"));
    // The server consumes call 1's message: WINDOW, then the queued message flows.
    server.consumed(slow, Core::message_cost(big.len()));
    let mut down = Wire::default();
    down.flush(&mut server);
    assert_eq!(down.frames[0][3], Kind::Window as u8);
    assert!(down.deliver(&mut client).is_empty());
    up.flush(&mut client);
    assert_eq!(
        up.deliver(&mut server),
        vec![Ev::Message(1, None, b"queued".to_vec(), false, None)]
    );
}

#[test]
fn cancel_discards_frames_in_flight_both_ways() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(9).unwrap();
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, 0, 0, b"a"),
        1,
        0,
    );
    up.deliver(&mut server);
    server.set_user(call, 9);
    // The server replies while the client cancels: both frames cross.
    send(
        &mut down,
        &mut server,
        call,
        (Kind::Message, 0, 0, b"r"),
        0,
        0,
    );
    assert_eq!(client.cancel(call, Code::DeadlineExceeded), Some(9));
    assert_eq!(client.open_calls(), 1, "counted until the CANCEL leaves");
    up.flush(&mut client);
    assert_eq!(client.open_calls(), 0);
    assert!(down.deliver(&mut client).is_empty(), "late reply discarded");
    assert_eq!(
        up.deliver(&mut server),
        vec![Ev::Cancelled(1, Code::DeadlineExceeded, 9)]
    );
    assert_eq!(server.open_calls(), 0);
    assert_eq!(
        server
            .send(call, out(&server, Kind::End, 0, 0, b""), 0, 0)
            .unwrap_err(),
        SendError::NotOpen
    );
}

#[test]
fn credits_come_back_without_traffic_in_the_other_direction() {
    // A client streams messages; the server never answers: CREDIT frames keep it going.
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(1).unwrap();
    for i in 0..40u8 {
        send(
            &mut up,
            &mut client,
            call,
            (Kind::Message, 0, 0, &[i]),
            1,
            0,
        );
        for e in up.deliver(&mut server) {
            if let Ev::Message(id, _, b, _, _) = e {
                server.consumed(id, Core::message_cost(b.len()));
            }
        }
        down.flush(&mut server);
        down.deliver(&mut client);
    }
    assert!(client.send_credits() >= 2);
}

#[test]
fn oversized_messages_are_refused_not_fatal() {
    let (mut client, mut server) = pair_with(
        hello(),
        Hello {
            max_message_size: 64,
            ..hello()
        },
    );
    let mut down = Wire::default();
    let call = client.open_call(1).unwrap();
    // The client's own check refuses it locally first.
    let big = vec![0u8; 100];
    assert!(matches!(
        client.send(call, out(&client, Kind::Message, 0, 0, &big), 1, 0),
        Err(SendError::TooLarge(_))
    ));
    // A client that does not check: the server answers RESOURCE_EXHAUSTED.
    let mut frame = vec![0u8; HEADER_LEN + 100];
    Header {
        flags: flags::OPEN,
        call_id: 1,
        code: 1,
        message_len: 100,
        segment_len: 100,
        ..Header::new(Kind::Message)
    }
    .encode(&mut frame);
    assert_eq!(own(server.on_frame(&frame).unwrap()), Ev::None);
    down.flush(&mut server);
    let events = down.deliver(&mut client);
    assert!(
        matches!(&events[..], [Ev::Ended(1, Code::ResourceExhausted, t, 1)] if t[0].0 == "grpc-message"),
        "{events:?}"
    );
}

#[test]
fn goodbye_refuses_later_calls_as_unprocessed() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let first = client.open_call(1).unwrap();
    send(
        &mut up,
        &mut client,
        first,
        (Kind::Message, flags::END, 0, b"1"),
        1,
        0,
    );
    up.deliver(&mut server);
    server.goodbye();
    down.flush(&mut server);
    // Crossing the GOODBYE: call 2 leaves before the client hears of it.
    let second = client.open_call(2).unwrap();
    send(
        &mut up,
        &mut client,
        second,
        (Kind::Message, flags::END, 0, b"2"),
        1,
        0,
    );
    assert_eq!(down.deliver(&mut client), vec![Ev::Goodbye(1, vec![2])]);
    assert_eq!(client.open_call(3), Err(SendError::GoingAway));
    assert!(
        up.deliver(&mut server).is_empty(),
        "call 2 is refused, not dispatched"
    );
    // Call 1 still completes.
    send(
        &mut down,
        &mut server,
        first,
        (Kind::Message, flags::END, 0, b"ok"),
        0,
        0,
    );
    assert_eq!(
        down.deliver(&mut client),
        vec![Ev::Message(1, None, b"ok".to_vec(), true, Some(1))]
    );
}

#[test]
fn ping_is_answered_and_a_flood_queues_one_answer() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    client.ping(42);
    up.flush(&mut client);
    assert!(up.deliver(&mut server).is_empty());
    down.flush(&mut server);
    assert_eq!(down.deliver(&mut client), vec![Ev::Pong(42)]);
    for i in 0..5 {
        let mut f = [0u8; HEADER_LEN];
        Header {
            call_id: i,
            ..Header::new(Kind::Ping)
        }
        .encode(&mut f);
        server.on_frame(&f).unwrap();
        server.released(1);
    }
    // (Not delivered: the client did not send these PINGs, the credits would not add up.)
    down.flush(&mut server);
    assert_eq!(down.frames.len(), 1, "one answer");
    let h = Header::decode(&down.frames[0]).unwrap();
    assert_eq!((h.kind, h.flags, h.call_id), (Kind::Ping, flags::ACK, 4));
}

#[test]
fn at_capacity_the_client_opens_no_more() {
    let (mut client, _server) = pair();
    for i in 0..4 {
        client.open_call(i).unwrap();
    }
    assert_eq!(client.open_call(9), Err(SendError::AtCapacity));
}

#[test]
fn status_blocks_fit_the_limit() {
    let long = "é".repeat(2000);
    let b = status_block(
        &WireStatus::new(Code::Internal, long).with_details(vec![0; 2000]),
        &[],
        1024,
    );
    assert!(b.len() <= 1024);
    let entries = block(&b);
    assert_eq!(entries.len(), 1, "details dropped, message cut");
    assert!(metadata::percent_decode(&entries[0].1).starts_with("éé"));
}

// ----- the violation table: one test per row ------------------------------------------------

fn frame(h: Header, payload: &[u8]) -> Vec<u8> {
    h.to_frame(payload)
}

fn open_msg(id: u64, payload: &[u8]) -> Vec<u8> {
    frame(
        Header {
            flags: flags::OPEN,
            call_id: id,
            code: 1,
            message_len: payload.len() as u32,
            ..Header::new(Kind::Message)
        },
        payload,
    )
}

fn server() -> Core {
    pair().1
}

/// Feeds frames (releasing each slot) and returns the violation the last one caused.
fn violation_of(core: &mut Core, frames: &[Vec<u8>]) -> Violation {
    let (last, rest) = frames.split_last().unwrap();
    for f in rest {
        core.on_frame(f).expect("frames before the last are valid");
        core.released(1);
    }
    match core.on_frame(last) {
        Err(Error::Protocol { violation, .. }) => violation,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn violation_short_frame() {
    assert_eq!(
        violation_of(&mut server(), &[vec![b'R'; 39]]),
        Violation::ShortFrame
    );
}

#[test]
fn violation_length_mismatch() {
    let mut f = open_msg(1, b"abcd");
    f.pop();
    assert_eq!(violation_of(&mut server(), &[f]), Violation::LengthMismatch);
}

#[test]
fn violation_bad_magic() {
    let mut f = open_msg(1, b"");
    f[1] = b'Q';
    assert_eq!(violation_of(&mut server(), &[f]), Violation::BadMagic);
}

#[test]
fn violation_bad_version() {
    let mut f = open_msg(1, b"");
    f[2] = 1;
    assert_eq!(violation_of(&mut server(), &[f]), Violation::BadVersion);
}

#[test]
fn violation_unknown_kind() {
    let mut f = open_msg(1, b"");
    f[3] = 0;
    assert_eq!(violation_of(&mut server(), &[f]), Violation::UnknownKind);
}

#[test]
fn violation_bad_flags() {
    let f = frame(
        Header {
            flags: flags::END,
            call_id: 1,
            ..Header::new(Kind::Cancel)
        },
        b"",
    );
    assert_eq!(violation_of(&mut server(), &[f]), Violation::BadFlags);
}

#[test]
fn violation_nonzero_field() {
    let f = frame(
        Header {
            call_id: 5,
            ..Header::new(Kind::Credit)
        },
        b"",
    );
    assert_eq!(violation_of(&mut server(), &[f]), Violation::NonzeroField);
    // A client's END with a status.
    let end = frame(
        Header {
            call_id: 1,
            code: 3,
            ..Header::new(Kind::End)
        },
        b"",
    );
    assert_eq!(
        violation_of(&mut server(), &[open_msg(1, b"x"), end]),
        Violation::NonzeroField
    );
}

#[test]
fn violation_segment_bounds() {
    let mut f = open_msg(1, b"abcd");
    f[24] = 3; // message_len 3 < segment_len 4
    assert_eq!(violation_of(&mut server(), &[f]), Violation::SegmentBounds);
}

#[test]
fn violation_frame_too_large() {
    let f = open_msg(1, &[0; 256 - HEADER_LEN + 1]);
    assert_eq!(violation_of(&mut server(), &[f]), Violation::FrameTooLarge);
}

#[test]
fn violation_empty_segment() {
    let f = frame(
        Header {
            flags: flags::OPEN,
            call_id: 1,
            message_len: 10,
            ..Header::new(Kind::Message)
        },
        b"",
    );
    assert_eq!(violation_of(&mut server(), &[f]), Violation::EmptySegment);
}

#[test]
fn violation_hello_repeated() {
    let f = hello().to_frame().to_vec();
    assert_eq!(violation_of(&mut server(), &[f]), Violation::HelloRepeated);
}

#[test]
fn violation_credit_overrun() {
    // Eight slots, none released: seven PINGs leave the client its reserve credit, a CREDIT
    // (which may spend it) leaves none, and any further frame overruns.
    let mut s = server();
    s.ping(1);
    assert!(s.poll_transmit(&mut || Some(vec![0; 256])).is_some());
    let ping = frame(Header::new(Kind::Ping), b"");
    let credit = frame(
        Header {
            credits: 1,
            ..Header::new(Kind::Credit)
        },
        b"",
    );
    for _ in 0..7 {
        s.on_frame(&ping).unwrap();
    }
    s.on_frame(&credit).unwrap();
    match s.on_frame(&credit) {
        Err(Error::Protocol { violation, .. }) => assert_eq!(violation, Violation::CreditOverrun),
        other => panic!("{other:?}"),
    }
}

#[test]
fn violation_reserve_spent() {
    let frames: Vec<_> = (1..=8).map(|i| open_msg(i, b"x")).collect();
    let mut s = pair_with(
        hello(),
        Hello {
            max_calls: 100,
            ..hello()
        },
    )
    .1;
    for f in &frames[..7] {
        s.on_frame(f).unwrap();
    }
    match s.on_frame(&frames[7]) {
        Err(Error::Protocol { violation, .. }) => assert_eq!(violation, Violation::ReserveSpent),
        other => panic!("{other:?}"),
    }
}

#[test]
fn violation_credit_excess() {
    let f = frame(
        Header {
            credits: 1,
            ..Header::new(Kind::Credit)
        },
        b"",
    );
    // The server sent nothing: the client cannot owe it a credit.
    assert_eq!(violation_of(&mut server(), &[f]), Violation::CreditExcess);
}

#[test]
fn violation_empty_credit() {
    let f = frame(Header::new(Kind::Credit), b"");
    assert_eq!(violation_of(&mut server(), &[f]), Violation::EmptyCredit);
}

#[test]
fn violation_call_id_zero() {
    let f = open_msg(0, b"x");
    assert_eq!(violation_of(&mut server(), &[f]), Violation::CallIdZero);
}

#[test]
fn violation_call_id_order() {
    let frames = [open_msg(5, b"x"), open_msg(5, b"y")];
    assert_eq!(violation_of(&mut server(), &frames), Violation::CallIdOrder);
    let frames = [open_msg(5, b"x"), open_msg(3, b"y")];
    assert_eq!(violation_of(&mut server(), &frames), Violation::CallIdOrder);
}

#[test]
fn violation_unknown_call() {
    let f = frame(
        Header {
            call_id: 1,
            message_len: 1,
            ..Header::new(Kind::Message)
        },
        b"x",
    );
    assert_eq!(violation_of(&mut server(), &[f]), Violation::UnknownCall);
}

#[test]
fn violation_too_many_calls() {
    let frames: Vec<_> = (1..=5).map(|i| open_msg(i, b"x")).collect();
    assert_eq!(
        violation_of(&mut server(), &frames),
        Violation::TooManyCalls
    );
}

#[test]
fn violation_wrong_role() {
    let (mut client, _) = pair();
    client.open_call(1).unwrap();
    assert_eq!(
        violation_of(&mut client, &[open_msg(1, b"x")]),
        Violation::WrongRole
    );
}

#[test]
fn violation_headers_out_of_order() {
    let headers = frame(
        Header {
            call_id: 1,
            ..Header::new(Kind::Headers)
        },
        b"",
    );
    assert_eq!(
        violation_of(&mut server(), &[open_msg(1, b"x"), headers.clone()]),
        Violation::HeadersOutOfOrder
    );
    // Response headers after a message.
    let (mut client, _) = pair();
    client.open_call(1).unwrap();
    let msg = frame(
        Header {
            call_id: 1,
            message_len: 1,
            ..Header::new(Kind::Message)
        },
        b"r",
    );
    assert_eq!(
        violation_of(&mut client, &[msg, headers]),
        Violation::HeadersOutOfOrder
    );
}

#[test]
fn violation_after_end() {
    let ending = frame(
        Header {
            flags: flags::OPEN | flags::END,
            call_id: 1,
            code: 1,
            message_len: 1,
            ..Header::new(Kind::Message)
        },
        b"x",
    );
    let more = frame(
        Header {
            call_id: 1,
            message_len: 1,
            ..Header::new(Kind::Message)
        },
        b"y",
    );
    assert_eq!(
        violation_of(&mut server(), &[ending, more]),
        Violation::AfterEnd
    );
}

#[test]
fn violation_window_overrun() {
    // A 1,024-byte window: a 1,000-byte message (cost 1,016) leaves 8; the next one may go
    // (window > 0), and spends it below zero; a third is an overrun.
    let big = Hello {
        slot_size: 2048,
        ..hello()
    };
    let mut s = pair_with(big, big).1;
    let msg = |first: bool| {
        frame(
            Header {
                flags: if first { flags::OPEN } else { 0 },
                call_id: 1,
                code: u32::from(first),
                message_len: 1000,
                ..Header::new(Kind::Message)
            },
            &[0; 1000],
        )
    };
    assert_eq!(
        violation_of(&mut s, &[msg(true), msg(false), msg(false)]),
        Violation::WindowOverrun
    );
}

#[test]
fn violation_window_excess() {
    let window = frame(
        Header {
            call_id: 1,
            code: MAX_WINDOW,
            ..Header::new(Kind::Window)
        },
        b"",
    );
    assert_eq!(
        violation_of(&mut server(), &[open_msg(1, b"x"), window]),
        Violation::WindowExcess
    );
}

fn segment(id: u64, offset: u32, len: u32, total: u32) -> Vec<u8> {
    frame(
        Header {
            flags: flags::OPEN,
            call_id: id,
            code: 1,
            message_len: total,
            segment_offset: offset,
            ..Header::new(Kind::Message)
        },
        &vec![7; len as usize],
    )
}

#[test]
fn violation_segment_restart() {
    let frames = [segment(1, 0, 10, 20), {
        let mut f = frame(
            Header {
                call_id: 1,
                message_len: 5,
                ..Header::new(Kind::Message)
            },
            &[1; 5],
        );
        f[4] = 0;
        f
    }];
    assert_eq!(
        violation_of(&mut server(), &frames),
        Violation::SegmentRestart
    );
}

#[test]
fn violation_segment_orphan() {
    let f = frame(
        Header {
            call_id: 1,
            message_len: 10,
            segment_offset: 5,
            ..Header::new(Kind::Message)
        },
        &[1; 5],
    );
    assert_eq!(
        violation_of(&mut server(), &[open_msg(1, b"x"), f]),
        Violation::SegmentOrphan
    );
}

#[test]
fn violation_segment_gap() {
    let frames = [segment(1, 0, 10, 30), segment(1, 11, 10, 30)];
    assert_eq!(violation_of(&mut server(), &frames), Violation::SegmentGap);
}

#[test]
fn violation_segment_mismatch() {
    let frames = [segment(1, 0, 10, 30), segment(1, 10, 10, 31)];
    assert_eq!(
        violation_of(&mut server(), &frames),
        Violation::SegmentMismatch
    );
}

#[test]
fn violation_malformed_metadata() {
    let f = frame(
        Header {
            flags: flags::OPEN,
            call_id: 1,
            code: 1,
            message_len: 3,
            ..Header::new(Kind::Headers)
        },
        &[1, 0, b'A'],
    );
    assert_eq!(
        violation_of(&mut server(), &[f]),
        Violation::MalformedMetadata
    );
}

#[test]
fn violation_goodbye_raised() {
    let (mut client, _) = pair();
    let bye = |last| {
        frame(
            Header {
                call_id: last,
                ..Header::new(Kind::Goodbye)
            },
            b"",
        )
    };
    assert_eq!(
        violation_of(&mut client, &[bye(3), bye(4)]),
        Violation::GoodbyeRaised
    );
}

// ----- for the randomized simulation (`pair/sim.rs`) ----------------------------------------

impl<C, P> Connection<C, P> {
    /// The state the simulation prints when it finds no progress: credits, queues and each
    /// call's record.
    pub(crate) fn describe(&self) -> String {
        let mut calls: Vec<_> = self
            .calls
            .iter()
            .map(|(id, c)| {
                (
                    id,
                    c.state,
                    c.send_window,
                    c.recv_window,
                    c.window_owed,
                    c.queued(),
                    c.recv_open,
                    c.send_open,
                    c.partial().is_some(),
                )
            })
            .collect();
        calls.sort_unstable_by_key(|c| *c.0);
        format!(
            "credits {} owed {} peer credits {} ready {:?} control {:?} calls (id, state, send \
             window, receive window, window owed, queued, receiving, sending, reassembling) \
             {calls:?}",
            self.send_credits, self.owed, self.peer_credits, self.ready, self.control,
        )
    }

    /// The calls the core keeps a record of (open, or cancelled with the CANCEL unsent).
    pub(crate) fn call_records(&self) -> usize {
        self.calls.len()
    }
}

// ----- memory (PROTOCOL.md §15) --------------------------------------------------------------

/// The call records a server reserves when its first call opens, and keeps.
const RECORDS: usize = RECORD_CHUNK as usize * CALL_RECORD;

/// A server core whose memory comes from a budget with no floor and a share of `share` bytes
/// beyond its first chunk of call records.
fn server_with_share(share: usize) -> (Core, Core, MemoryBudget) {
    let (client, mut server) = pair();
    let budget = MemoryBudget::with_floor(1 << 20, 0);
    server.set_memory(budget.admit_with_share(0, share + RECORDS).unwrap());
    (client, server, budget)
}

/// A server reserves call records as calls open, a chunk at a time, not at admission: an idle
/// connection holds none; a call that finds no memory for its record is refused
/// RESOURCE_EXHAUSTED, and the connection goes on.
#[test]
fn call_records_are_reserved_as_calls_open() {
    let wide = Hello {
        max_calls: 16,
        slot_count: 64,
        ..hello()
    };
    let (mut client, mut server) = pair_with(wide, wide);
    let budget = MemoryBudget::with_floor(1 << 20, 0);
    server.set_memory(budget.admit_with_share(0, RECORDS).unwrap());
    assert_eq!(budget.used(), 0, "an idle connection holds no records");
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let calls: Vec<u64> = (0..=RECORD_CHUNK)
        .map(|user| {
            let call = client.open_call(user).unwrap();
            send(
                &mut up,
                &mut client,
                call,
                (Kind::Headers, 0, 0, &[]),
                ADD,
                0,
            );
            call
        })
        .collect();
    let delivered = up.deliver(&mut server);
    assert_eq!(delivered.len(), RECORD_CHUNK as usize, "{delivered:?}");
    assert_eq!(budget.used(), RECORDS, "one chunk for the first eight");
    down.flush(&mut server);
    let answers = down.deliver(&mut client);
    let last = *calls.last().unwrap();
    assert!(
        matches!(answers[..], [Ev::Ended(id, Code::ResourceExhausted, _, _)] if id == last),
        "the ninth call finds no room for a second chunk: {answers:?}"
    );
}

#[test]
fn a_segmented_message_holds_its_declared_length_until_it_is_dropped() {
    let (mut client, mut server, budget) = server_with_share(64 << 10);
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(1).unwrap();
    let body = vec![3u8; 3000];
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, 0, 0, &body),
        ADD,
        0,
    );
    let first = up.frames.pop_front().unwrap();
    assert_eq!(own(server.on_frame(&first).unwrap()), Ev::None);
    assert_eq!(
        budget.used(),
        RECORDS + 3000 + MESSAGE_OVERHEAD as usize,
        "the whole message, reserved at its first segment (and the call records)"
    );
    server.released(1);
    // The rest, as credits come back.
    let mut held = None;
    while held.is_none() {
        while let Some(f) = up.frames.pop_front() {
            if let Event::Message {
                body: b, held: h, ..
            } = server.on_frame(&f).unwrap()
            {
                assert_eq!(&b[..], &body[..]);
                held = Some(h.expect("a reassembled body comes with its reservation"));
            }
            server.released(1);
        }
        down.flush(&mut server);
        down.deliver(&mut client);
        up.flush(&mut client);
    }
    let held = held.unwrap();
    assert_eq!(held.bytes(), 3000 + MESSAGE_OVERHEAD as usize);
    drop(held);
    assert_eq!(
        budget.used(),
        RECORDS,
        "the message is released with its body"
    );
}

#[test]
fn a_message_beyond_the_share_is_refused_and_costs_nothing() {
    let (mut client, mut server, budget) = server_with_share(2000);
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let call = client.open_call(1).unwrap();
    let body = vec![3u8; 3000];
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, flags::END, 0, &body),
        ADD,
        0,
    );
    assert_eq!(
        up.deliver(&mut server),
        vec![],
        "refused before the call is delivered"
    );
    assert_eq!(budget.used(), RECORDS, "the call records only");
    down.flush(&mut server);
    assert_eq!(
        down.deliver(&mut client),
        vec![Ev::Ended(
            call,
            Code::ResourceExhausted,
            vec![(
                "grpc-message".to_string(),
                b"MESSAGE of 3000 bytes does not fit in the memory left for this connection"
                    .to_vec()
            )],
            1
        )]
    );
    // A message within the share is served on the same connection.
    let call = client.open_call(2).unwrap();
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, flags::END, 0, &[7; 300]),
        ADD,
        0,
    );
    let delivered = up.deliver(&mut server);
    assert!(matches!(
        delivered[..],
        [Ev::Message(2, Some(_), _, true, None)]
    ));
}

#[test]
fn metadata_beyond_the_share_is_refused_and_released_with_its_call() {
    let (mut client, mut server, budget) = server_with_share(150);
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let mut small = Vec::new();
    metadata::push_entry(&mut small, "x-user", &[b'a'; 100]);
    let mut large = Vec::new();
    metadata::push_entry(&mut large, "x-user", &[b'a'; 200]);
    for (user, block) in [(1, &small), (2, &large)] {
        let call = client.open_call(user).unwrap();
        send(
            &mut up,
            &mut client,
            call,
            (Kind::Headers, 0, 0, block),
            ADD,
            0,
        );
    }
    let delivered = up.deliver(&mut server);
    assert!(
        matches!(delivered[..], [Ev::Opened(1, ..)]),
        "{delivered:?}"
    );
    assert_eq!(
        budget.used(),
        RECORDS + small.len(),
        "the first call holds its metadata"
    );
    down.flush(&mut server);
    let answers = down.deliver(&mut client);
    assert!(
        matches!(answers[..], [Ev::Ended(2, Code::ResourceExhausted, _, 2)]),
        "{answers:?}"
    );
    send(&mut down, &mut server, 1, (Kind::End, 0, 0, &[]), 0, 0);
    assert_eq!(budget.used(), RECORDS, "released when the call ends");
}

#[test]
fn a_message_stalled_in_reassembly_is_dropped_on_the_virtual_clock() {
    let (mut client, mut server, budget) = server_with_share(64 << 10);
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let timeout = Duration::from_secs(10);
    let t0 = Instant::now();
    let call = client.open_call(1).unwrap();
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, 0, 0, &[5; 1000]),
        ADD,
        0,
    );
    server.set_stall_timeout(Some(timeout));
    let first = up.frames.pop_front().unwrap();
    server.on_frame(&first).unwrap();
    assert!(server.handle_timeout(t0).is_empty(), "first look");
    // Progress at 5 s restarts the count.
    let second = up.frames.pop_front().unwrap();
    server.on_frame(&second).unwrap();
    let t = |s: f64| t0 + Duration::from_secs_f64(s);
    assert!(server.handle_timeout(t(5.0)).is_empty());
    assert_eq!(
        server.poll_timeout(),
        Some(t(15.0)),
        "looks again when it would stall"
    );
    assert!(
        server.handle_timeout(t(14.9)).is_empty(),
        "9.9 s without progress"
    );
    assert!(budget.used() > 0);
    // Opened but not delivered: nothing to report, the END goes to the client.
    assert!(server.handle_timeout(t(15.0)).is_empty());
    assert_eq!(server.poll_timeout(), None, "nothing left to time");
    assert_eq!(
        budget.used(),
        RECORDS,
        "the partial message and the call are released (its records stay)"
    );
    down.flush(&mut server);
    let answers = down.deliver(&mut client);
    assert!(
        matches!(answers[..], [Ev::Ended(1, Code::ResourceExhausted, _, 1)]),
        "{answers:?}"
    );
    // What was left of it is discarded.
    assert_eq!(up.deliver(&mut server), vec![]);
}

#[test]
fn a_reply_stalled_in_reassembly_fails_the_call_at_the_client() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let t0 = Instant::now();
    let call = client.open_call(9).unwrap();
    send(
        &mut up,
        &mut client,
        call,
        (Kind::Message, flags::END, 0, &[1]),
        ADD,
        0,
    );
    up.deliver(&mut server);
    send(
        &mut down,
        &mut server,
        call,
        (Kind::Message, flags::END, 0, &[2; 1000]),
        0,
        0,
    );
    let first = down.frames.pop_front().unwrap();
    client.on_frame(&first).unwrap();
    let timeout = Duration::from_secs(1);
    client.set_stall_timeout(Some(timeout));
    assert!(client.handle_timeout(t0).is_empty());
    let failed: Vec<(u64, Code, u32)> = client
        .handle_timeout(t0 + timeout)
        .into_iter()
        .map(|e| match e {
            Expiry::Stalled { call, status, user } => (call, status.code(), user),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(failed, vec![(call, Code::ResourceExhausted, 9)]);
    up.flush(&mut client);
    let cancel = Header::decode(&up.frames[0]).unwrap();
    assert_eq!(
        (cancel.kind, cancel.code),
        (Kind::Cancel, Code::ResourceExhausted as u32)
    );
}

/// A call's record moves whenever the call table inserts or removes it: with its key it stays
/// within two cache lines (moved by a few vector stores, not a `memcpy` call) for a runtime
/// whose per-call data is three words.
#[test]
fn call_record_moves_without_memcpy() {
    let entry = std::mem::size_of::<(u64, Call<[usize; 3], Vec<u8>>)>();
    assert!(entry <= 128, "a call table entry is {entry} bytes");
}

// ----- extensions (§22) ---------------------------------------------------------------

/// A whole request's payload: the block's length, the block, the message.
fn whole_payload(block: &[u8], message: &[u8]) -> Vec<u8> {
    let mut p = (block.len() as u32).to_le_bytes().to_vec();
    p.extend_from_slice(block);
    p.extend_from_slice(message);
    p
}

/// A client and a server that agreed on whole requests through the offer and its answer.
fn agreed_pair() -> (Core, Core, Wire, Wire) {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    client.offer_extensions();
    up.flush(&mut client);
    assert_eq!(up.frames.len(), 1, "the offer is one PING");
    assert_eq!(up.deliver(&mut server), vec![]);
    assert!(server.whole_requests(), "accepted from the offer on");
    down.flush(&mut server);
    // Whole requests and the keepalive pace: no pool, so no shared credits (no keepalive
    // either, so no pace follows).
    let accepted = extension::acceptance(extension::WHOLE_REQUESTS | extension::KEEPALIVE_PACE);
    assert_eq!(down.deliver(&mut client), vec![Ev::Pong(accepted)]);
    assert!(client.whole_requests());
    (client, server, up, down)
}

fn user_block() -> Vec<u8> {
    let mut block = Vec::new();
    metadata::push_entry(&mut block, "x-user", b"alice");
    metadata::push_entry(&mut block, "authorization", b"Bearer t");
    block
}

/// What the server saw of a whole request.
type WholeSeen = (Option<(u32, u32)>, Vec<u8>, Vec<u8>, bool);

/// The server's view of a whole request: its opening, metadata block, message and END.
fn whole_event(server: &mut Core, frames: &mut Wire) -> WholeSeen {
    let mut seen = None;
    while let Some(f) = frames.frames.pop_front() {
        let event = server.handle_frame(&f, Instant::now).expect("valid frame");
        server.released(1);
        if let Event::Message {
            opened,
            whole: true,
            body,
            end,
            ..
        } = event
        {
            let (headers, body) = whole_request_parts(&body);
            seen = Some((opened, headers.to_vec(), body.to_vec(), end));
        }
    }
    seen.expect("the request arrived")
}

#[test]
fn a_whole_request_opens_a_call_with_its_metadata_in_one_frame() {
    let (mut client, mut server, mut up, mut down) = agreed_pair();
    let call = client.open_unary_call(3).unwrap();
    let payload = whole_payload(&user_block(), &[8, 2, 16, 3]);
    let req = (Kind::Message, flags::END | flags::METADATA, 0, &payload[..]);
    send(&mut up, &mut client, call, req, ADD, 250_000);
    assert_eq!(up.frames.len(), 1, "one frame for headers and message");
    let (opened, headers, body, end) = whole_event(&mut server, &mut up);
    assert_eq!(opened, Some((ADD, 250_000)));
    assert_eq!(block(&headers), block(&user_block()));
    assert_eq!((body, end), (vec![8, 2, 16, 3], true));
    assert!(server.deadline(call).is_some(), "its deadline runs");
    // The reply is the usual one.
    let reply = (Kind::Message, flags::END, 0, &[8, 5][..]);
    send(&mut down, &mut server, call, reply, 0, 0);
    assert_eq!(
        down.deliver(&mut client),
        vec![Ev::Message(call, None, vec![8, 5], true, Some(3))]
    );
    assert_eq!((client.open_calls(), server.open_calls()), (0, 0));
}

#[test]
fn a_whole_request_larger_than_a_slot_is_reassembled() {
    let (mut client, mut server, mut up, _) = agreed_pair();
    let call = client.open_unary_call(3).unwrap();
    let message = vec![0x5a; 700];
    let payload = whole_payload(&user_block(), &message);
    let req = (Kind::Message, flags::END | flags::METADATA, 0, &payload[..]);
    send(&mut up, &mut client, call, req, ADD, 0);
    assert!(up.frames.len() > 3, "segmented");
    let (opened, headers, body, end) = whole_event(&mut server, &mut up);
    assert_eq!(opened, Some((ADD, 0)));
    assert_eq!(block(&headers), block(&user_block()));
    assert_eq!((body, end), (message, true));
}

#[test]
fn a_server_without_extensions_echoes_the_offer_and_none_is_used() {
    let (mut client, _) = pair();
    client.offer_extensions();
    let mut up = Wire::default();
    up.flush(&mut client);
    // A version 2 peer of sections 1 to 21 answers the PING with the same value.
    let offer = Header::decode(&up.frames[0]).unwrap().call_id;
    assert_eq!(extension::offered(offer), Some(extension::SUPPORTED));
    let echo = frame(
        Header {
            flags: flags::ACK,
            call_id: offer,
            ..Header::new(Kind::Ping)
        },
        b"",
    );
    assert_eq!(own(client.on_frame(&echo).unwrap()), Ev::Pong(offer));
    assert!(!client.whole_requests());
    let call = client.open_unary_call(3).unwrap();
    let payload = whole_payload(&user_block(), b"m");
    assert!(matches!(
        try_whole(&mut client, call, flags::END | flags::METADATA, &payload),
        Err(SendError::Invalid(_))
    ));
}

/// Asks the client's core to send `payload` as a whole request's frame with flags `fl`.
fn try_whole(
    client: &mut Core,
    call: u64,
    fl: u16,
    payload: &[u8],
) -> Result<Option<(Vec<u8>, usize)>, SendError> {
    let o = out(client, Kind::Message, fl, 0, payload);
    client.send(call, o, ADD, 0)
}

#[test]
fn a_client_sends_no_whole_request_beyond_the_server_limits() {
    let (mut client, _, _, _) = agreed_pair();
    let call = client.open_unary_call(3).unwrap();
    let mut big = Vec::new();
    metadata::push_entry(&mut big, "x-big", &[b'a'; 1100]);
    let payload = whole_payload(&big, b"m");
    assert!(matches!(
        try_whole(&mut client, call, flags::END | flags::METADATA, &payload),
        Err(SendError::TooLarge(_))
    ));
    // Nor one that is not the call's only frame.
    let call = client.open_call(4).unwrap();
    let payload = whole_payload(&user_block(), b"m");
    let o = out(&client, Kind::Message, flags::METADATA, 0, &payload);
    assert!(matches!(
        client.send(call, o, ADD, 0),
        Err(SendError::Invalid(_))
    ));
}

/// A whole request's frame as a client would send it.
fn whole_frame(id: u64, payload: &[u8]) -> Vec<u8> {
    frame(
        Header {
            flags: flags::OPEN | flags::END | flags::METADATA,
            call_id: id,
            code: 1,
            message_len: payload.len() as u32,
            ..Header::new(Kind::Message)
        },
        payload,
    )
}

/// The offer frame, as a client sends it.
fn offer_frame() -> Vec<u8> {
    frame(
        Header {
            call_id: extension::offer(extension::WHOLE_REQUESTS),
            ..Header::new(Kind::Ping)
        },
        b"",
    )
}

#[test]
fn whole_requests_without_the_offer_are_bad_flags() {
    let payload = whole_payload(&user_block(), b"m");
    assert_eq!(
        violation_of(&mut server(), &[whole_frame(1, &payload)]),
        Violation::BadFlags
    );
    // METADATA needs OPEN and END beside it.
    let mut h = Header::decode(&whole_frame(1, &payload)).unwrap();
    h.flags = flags::OPEN | flags::METADATA;
    let f = frame(h, &payload);
    assert_eq!(
        violation_of(&mut server(), &[offer_frame(), f]),
        Violation::BadFlags
    );
}

#[test]
fn a_whole_request_whose_block_overruns_it_is_malformed_metadata() {
    let mut payload = whole_payload(&user_block(), b"m");
    payload[..4].copy_from_slice(&1000u32.to_le_bytes());
    assert_eq!(
        violation_of(&mut server(), &[offer_frame(), whole_frame(1, &payload)]),
        Violation::MalformedMetadata
    );
    let short = whole_frame(2, &[1, 0]);
    assert_eq!(
        violation_of(&mut server(), &[offer_frame(), short]),
        Violation::MalformedMetadata
    );
    let mut bad_name = Vec::new();
    bad_name.extend_from_slice(&3u16.to_le_bytes());
    bad_name.extend_from_slice(b"A:B");
    bad_name.extend_from_slice(&0u32.to_le_bytes());
    let f = whole_frame(3, &whole_payload(&bad_name, b"m"));
    assert_eq!(
        violation_of(&mut server(), &[offer_frame(), f]),
        Violation::MalformedMetadata
    );
}

#[test]
fn a_whole_request_over_the_metadata_limit_is_refused_not_a_violation() {
    let mut server = server();
    server.on_frame(&offer_frame()).unwrap();
    server.released(1);
    let mut big = Vec::new();
    metadata::push_entry(&mut big, "x-big", &[b'a'; 1100]);
    // Too large for one 256-byte slot: its first segment alone says enough.
    let payload = whole_payload(&big, b"m");
    let first = frame(
        Header {
            flags: flags::OPEN | flags::END | flags::METADATA,
            call_id: 1,
            code: 1,
            message_len: payload.len() as u32,
            segment_len: 200,
            ..Header::new(Kind::Message)
        },
        &payload[..200],
    );
    assert_eq!(own(server.on_frame(&first).unwrap()), Ev::None);
    server.released(1);
    let mut down = Wire::default();
    down.flush(&mut server);
    let end = Header::decode(&down.frames[down.frames.len() - 1]).unwrap();
    assert_eq!(
        (end.kind, end.code),
        (Kind::End, Code::ResourceExhausted as u32)
    );
}

#[test]
fn a_later_offer_or_answer_withdraws_no_agreed_extension() {
    let (mut client, mut server, _, _) = agreed_pair();
    // A PING that reads as an offer of nothing, then an answer that accepts nothing.
    let empty_offer = frame(
        Header {
            call_id: extension::offer(0),
            ..Header::new(Kind::Ping)
        },
        b"",
    );
    server.on_frame(&empty_offer).unwrap();
    server.released(1);
    assert!(
        server.whole_requests(),
        "frames sent under the agreement may be in flight"
    );
    let mut down = Wire::default();
    down.flush(&mut server);
    let answer = Header::decode(&down.frames[0]).unwrap();
    assert_eq!(
        extension::accepted(answer.call_id),
        Some(extension::WHOLE_REQUESTS | extension::KEEPALIVE_PACE),
        "the acceptance names every bit in force"
    );
    let empty_answer = frame(
        Header {
            flags: flags::ACK,
            call_id: extension::acceptance(0),
            ..Header::new(Kind::Ping)
        },
        b"",
    );
    client.on_frame(&empty_answer).unwrap();
    assert!(client.whole_requests());
}

/// A call that ended stops counting as a watched deadline at the next timer step, not when
/// its deadline would have passed: a server whose calls all ended watches none (its endpoint
/// stops ticking for the connection), while a call still open keeps its own.
#[test]
fn deadlines_of_ended_calls_are_dropped_at_the_next_timer_step() {
    let (mut client, mut server) = pair();
    let (mut up, mut down) = (Wire::default(), Wire::default());
    let now = Instant::now();
    // Two calls with a minute to go; the second is answered, the first is not (yet).
    let (first, second) = (client.open_call(7).unwrap(), client.open_call(7).unwrap());
    let req = (Kind::Message, flags::END, 0, &[8, 2][..]);
    send(&mut up, &mut client, first, req, ADD, 60_000_000);
    send(&mut up, &mut client, second, req, ADD, 60_000_000);
    // Taken with the time read (`handle_frame`): the deadlines start then.
    while let Some(f) = up.frames.pop_front() {
        server.handle_frame(&f, || now).expect("valid frame");
        server.released(1);
    }
    let reply = (Kind::Message, flags::END, 0, &[8, 5][..]);
    send(&mut down, &mut server, second, reply, 0, 0);
    assert!(server.handle_timeout(now).is_empty(), "nothing expired");
    assert!(server.deadline(first).is_some());
    assert!(
        server.has_deadlines(),
        "the open call's deadline is watched"
    );
    send(&mut down, &mut server, first, reply, 0, 0);
    assert_eq!(server.open_calls(), 0);
    assert!(server.handle_timeout(now).is_empty(), "nothing expired");
    assert!(
        !server.has_deadlines(),
        "no call is open: no deadline is watched, a minute before the first would pass"
    );
    assert_eq!(down.deliver(&mut client).len(), 2, "both replies arrived");
}
