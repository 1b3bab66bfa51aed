//! Criterion micro-benchmarks of the per-message work of rpc-core's protocol core, without
//! any transport or thread:
//!
//! * `encode`: what a sender does for a 64-byte `EchoRequest` on the direct path: the
//!   message's encoded length, the 40-byte frame header, and prost's encoding into a send
//!   slot of the default size (8 KiB).
//! * `decode`: what a receiver does with that frame: header validation and prost decoding of
//!   the body (which allocates the payload `Vec`).
//! * `dispatch`: one unary request frame through `Connection::on_frame` on a server-side
//!   protocol core (validation, credit accounting, the call table), then the reply's header
//!   written by `Connection::send` into its send slot, and the receive slot reported
//!   released.
//!
//! `cargo bench -p rpc-benches --bench micro`; the estimates land in
//! `target/criterion/{encode,decode,dispatch}/new/estimates.json`.

use std::hint::black_box;

use criterion::{criterion_main, Criterion};
use prost::Message;
use rpc_benches::echo::EchoRequest;
use rpc_core::protocol::v2::{flags, Outgoing, Payload};
use rpc_core::protocol::{Connection, Event, Header, Kind, Role, HEADER_LEN};
use rpc_core::RingConfig;

/// The 64-byte request every benchmark uses.
fn request() -> EchoRequest {
    EchoRequest {
        payload: (0..64u8).collect(),
    }
}

/// The header of a unary request (one MESSAGE opening and ending the call) of `len` bytes.
fn request_header(call_id: u64, credits: u16, len: usize) -> Header {
    Header {
        flags: flags::OPEN | flags::END,
        credits,
        call_id,
        code: 0x1234_5678,
        message_len: len as u32,
        segment_len: len as u32,
        ..Header::new(Kind::Message)
    }
}

/// A complete request frame carrying `request`.
fn request_frame(request: &EchoRequest, call_id: u64, credits: u16) -> Vec<u8> {
    let len = request.encoded_len();
    let mut frame = vec![0u8; HEADER_LEN + len];
    request_header(call_id, credits, len).encode(&mut frame);
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
    let frame = request_frame(&request(), 1, 1);
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
    let hello = ring.hello();
    // The server's core; its per-call data is irrelevant here.
    let mut core: Connection<(), Vec<u8>> =
        Connection::new(Role::Server, hello, hello, ring.slot_size as usize);
    let request = request();
    let reply_len = request.encoded_len();
    let mut spare = Some(vec![0u8; ring.slot_size as usize]);
    // Steady state: every request returns the credit its predecessor's reply spent (the
    // first one returns none: the server starts with all its credits), and opens the next
    // call id.
    let mut frame = request_frame(&request, 1, 0);
    let mut call = 1u64;
    c.bench_function("dispatch", |b| {
        b.iter(|| {
            match core.on_frame(black_box(&frame)) {
                Ok(Event::Message { call: id, .. }) => {
                    let out = Outgoing {
                        kind: Kind::Message,
                        flags: flags::END,
                        code: 0,
                        payload: Payload::InBuffer(spare.take().expect("slot"), reply_len),
                    };
                    let (slot, _) = core
                        .send(id, out, 0, 0)
                        .expect("open call")
                        .expect("credits allow it");
                    spare = Some(black_box(slot));
                }
                other => panic!("expected a request, got {other:?}"),
            }
            core.released(1);
            call += 1;
            frame[8..16].copy_from_slice(&call.to_le_bytes());
            frame[6..8].copy_from_slice(&1u16.to_le_bytes());
        })
    });
}
/// The group Criterion runs (a module, so the generated function needs no doc comment).
mod group {
    criterion::criterion_group!(micro, super::encode, super::decode, super::dispatch);
}
criterion_main!(group::micro);
