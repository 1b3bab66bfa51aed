//! Slot rings in ordinary heap memory, and a completion queue fed by other threads: the
//! building blocks of the TCP and in-memory transports. A receive slot is a boxed byte slice that
//! moves from the ring's posted pool into a [`RecvBuf`] and back when that is dropped, so
//! frames are read into slots and decoded in place exactly as with verbs.

// The slot types live in a module of their own: mod.rs names them in its buffer enums, and
// this file, which builds those buffers, imports mod.rs.
mod shared;
mod slots;

use std::sync::Arc;
use std::time::Duration;

use rpc_proto::Grant;
use rpc_sync::{DrainQueue, Mutex};

use super::{
    Completion, CompletionQueue, CreditsDue, Driver, Link, LinkId, RecvBuf, RecvInner, RingConfig,
    SendBuf, SendInner, SharedRings,
};
use crate::protocol::v2::Hello;
use crate::Error;
use shared::{SharedHeapRecv, SharedHeapSend};
use std::sync::{OnceLock, Weak};

pub(crate) use slots::{HeapRecv, HeapRecvRing, HeapSend, HeapSendPool};

// The two ways in to a buffer, kept here rather than in slots.rs because they name mod.rs's
// buffer types.
impl HeapRecvRing {
    /// Wraps a filled slot as a completion buffer; dropping it re-posts the slot.
    pub(crate) fn completed(self: &Arc<Self>, buf: Box<[u8]>, len: usize) -> RecvBuf {
        RecvBuf {
            inner: RecvInner::Heap(self.filled(buf)),
            len,
        }
    }
}

impl HeapSendPool {
    /// A free send slot, or `None` when all are in flight.
    #[inline(always)]
    pub(crate) fn alloc(&self) -> Option<SendBuf> {
        self.take().map(|send| SendBuf {
            inner: SendInner::Heap(send),
        })
    }
}

/// A completion queue that other threads (the TCP I/O thread, in-memory peers) push into:
/// an [`rpc_sync::DrainQueue`] (a buffer under a short lock that keeps its capacity, so
/// steady traffic allocates nothing). Its length is bounded by the transports: each
/// completion of a link holds one of its posted receive slots, plus one `Closed` per link.
pub(crate) struct ChannelCq {
    queue: DrainQueue<Completion>,
    driver: OnceLock<Weak<dyn Driver>>,
    /// Completions are pushed by peers and wait for a thread of this endpoint to poll them
    /// (the in-memory transport), rather than handled by the thread that produced them (the
    /// TCP I/O thread, through [`ChannelCq::drive`]).
    polled: bool,
}

impl ChannelCq {
    /// The queue of TCP links: the I/O thread handles what it reads.
    pub(crate) fn new() -> Arc<ChannelCq> {
        Self::with_polling(false)
    }

    /// The queue of in-memory links: peers push, this endpoint's threads poll.
    pub(crate) fn polled() -> Arc<ChannelCq> {
        Self::with_polling(true)
    }

    fn with_polling(polled: bool) -> Arc<ChannelCq> {
        Arc::new(ChannelCq {
            queue: DrainQueue::with_capacity(64),
            driver: OnceLock::new(),
            polled,
        })
    }

    /// Adds a completion without waking anyone: the caller follows with [`ChannelCq::drive`]
    /// (a producer batching several completions).
    pub(crate) fn enqueue(&self, c: Completion) {
        self.queue.enqueue(c);
    }

    /// Handles the queued completions on this thread if no other thread is polling; the
    /// poller is woken only when no endpoint is registered yet. The thread that polls
    /// re-checks the queue after it lets go ([`DrainQueue::drive`]), so nothing is left
    /// behind.
    pub(crate) fn drive(&self) {
        if self.queue.is_empty() {
            // Whatever this thread queued was taken by a poller, which handles it.
            return;
        }
        let Some(driver) = self.driver.get().and_then(Weak::upgrade) else {
            if self.queue.wake_if_sleeping() {
                rpc_sync::woke_a_thread();
            }
            return;
        };
        self.queue.drive(|| driver.drive_once());
    }

    /// Adds a completion and wakes the poller if it sleeps.
    pub(crate) fn push(&self, c: Completion) {
        if self.queue.push(c) {
            rpc_sync::woke_a_thread();
        }
    }

    /// Adds the `Closed` of a link, wakes the poller if it sleeps on the queue, then tells
    /// the endpoint ([`Driver::link_closed`]): its poller may sleep elsewhere.
    pub(crate) fn push_closed(&self, link: LinkId, reason: String) {
        self.push(Completion::Closed { link, reason });
        if let Some(driver) = self.driver.get().and_then(Weak::upgrade) {
            driver.link_closed();
        }
    }
}

impl CompletionQueue for ChannelCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        self.queue.drain_into(out, max)
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.queue.wait(timeout);
    }

    fn wake(&self) {
        rpc_sync::woke_a_thread();
        self.queue.wake();
    }

    fn set_driver(&self, driver: Weak<dyn Driver>) {
        let _ = self.driver.set(driver);
    }

    fn needs_polling(&self) -> bool {
        self.polled
    }
}

/// A TCP server's slots shared by all its connections (see the `shared` module): the receive
/// slots with their credit pool, and the send slots.
pub(crate) struct HeapShared {
    recv: Arc<SharedHeapRecv>,
    send: Arc<SharedHeapSend>,
}

impl HeapShared {
    /// The pools of `config` (validated): `recv_slots × recv_shards` receive credits (as
    /// many connections as a verbs server's shards admit) and `send_slots` send slots, all of
    /// `slot_size` bytes (the ring's: heap slots are allocated as frames come, so their size
    /// costs an idle connection nothing, and frames keep their segments); a connection
    /// waiting for a send slot is told through `cq`.
    pub(crate) fn new(
        config: SharedRings,
        slot_size: u32,
        cq: &Arc<ChannelCq>,
    ) -> Result<Arc<HeapShared>, Error> {
        config.validate()?;
        let slots = config.recv_slots.saturating_mul(config.recv_shards);
        let recv = SharedHeapRecv::new(slots, config.base_grant, config.max_grant, slot_size);
        let send = SharedHeapSend::new(config.send_slots, slot_size);
        let cq = Arc::downgrade(cq);
        send.on_ready(Box::new(move |link| {
            if let Some(cq) = cq.upgrade() {
                cq.push(Completion::SendDone { link });
            }
        }));
        Ok(Arc::new(HeapShared { recv, send }))
    }

    /// A new connection's grant, or `None` when the pool has no room for it.
    pub(crate) fn admit(&self) -> Option<Grant> {
        self.recv.admit()
    }

    /// The HELLO of a connection of these pools: the base grant as `slot_count`, the rest
    /// from `ring`.
    pub(crate) fn hello(&self, ring: RingConfig) -> Hello {
        Hello {
            slot_count: self.recv.base(),
            slot_size: self.recv.slot_size() as u32,
            ..ring.hello()
        }
    }
}

/// What a link of the heap-slot transports (TCP, in-memory) keeps: its id, slot rings and the
/// two HELLOs. Only moving a frame to the peer and closing differ between them ([`HeapLink`]).
pub(crate) struct HeapLinkParts {
    pub(crate) id: LinkId,
    pub(crate) send_pool: HeapSendPool,
    pub(crate) recv_ring: Arc<HeapRecvRing>,
    pub(crate) local: Hello,
    pub(crate) peer: Hello,
    pub(crate) peer_name: String,
    /// The grant of the shared pool, until the connection's core takes it.
    grant: Mutex<Option<Grant>>,
}

impl HeapLinkParts {
    /// Rings of `ring`'s sizes for link `id`, whose peer announced `peer`.
    pub(crate) fn new(id: LinkId, ring: RingConfig, peer: Hello, peer_name: String) -> Self {
        HeapLinkParts {
            id,
            send_pool: HeapSendPool::new(ring.slot_count, ring.slot_size),
            recv_ring: HeapRecvRing::new(ring.slot_count, ring.slot_size),
            local: ring.hello(),
            peer,
            peer_name,
            grant: Mutex::new(None),
        }
    }

    /// Slots of `shared` for link `id`, admitted with `grant`: up to `ring.slot_count` send
    /// slots at a time, and receive slots as frames come.
    pub(crate) fn shared(
        id: LinkId,
        (ring, shared, grant): (RingConfig, &HeapShared, Grant),
        peer: Hello,
        peer_name: String,
    ) -> Self {
        HeapLinkParts {
            id,
            send_pool: HeapSendPool::shared(shared.send.clone(), id, ring.slot_count),
            recv_ring: HeapRecvRing::shared(shared.recv.clone()),
            local: shared.hello(ring),
            peer,
            peer_name,
            grant: Mutex::new(Some(grant)),
        }
    }
}

/// A link over heap slots; [`Link`] follows from these three.
pub(crate) trait HeapLink: Send + Sync + 'static {
    fn parts(&self) -> &HeapLinkParts;
    /// Moves the first `len` bytes of `buf` to the peer as one frame; the slot returns to its
    /// pool when the transport drops `buf` (at once, or once the frame is written).
    fn transmit(&self, buf: SendBuf, len: usize) -> Result<(), Error>;
    /// Queues a frame for the next [`HeapLink::flush`] (default: transmits it at once).
    fn transmit_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        self.transmit(buf, len)
    }
    /// Sends what [`HeapLink::transmit_batched`] queued (default: nothing is queued).
    fn flush(&self) -> Result<(), Error> {
        Ok(())
    }
    /// Tears the link down (idempotent); a `Closed` completion follows.
    fn shutdown(&self);
}

impl<T: HeapLink> Link for T {
    fn id(&self) -> LinkId {
        self.parts().id
    }

    fn alloc_send(&self) -> Option<SendBuf> {
        self.parts().send_pool.alloc()
    }

    fn send_slot_size(&self) -> usize {
        self.parts().send_pool.slot_size()
    }

    fn ring_bytes(&self) -> usize {
        if self.parts().recv_ring.is_shared() {
            // Shared slots are bounded server-wide, not per link.
            return 0;
        }
        let local = self.parts().local;
        2 * local.slot_count as usize * local.slot_size as usize
    }

    fn take_grant(&self) -> Option<Grant> {
        self.parts().grant.lock().take()
    }

    fn post_send(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        rpc_sync::assert_unlocked("posting a frame");
        let result = self.transmit(buf, len);
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn post_send_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        rpc_sync::assert_unlocked("posting a frame");
        let result = self.transmit_batched(buf, len);
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn flush_sends(&self) -> Result<(), Error> {
        rpc_sync::assert_unlocked("flushing posted frames");
        let result = self.flush();
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn take_reposted(&self) -> u32 {
        self.parts().recv_ring.reposts().ledger().take_released()
    }

    fn publish_owed(&self, owed: u32) -> u32 {
        self.parts().recv_ring.reposts().ledger().publish_owed(owed)
    }

    fn on_credits_due(&self, conn: Weak<dyn CreditsDue>, threshold: u32) {
        self.parts().recv_ring.reposts().set_hook(conn, threshold);
    }

    fn local_hello(&self) -> Hello {
        self.parts().local
    }

    fn peer_hello(&self) -> Hello {
        self.parts().peer
    }

    fn peer_name(&self) -> String {
        self.parts().peer_name.clone()
    }

    fn close(&self) {
        self.shutdown();
    }
}
