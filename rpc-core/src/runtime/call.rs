//! What a call's two ends share, whichever engine carries the call (one of our connections
//! or an HTTP/2 stream of the gRPC face): a received message body ([`Payload`]), a client's
//! rendezvous with whoever completes its call ([`CallCell`]), a server's request as its
//! handler gets it ([`RequestDelivery`]), and the encoding of outgoing messages ([`Encode`]).

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rpc_sync::{assert_unlocked, Flag, Oneshot, Published, Wake};

use super::service::ServedMethod;
use super::stream::{Received, StreamShared};
use crate::protocol::v2::Reservation;
use crate::transport::RecvBuf;
use crate::{MetadataMap, Status};

/// A unary call's reply as its caller gets it.
pub(crate) struct Reply {
    pub(crate) payload: Payload,
    pub(crate) headers: MetadataMap,
    pub(crate) trailers: MetadataMap,
}

/// Server: a call for a handler.
pub(crate) struct RequestDelivery {
    pub(crate) call: u64,
    /// As the server's dispatch handed it out.
    pub(crate) method: ServedMethod,
    pub(crate) deadline: Option<Instant>,
    /// The deadline was set from the clock read for the frame that opened the call, in the
    /// step that delivers it: it cannot have passed yet, and dispatch reads no clock for it.
    pub(crate) deadline_fresh: bool,
    pub(crate) metadata: MetadataMap,
    pub(crate) body: RequestBody,
    /// The call's stream state: its requests (client-streaming and bidi methods), its
    /// responses (server-streaming and bidi), its cancellation. `None` for unary methods.
    pub(crate) stream: Option<Arc<StreamShared>>,
}

/// A request's messages: the one message of a unary-request call, or the call's stream.
pub(crate) enum RequestBody {
    Message(Payload),
    Stream,
}

/// A message body ready to be encoded: protobuf messages.
pub(crate) trait Encode {
    fn encoded_len(&self) -> usize;
    fn encode_into(&self, out: &mut [u8]);
    fn encode_to_vec(&self, len: usize) -> Vec<u8>;
}

impl<M: prost::Message> Encode for M {
    fn encoded_len(&self) -> usize {
        prost::Message::encoded_len(self)
    }
    fn encode_into(&self, mut out: &mut [u8]) {
        self.encode_raw(&mut out);
    }
    fn encode_to_vec(&self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        self.encode_raw(&mut out);
        out
    }
}

/// A message whose encoded length was measured already (for a size check): encoding it does
/// not measure it again.
pub(crate) struct Measured<'a, M> {
    pub(crate) message: &'a M,
    pub(crate) len: usize,
}

impl<M: prost::Message> Encode for Measured<'_, M> {
    fn encoded_len(&self) -> usize {
        self.len
    }
    fn encode_into(&self, out: &mut [u8]) {
        Encode::encode_into(self.message, out);
    }
    fn encode_to_vec(&self, len: usize) -> Vec<u8> {
        Encode::encode_to_vec(self.message, len)
    }
}

/// Decodes a protobuf message from `bytes` as `M::decode(bytes)` does, with one allocation
/// less for each `bytes` field: prost reads such a field through
/// [`Buf::copy_to_bytes`](prost::bytes::Buf::copy_to_bytes) before a `Vec<u8>` field copies
/// it again, and that intermediate `Bytes` comes from the thread's scratch buffer
/// ([`SCRATCH`]) rather than an allocation of its own. A message type that keeps such a
/// field as `Bytes` goes to [`KEEPERS`] once it filled a scratch buffer with kept fields;
/// its fields get a `Bytes` of their own from then on, so that a kept field holds only
/// itself.
pub(crate) fn decode<M: prost::Message + Default>(bytes: &[u8]) -> Result<M, prost::DecodeError> {
    let kind = std::any::type_name::<M>();
    let scratch = !ANY_KEEPERS.get() || !KEEPERS.with_borrow(|keepers| keepers.contains(&kind));
    M::decode(SliceBuf {
        rest: bytes,
        kind: scratch.then_some(kind),
    })
}

/// The largest `bytes` field copied out through [`SCRATCH`]; larger ones get a `Bytes` of
/// their own (their copy costs more than the allocation then).
const SCRATCH_FIELD: usize = 4096;

thread_local! {
    /// Where this thread's decodes copy `bytes` fields out for prost, which copies them again
    /// into the message's `Vec<u8>` and lets go of them at once: the next field reuses the
    /// same memory, without an allocation. With it, the message type that used it last.
    /// A field kept as `Bytes` (prost's `bytes` option) holds on to the buffer it came from,
    /// at most [`SCRATCH_FIELD`] bytes; once kept fields fill it, the thread takes a new
    /// buffer and the type that used it last goes to [`KEEPERS`].
    static SCRATCH: Cell<Option<(BytesMut, &'static str)>> = const { Cell::new(None) };
    /// The message types (by type name) found keeping fields copied through [`SCRATCH`]:
    /// bounded by the message types the program decodes, and empty unless one keeps its
    /// `bytes` fields as `Bytes`.
    static KEEPERS: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    /// Whether [`KEEPERS`] has any: a decode on a thread with none looks no further.
    static ANY_KEEPERS: Cell<bool> = const { Cell::new(false) };
}

/// A borrowed slice as prost's input, copying a `bytes` field out in one step.
struct SliceBuf<'a> {
    rest: &'a [u8],
    /// The message type decoded, if its fields go through [`SCRATCH`].
    kind: Option<&'static str>,
}

impl prost::bytes::Buf for SliceBuf<'_> {
    fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn chunk(&self) -> &[u8] {
        self.rest
    }

    fn advance(&mut self, cnt: usize) {
        self.rest = &self.rest[cnt..];
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        let (field, rest) = self.rest.split_at(len);
        self.rest = rest;
        let Some(kind) = self.kind.filter(|_| len <= SCRATCH_FIELD) else {
            return Bytes::copy_from_slice(field);
        };
        // `try_with`: a decode in another thread-local's destructor goes without.
        let Ok(held) = SCRATCH.try_with(Cell::take) else {
            return Bytes::copy_from_slice(field);
        };
        let mut scratch = match held {
            Some((mut scratch, last)) => {
                // Reclaimed when no field copied out earlier is still held (or room is
                // left); else it is full of fields still held, and the type that used it
                // last keeps them.
                if !scratch.try_reclaim(len) {
                    KEEPERS.with_borrow_mut(|keepers| keepers.push(last));
                    ANY_KEEPERS.set(true);
                    if last == kind {
                        self.kind = None;
                        return Bytes::copy_from_slice(field);
                    }
                    scratch = BytesMut::with_capacity(SCRATCH_FIELD);
                }
                scratch
            }
            None => BytesMut::with_capacity(SCRATCH_FIELD),
        };
        scratch.extend_from_slice(field);
        let copied = scratch.split().freeze();
        let _ = SCRATCH.try_with(|spare| spare.set(Some((scratch, kind))));
        copied
    }
}

/// A received message body: still in its receive slot (decoded in place; the slot is
/// re-posted when this is dropped, and its link tells the connection if a CREDIT frame is
/// due) or reassembled from segments.
pub struct Payload {
    data: PayloadData,
}

enum PayloadData {
    /// `offset` and `len` within the slot (a slot's size is a `u32`): the body stays small to
    /// move.
    Slot { buf: RecvBuf, offset: u32, len: u32 },
    /// Bytes of their own, counted against the connection's memory while held for the peer.
    Owned(Vec<u8>, Option<Box<Reservation>>),
}

impl Payload {
    /// A body at `offset..offset + len` of its receive slot `buf`.
    pub(crate) fn in_slot(buf: RecvBuf, offset: usize, len: usize) -> Payload {
        Payload {
            data: PayloadData::Slot {
                buf,
                offset: offset as u32,
                len: len as u32,
            },
        }
    }

    /// A body reassembled from segments, its bytes counted under `held`.
    pub(crate) fn reassembled(bytes: Vec<u8>, held: Option<Box<Reservation>>) -> Payload {
        Payload {
            data: PayloadData::Owned(bytes, held),
        }
    }

    /// A body that was never in a receive slot (a message of the gRPC face).
    pub(crate) fn owned(bytes: Vec<u8>) -> Payload {
        Payload {
            data: PayloadData::Owned(bytes, None),
        }
    }

    /// Copies a body out of its receive slot and releases the slot (and its credit): for a
    /// reply nobody is decoding yet, which must not hold the receive ring.
    pub(crate) fn detach(mut self) -> Payload {
        if let PayloadData::Slot { buf, offset, len } = &self.data {
            let owned = buf[slot_range(*offset, *len)].to_vec();
            // Drops the slot: re-posted, its credit counted.
            self.data = PayloadData::Owned(owned, None);
        }
        self
    }

    /// The body as a stream item: reassembled bytes keep their reservation; a body still in
    /// its slot is copied (one request message of a call the server serves as a stream).
    pub(crate) fn into_received(self) -> Received {
        match self.data {
            PayloadData::Owned(v, held) => Received::new(v, held.map(|h| *h)),
            PayloadData::Slot { buf, offset, len } => {
                Received::new(buf[slot_range(offset, len)].to_vec(), None)
            }
        }
    }
}

fn slot_range(offset: u32, len: u32) -> std::ops::Range<usize> {
    offset as usize..offset as usize + len as usize
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.data {
            PayloadData::Slot { buf, offset, len } => &buf[slot_range(*offset, *len)],
            PayloadData::Owned(v, _) => v,
        }
    }
}

/// Where a call's outcome is left for its caller.
pub(crate) struct CallCell {
    pub(crate) outcome: Oneshot<Result<Reply, Status>>,
    /// The call id, once the connection's owner opened the call.
    id: Published,
    /// A thread is waiting and will decode the reply at once: it may stay in its slot.
    pub(crate) thread_waiting: Flag,
    /// The call failed without its server processing it (PROTOCOL.md §14): it never went
    /// out (its connection was closed, or had heard GOODBYE, when its turn came), or the
    /// server's GOODBYE gave it back. Raised before the outcome is left, so a caller that
    /// has the outcome sees it: such a call may be made again on another connection.
    unprocessed: Flag,
}

impl CallCell {
    pub(crate) fn new() -> Arc<CallCell> {
        Arc::new(CallCell {
            outcome: Oneshot::new(),
            id: Published::new(0),
            thread_waiting: Flag::new(false),
            unprocessed: Flag::new(false),
        })
    }

    /// Marks the call as one its server did not process (see `unprocessed`), before its
    /// outcome is left.
    pub(crate) fn mark_unprocessed(&self) {
        self.unprocessed.raise();
    }

    /// Whether the call failed without its server processing it (see `unprocessed`).
    pub(crate) fn was_unprocessed(&self) -> bool {
        self.unprocessed.is_raised()
    }

    pub(crate) fn id(&self) -> u64 {
        self.id.get()
    }

    pub(crate) fn set_id(&self, id: u64) {
        self.id.set(id);
    }

    /// Leaves the outcome, and the caller's wake-up (if it waits parked or as a task) to
    /// the returned [`Wake`]: the connection's owner leaves the outcome while it owns the
    /// state (deciding it there, against a cancel or a deadline) and wakes the caller once
    /// it let go. A caller that drives the connection itself sees the outcome as soon as
    /// its own step returns, with nothing left to wake. `None`: an outcome was left
    /// already (this one is dropped).
    ///
    /// A reply stays in its receive slot (zero-copy) only while a thread waits to decode it.
    /// Otherwise (a future not being awaited yet) it is copied out and the slot released:
    /// replies nobody consumes yet must not hold the receive ring, or the peer would run out
    /// of credits for the replies that callers are waiting for.
    pub(crate) fn complete_deferred(&self, result: Result<Reply, Status>) -> Option<Wake> {
        let result = match result {
            Ok(reply) if !self.thread_waiting.is_raised() => Ok(Reply {
                payload: reply.payload.detach(),
                ..reply
            }),
            other => other,
        };
        self.outcome.complete_deferred(result)
    }

    /// Makes a used cell new again (it must not be shared any more).
    pub(crate) fn reset(&mut self) {
        self.outcome.reset();
        self.id.set(0);
        self.thread_waiting.set(false);
        self.unprocessed.set(false);
    }

    /// Parks the calling thread until the outcome is there or `deadline` passes (`None`).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<Result<Reply, Status>> {
        assert_unlocked("waiting for a reply");
        self.thread_waiting.set(true);
        let result = self.outcome.wait(deadline);
        self.thread_waiting.set(false);
        result
    }
}

/// The status of a call refused because a message of `len` bytes does not fit in the memory
/// left for its connection.
pub(crate) fn out_of_memory(len: usize) -> Status {
    Status::resource_exhausted(format!(
        "a message of {len} bytes does not fit in the memory left for this connection"
    ))
}

#[cfg(test)]
mod tests {
    use super::{decode, Bytes, SCRATCH_FIELD};
    use prost::Message;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Fields {
        #[prost(bytes = "vec", tag = "1")]
        copied: Vec<u8>,
        #[prost(bytes = "bytes", tag = "2")]
        kept: Bytes,
        #[prost(bytes = "vec", repeated, tag = "3")]
        many: Vec<Vec<u8>>,
    }

    fn filled(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn bytes_fields_decode_alike_and_kept_ones_outlive_later_decodes() {
        let sizes = [
            0,
            1,
            64,
            SCRATCH_FIELD - 1,
            SCRATCH_FIELD,
            SCRATCH_FIELD + 1,
            3 * SCRATCH_FIELD,
        ];
        let mut kept = Vec::new();
        for (round, &size) in sizes.iter().cycle().take(3 * sizes.len()).enumerate() {
            let seed = round as u8;
            let sent = Fields {
                copied: filled(size, seed),
                kept: Bytes::from(filled(size / 2 + 1, seed ^ 0x5a)),
                many: (0..4)
                    .map(|i| filled(size / (i + 1), seed + i as u8))
                    .collect(),
            };
            let got: Fields = decode(&sent.encode_to_vec()).expect("decodes");
            assert_eq!(got, sent, "size {size}");
            // Kept across the decodes that follow, which reuse the thread's scratch buffer.
            kept.push((got.kept, sent.kept));
        }
        for (got, sent) in kept {
            assert_eq!(got, sent);
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Kept {
        #[prost(bytes = "bytes", tag = "1")]
        key: Bytes,
    }

    #[test]
    fn a_message_type_that_keeps_its_fields_gets_them_on_their_own() {
        let sent = Kept {
            key: Bytes::from_static(b"a sixteen b key!"),
        };
        let wire = sent.encode_to_vec();
        // Kept fields fill one scratch buffer (4 KiB) at most; then the type is known to keep
        // its fields, and each later one is a `Bytes` of its own, holding only itself.
        let mut kept: Vec<Kept> = Vec::new();
        for _ in 0..(2 * SCRATCH_FIELD / sent.key.len()) {
            kept.push(decode(&wire).expect("decodes"));
        }
        let shared = kept.iter().filter(|k| !k.key.is_unique()).count();
        assert!(
            shared <= SCRATCH_FIELD / sent.key.len(),
            "{shared} fields share scratch buffers"
        );
        assert!(kept.last().expect("some").key.is_unique());
        assert!(kept.iter().all(|k| *k == sent));
        // A type whose fields are copied into `Vec`s keeps using the scratch buffer.
        let fields = Fields {
            copied: vec![7; 64],
            ..Fields::default()
        };
        for _ in 0..(2 * SCRATCH_FIELD / 64) {
            assert_eq!(
                decode::<Fields>(&fields.encode_to_vec()).expect("decodes"),
                fields
            );
        }
        assert!(
            !super::KEEPERS
                .with_borrow(|keepers| { keepers.contains(&std::any::type_name::<Fields>()) }),
            "a Vec<u8> field is not kept"
        );
    }
}
