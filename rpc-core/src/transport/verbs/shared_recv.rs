//! One shard of a server endpoint's shared receive slots: an SRQ with `slots` receives of one
//! size posted from one registered region, taken by the QPs of the links admitted to it, the
//! [`CreditPool`] that grants those slots to the links' peers (`docs/PROTOCOL.md` §22.4), and
//! the completion queue their receives and sends complete on, and the budget of their SENDs in
//! flight. The CQ has an entry for every posted slot and for every SEND of the budget: each
//! SEND holds one from its post until a completion covers it (and a flush would complete it),
//! so no number of links, not even all of them flushed at once, can overflow it. An endpoint adds shards as connections are admitted (see
//! `completions::SharedPools`): registered memory follows the connections, a shard at a
//! time.
//!
//! Every slot is posted once at creation and re-posted as soon as its frame is released,
//! whichever link it served, even a closing one: the SRQ never loses a slot. The pool never
//! grants more credits than there are slots, and a granted credit is backed by a posted slot
//! (a peer's credits plus its frames in flight never exceed its grant minus the slots its frames
//! hold), so a SEND never meets an empty SRQ, which `rnr_retry` 0 would turn into an error.
//!
//! A peer that sends beyond its credits takes slots other links' grants count on, until the
//! poller reads its first such frame and closes its link (a `credit-overrun`). So the SRQ holds
//! [`headroom`] slots more than the pool grants: a burst that large from a misbehaving peer
//! costs the others nothing.
//!
//! Registered memory is the SRQ's, `(slots + headroom) × slot_size`, whatever the number of
//! links admitted to it.

use std::sync::Arc;

use rpc_proto::{CreditPool, Grant};
use rpc_sync::SlotPool;

use super::cq::{CqShards, CqeReservation, RawCq};
use super::device::Pd;
use super::mr::Region;
use super::srq::Srq;
use super::wr_id::{shared_key, wr_id};
use crate::transport::shared_bounds::headroom;
use crate::Error;

/// The SRQ, its slots and its pool. Field order is drop order: the SRQ goes (once every QP
/// attached to it is gone: each link holds an `Arc` of this) before the region it points into.
pub(super) struct SharedRecv {
    srq: Arc<Srq>,
    region: Region,
    pool: CreditPool,
    base: u32,
    index: u32,
    cq: Arc<RawCq>,
    _reservation: CqeReservation,
    /// The SENDs in flight of this shard's links together, a waiting link told in turn.
    sends: SlotPool<()>,
}

impl SharedRecv {
    /// How many receives a pool of `slots` slots posts: the slots and the headroom (the
    /// completion entries its links' CQ reserves for them).
    pub(super) fn posted(slots: u32) -> u32 {
        slots.saturating_add(headroom(slots))
    }

    /// Creates shard `index`: the SRQ and its region on `pd` for a pool of `slots` slots of
    /// `slot_size` bytes (plus the headroom), granted `base` to each link and at most
    /// `max_grant`; a budget of `sends` SENDs in flight for its links together; and a CQ of
    /// its own among `cqs` with an entry for each posted receive and each SEND of the budget
    /// (one CQ per link: a reply's send completion and the next request come in one poll).
    /// Posts every slot. (The numbers of a validated `transport::SharedRings`: that module
    /// names this one's buffers, so it is not named here.)
    pub(super) fn new(
        pd: &Arc<Pd>,
        cqs: &CqShards,
        index: u32,
        (slots, base, max_grant): (u32, u32, u32),
        (slot_size, sends): (u32, u32),
    ) -> Result<Arc<SharedRecv>, Error> {
        let posted = Self::posted(slots);
        let entries = posted.saturating_add(sends);
        let (cq, reservation) = cqs.dedicated(entries)?;
        let region = Region::new(pd, posted, slot_size)?;
        let srq = Arc::new(Srq::new(pd, posted)?);
        let shared = Arc::new(SharedRecv {
            srq,
            region,
            pool: CreditPool::with_max_grant(slots, max_grant),
            base,
            index,
            cq,
            _reservation: reservation,
            sends: SlotPool::with_slots(vec![(); sends as usize]),
        });
        for slot in 0..posted {
            shared.post(slot)?;
        }
        tracing::debug!(
            index,
            slots,
            posted,
            slot_size,
            base_grant = base,
            max_grant,
            "verbs: shared receive queue ready, receives posted"
        );
        Ok(shared)
    }

    pub(super) fn srq(&self) -> &Arc<Srq> {
        &self.srq
    }

    /// The CQ this shard's links complete on, receives and sends.
    pub(super) fn cq(&self) -> &Arc<RawCq> {
        &self.cq
    }

    /// The base grant of a new link from the pool, or `None` when the pool has no room for
    /// it (the connection is to be refused).
    pub(super) fn admit(&self) -> Option<Grant> {
        self.pool.admit(self.base)
    }

    /// A SEND of link `key` may go out (one of the budget taken), or `None` with the link put
    /// on the waiting list.
    pub(super) fn take_send(&self, key: u32) -> Option<()> {
        self.sends.take(u64::from(key))
    }

    /// A SEND is covered by a completion (or never went out): its place in the budget goes
    /// back; returns the key of the waiting link it is kept for, to tell.
    pub(super) fn give_send(&self) -> Option<u32> {
        // Keys are what `take_send` was given: u32.
        self.sends.give(()).map(|key| key as u32)
    }

    /// `n` SENDs are covered (one lock for all): their places go back; the keys of the
    /// waiting links they are kept for are appended to `told`, to tell.
    pub(super) fn give_sends(&self, n: usize, told: &mut Vec<u64>) {
        self.sends.give_many(std::iter::repeat_n((), n), told);
    }

    /// Link `key` is gone: the places kept for it pass on; returns the keys of the waiting
    /// links they are kept for now, to tell.
    pub(super) fn forget_sends(&self, key: u32) -> Vec<u32> {
        let waiters = self.sends.forget(u64::from(key));
        waiters.into_iter().map(|key| key as u32).collect()
    }

    /// The credits a new link's peer starts with: its HELLO's `slot_count`.
    pub(super) fn base(&self) -> u32 {
        self.base
    }

    pub(super) fn slot_size(&self) -> usize {
        self.region.slot_size()
    }

    fn post(&self, slot: u32) -> Result<(), Error> {
        self.srq.post_recv(
            wr_id(false, shared_key(self.index), slot),
            self.region.slot_addr(slot),
            self.region.slot_size() as u32,
            self.region.lkey(),
        )
    }

    /// Gives a received slot back to the SRQ (its frame was released, or its link is gone).
    pub(super) fn repost(&self, slot: u32) {
        if let Err(e) = self.post(slot) {
            tracing::warn!(slot, error = %e, "verbs: re-posting a shared receive failed");
        }
    }

    /// The bytes of slot `slot`.
    ///
    /// # Safety
    /// The caller must own the slot: it completed and was not re-posted since, and no `&mut`
    /// to it exists for the returned lifetime.
    pub(super) unsafe fn slot(&self, slot: u32) -> &[u8] {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.region.slot(slot) }
    }
}
