//! A verbs link: one RC QP with a receive ring and a send ring ([`LinkInner`]), and the
//! buffers handed to the runtime ([`VerbsRecv`], [`VerbsSend`]). The runtime's face of it,
//! [`VerbsLink`](super::handle::VerbsLink), is in `handle.rs`: it converts to and from
//! transport/mod.rs's buffer enums, and those enums name this file's buffer types, so this file
//! imports nothing from transport/mod.rs (`scripts/check-modules` would see a cycle). The
//! buffers hold an `Arc<LinkInner>`, not a trait object, so a frame costs no virtual call.
//!
//! **Receive ring.** `slot_count` slots of `slot_size` bytes in one registered region, all
//! posted before the connection is established (the HELLO promises them to the peer). A RECV
//! completion becomes a [`VerbsRecv`] that owns its slot; dropping it re-posts the slot and
//! counts a credit for [`Link::take_reposted`]. Once the link is closing, dropped slots are
//! simply released. A server that pools its receive slots gives its links no ring of their
//! own: their QPs take receives from the endpoint's shared receive queue
//! ([`SharedRecv`]), a slot goes back to it when released (closing link or not), and the link
//! holds its [`Grant`] of the pool until its connection's core takes it.
//!
//! **Send ring.** `slot_count` slots in one registered region; free slots sit in a lock-free
//! queue. A slot leaves the queue in `alloc_send`, is posted by `post_send`, and returns at
//! the completion that covers it.
//!
//! A link of a shared receive queue has no send ring: it takes slots from the endpoint's
//! [`SharedSend`], and has at most `quota` SENDs in flight (its QP's send queue depth), each
//! holding one of its shard's budget of SENDs in flight (for which the shard's CQ reserved
//! entries). An inline SEND's slot goes back to the pool right after the post, which copied
//! the frame, but the SEND keeps its quota unit and its place in the budget until a
//! completion covers it: it holds a send queue entry, and a flush would complete it. Every
//! [`SHARED_SIGNAL_EVERY`]-th SEND is signalled, so an idle link holds few places; so is the
//! last SEND of a post that leaves slots waiting for their completion, so that no slot stays
//! with an idle link. A link that waited for a slot or a place is told through the link table
//! when one is free; one that reached its quota, by the completion that covers its SENDs.
//!
//! Signalling is selective: every `signal_every`-th SEND (three quarters of the ring, at
//! most [`SHARED_SIGNAL_EVERY`] on shared rings) is signalled, and so is every SEND posted while fewer than
//! `low_water` slots (a quarter) are free, so an exhausted pool always has a signalled SEND
//! outstanding. A send completion is thus rare (one per 48 SENDs of a 64-slot ring), and
//! seldom a completion-queue poll of its own. WRs on an RC QP complete in
//! order, so a signalled completion frees its own slot and every earlier unsignalled one
//! (tracked in posting order in `SendState::inflight`). Frames of at most the QP's inline
//! limit are sent inline. `post_send_batched` holds SENDs in `SendState::held` until
//! `flush_sends` posts them chained, one `ibv_post_send` (one doorbell) per
//! [`super::qp::POST_CHAIN`]; a plain `post_send` posts the held ones first, so frames always
//! go out in the order they were posted.
//!
//! **Table.** A link registers in its endpoint's link table ([`Links`]) under a fresh key, the
//! key its work requests' wr_ids carry (see the `wr_id` module), and removes itself when it is
//! released. It is closed through the table's side queue (`close_with`): by `Link::close`, or
//! by the endpoint's cm event thread (`close_by_event`).
//!
//! [`Link::take_reposted`]: crate::transport::Link::take_reposted

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use crossbeam::queue::ArrayQueue;
use rdma_sys::ibv_send_flags;
use rpc_proto::Grant;
use rpc_sync::{Count, Flag, Mutex};

use crate::transport::reposts::Reposts;
use crate::transport::shared_bounds::SHARED_SIGNAL_EVERY;

use super::cm::CmEvent;
use super::cq::CqeReservation;
use super::events::CmDispatcher;
use super::mr::Region;
use super::qp::{Qp, SendWr};
use super::shared_recv::SharedRecv;
use super::shared_send::SharedSend;
use super::table::LinkTable;
use super::wr_id::wr_id;
use crate::protocol::v2::Hello;
use crate::Error;

/// The link table of an endpoint.
pub(super) type Links = LinkTable<LinkInner>;

/// The slot a shared-ring link's signalled inline SEND names in its wr_id and in
/// `SendState::inflight`: none (its slot went back to the pool once the post copied the frame).
/// Its completion covers what was posted before it.
const INLINE_SIGNALED: u32 = u32::MAX;
/// The same for an unsignalled inline SEND: it completes only when flushed.
const INLINE_UNSIGNALED: u32 = u32::MAX - 1;

/// Whether `slot` of `SendState::inflight` is an inline SEND's mark, not a slot.
fn is_inline_mark(slot: u32) -> bool {
    slot >= INLINE_UNSIGNALED
}

struct SendState {
    /// Posted since the last signalled SEND.
    unsignaled: u32,
    /// Of those, the ones holding a shared send slot until a completion covers them.
    unsignaled_holding: u32,
    /// Every SEND posted (or held in `held`) and not yet covered by a completion, in posting
    /// order: its slot, or an inline mark ([`INLINE_SIGNALED`], [`INLINE_UNSIGNALED`]).
    inflight: VecDeque<u32>,
    /// SENDs of `post_send_batched` not posted yet (at most one per send slot: the capacity
    /// is reserved up front). Each pushed one entry, the tail of `inflight`.
    held: Vec<SendWr>,
    /// Shared send slots of held inline SENDs: free again once the post copied them.
    copied_at_post: Vec<u32>,
}

/// Where a link's receives land.
pub(super) enum RecvRing {
    /// A ring of its own, posted to its QP.
    Own(Region),
    /// The endpoint's shared receive queue.
    Shared(Arc<SharedRecv>),
}

/// Where a link's send slots come from.
// One per link, built once and never moved: boxing the (cache-padded) queue would only add a
// pointer to follow on every send.
#[allow(clippy::large_enum_variant)]
pub(super) enum SendRing {
    /// A ring of its own, its free slots in a queue.
    Own {
        region: Region,
        free: ArrayQueue<u32>,
    },
    /// The endpoint's shared send slots, at most `quota` at a time (`held`).
    Shared {
        pool: Arc<SharedSend>,
        quota: u32,
        held: Count,
    },
}

impl SendRing {
    /// A ring of its own of `region`'s slots, all free.
    pub(super) fn own(region: Region) -> SendRing {
        let free = ArrayQueue::new(region.count() as usize);
        for slot in 0..region.count() {
            // Cannot fail: the queue has room for every slot.
            let _ = free.push(slot);
        }
        SendRing::Own { region, free }
    }

    /// Up to `quota` slots at a time of `pool`.
    pub(super) fn shared(pool: Arc<SharedSend>, quota: u32) -> SendRing {
        SendRing::Shared {
            pool,
            quota,
            held: Count::new(0),
        }
    }

    fn region(&self) -> &Region {
        match self {
            SendRing::Own { region, .. } => region,
            SendRing::Shared { pool, .. } => pool.region(),
        }
    }

    /// Most slots the link holds at once.
    fn count(&self) -> u32 {
        match self {
            SendRing::Own { region, .. } => region.count(),
            SendRing::Shared { quota, .. } => *quota,
        }
    }
}

impl RecvRing {
    fn slot_size(&self) -> usize {
        match self {
            RecvRing::Own(region) => region.slot_size(),
            RecvRing::Shared(shared) => shared.slot_size(),
        }
    }
}

/// What a shared-ring link's SENDs still held when the link was released (their completions,
/// if any come, find no link): given back once its QP is destroyed, when this drops.
/// Waiting links are told as `sends_completed_through` tells them.
struct HeldAtRelease {
    slots: Vec<u32>,
    places: usize,
    pool: Arc<SharedSend>,
    shard: Arc<SharedRecv>,
    links: Arc<Links>,
}

impl Drop for HeldAtRelease {
    fn drop(&mut self) {
        let mut told = Vec::new();
        for slot in self.slots.drain(..) {
            if let Some(waiter) = self.pool.give(slot) {
                told.push(u64::from(waiter));
            }
        }
        self.shard.give_sends(self.places, &mut told);
        for waiter in told {
            // Keys are u32 (what the pools were given).
            self.links.push_send_ready(waiter as u32);
        }
    }
}

/// Everything a link owns. Field order is drop order: the QP goes first (so the device stops
/// using the rings and the cm id can be destroyed), then what its SENDs held of shared
/// rings, then the rings, then the CQ reservation.
pub(super) struct LinkInner {
    qp: Qp,
    held_at_release: Option<HeldAtRelease>,
    recv: RecvRing,
    send: SendRing,
    _reservation: Option<CqeReservation>,
    key: u32,
    /// The link's `transport::LinkId`, spelled out as its type: naming the alias would import
    /// transport/mod.rs, whose buffer enums name [`VerbsRecv`] and [`VerbsSend`] of this file.
    id: u64,
    send_state: Mutex<SendState>,
    reposted: Reposts,
    closing: Flag,
    closed_reported: Flag,
    reason: Mutex<Option<String>>,
    local_hello: Hello,
    peer_hello: OnceLock<Hello>,
    peer_name: String,
    signal_every: u32,
    /// Free send slots below which every SEND is signalled (own ring).
    low_water: u32,
    links: Arc<Links>,
    /// The cm event thread, which closes this link on a disconnect: kept running while the
    /// link lives, and told to forget the link's id when it is released.
    dispatcher: Arc<CmDispatcher>,
    /// The grant of a shared receive queue's pool, until the connection takes it.
    grant: Mutex<Option<Grant>>,
}

/// What a link is built from.
pub(super) struct LinkParts {
    pub(super) qp: Qp,
    pub(super) recv: RecvRing,
    pub(super) grant: Option<Grant>,
    pub(super) send: SendRing,
    pub(super) reservation: Option<CqeReservation>,
    pub(super) id: u64,
    pub(super) local_hello: Hello,
    pub(super) peer_name: String,
    pub(super) links: Arc<Links>,
    pub(super) dispatcher: Arc<CmDispatcher>,
}

impl LinkInner {
    /// Builds the link, registers it in the CQ's link table and posts every receive slot.
    pub(super) fn new(parts: LinkParts) -> Result<Arc<LinkInner>, Error> {
        let count = parts.send.count();
        let signal_every = match &parts.send {
            SendRing::Own { .. } => (count * 3 / 4).max(1),
            SendRing::Shared { .. } => (count * 3 / 4).clamp(1, SHARED_SIGNAL_EVERY),
        };
        let low_water = (count / 4).max(1);
        let key = parts.links.next_key()?;
        let link = Arc::new(LinkInner {
            qp: parts.qp,
            held_at_release: None,
            recv: parts.recv,
            send: parts.send,
            _reservation: parts.reservation,
            key,
            id: parts.id,
            send_state: Mutex::new(SendState {
                unsignaled: 0,
                unsignaled_holding: 0,
                inflight: VecDeque::with_capacity(count as usize),
                held: Vec::with_capacity(count as usize),
                copied_at_post: Vec::with_capacity(count as usize),
            }),
            reposted: Reposts::new(),
            closing: Flag::new(false),
            closed_reported: Flag::new(false),
            reason: Mutex::new(None),
            local_hello: parts.local_hello,
            peer_hello: OnceLock::new(),
            peer_name: parts.peer_name,
            signal_every,
            low_water,
            links: parts.links,
            dispatcher: parts.dispatcher,
            grant: Mutex::new(parts.grant),
        });
        link.links.register(key, &link);
        match &link.recv {
            RecvRing::Own(region) => {
                for slot in 0..region.count() {
                    link.post_recv(region, slot)?;
                }
            }
            RecvRing::Shared(_) => link.links.register_qp(link.qp.qp_num(), key),
        }
        tracing::debug!(
            link = link.id,
            key,
            qp_num = link.qp.qp_num(),
            slots = count,
            slot_size = link.recv.slot_size(),
            shared_recv = matches!(link.recv, RecvRing::Shared(_)),
            shared_send = matches!(link.send, SendRing::Shared { .. }),
            signal_every,
            "verbs: link rings ready, receives posted"
        );
        Ok(link)
    }

    pub(super) fn key(&self) -> u32 {
        self.key
    }

    pub(super) fn id(&self) -> u64 {
        self.id
    }

    pub(super) fn qp(&self) -> &Qp {
        &self.qp
    }

    pub(super) fn set_peer_hello(&self, hello: Hello) {
        let _ = self.peer_hello.set(hello);
    }

    pub(super) fn local_hello(&self) -> Hello {
        self.local_hello
    }

    pub(super) fn peer_hello(&self) -> Hello {
        *self.peer_hello.get().unwrap_or(&self.local_hello)
    }

    pub(super) fn peer_name(&self) -> &str {
        &self.peer_name
    }

    /// The re-post count: its credit ledger (re-posted receive slots not yet taken as
    /// credits, and the owed credits published), and the connection to tell when credits are
    /// due.
    pub(super) fn reposts(&self) -> &Reposts {
        &self.reposted
    }

    /// Bytes registered for this link alone: its rings, unless they are shared.
    pub(super) fn ring_bytes(&self) -> usize {
        let send = match &self.send {
            SendRing::Own { region, .. } => region.count() as usize * region.slot_size(),
            SendRing::Shared { .. } => 0,
        };
        match &self.recv {
            RecvRing::Own(region) => send + region.count() as usize * region.slot_size(),
            RecvRing::Shared(_) => send,
        }
    }

    /// The largest frame this side may send: its own slot, and the peer's receive slot.
    pub(super) fn send_limit(&self) -> usize {
        self.send
            .region()
            .slot_size()
            .min(self.peer_hello().slot_size as usize)
    }

    fn post_recv(&self, region: &Region, slot: u32) -> Result<(), Error> {
        self.qp.post_recv(
            wr_id(false, self.key, slot),
            region.slot_addr(slot),
            region.slot_size() as u32,
            region.lkey(),
        )
    }

    /// Gives a received slot back to the device (called when its VerbsRecv drops, or for a
    /// shared slot whose frame the link will not report): a shared slot always goes back to
    /// the SRQ; a credit is counted only while the link is open.
    pub(super) fn repost(&self, slot: u32) {
        let posted = match &self.recv {
            RecvRing::Own(_) if self.is_closing() => return,
            RecvRing::Own(region) => self.post_recv(region, slot),
            RecvRing::Shared(shared) => {
                shared.repost(slot);
                if self.is_closing() {
                    return;
                }
                Ok(())
            }
        };
        match posted {
            Ok(()) => {
                self.reposted.release();
            }
            Err(e) => tracing::debug!(link = self.id, error = %e, "verbs: re-post failed"),
        }
    }

    /// The grant of a shared receive queue's pool, once (see [`RecvRing::Shared`]).
    pub(super) fn take_grant(&self) -> Option<Grant> {
        self.grant.lock().take()
    }

    pub(super) fn is_closing(&self) -> bool {
        self.closing.is_raised()
    }

    /// Marks the link closing with `reason`; true if this call did it.
    pub(super) fn begin_close(&self, reason: String) -> bool {
        if !self.closing.raise() {
            return false;
        }
        *self.reason.lock() = Some(reason);
        true
    }

    pub(super) fn close_reason(&self) -> String {
        self.reason
            .lock()
            .clone()
            .unwrap_or_else(|| "closed".to_string())
    }

    /// Claims the right to report `Completion::Closed`; true exactly once.
    pub(super) fn claim_closed_report(&self) -> bool {
        self.closed_reported.raise()
    }

    pub(super) fn closed_reported(&self) -> bool {
        self.closed_reported.is_raised()
    }

    /// Moves the QP to the error state (flushing everything posted) and tells the peer.
    pub(super) fn disconnect(&self) {
        self.qp.id().disconnect();
    }

    /// Closes because of a cm event or a local request: the Closed completion follows through
    /// the CQ's side queue.
    pub(super) fn close_with(&self, reason: String) {
        if self.begin_close(reason) {
            self.disconnect();
            self.links.push_closed(self.key);
        } else {
            // Closing already (e.g. we closed first and this is the peer's answer): make sure
            // the DREP goes out.
            self.disconnect();
        }
    }

    /// Closes link `key` of `links` because of cm event `event` (the cm event thread's answer
    /// to a disconnect or device removal); `key` is `None` for an id no link has adopted.
    pub(super) fn close_by_event(links: &Links, key: Option<u32>, event: &CmEvent, reason: String) {
        let Some(link) = key.and_then(|key| links.lookup(key)) else {
            tracing::debug!(event = %event.describe(), "verbs: cm event for a released link");
            return;
        };
        tracing::debug!(link = link.id(), event = %event.describe(), "verbs: link closed by cm event");
        link.close_with(reason);
    }

    /// A completion covering send slot `slot` (or the earliest inline SEND of that mark, for
    /// [`INLINE_SIGNALED`] and [`INLINE_UNSIGNALED`]): frees it and everything posted before
    /// it.
    pub(super) fn sends_completed_through(&self, slot: u32) {
        // Waiting links are told once the lock is released (telling writes an eventfd).
        let mut told = Vec::new();
        {
            let mut state = self.send_state.lock();
            if !state.inflight.contains(&slot) {
                tracing::debug!(
                    link = self.id,
                    slot,
                    "verbs: completion for a slot not in flight"
                );
                return;
            }
            let mut covered = 0;
            while let Some(s) = state.inflight.pop_front() {
                covered += 1;
                match &self.send {
                    SendRing::Own { free, .. } => {
                        let _ = free.push(s);
                    }
                    SendRing::Shared { pool, .. } if !is_inline_mark(s) => {
                        if let Some(waiter) = pool.give(s) {
                            told.push(u64::from(waiter));
                        }
                    }
                    SendRing::Shared { .. } => {}
                }
                if s == slot {
                    break;
                }
            }
            // Their quota units and places in the shard's budget, all at once.
            if let (SendRing::Shared { held, .. }, RecvRing::Shared(shard)) =
                (&self.send, &self.recv)
            {
                held.sub(covered);
                shard.give_sends(covered, &mut told);
            }
        }
        self.tell(told);
    }

    /// Tells the links in `told` that a slot or place they waited for is free. Called with no
    /// lock held: telling writes an eventfd.
    fn tell(&self, told: Vec<u64>) {
        for waiter in told {
            // Keys are u32 (what the pools were given).
            self.links.push_send_ready(waiter as u32);
        }
    }

    /// A SEND of `inflight` is done (covered by a completion, or never posted): frees its slot,
    /// or the quota unit of an inline one. Links that waited are added to `told`.
    fn sent(&self, slot: u32, told: &mut Vec<u64>) {
        match (&self.send, is_inline_mark(slot)) {
            (SendRing::Shared { held, .. }, true) => {
                held.sub(1);
                self.give_place(told);
            }
            (SendRing::Own { .. }, true) => {}
            (_, false) => self.free_send(slot, told),
        }
    }

    /// Returns send slot `slot`: to the link's queue, or to the shared pool (and its unit of
    /// the quota). Links that waited are added to `told`.
    fn free_send(&self, slot: u32, told: &mut Vec<u64>) {
        match &self.send {
            SendRing::Own { free, .. } => {
                let _ = free.push(slot);
            }
            SendRing::Shared { held, .. } => {
                held.sub(1);
                self.give_place(told);
                self.give_shared(slot, told);
            }
        }
    }

    /// Gives a place of the shard's budget of SENDs in flight back, adding a link that
    /// waited for one to `told`.
    fn give_place(&self, told: &mut Vec<u64>) {
        if let RecvRing::Shared(shard) = &self.recv {
            if let Some(waiter) = shard.give_send() {
                told.push(u64::from(waiter));
            }
        }
    }

    /// Gives shared send slot `slot` back to the pool, adding a link that waited for one to
    /// `told`.
    fn give_shared(&self, slot: u32, told: &mut Vec<u64>) {
        if let SendRing::Shared { pool, .. } = &self.send {
            if let Some(waiter) = pool.give(slot) {
                told.push(u64::from(waiter));
            }
        }
    }

    /// Queues the SEND of `len` bytes of `send`'s slot behind those held (signalled and
    /// inline as `post_send` decides), to go out at the next [`LinkInner::post_held`].
    ///
    /// A shared-ring link's inline SEND does not keep its slot: the post copies the frame, so
    /// the slot goes back to the pool right after it, and the SEND is signalled only as often
    /// as the quota needs (every `signal_every`-th, and while it runs low), not for its slot.
    /// So a small reply costs no completion.
    fn hold(&self, state: &mut SendState, mut send: VerbsSend, len: usize) {
        let (free, shared) = match &self.send {
            SendRing::Own { free, .. } => (free.len(), false),
            SendRing::Shared { quota, held, .. } => {
                ((*quota as usize).saturating_sub(held.get()), true)
            }
        };
        let low = free < self.low_water as usize;
        let signal = state.unsignaled + 1 >= self.signal_every || low;
        let inline = len > 0 && len <= self.qp.max_inline() as usize;
        let mut flags = 0;
        if signal {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        let copied = shared && inline;
        let named = match (copied, signal) {
            (false, _) => send.slot,
            (true, true) => INLINE_SIGNALED,
            (true, false) => INLINE_UNSIGNALED,
        };
        let region = self.send.region();
        state.held.push(SendWr {
            wr_id: wr_id(true, self.key, named),
            addr: region.slot_addr(send.slot),
            len: len as u32,
            lkey: region.lkey(),
            flags,
        });
        if copied {
            state.copied_at_post.push(send.slot);
        }
        state.inflight.push_back(named);
        if signal {
            state.unsignaled = 0;
            state.unsignaled_holding = 0;
        } else {
            state.unsignaled += 1;
            state.unsignaled_holding += u32::from(shared && !copied);
        }
        send.posted = true;
    }

    /// Posts the held SENDs, chained (one doorbell per [`super::qp::POST_CHAIN`]). On a
    /// closing link they are dropped and their slots freed: the QP is flushed anyway. Links
    /// that waited for the slots and places given back are added to `told`, to be told once
    /// the send state is unlocked.
    fn post_held(&self, state: &mut SendState, told: &mut Vec<u64>) -> Result<(), Error> {
        if state.held.is_empty() {
            return Ok(());
        }
        // A shared-ring link signals the tail of a post that leaves slots waiting for a
        // completion, so that no slot stays with an idle link.
        if state.unsignaled_holding > 0 {
            let last = state.held.last_mut().expect("held");
            last.flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            if (last.wr_id as u32) == INLINE_UNSIGNALED {
                last.wr_id = wr_id(true, self.key, INLINE_SIGNALED);
                if let Some(mark) = state.inflight.back_mut() {
                    *mark = INLINE_SIGNALED;
                }
            }
            state.unsignaled = 0;
            state.unsignaled_holding = 0;
        }
        let result = if self.is_closing() {
            Err(Error::ConnectionClosed(self.close_reason()))
        } else {
            self.qp.post_sends(&state.held)
        };
        if result.is_err() {
            // Whatever was not posted never completes: give its slots back. (A failed post
            // closes the link; the ones posted before it complete flushed.)
            for _ in 0..state.held.len() {
                if let Some(slot) = state.inflight.pop_back() {
                    self.sent(slot, told);
                }
            }
        }
        // Copied into the work requests (or never to be sent): free again.
        for slot in state.copied_at_post.drain(..) {
            self.give_shared(slot, told);
        }
        state.held.clear();
        result
    }

    /// Posts the first `len` bytes of `send`'s slot, after the SENDs held before it.
    pub(super) fn post_send(&self, send: VerbsSend, len: usize) -> Result<(), Error> {
        let mut told = Vec::new();
        let result = {
            let mut state = self.send_state.lock();
            self.hold(&mut state, send, len);
            self.post_held(&mut state, &mut told)
        };
        self.tell(told);
        result
    }

    /// Holds the SEND of the first `len` bytes of `send`'s slot for [`LinkInner::flush_sends`].
    pub(super) fn post_send_batched(&self, send: VerbsSend, len: usize) {
        let mut state = self.send_state.lock();
        self.hold(&mut state, send, len);
    }

    /// Posts the SENDs held by [`LinkInner::post_send_batched`].
    pub(super) fn flush_sends(&self) -> Result<(), Error> {
        let mut told = Vec::new();
        let result = self.post_held(&mut self.send_state.lock(), &mut told);
        self.tell(told);
        result
    }

    /// Builds the receive buffer handed up for a completed slot.
    pub(super) fn recv_buf(self: &Arc<Self>, slot: u32) -> VerbsRecv {
        VerbsRecv {
            link: self.clone(),
            slot,
        }
    }

    /// A free send slot, or `None` when all are in flight or the link is closing. (A link of
    /// shared send slots that found the pool empty is told by a `SendDone` when one is free.)
    pub(super) fn alloc_send(self: &Arc<Self>) -> Option<VerbsSend> {
        if self.is_closing() {
            return None;
        }
        let slot = match &self.send {
            SendRing::Own { free, .. } => free.pop()?,
            SendRing::Shared { pool, quota, held } => {
                if !held.try_add_below(*quota as usize) {
                    return None;
                }
                let placed = match &self.recv {
                    RecvRing::Shared(shard) => shard.take_send(self.key).is_some(),
                    RecvRing::Own(_) => true,
                };
                if !placed {
                    held.sub(1);
                    return None;
                }
                match pool.take(self.key) {
                    Some(slot) => slot,
                    None => {
                        let mut told = Vec::new();
                        self.give_place(&mut told);
                        self.tell(told);
                        held.sub(1);
                        return None;
                    }
                }
            }
        };
        Some(VerbsSend {
            link: self.clone(),
            slot,
            posted: false,
        })
    }
}

impl Drop for LinkInner {
    fn drop(&mut self) {
        self.dispatcher.forget(self.qp.id().addr());
        self.links.unregister(self.key);
        if matches!(self.recv, RecvRing::Shared(_)) {
            self.links.unregister_qp(self.qp.qp_num());
        }
        if let SendRing::Shared { pool, .. } = &self.send {
            for waiter in pool.forget(self.key) {
                self.links.push_send_ready(waiter);
            }
        }
        if let RecvRing::Shared(shard) = &self.recv {
            for waiter in shard.forget_sends(self.key) {
                self.links.push_send_ready(waiter);
            }
        }
        if let (SendRing::Shared { pool, .. }, RecvRing::Shared(shard)) = (&self.send, &self.recv) {
            let inflight = std::mem::take(&mut self.send_state.get_mut().inflight);
            self.held_at_release = Some(HeldAtRelease {
                slots: inflight
                    .iter()
                    .copied()
                    .filter(|s| !is_inline_mark(*s))
                    .collect(),
                places: inflight.len(),
                pool: pool.clone(),
                shard: shard.clone(),
                links: self.links.clone(),
            });
        }
        // The fields drop next, in order: the QP (rdma_destroy_qp discards all posted work,
        // so the device no longer touches the rings), the cm id with it (rdma_destroy_id also
        // disconnects an established connection), what the SENDs held of shared rings (given
        // back), the rings (deregistered, freed), and the CQ
        // reservation.
        tracing::debug!(link = self.id, key = self.key, "verbs: link released");
    }
}

/// A received frame's slot; the frame bytes are the first `len` bytes of [`VerbsRecv::bytes`].
/// Dropping it re-posts the slot (or, on a closed link, just releases it).
pub struct VerbsRecv {
    link: Arc<LinkInner>,
    slot: u32,
}

impl VerbsRecv {
    /// The whole receive slot.
    pub fn bytes(&self) -> &[u8] {
        match &self.link.recv {
            // SAFETY: this VerbsRecv owns the slot: it was created from the slot's completion
            // and the slot is re-posted only when this value drops, so the device does not
            // write to it while the returned borrow lives; nobody else takes a `&mut` to
            // receive slots.
            RecvRing::Own(region) => unsafe { region.slot(self.slot) },
            // SAFETY: as above, for a slot of the shared receive queue.
            RecvRing::Shared(shared) => unsafe { shared.slot(self.slot) },
        }
    }
}

impl Drop for VerbsRecv {
    fn drop(&mut self) {
        self.link.repost(self.slot);
    }
}

/// A free send slot, writable until it is posted. Dropping it unposted returns it to the pool.
pub struct VerbsSend {
    link: Arc<LinkInner>,
    slot: u32,
    posted: bool,
}

impl VerbsSend {
    /// The slot, as long as the largest frame this link may send.
    pub fn bytes(&self) -> &[u8] {
        let limit = self.link.send_limit();
        // SAFETY: this VerbsSend owns the slot: it left the free pool in alloc_send and goes
        // back only when this value is posted-and-completed or dropped; the device does not
        // read it before it is posted.
        let slot = unsafe { self.link.send.region().slot(self.slot) };
        &slot[..limit]
    }

    /// The slot, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let limit = self.link.send_limit();
        // SAFETY: as for `bytes`; `&mut self` makes this the only borrow of the slot.
        let slot = unsafe { self.link.send.region().slot_mut(self.slot) };
        &mut slot[..limit]
    }

    /// Whether this slot is one of `link`'s.
    pub(super) fn belongs_to(&self, link: &Arc<LinkInner>) -> bool {
        Arc::ptr_eq(&self.link, link)
    }
}

impl Drop for VerbsSend {
    fn drop(&mut self) {
        if !self.posted {
            let mut told = Vec::new();
            self.link.free_send(self.slot, &mut told);
            self.link.tell(told);
        }
    }
}
