//! The heap slots that a [`RecvBuf`] or [`SendBuf`] carries, and the ring and pool they go
//! back to when dropped. transport/mod.rs names these types in its buffer enums, so this file
//! must not import anything from it: heap.rs, which builds the buffers, would otherwise close
//! an import cycle with mod.rs (`scripts/check-modules`).
//!
//! [`RecvBuf`]: crate::transport::RecvBuf
//! [`SendBuf`]: crate::transport::SendBuf

use std::sync::Arc;

use crate::transport::reposts::Reposts;

use crate::free_list::FreeStack;

/// `count` slots of `size` bytes, all free.
fn full(count: u32, size: u32) -> FreeStack<Box<[u8]>> {
    let slots = FreeStack::new(count as usize);
    for _ in 0..count {
        slots.give(vec![0u8; size as usize].into_boxed_slice());
    }
    slots
}

/// Receive slots: the posted pool and the count of re-posts not yet reported as credits.
pub(crate) struct HeapRecvRing {
    posted: FreeStack<Box<[u8]>>,
    reposts: Reposts,
    slot_size: usize,
}

impl HeapRecvRing {
    /// A ring of `count` posted slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> Arc<HeapRecvRing> {
        Arc::new(HeapRecvRing {
            posted: full(count, size),
            reposts: Reposts::new(),
            slot_size: size as usize,
        })
    }

    /// Size of each slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Takes a posted slot to receive into, or `None` if the peer sent beyond its credits.
    pub(crate) fn take_posted(&self) -> Option<Box<[u8]>> {
        self.posted.take()
    }

    /// A filled slot that re-posts itself to this ring when dropped (heap.rs wraps it in a
    /// `RecvBuf`).
    pub(super) fn filled(self: &Arc<Self>, buf: Box<[u8]>) -> HeapRecv {
        HeapRecv {
            buf,
            ring: Arc::clone(self),
        }
    }

    /// The re-post count: its credit ledger, and the connection to tell when credits are due.
    pub(crate) fn reposts(&self) -> &Reposts {
        &self.reposts
    }
}

/// A filled heap receive slot (the heap variant of a `RecvBuf`).
pub(crate) struct HeapRecv {
    buf: Box<[u8]>,
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
        if self.ring.posted.give(buf) {
            self.ring.reposts.release();
        }
    }
}

/// Free send slots.
pub(crate) struct HeapSendPool {
    free: Arc<FreeStack<Box<[u8]>>>,
    slot_size: usize,
}

/// A heap send slot (the heap variant of a `SendBuf`); back to its pool when dropped, sent or
/// not.
pub(crate) struct HeapSend {
    buf: Box<[u8]>,
    pool: Arc<FreeStack<Box<[u8]>>>,
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
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

impl HeapSendPool {
    /// A pool of `count` slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> HeapSendPool {
        HeapSendPool {
            free: Arc::new(full(count, size)),
            slot_size: size as usize,
        }
    }

    /// A free slot, or `None` when all are taken (heap.rs wraps it in a `SendBuf`).
    pub(super) fn take(&self) -> Option<HeapSend> {
        self.free.take().map(|buf| HeapSend {
            buf,
            pool: Arc::clone(&self.free),
        })
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }
}
