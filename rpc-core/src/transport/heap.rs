//! Slot rings in ordinary heap memory, and a completion queue fed by other threads: the
//! building blocks of the TCP and in-memory transports. A receive slot is a `Vec<u8>` that
//! moves from the ring's posted pool into a [`RecvBuf`] and back when that is dropped, so
//! frames are read into slots and decoded in place exactly as with verbs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use crossbeam::queue::ArrayQueue;
use parking_lot::{Condvar, Mutex};

use super::{
    Completion, CompletionQueue, Driver, Link, LinkId, RecvBuf, RecvInner, RingConfig, SendBuf,
    SendInner,
};
use crate::protocol::v2::Hello;
use crate::Error;
use std::sync::{OnceLock, Weak};

/// Receive slots: the posted pool and the count of re-posts not yet reported as credits.
pub(crate) struct HeapRecvRing {
    posted: ArrayQueue<Vec<u8>>,
    reposted: AtomicU32,
    slot_size: usize,
}

impl HeapRecvRing {
    /// A ring of `count` posted slots of `size` bytes.
    pub(crate) fn new(count: u32, size: u32) -> Arc<HeapRecvRing> {
        let ring = HeapRecvRing {
            posted: ArrayQueue::new(count as usize),
            reposted: AtomicU32::new(0),
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

    /// Wraps a filled slot as a completion buffer; dropping it re-posts the slot.
    pub(crate) fn completed(self: &Arc<Self>, buf: Vec<u8>, len: usize) -> RecvBuf {
        RecvBuf {
            inner: RecvInner::Heap(HeapRecv {
                buf,
                ring: Arc::clone(self),
            }),
            len,
        }
    }

    /// Re-posts reported since the last call.
    pub(crate) fn take_reposted(&self) -> u32 {
        self.reposted.swap(0, Ordering::SeqCst)
    }

    /// Re-posts not yet taken.
    pub(crate) fn reposted_pending(&self) -> u32 {
        self.reposted.load(Ordering::SeqCst)
    }
}

/// A filled heap receive slot (the heap variant of [`RecvBuf`]).
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
            self.ring.reposted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Free send slots.
pub(crate) struct HeapSendPool {
    free: Arc<ArrayQueue<Vec<u8>>>,
    slot_size: usize,
}

/// A heap send slot (the heap variant of [`SendBuf`]); back to its pool when dropped, sent
/// or not.
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

    pub(crate) fn alloc(&self) -> Option<SendBuf> {
        self.free.pop().map(|buf| SendBuf {
            inner: SendInner::Heap(HeapSend {
                buf,
                pool: Arc::clone(&self.free),
            }),
        })
    }

    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }
}

/// A completion queue that other threads (the TCP I/O thread, in-memory peers) push into.
///
/// A `VecDeque` under a short lock (no I/O, no waiting inside) rather than a linked queue:
/// it keeps its capacity, so steady traffic allocates nothing. Its length is bounded by the
/// transports: each completion of a link holds one of its posted receive slots, plus one
/// `Closed` per link.
pub(crate) struct ChannelCq {
    queue: rpc_sync::Mutex<VecDeque<Completion>>,
    driver: OnceLock<Weak<dyn Driver>>,
    sleeping: AtomicBool,
    notified: Mutex<bool>,
    cv: Condvar,
}

impl ChannelCq {
    pub(crate) fn new() -> Arc<ChannelCq> {
        Arc::new(ChannelCq {
            queue: rpc_sync::Mutex::new(VecDeque::with_capacity(64)),
            driver: OnceLock::new(),
            sleeping: AtomicBool::new(false),
            notified: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    /// Adds a completion without waking anyone: the caller follows with [`ChannelCq::drive`]
    /// (a producer batching several completions).
    pub(crate) fn enqueue(&self, c: Completion) {
        self.queue.lock().push_back(c);
    }

    /// Handles the queued completions on this thread if no other thread is polling; the
    /// poller is woken only when no endpoint is registered yet. The thread that holds the
    /// poll lock re-checks the queue after releasing it (the fences make sure one of the two
    /// sees the other), so nothing is left behind.
    pub(crate) fn drive(&self) {
        if self.queue.lock().is_empty() {
            // Whatever this thread queued was taken by a poller, which handles it.
            return;
        }
        let Some(driver) = self.driver.get().and_then(Weak::upgrade) else {
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.sleeping.load(Ordering::SeqCst) {
                self.wake();
            }
            return;
        };
        loop {
            std::sync::atomic::fence(Ordering::SeqCst);
            if !driver.drive_once() {
                return;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.queue.lock().is_empty() {
                return;
            }
        }
    }

    /// Adds a completion and wakes the poller if it sleeps.
    pub(crate) fn push(&self, c: Completion) {
        self.queue.lock().push_back(c);
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }
}

impl CompletionQueue for ChannelCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut queue = self.queue.lock();
        let n = queue.len().min(max);
        out.extend(queue.drain(..n));
        n
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.sleeping.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.queue.lock().is_empty() {
            self.sleeping.store(false, Ordering::SeqCst);
            return;
        }
        rpc_sync::assert_unlocked("waiting for completions");
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut notified = self.notified.lock();
        while !*notified {
            match deadline {
                Some(d) => {
                    if self.cv.wait_until(&mut notified, d).timed_out() {
                        break;
                    }
                }
                None => self.cv.wait(&mut notified),
            }
        }
        *notified = false;
        self.sleeping.store(false, Ordering::SeqCst);
    }

    fn wake(&self) {
        crate::runtime::woke_a_thread();
        *self.notified.lock() = true;
        self.cv.notify_one();
    }

    fn set_driver(&self, driver: Weak<dyn Driver>) {
        let _ = self.driver.set(driver);
    }

    fn needs_polling(&self) -> bool {
        false
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

    fn post_send(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        let result = self.transmit(buf, len);
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn post_send_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        let result = self.transmit_batched(buf, len);
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn flush_sends(&self) -> Result<(), Error> {
        let result = self.flush();
        if result.is_err() {
            self.shutdown();
        }
        result
    }

    fn take_reposted(&self) -> u32 {
        self.parts().recv_ring.take_reposted()
    }

    fn reposted_pending(&self) -> u32 {
        self.parts().recv_ring.reposted_pending()
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
