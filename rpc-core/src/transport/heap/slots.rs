//! The heap slots that a [`RecvBuf`] or [`SendBuf`] carries, and the ring and pool they go
//! back to when dropped. transport/mod.rs names these types in its buffer enums, so this file
//! must not import anything from it: heap.rs, which builds the buffers, would otherwise close
//! an import cycle with mod.rs (`scripts/check-modules`).
//!
//! [`RecvBuf`]: crate::transport::RecvBuf
//! [`SendBuf`]: crate::transport::SendBuf

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;
use rpc_sync::CreditLedger;

/// Receive slots: the posted pool and the count of re-posts not yet reported as credits.
pub(crate) struct HeapRecvRing {
    posted: ArrayQueue<Vec<u8>>,
    credits: CreditLedger,
    slot_size: usize,
}

impl HeapRecvRing {
    /// A ring of `count` posted slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> Arc<HeapRecvRing> {
        let ring = HeapRecvRing {
            posted: ArrayQueue::new(count as usize),
            credits: CreditLedger::new(),
            slot_size: size as usize,
        };
        for _ in 0..count {
            ring.posted
                .push(vec![0u8; size as usize])
                .expect("ring has room for its slots");
        }
        Arc::new(ring)
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
        if self.ring.posted.push(buf).is_ok() {
            self.ring.credits.release();
        }
    }
}

/// Free send slots.
pub(crate) struct HeapSendPool {
    free: Arc<ArrayQueue<Vec<u8>>>,
    slot_size: usize,
}

/// A heap send slot (the heap variant of a `SendBuf`); back to its pool when dropped, sent or
/// not.
pub(crate) struct HeapSend {
    buf: Vec<u8>,
    pool: Arc<ArrayQueue<Vec<u8>>>,
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
        let _ = self.pool.push(std::mem::take(&mut self.buf));
    }
}

impl HeapSendPool {
    /// A pool of `count` slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> HeapSendPool {
        let free = ArrayQueue::new(count as usize);
        for _ in 0..count {
            free.push(vec![0u8; size as usize])
                .expect("pool has room for its slots");
        }
        HeapSendPool {
            free: Arc::new(free),
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
