//! The heap slots that a [`RecvBuf`] or [`SendBuf`] carries, and the ring and pool they go
//! back to when dropped. transport/mod.rs names these types in its buffer enums, so this file
//! must not import anything from it: heap.rs, which builds the buffers, would otherwise close
//! an import cycle with mod.rs (`scripts/check-modules`).
//!
//! [`RecvBuf`]: crate::transport::RecvBuf
//! [`SendBuf`]: crate::transport::SendBuf

use std::sync::Arc;

use rpc_sync::Count;

use super::shared::{slot_bytes, SharedHeapRecv, SharedHeapSend};
use crate::free_list::FreeStack;
use crate::transport::reposts::Reposts;

/// `count` slots of `size` bytes, all free.
fn full(count: u32, size: u32) -> FreeStack<Box<[u8]>> {
    let slots = FreeStack::new(count as usize);
    for _ in 0..count {
        slots.give(slot_bytes(size as usize));
    }
    slots
}

/// Where a link's receive slots come from.
enum Posted {
    /// A ring of its own, every slot allocated up front.
    Own(FreeStack<Box<[u8]>>),
    /// A server's shared slots, at most the pool's `per_connection` at a time (`held`).
    Shared {
        pool: Arc<SharedHeapRecv>,
        held: Count,
    },
}

/// Receive slots: the posted pool and the count of re-posts not yet reported as credits.
pub(crate) struct HeapRecvRing {
    posted: Posted,
    reposts: Reposts,
    slot_size: usize,
}

impl HeapRecvRing {
    /// A ring of `count` posted slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> Arc<HeapRecvRing> {
        Arc::new(HeapRecvRing {
            posted: Posted::Own(full(count, size)),
            reposts: Reposts::new(),
            slot_size: size as usize,
        })
    }

    /// Slots taken from `pool` as frames arrive.
    pub(crate) fn shared(pool: Arc<SharedHeapRecv>) -> Arc<HeapRecvRing> {
        Arc::new(HeapRecvRing {
            slot_size: pool.slot_size(),
            posted: Posted::Shared {
                pool,
                held: Count::new(0),
            },
            reposts: Reposts::new(),
        })
    }

    /// Whether the slots are a server's shared ones.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.posted, Posted::Shared { .. })
    }

    /// Size of each slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Takes a posted slot to receive into, or `None` if the peer sent beyond its credits
    /// (for shared slots: beyond what any grant allows, or into the pool's last headroom; the
    /// connection's core finds an overrun within its grant).
    #[inline(always)]
    pub(crate) fn take_posted(&self) -> Option<Box<[u8]>> {
        match &self.posted {
            Posted::Own(posted) => posted.take(),
            Posted::Shared { pool, held } => {
                if !held.try_add_below(pool.per_connection()) {
                    return None;
                }
                let buf = pool.take();
                if buf.is_none() {
                    held.sub(1);
                }
                buf
            }
        }
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
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for HeapRecv {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // The slot must be back in the pool before the credit is counted: the peer may send
        // into it as soon as it learns of the credit.
        match &self.ring.posted {
            Posted::Own(posted) => {
                if posted.give(buf) {
                    self.ring.reposts.release();
                }
            }
            Posted::Shared { pool, held } => {
                pool.give(buf);
                held.sub(1);
                self.ring.reposts.release();
            }
        }
    }
}

/// Where a link's send slots come from and go back to.
enum SendSource {
    /// Slots of its own, all allocated up front.
    Own(FreeStack<Box<[u8]>>),
    /// Up to `quota` of a server's shared slots at a time (`held`); the pool knows the link
    /// as `link` (its id) when it waits.
    Shared {
        pool: Arc<SharedHeapSend>,
        link: u64,
        quota: usize,
        held: Count,
    },
}

/// Free send slots: a pool of the link's own, or its share of a server's.
pub(crate) struct HeapSendPool {
    source: Arc<SendSource>,
    slot_size: usize,
}

/// A heap send slot (the heap variant of a `SendBuf`); back to its pool when dropped, sent or
/// not. (Small: it moves with every frame posted.)
pub(crate) struct HeapSend {
    buf: Box<[u8]>,
    source: Arc<SendSource>,
}

impl HeapSend {
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for HeapSend {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        match &*self.source {
            SendSource::Own(free) => {
                free.give(buf);
            }
            SendSource::Shared { pool, held, .. } => {
                held.sub(1);
                pool.give(buf);
            }
        }
    }
}

impl HeapSendPool {
    /// A pool of `count` slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> HeapSendPool {
        HeapSendPool {
            source: Arc::new(SendSource::Own(full(count, size))),
            slot_size: size as usize,
        }
    }

    /// Up to `quota` slots at a time of `pool`, for link `link`.
    pub(crate) fn shared(pool: Arc<SharedHeapSend>, link: u64, quota: u32) -> HeapSendPool {
        HeapSendPool {
            slot_size: pool.slot_size(),
            source: Arc::new(SendSource::Shared {
                pool,
                link,
                quota: quota as usize,
                held: Count::new(0),
            }),
        }
    }

    /// A free slot, or `None` when all are taken (heap.rs wraps it in a `SendBuf`). A link of
    /// shared slots that found none free is told when one is kept for it.
    #[inline(always)]
    pub(super) fn take(&self) -> Option<HeapSend> {
        let buf = match &*self.source {
            SendSource::Own(free) => free.take()?,
            SendSource::Shared {
                pool,
                link,
                quota,
                held,
            } => {
                if !held.try_add_below(*quota) {
                    return None;
                }
                let Some(buf) = pool.take(*link) else {
                    held.sub(1);
                    return None;
                };
                buf
            }
        };
        Some(HeapSend {
            buf,
            source: Arc::clone(&self.source),
        })
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }
}

impl Drop for HeapSendPool {
    fn drop(&mut self) {
        // The link is gone: it waits for nothing more.
        if let SendSource::Shared { pool, link, .. } = &*self.source {
            pool.forget(*link);
        }
    }
}
