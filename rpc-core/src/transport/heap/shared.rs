//! A TCP server's heap slots shared by all its connections (`docs/PROTOCOL.md` §22.4), the heap
//! counterpart of the verbs shared rings: with them an idle connection holds no slot at all,
//! and the slots of all connections together are bounded server-wide.
//!
//! - **Receive** ([`SharedHeapRecv`]): one [`CreditPool`] of `recv_slots × recv_shards` credits
//!   (as many as a verbs server's shards hold, so both admit as many connections) grants each
//!   connection its base and raises. A slot is allocated when a frame arrives and goes back to
//!   a cache of free slots when the frame is released. At most as many slots are out at once as
//!   the pool grants, plus [`headroom`] for what peers overrunning their credits send before
//!   their connections are closed; a connection holds at most `max_grant`, which no grant
//!   passes. So no peer, nor all of them, makes the server allocate more.
//! - **Send** ([`SharedHeapSend`]): `send_slots` slots for all connections, allocated as they
//!   are first taken and kept, each connection taking one per frame posted and not yet
//!   written, at most its own quota. A connection that finds none free waits on the
//!   [`SlotPool`]'s list and is told, in turn, when one is given back.
//!
//! This file names nothing of transport/mod.rs or heap.rs (they name its types): a waiting
//! connection is told through the callback the TCP transport installs.

use std::sync::{Arc, OnceLock};

use rpc_proto::{CreditPool, Grant};
use rpc_sync::{Count, SlotPool};

use crate::free_list::FreeStack;
use crate::transport::shared_bounds::headroom;

/// Free slots kept for reuse beyond which released ones are freed: the steady traffic of a
/// busy server allocates nothing, an idle one keeps at most this many.
const CACHE: usize = 1024;

/// A zeroed slot of `size` bytes.
pub(super) fn slot_bytes(size: usize) -> Box<[u8]> {
    vec![0u8; size].into_boxed_slice()
}

/// The receive slots of a server's connections and the credit pool granting them.
pub(crate) struct SharedHeapRecv {
    credits: CreditPool,
    base: u32,
    max_grant: u32,
    slot_size: usize,
    /// Slots out (being filled or holding a frame): at most `limit`.
    out: Count,
    limit: usize,
    cache: FreeStack<Box<[u8]>>,
}

impl SharedHeapRecv {
    /// A pool of `slots` credits for slots of `slot_size` bytes, `base` granted to each
    /// connection and at most `max_grant` (the numbers of a validated `SharedRings`).
    pub(crate) fn new(slots: u32, base: u32, max_grant: u32, slot_size: u32) -> Arc<Self> {
        Arc::new(SharedHeapRecv {
            credits: CreditPool::with_max_grant(slots, max_grant),
            base,
            max_grant,
            slot_size: slot_size as usize,
            out: Count::new(0),
            limit: slots.saturating_add(headroom(slots)) as usize,
            cache: FreeStack::new(CACHE),
        })
    }

    /// A new connection's base grant, or `None` when the pool has no room for it (the
    /// connection is to be refused).
    pub(crate) fn admit(&self) -> Option<Grant> {
        self.credits.admit(self.base)
    }

    /// The credits a new connection's peer starts with: its HELLO's `slot_count`.
    pub(crate) fn base(&self) -> u32 {
        self.base
    }

    /// Most slots one connection holds: no grant is larger.
    pub(crate) fn per_connection(&self) -> usize {
        self.max_grant as usize
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// A slot to read a frame into, or `None` when as many are out as the pool and its
    /// headroom allow.
    pub(crate) fn take(&self) -> Option<Box<[u8]>> {
        if !self.out.try_add_below(self.limit) {
            return None;
        }
        Some(
            self.cache
                .take()
                .unwrap_or_else(|| slot_bytes(self.slot_size)),
        )
    }

    /// A slot back (its frame released).
    pub(crate) fn give(&self, buf: Box<[u8]>) {
        self.out.sub(1);
        // Beyond the cache's bound the slot is freed.
        let _ = self.cache.give(buf);
    }

    /// Slots out now (a snapshot).
    #[cfg(test)]
    pub(crate) fn out(&self) -> usize {
        self.out.get()
    }
}

/// Tells a connection (by its link id) that a send slot is kept for it.
pub(crate) type SendReady = Box<dyn Fn(u64) + Send + Sync>;

/// The send slots of a server's connections: buffers allocated as they are first taken and
/// kept for reuse.
pub(crate) struct SharedHeapSend {
    slots: SlotPool<Option<Box<[u8]>>>,
    slot_size: usize,
    ready: OnceLock<SendReady>,
}

impl SharedHeapSend {
    /// `slots` send slots of `slot_size` bytes, allocated as they are first taken.
    pub(crate) fn new(slots: u32, slot_size: u32) -> Arc<Self> {
        Arc::new(SharedHeapSend {
            slots: SlotPool::with_slots((0..slots).map(|_| None).collect()),
            slot_size: slot_size as usize,
            ready: OnceLock::new(),
        })
    }

    /// Installs how a waiting connection is told (once, by the transport).
    pub(crate) fn on_ready(&self, ready: SendReady) {
        let _ = self.ready.set(ready);
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// A slot for link `link`, or `None` with the link put on the waiting list.
    pub(crate) fn take(&self, link: u64) -> Option<Box<[u8]>> {
        let slot = self.slots.take(link)?;
        Some(slot.unwrap_or_else(|| slot_bytes(self.slot_size)))
    }

    /// A slot back: kept for the longest waiter, who is told.
    pub(crate) fn give(&self, buf: Box<[u8]>) {
        if let Some(waiter) = self.slots.give(Some(buf)) {
            self.tell(waiter);
        }
    }

    /// Link `link` is gone: the slots kept for it pass to the next waiters, who are told.
    pub(crate) fn forget(&self, link: u64) {
        for waiter in self.slots.forget(link) {
            self.tell(waiter);
        }
    }

    fn tell(&self, link: u64) {
        match self.ready.get() {
            Some(ready) => ready(link),
            None => tracing::warn!(link, "a send slot is kept for a link nobody can tell"),
        }
    }

    /// Slots free now (a snapshot).
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.slots.free()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc_sync::Mutex;

    #[test]
    fn receive_slots_out_never_pass_the_pool_and_its_headroom() {
        let pool = SharedHeapRecv::new(16, 3, 8, 64);
        let limit = 16 + headroom(16) as usize;
        let taken: Vec<_> = (0..limit).map(|_| pool.take().expect("within")).collect();
        assert!(pool.take().is_none(), "one beyond the limit");
        assert_eq!(pool.out(), limit);
        for buf in taken {
            pool.give(buf);
        }
        assert_eq!(pool.out(), 0);
        assert_eq!(pool.take().map(|b| b.len()), Some(64), "a cached slot");
    }

    #[test]
    fn a_link_waiting_for_a_send_slot_is_told_when_one_comes_back() {
        let pool = SharedHeapSend::new(1, 32);
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&told);
        pool.on_ready(Box::new(move |link| sink.lock().push(link)));
        let buf = pool.take(7).expect("a free slot");
        assert!(pool.take(9).is_none(), "none left: 9 waits");
        pool.give(buf);
        assert_eq!(*told.lock(), vec![9]);
        assert!(pool.take(7).is_none(), "kept for 9");
        let buf = pool.take(9).expect("the kept slot");
        assert_eq!(buf.len(), 32);
        pool.forget(7);
        pool.give(buf);
        assert_eq!(*told.lock(), vec![9], "7, forgotten, is not told");
        assert_eq!(pool.free(), 1);
    }
}
