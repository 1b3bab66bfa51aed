//! Client and server cores driven against each other in memory, with simulated slots.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;

const SLOT: u32 = 256;

fn hello(slot_count: u32, max_message_size: u32) -> Hello {
    Hello {
        slot_count,
        slot_size: SLOT,
        max_message_size,
    }
}

/// One direction's wire plus the receiver's slots in use.
struct Side {
    conn: Connection<u32>,
    inbox: VecDeque<Vec<u8>>,
    held: usize,
}

struct Pair {
    a: Side,
    b: Side,
    now: Instant,
}

impl Pair {
    fn new(slots: u32, max: u32) -> Pair {
        let (ha, hb) = (hello(slots, max), hello(slots, max));
        Pair {
            a: Side {
                conn: Connection::new(ha, hb, SLOT as usize),
                inbox: VecDeque::new(),
                held: 0,
            },
            b: Side {
                conn: Connection::new(hb, ha, SLOT as usize),
                inbox: VecDeque::new(),
                held: 0,
            },
            now: Instant::now(),
        }
    }

    /// Sends `body` from `from` as in the runtime: direct when possible, else queued.
    fn send(side: &mut Side, peer_inbox: &mut VecDeque<Vec<u8>>, head: MessageHead, body: &[u8]) {
        if side.conn.can_send_direct(body.len()) {
            let mut frame = vec![0u8; HEADER_LEN + body.len()];
            side.conn.direct_header(head, body.len()).encode(&mut frame);
            frame[HEADER_LEN..].copy_from_slice(body);
            peer_inbox.push_back(frame);
        } else {
            side.conn.enqueue(head, body.to_vec());
        }
        Self::flush(side, peer_inbox);
    }

    fn flush(side: &mut Side, peer_inbox: &mut VecDeque<Vec<u8>>) {
        let mut slot = vec![0u8; SLOT as usize];
        while let Some(n) = side.conn.poll_transmit(&mut slot) {
            peer_inbox.push_back(slot[..n].to_vec());
        }
    }

    /// Delivers one frame to `to`; the slot stays held until `release`.
    fn deliver(to: &mut Side) -> Option<(Event<u32>, Vec<u8>)> {
        let frame = to.inbox.pop_front()?;
        to.held += 1;
        let ev = to.conn.on_frame(&frame).expect("valid frame");
        Some((ev, frame))
    }

    fn release(side: &mut Side, peer_inbox: &mut VecDeque<Vec<u8>>) {
        side.conn.note_reposted(side.held as u32);
        side.held = 0;
        Self::flush(side, peer_inbox);
    }
}

fn body_bytes(body: &Body, frame: &[u8]) -> Vec<u8> {
    match body {
        Body::InFrame { offset, len } => frame[*offset..offset + len].to_vec(),
        Body::Owned(v) => v.clone(),
    }
}

fn request(id: u64) -> MessageHead {
    MessageHead {
        kind: FrameKind::Request,
        request_id: id,
        code: 42,
        timeout_us: 0,
    }
}

/// Runs `n` calls with bodies of `size` bytes from a (client) to b (echo server) and
/// checks every reply. The server echoes each request as its response.
fn echo_calls(p: &mut Pair, n: usize, size: usize) {
    let mut expected = std::collections::HashMap::new();
    for i in 0..n {
        let body: Vec<u8> = (0..size).map(|j| (i * 7 + j) as u8).collect();
        let id = p.a.conn.start_call(i as u32, body.len(), None).unwrap();
        expected.insert(i as u32, body.clone());
        Pair::send(&mut p.a, &mut p.b.inbox, request(id), &body);
    }
    let mut done = 0;
    let mut idle_rounds = 0;
    while done < n {
        let mut progressed = false;
        while let Some((ev, frame)) = Pair::deliver(&mut p.b) {
            progressed = true;
            if let Event::Request { id, body, .. } = ev {
                let data = body_bytes(&body, &frame);
                Pair::send(
                    &mut p.b,
                    &mut p.a.inbox,
                    MessageHead::response(id, Code::Ok),
                    &data,
                );
            }
        }
        Pair::release(&mut p.b, &mut p.a.inbox);
        while let Some((ev, frame)) = Pair::deliver(&mut p.a) {
            progressed = true;
            if let Event::Response { waiter, result, .. } = ev {
                let data = body_bytes(&result.expect("ok"), &frame);
                assert_eq!(data, expected[&waiter], "reply of call {waiter}");
                done += 1;
            }
        }
        Pair::release(&mut p.a, &mut p.b.inbox);
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        assert!(idle_rounds < 3, "deadlock: {done}/{n} calls done");
    }
    assert_eq!(p.a.conn.outstanding_calls(), 0);
}

#[test]
fn unary_calls_round_trip_in_one_frame() {
    let mut p = Pair::new(8, 1 << 20);
    echo_calls(&mut p, 3, 10);
}

#[test]
fn large_messages_are_segmented_and_reassembled() {
    let mut p = Pair::new(4, 1 << 20);
    let max_payload = SLOT as usize - HEADER_LEN;
    for size in [0, 1, max_payload - 1, max_payload, max_payload + 1, 5000] {
        echo_calls(&mut p, 2, size);
    }
}

#[test]
fn many_outstanding_calls_never_exceed_credits_nor_deadlock() {
    // 2 slots is the minimum: one data credit plus the reserve.
    for slots in [2, 3, 8] {
        let mut p = Pair::new(slots, 1 << 20);
        echo_calls(&mut p, 100, 600);
        echo_calls(&mut p, 100, 3);
    }
}

#[test]
fn sender_stops_at_the_reserve_credit_and_resumes_on_credit_return() {
    let mut p = Pair::new(4, 1 << 20);
    for i in 0..10 {
        let id = p.a.conn.start_call(i, 1, None).unwrap();
        Pair::send(&mut p.a, &mut p.b.inbox, request(id), b"x");
    }
    assert_eq!(
        p.b.inbox.len(),
        3,
        "4 slots: 3 data frames, 1 credit in reserve"
    );
    assert_eq!(p.a.conn.send_credits(), 1);
    // The receiver consumes them but has no response to carry the credits: a CREDIT frame.
    while Pair::deliver(&mut p.b).is_some() {}
    Pair::release(&mut p.b, &mut p.a.inbox);
    assert_eq!(p.a.inbox.len(), 1);
    Pair::deliver(&mut p.a).unwrap();
    Pair::release(&mut p.a, &mut p.b.inbox);
    assert_eq!(
        p.b.inbox.len(),
        3,
        "credits returned, three more requests flow"
    );
}

#[test]
fn oversized_request_is_rejected_without_allocation_and_the_connection_survives() {
    let mut p = Pair::new(8, 1 << 20);
    // b accepts at most 300 bytes; a believes the limit is higher (a hostile or buggy peer).
    p.b.conn.local.max_message_size = 300;
    let id = p.a.conn.start_call(1, 1000, None).unwrap();
    Pair::send(&mut p.a, &mut p.b.inbox, request(id), &[7u8; 1000]);
    let (ev, _) = Pair::deliver(&mut p.b).unwrap();
    match ev {
        Event::Reject { id: rid, status } => {
            assert_eq!(rid, id);
            assert_eq!(status.code(), Code::ResourceExhausted);
        }
        other => panic!("expected Reject, got {other:?}"),
    }
    assert_eq!(p.b.conn.partial_bytes, 0);
    while let Some((ev, _)) = Pair::deliver(&mut p.b) {
        assert!(
            matches!(ev, Event::None),
            "remaining segments are discarded"
        );
    }
    assert_eq!(p.b.conn.partial_bytes, 0);
    assert!(p.b.conn.discarding.is_empty());
    Pair::release(&mut p.b, &mut p.a.inbox);
    p.a.conn.cancel_call(id);
    echo_calls(&mut p, 2, 100);
}

#[test]
fn a_client_refuses_requests_above_the_peer_limit() {
    let mut p = Pair::new(8, 500);
    let (waiter, status) = p.a.conn.start_call(9, 501, None).unwrap_err();
    assert_eq!(waiter, 9);
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(p.a.conn.start_call(9, 500, None).is_ok());
}

#[test]
fn error_statuses_cross_with_their_message() {
    let mut p = Pair::new(8, 1 << 20);
    let id = p.a.conn.start_call(5, 0, None).unwrap();
    Pair::send(&mut p.a, &mut p.b.inbox, request(id), b"");
    let (ev, _) = Pair::deliver(&mut p.b).unwrap();
    let Event::Request { id: rid, .. } = ev else {
        panic!("expected a request")
    };
    let msg = "division by zero: 1 / 0";
    Pair::send(
        &mut p.b,
        &mut p.a.inbox,
        MessageHead::response(rid, Code::InvalidArgument),
        msg.as_bytes(),
    );
    let (ev, _) = Pair::deliver(&mut p.a).unwrap();
    let Event::Response { waiter, result, .. } = ev else {
        panic!("expected a response")
    };
    assert_eq!(waiter, 5);
    assert_eq!(result.unwrap_err(), Status::invalid_argument(msg));
}

#[test]
fn deadlines_expire_calls_and_late_responses_are_dropped() {
    let mut p = Pair::new(8, 1 << 20);
    let t0 = p.now;
    let id =
        p.a.conn
            .start_call(1, 1, Some(t0 + Duration::from_millis(10)))
            .unwrap();
    p.a.conn.start_call(2, 1, None).unwrap();
    assert_eq!(
        p.a.conn.next_deadline(),
        Some(t0 + Duration::from_millis(10))
    );
    let mut out = Vec::new();
    p.a.conn
        .expire_calls(t0 + Duration::from_millis(5), &mut out);
    assert!(out.is_empty());
    p.a.conn
        .expire_calls(t0 + Duration::from_millis(10), &mut out);
    assert_eq!(out, vec![(id, 1)]);
    assert_eq!(p.a.conn.next_deadline(), None);
    // The server answers anyway, late, and segmented: the client drops it quietly.
    Pair::send(
        &mut p.b,
        &mut p.a.inbox,
        MessageHead::response(id, Code::Ok),
        &[1u8; 700],
    );
    while let Some((ev, _)) = Pair::deliver(&mut p.a) {
        assert!(matches!(ev, Event::None));
    }
    assert_eq!(p.a.conn.outstanding_calls(), 1);
}

#[test]
fn timeouts_travel_with_requests() {
    let mut p = Pair::new(8, 1 << 20);
    let id = p.a.conn.start_call(1, 0, None).unwrap();
    let head = MessageHead {
        timeout_us: 2_000,
        ..request(id)
    };
    Pair::send(&mut p.a, &mut p.b.inbox, head, b"");
    let (ev, _) = Pair::deliver(&mut p.b).unwrap();
    let Event::Request { timeout, .. } = ev else {
        panic!("expected a request")
    };
    assert_eq!(timeout, Some(Duration::from_micros(2_000)));
}

#[test]
fn goodbye_refuses_new_calls() {
    let mut p = Pair::new(8, 1 << 20);
    let mut frame = [0u8; HEADER_LEN];
    p.b.conn.goodbye_header().unwrap().encode(&mut frame);
    p.a.inbox.push_back(frame.to_vec());
    assert!(matches!(Pair::deliver(&mut p.a), Some((Event::Goodbye, _))));
    let (_, status) = p.a.conn.start_call(1, 0, None).unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
}

fn frame(h: Header, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; HEADER_LEN + payload.len()];
    h.encode(&mut f);
    f[HEADER_LEN..].copy_from_slice(payload);
    f
}

fn req_header(id: u64, total: u32, offset: u32, len: u32) -> Header {
    Header {
        kind: FrameKind::Request,
        credits: 0,
        request_id: id,
        code: 1,
        timeout_us: 0,
        message_len: total,
        segment_offset: offset,
        segment_len: len,
    }
}

#[test]
fn protocol_violations_are_errors() {
    let fresh = || Connection::<u32>::new(hello(4, 1 << 20), hello(4, 1 << 20), SLOT as usize);
    let check = |frames: &[Vec<u8>], what: &str| {
        let mut c = fresh();
        let mut result = Ok(());
        for f in frames {
            if let Err(e) = c.on_frame(f) {
                result = Err(e);
                break;
            }
        }
        assert!(result.is_err(), "{what} must be rejected");
    };
    check(&[vec![0u8; 10]], "a truncated header");
    check(
        &[frame(req_header(1, 10, 0, 10), b"short")],
        "a truncated payload",
    );
    check(&[hello(4, 100).to_frame().to_vec()], "a second HELLO");
    check(&[frame(req_header(0, 1, 0, 1), b"x")], "request id 0");
    check(
        &[frame(req_header(1, 300, 0, 300), &[0u8; 300])],
        "a frame larger than the slot",
    );
    check(
        &[frame(req_header(1, 20, 10, 10), &[0u8; 10])],
        "a continuation without a start",
    );
    check(
        &[
            frame(req_header(1, 20, 0, 10), &[0u8; 10]),
            frame(req_header(1, 20, 12, 8), &[0u8; 8]),
        ],
        "a gap between segments",
    );
    check(
        &[
            frame(req_header(1, 1, 0, 1), b"x"),
            frame(req_header(1, 1, 0, 1), b"x"),
        ],
        "a duplicate request id in progress",
    );
    let mut credit = Header::control(FrameKind::Credit, 1);
    check(&[frame(credit, b"")], "credits beyond the peer's slots");
    credit.credits = 0;
    credit.message_len = 1;
    credit.segment_len = 1;
    check(&[frame(credit, b"x")], "a CREDIT frame with a payload");
    let many: Vec<Vec<u8>> = (1..=5)
        .map(|i| frame(req_header(i, 1, 0, 1), b"x"))
        .collect();
    check(&many, "more frames than slots without credit");
}
