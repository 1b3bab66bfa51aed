//! A server endpoint's shared rings ([`SharedPools`]): its receive shards and its send slots.
//!
//! **Receive shards.** Each shard ([`SharedRecv`]) is an SRQ of `recv_slots` slots with the
//! credit pool granting them and a completion queue of its own. A connection is admitted to
//! the first shard whose pool has room for its base grant; when none has, a new shard is
//! created, up to `recv_shards` of them. So registered memory grows with the connections
//! admitted, a shard at a time, and no completion queue holds more than one shard's slots,
//! whatever the number of connections. A connection stays on its shard: its QP takes its
//! receives from that SRQ.
//!
//! **Send slots.** One [`SharedSend`] pool for every link. A link's QP sends and receives on
//! its shard's completion queue. Every SEND in flight (inline ones included, though their
//! slots go back at the post: each still holds an entry of the send queue, and a flush turns
//! it into a completion) holds one of its shard's `sends_in_flight`, for which the shard's CQ
//! reserves entries besides one per posted receive. So no burst of completions, not even
//! every link flushed at once, can overflow a CQ.
//!
//! Shards are added by the acceptor thread only, so `adding` serializes nothing on the data
//! path; the list is read on admission and when a receive of a released link is re-posted.

use std::sync::Arc;

use rpc_proto::Grant;
use rpc_sync::{Mutex, RwLock};

use super::cq::CqShards;
use super::device::Pd;
use super::shared_recv::SharedRecv;
use super::shared_send::SharedSend;
use super::wr_id::MAX_SHARED;
use crate::transport::SharedRings;
use crate::Error;

/// A link admitted to a shard: the shard, and its grant of the shard's credits.
pub(super) struct Admission {
    pub(super) shard: Arc<SharedRecv>,
    pub(super) grant: Grant,
}

/// A server endpoint's receive shards and send slots.
pub(super) struct SharedPools {
    config: SharedRings,
    recv: RwLock<Vec<Arc<SharedRecv>>>,
    /// Held while a shard is created, so that two admissions do not both add one.
    adding: Mutex<()>,
    send: Arc<SharedSend>,
}

impl SharedPools {
    /// The send slots (`config.send_slots` of `send_slot_size` bytes, registered on `pd`);
    /// receive shards come with the first admissions.
    pub(super) fn new(
        pd: &Arc<Pd>,
        config: SharedRings,
        send_slot_size: u32,
    ) -> Result<Arc<SharedPools>, Error> {
        config.validate()?;
        let send = SharedSend::new(pd, config.send_slots, send_slot_size)?;
        Ok(Arc::new(SharedPools {
            config,
            recv: RwLock::new(Vec::new()),
            adding: Mutex::new(()),
            send,
        }))
    }

    /// The shared send slots.
    pub(super) fn send(&self) -> &Arc<SharedSend> {
        &self.send
    }

    /// Admits a new link: the first shard with room for its base grant, and the grant; a new
    /// shard when none has room; an error when every shard allowed is full.
    pub(super) fn admit(&self, (pd, cqs): (&Arc<Pd>, &CqShards)) -> Result<Admission, Error> {
        if let Some(admitted) = self.admit_existing() {
            return Ok(admitted);
        }
        let _adding = self.adding.lock();
        // Another admission may have added a shard, or a link given its grant back.
        if let Some(admitted) = self.admit_existing() {
            return Ok(admitted);
        }
        let index = self.recv.read().len() as u32;
        let limit = self.config.recv_shards.min(MAX_SHARED);
        if index >= limit {
            return Err(Error::Verbs {
                call: "accept",
                reason: format!(
                    "all {limit} shared receive shards of {} slots are granted",
                    self.config.recv_slots
                ),
            });
        }
        let c = self.config;
        let numbers = (c.recv_slots, c.base_grant, c.max_grant);
        let sizes = (c.recv_slot_size, c.sends_in_flight);
        let shard = SharedRecv::new(pd, cqs, index, numbers, sizes)?;
        let grant = shard.admit().ok_or_else(|| Error::Verbs {
            call: "accept",
            reason: "a new shared receive shard has no room for one base grant".into(),
        })?;
        self.recv.write().push(shard.clone());
        tracing::debug!(shards = index + 1, "verbs: shared receive shard added");
        Ok(Admission { shard, grant })
    }

    fn admit_existing(&self) -> Option<Admission> {
        let shards = self.recv.read();
        shards.iter().find_map(|shard| {
            (shard.admit()).map(|grant| Admission {
                shard: shard.clone(),
                grant,
            })
        })
    }

    /// Re-posts slot `slot` of shard `index` (its link is gone).
    pub(super) fn repost(&self, index: u32, slot: u32) {
        let shard = self.recv.read().get(index as usize).cloned();
        match shard {
            Some(shard) => shard.repost(slot),
            None => tracing::warn!(index, slot, "verbs: a receive of an unknown shared shard"),
        }
    }
}
