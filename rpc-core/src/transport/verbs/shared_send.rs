//! A server endpoint's shared send slots: one registered region of `slots` send slots that
//! every link of a shared receive queue takes from, one per frame in flight, instead of a send
//! ring of its own. So registered memory follows the frames in flight, not the number of
//! links (an idle link holds no send slot).
//!
//! A link takes a slot when it has a frame to send and gives it back at the completion that
//! covers it, or right after the post for a frame sent inline (the post copied it). A link
//! whose SENDs all complete unsignalled would keep its slots until its next signalled one,
//! maybe forever on an idle link; so such links signal the last SEND of every post that
//! leaves a slot waiting (see the `link` module), and a slot is back in the pool one
//! completion after its frame left. Small frames (a 64 B reply) thus cost no completion.
//!
//! A link that finds the pool empty is put on the [`SlotPool`]'s waiting list; the next slot
//! given back is kept for it, and the poller reports a `SendDone` for it (see
//! `LinkTable::push_send_ready`), on which its connection tries again and gets that slot. So
//! waiting links are served in turn, however busy the others are; a released link's kept
//! slots pass to the next waiters. (What bounds a link's SENDs in flight, and so the
//! completion entries its shard's CQ reserves, is its quota: see `shared_pools`.)

use std::sync::Arc;

use rpc_sync::SlotPool;

use super::device::Pd;
use super::mr::Region;
use crate::Error;

/// The shared send slots. Field order is drop order: every link holding slots holds an `Arc`
/// of this, so the region outlives every QP that could still read from it.
pub(super) struct SharedSend {
    region: Region,
    slots: SlotPool,
}

impl SharedSend {
    /// Registers `slots` slots of `slot_size` bytes on `pd`.
    pub(super) fn new(pd: &Arc<Pd>, slots: u32, slot_size: u32) -> Result<Arc<SharedSend>, Error> {
        let region = Region::new(pd, slots, slot_size)?;
        tracing::debug!(slots, slot_size, "verbs: shared send slots ready");
        Ok(Arc::new(SharedSend {
            region,
            slots: SlotPool::new(slots),
        }))
    }

    /// The registered slots.
    pub(super) fn region(&self) -> &Region {
        &self.region
    }

    /// A free slot for link `key`, or `None` with the link put on the waiting list.
    pub(super) fn take(&self, key: u32) -> Option<u32> {
        self.slots.take(u64::from(key))
    }

    /// Gives `slot` back; returns the key of the waiting link it is kept for, to tell.
    pub(super) fn give(&self, slot: u32) -> Option<u32> {
        // Keys are what `take` was given: u32.
        self.slots.give(slot).map(|key| key as u32)
    }

    /// Forgets link `key` (released): the slots kept for it pass on; returns the keys of the
    /// waiting links they are kept for now, to tell.
    pub(super) fn forget(&self, key: u32) -> Vec<u32> {
        let waiters = self.slots.forget(u64::from(key));
        waiters.into_iter().map(|key| key as u32).collect()
    }
}
