//! The link table of an endpoint: link key → link, the keys of links whose `Closed` the poller
//! has still to report, the keys of links to tell that a shared send slot is free, and the
//! eventfd that wakes the poller.
//!
//! Work completions name their link by key (see the `wr_id` module), so the poller maps them
//! through this table; a key is never reused, and a link removes itself when it is released,
//! so a late completion of a released link finds nothing. The table holds links weakly: it
//! never keeps one alive.
//!
//! The table is generic over the link type because it never calls a link: it sits below the
//! links that register in it (`link::Links` is the table of `LinkInner`s).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crossbeam::queue::SegQueue;
use rpc_sync::RwLock;

use super::sys::EventFd;
use super::wr_id::MAX_LINK_KEY;
use crate::Error;

/// Links by key, closed links waiting for their `Closed`, and the poller's wake-up.
pub(super) struct LinkTable<L> {
    links: RwLock<HashMap<u32, Weak<L>>>,
    /// The key of each link whose receives come from a shared receive queue, by QP number:
    /// such a receive's completion names its link only by its QP.
    by_qp: RwLock<HashMap<u32, u32>>,
    next_key: AtomicU32,
    closed: SegQueue<u32>,
    /// Links that waited for a shared send slot: one is free now.
    send_ready: SegQueue<u32>,
    wake: EventFd,
    /// Tells the endpoint of each queued `Closed`: its poller may sleep away from the
    /// eventfd (an idle client's, between its ticks).
    on_close: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl<L> LinkTable<L> {
    pub(super) fn new() -> Result<LinkTable<L>, Error> {
        Ok(LinkTable {
            links: RwLock::new(HashMap::new()),
            by_qp: RwLock::new(HashMap::new()),
            next_key: AtomicU32::new(1),
            closed: SegQueue::new(),
            send_ready: SegQueue::new(),
            wake: EventFd::new()?,
            on_close: OnceLock::new(),
        })
    }

    /// A key no link of this table had before.
    pub(super) fn next_key(&self) -> Result<u32, Error> {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        if key == 0 || key > MAX_LINK_KEY {
            return Err(Error::Verbs {
                call: "link table",
                reason: "link keys exhausted for this endpoint".into(),
            });
        }
        Ok(key)
    }

    pub(super) fn register(&self, key: u32, link: &Arc<L>) {
        self.links.write().insert(key, Arc::downgrade(link));
    }

    pub(super) fn unregister(&self, key: u32) {
        self.links.write().remove(&key);
    }

    pub(super) fn lookup(&self, key: u32) -> Option<Arc<L>> {
        self.links.read().get(&key).and_then(Weak::upgrade)
    }

    /// Names link `key` as the owner of QP `qp_num`, whose receives are shared.
    pub(super) fn register_qp(&self, qp_num: u32, key: u32) {
        self.by_qp.write().insert(qp_num, key);
    }

    /// Forgets QP `qp_num` (its link is released; the device may reuse the number).
    pub(super) fn unregister_qp(&self, qp_num: u32) {
        self.by_qp.write().remove(&qp_num);
    }

    /// The key of the link that owns QP `qp_num`, if it shares a receive queue.
    pub(super) fn key_of_qp(&self, qp_num: u32) -> Option<u32> {
        self.by_qp.read().get(&qp_num).copied()
    }

    /// Queues the Closed completion of link `key`, wakes the poller and tells the endpoint
    /// (see [`LinkTable::set_on_close`]).
    pub(super) fn push_closed(&self, key: u32) {
        self.closed.push(key);
        self.wake.notify();
        if let Some(tell) = self.on_close.get() {
            tell();
        }
    }

    /// Registers what tells the endpoint that a `Closed` is queued (once).
    pub(super) fn set_on_close(&self, tell: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_close.set(tell);
    }

    /// The key of a link whose Closed is queued, oldest first.
    pub(super) fn pop_closed(&self) -> Option<u32> {
        self.closed.pop()
    }

    /// Queues a `SendDone` for link `key`, which waited for a shared send slot, and wakes
    /// the poller. Each push is a slot given back to a named waiter, so the queue never holds
    /// more than the pool has slots.
    pub(super) fn push_send_ready(&self, key: u32) {
        self.send_ready.push(key);
        self.wake.notify();
    }

    /// The key of a link to tell that a shared send slot is free, oldest first.
    pub(super) fn pop_send_ready(&self) -> Option<u32> {
        self.send_ready.pop()
    }

    /// Whether a Closed or a send slot's `SendDone` is queued.
    pub(super) fn has_side_work(&self) -> bool {
        !self.closed.is_empty() || !self.send_ready.is_empty()
    }

    /// Wakes the poller (or makes its next wait return at once).
    pub(super) fn wake(&self) {
        self.wake.notify();
    }

    /// The descriptor the poller waits on for [`LinkTable::wake`].
    pub(super) fn wake_fd(&self) -> RawFd {
        self.wake.raw()
    }

    /// Consumes the wake-ups that arrived.
    pub(super) fn drain_wake(&self) {
        self.wake.drain();
    }
}
