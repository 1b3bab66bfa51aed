//! The heap slots that a [`RecvBuf`] or [`SendBuf`] carries, and the ring and pool they go
//! back to when dropped. transport/mod.rs names these types in its buffer enums, so this file
//! must not import anything from it: heap.rs, which builds the buffers, would otherwise close
//! an import cycle with mod.rs (`scripts/check-modules`).
//!
//! [`RecvBuf`]: crate::transport::RecvBuf
//! [`SendBuf`]: crate::transport::SendBuf

use std::sync::Arc;

use rpc_sync::{CreditLedger, Mutex};

/// Free slots, taken and given back from any thread: a stack under a short lock (never held
/// but to push or pop), most recently returned first (its bytes likely still in cache). A lock
/// and a `Vec` cost fewer instructions per slot than a lock-free queue's sequence stamps, and
/// the slots are fixed in number, so the stack never grows past them.
struct SlotStack {
    slots: Mutex<Vec<Vec<u8>>>,
    /// The slots it holds when all are home.
    count: usize,
}

impl SlotStack {
    fn full(count: u32, size: u32) -> SlotStack {
        let slots = (0..count).map(|_| vec![0u8; size as usize]).collect();
        SlotStack {
            slots: Mutex::new(slots),
            count: count as usize,
        }
    }

    fn pop(&self) -> Option<Vec<u8>> {
        self.slots.lock().pop()
    }

    /// Gives `slot` back; `false` (and the slot dropped) if the stack already holds all of
    /// them, which only a slot of another ring could cause.
    fn push(&self, slot: Vec<u8>) -> bool {
        let mut slots = self.slots.lock();
        if slots.len() >= self.count {
            return false;
        }
        slots.push(slot);
        true
    }
}

/// Receive slots: the posted pool and the count of re-posts not yet reported as credits.
pub(crate) struct HeapRecvRing {
    posted: SlotStack,
    credits: CreditLedger,
    slot_size: usize,
}

impl HeapRecvRing {
    /// A ring of `count` posted slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> Arc<HeapRecvRing> {
        Arc::new(HeapRecvRing {
            posted: SlotStack::full(count, size),
            credits: CreditLedger::new(),
            slot_size: size as usize,
        })
    }

    /// Size of each slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Takes a posted slot to receive into, or `None` if the peer sent beyond its credits.
    pub(crate) fn take_posted(&self) -> Option<Vec<u8>> {
        self.posted.pop()
    }

    /// A filled slot that re-posts itself to this ring when dropped (heap.rs wraps it in a
    /// `RecvBuf`).
    pub(super) fn filled(self: &Arc<Self>, buf: Vec<u8>) -> HeapRecv {
        HeapRecv {
            buf,
            ring: Arc::clone(self),
        }
    }

    /// The ring's credit ledger: re-posts not taken yet, and the owed credits published.
    pub(crate) fn credits(&self) -> &CreditLedger {
        &self.credits
    }
}

/// A filled heap receive slot (the heap variant of a `RecvBuf`).
pub(crate) struct HeapRecv {
    buf: Vec<u8>,
    ring: Arc<HeapRecvRing>,
}

impl HeapRecv {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for HeapRecv {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // The slot must be back in the pool before the credit is counted: the peer may send
        // into it as soon as it learns of the credit.
        if self.ring.posted.push(buf) {
            self.ring.credits.release();
        }
    }
}

/// Free send slots.
pub(crate) struct HeapSendPool {
    free: Arc<SlotStack>,
    slot_size: usize,
}

/// A heap send slot (the heap variant of a `SendBuf`); back to its pool when dropped, sent or
/// not.
pub(crate) struct HeapSend {
    buf: Vec<u8>,
    pool: Arc<SlotStack>,
}

impl HeapSend {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for HeapSend {
    fn drop(&mut self) {
        self.pool.push(std::mem::take(&mut self.buf));
    }
}

impl HeapSendPool {
    /// A pool of `count` slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> HeapSendPool {
        HeapSendPool {
            free: Arc::new(SlotStack::full(count, size)),
            slot_size: size as usize,
        }
    }

    /// A free slot, or `None` when all are taken (heap.rs wraps it in a `SendBuf`).
    pub(super) fn take(&self) -> Option<HeapSend> {
        self.free.pop().map(|buf| HeapSend {
            buf,
            pool: Arc::clone(&self.free),
        })
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }
}
