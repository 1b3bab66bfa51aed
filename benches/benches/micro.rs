//! Criterion micro-benchmarks of the per-message work of rpc-core's protocol core, without
//! any transport or thread:
//!
//! * `encode`: what a sender does for a 64-byte `EchoRequest` on the direct path: the
//!   message's encoded length, the 40-byte frame header, and prost's encoding into a send
//!   slot of the default size (8 KiB).
//! * `decode`: what a receiver does with that frame: header validation and prost decoding of
//!   the body (which allocates the payload `Vec`).
//! * `dispatch`: one request frame through `Connection::on_frame` on a server-side protocol
//!   core (validation, credit accounting, the in-progress request set), then the response
//!   header from `Connection::direct_header` encoded into a send slot, and the receive slot
//!   reported re-posted.
//!
//! `cargo bench -p rpc-benches --bench micro`; the estimates land in
//! `target/criterion/{encode,decode,dispatch}/new/estimates.json`.

use std::hint::black_box;

use criterion::{criterion_main, Criterion};
use prost::Message;
use rpc_benches::echo::EchoRequest;
use rpc_core::protocol::{Connection, Event, FrameKind, Header, Hello, MessageHead, HEADER_LEN};
use rpc_core::{Code, RingConfig};

/// The 64-byte request every benchmark uses.
fn request() -> EchoRequest {
    EchoRequest {
        payload: (0..64u8).collect(),
    }
}

/// The header of a single-frame request of `len` body bytes.
fn request_header(request_id: u64, credits: u16, len: usize) -> Header {
    Header {
        kind: FrameKind::Request,
        credits,
        request_id,
        code: 0x1234_5678,
        timeout_us: 0,
        message_len: len as u32,
        segment_offset: 0,
        segment_len: len as u32,
    }
}

/// A complete request frame carrying `request`.
fn request_frame(request: &EchoRequest, credits: u16) -> Vec<u8> {
    let len = request.encoded_len();
    let mut frame = vec![0u8; HEADER_LEN + len];
    request_header(1, credits, len).encode(&mut frame);
    request
        .encode(&mut &mut frame[HEADER_LEN..])
        .expect("the frame has room");
    frame
}

fn encode(c: &mut Criterion) {
    let ring = RingConfig::default();
    let request = request();
    let mut slot = vec![0u8; ring.slot_size as usize];
    c.bench_function("encode", |b| {
        b.iter(|| {
            let request = black_box(&request);
            let len = request.encoded_len();
            request_header(7, 1, len).encode(&mut slot);
            let mut body = &mut slot[HEADER_LEN..HEADER_LEN + len];
            request.encode_raw(&mut body);
            black_box(&slot);
        })
    });
}

fn decode(c: &mut Criterion) {
    let frame = request_frame(&request(), 1);
    c.bench_function("decode", |b| {
        b.iter(|| {
            let frame = black_box(&frame[..]);
            let header = Header::decode(frame).expect("valid header");
            let body = &frame[HEADER_LEN..HEADER_LEN + header.segment_len as usize];
            let request = EchoRequest::decode(body).expect("valid body");
            black_box(request)
        })
    });
}

fn dispatch(c: &mut Criterion) {
    let ring = RingConfig::default();
    let hello = Hello {
        slot_count: ring.slot_count,
        slot_size: ring.slot_size,
        max_message_size: ring.max_message_size,
    };
    // The server's core; its waiters are irrelevant (it starts no calls).
    let mut core: Connection<()> = Connection::new(hello, hello, ring.slot_size as usize);
    let request = request();
    let reply_len = request.encoded_len();
    let mut slot = vec![0u8; ring.slot_size as usize];

    // Steady state: every request returns the credit its predecessor's reply spent. The
    // first one returns none (the server starts with all its credits).
    let first = request_frame(&request, 0);
    match core.on_frame(&first).expect("valid frame") {
        Event::Request { id, .. } => {
            core.direct_header(MessageHead::response(id, Code::Ok), reply_len)
                .encode(&mut slot);
            core.note_reposted(1);
        }
        other => panic!("expected a request, got {other:?}"),
    }
    let frame = request_frame(&request, 1);
    c.bench_function("dispatch", |b| {
        b.iter(|| {
            match core.on_frame(black_box(&frame)) {
                Ok(Event::Request { id, .. }) => {
                    assert!(core.can_send_direct(reply_len));
                    core.direct_header(MessageHead::response(id, Code::Ok), reply_len)
                        .encode(&mut slot);
                }
                other => panic!("expected a request, got {other:?}"),
            }
            core.note_reposted(1);
            black_box(&slot);
        })
    });
}

/// The group Criterion runs (a module, so the generated function needs no doc comment).
mod group {
    criterion::criterion_group!(micro, super::encode, super::decode, super::dispatch);
}
criterion_main!(group::micro);
