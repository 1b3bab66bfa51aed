//! A link plus its protocol core, shared by the poller and the threads that send on it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::client::CallCell;
use super::Counters;
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::{Body, Connection, MessageHead};
use crate::transport::{Link, RecvBuf};
use crate::Status;

pub(crate) type Core = Connection<Arc<CallCell>>;

pub(crate) struct Conn {
    pub(crate) link: Arc<dyn Link>,
    pub(crate) peer: Arc<str>,
    /// The peer's HELLO (fixed for the connection's life): its limits, without the lock.
    pub(crate) peer_hello: crate::protocol::Hello,
    pub(crate) core: Mutex<Core>,
    pub(crate) counters: Arc<Counters>,
    closed: AtomicBool,
}

/// A message body ready to be encoded: protobuf messages and raw status text.
pub(crate) trait Encode {
    fn encoded_len(&self) -> usize;
    fn encode_into(&self, out: &mut [u8]);
    /// Encodes into a new buffer of exactly `len` bytes (no zero-filling first).
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

/// Raw bytes (status messages).
pub(crate) struct Raw<'a>(pub(crate) &'a [u8]);

impl Encode for Raw<'_> {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn encode_into(&self, out: &mut [u8]) {
        out.copy_from_slice(self.0);
    }
    fn encode_to_vec(&self, _len: usize) -> Vec<u8> {
        self.0.to_vec()
    }
}

impl Conn {
    pub(crate) fn new(link: Arc<dyn Link>, counters: Arc<Counters>) -> Arc<Conn> {
        let core = Connection::new(link.local_hello(), link.peer_hello(), link.send_slot_size());
        Arc::new(Conn {
            peer: link.peer_name().into(),
            peer_hello: link.peer_hello(),
            link,
            core: Mutex::new(core),
            counters,
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the connection closed and tears the link down; returns whether this call did it.
    pub(crate) fn mark_closed(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::AcqRel);
        if first {
            self.link.close();
        }
        first
    }

    /// Locks the core, first crediting the receive slots re-posted since the last look.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        let mut core = self.core.lock();
        let reposted = self.link.take_reposted();
        if reposted > 0 {
            core.note_reposted(reposted);
        }
        core
    }

    /// Sends one message: straight into a send slot when it fits and a credit is free (the
    /// zero-copy path), otherwise encoded once into a buffer that the core cuts into frames
    /// as credits and slots allow.
    pub(crate) fn send(&self, head: MessageHead, body: &dyn Encode) -> Result<(), Status> {
        let len = body.encoded_len();
        let mut core = self.lock();
        if self.is_closed() {
            return Err(closed_status());
        }
        if core.can_send_direct(len) {
            if let Some(mut slot) = self.link.alloc_send() {
                core.direct_header(head, len).encode(&mut slot);
                body.encode_into(&mut slot[HEADER_LEN..HEADER_LEN + len]);
                self.post(slot, HEADER_LEN + len)?;
                return Ok(());
            }
        }
        drop(core);
        let buf = body.encode_to_vec(len);
        let mut core = self.lock();
        core.enqueue(head, buf);
        self.flush(&mut core)
    }

    fn post(&self, slot: crate::transport::SendBuf, len: usize) -> Result<(), Status> {
        self.counters.sent(len);
        self.link.post_send(slot, len).map_err(|e| {
            tracing::warn!(peer = %self.peer, error = %e, "send failed; closing the connection");
            self.mark_closed();
            closed_status()
        })
    }

    /// Moves queued frames and owed credits out while credits and send slots allow.
    pub(crate) fn flush(&self, core: &mut Core) -> Result<(), Status> {
        while core.wants_transmit() {
            let Some(mut slot) = self.link.alloc_send() else {
                break;
            };
            match core.poll_transmit(&mut slot) {
                Some(n) => self.post(slot, n)?,
                None => break,
            }
        }
        Ok(())
    }

    /// After receive slots were re-posted away from the poller: return the credits if enough
    /// are owed (or frames wait for them).
    pub(crate) fn credits_freed(&self) {
        if self.is_closed() {
            return;
        }
        let mut core = self.lock();
        if core.wants_transmit() {
            let _ = self.flush(&mut core);
        }
    }

    /// Answers request `id` with a non-OK status.
    pub(crate) fn send_status(&self, id: u64, status: &Status) {
        let head = MessageHead::response(id, status.code());
        let _ = self.send(head, &Raw(status.message().as_bytes()));
    }

    /// Sends GOODBYE if a credit allows (best effort: the close that follows tells the rest).
    pub(crate) fn send_goodbye(&self) {
        let mut core = self.lock();
        if let Some(h) = core.goodbye_header() {
            if let Some(mut slot) = self.link.alloc_send() {
                h.encode(&mut slot);
                let _ = self.post(slot, HEADER_LEN);
            }
        }
    }

    /// Fails every outstanding call with UNAVAILABLE.
    pub(crate) fn fail_calls(&self, reason: &str) {
        let calls = self.core.lock().take_all_calls();
        for (_, cell) in calls {
            cell.complete(Err(Status::unavailable(format!(
                "connection to {} lost: {reason}",
                self.peer
            ))));
        }
    }
}

pub(crate) fn closed_status() -> Status {
    Status::unavailable("the connection is closed")
}

/// A received message body: still in its receive slot (decoded in place; the slot is
/// re-posted when this is dropped) or reassembled from segments.
pub struct Payload {
    data: PayloadData,
    conn: Option<Arc<Conn>>,
}

enum PayloadData {
    Slot {
        buf: RecvBuf,
        offset: usize,
        len: usize,
    },
    Owned(Vec<u8>),
}

impl Payload {
    pub(crate) fn new(body: Body, buf: RecvBuf, conn: &Arc<Conn>) -> Payload {
        match body {
            Body::InFrame { offset, len } => Payload {
                data: PayloadData::Slot { buf, offset, len },
                conn: Some(Arc::clone(conn)),
            },
            Body::Owned(v) => Payload {
                data: PayloadData::Owned(v),
                conn: None,
            },
        }
    }
}

impl Payload {
    /// Copies a body out of its receive slot and releases the slot (and its credit).
    pub(crate) fn detach(mut self) -> Payload {
        if let PayloadData::Slot { buf, offset, len } = &self.data {
            let owned = buf[*offset..offset + len].to_vec();
            // Dropping the old data re-posts the slot; `Drop` then returns the credit.
            let conn = self.conn.take();
            self.data = PayloadData::Owned(owned);
            if let Some(conn) = conn {
                conn.credits_freed();
            }
        }
        self
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.data {
            PayloadData::Slot { buf, offset, len } => &buf[*offset..offset + len],
            PayloadData::Owned(v) => v,
        }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Re-post the slot first, then see whether its credit should travel now.
            self.data = PayloadData::Owned(Vec::new());
            conn.credits_freed();
        }
    }
}
