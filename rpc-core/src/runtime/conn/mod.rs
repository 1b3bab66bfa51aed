//! A link plus its protocol state. The state lives in a [`Serializer`]: one thread at a time
//! drives it (the poller with a completion, a caller starting a call, a handler replying),
//! and a thread that finds it busy leaves its work to that owner instead of waiting. No lock
//! is held across a post, a park or user code: handlers run and calls complete as
//! [`Delivery`]s, after the owner let go of the state.
//!
//! Data flows one way: completion → owner → protocol core → delivery (handler or waiting
//! call) → protocol core (reply) → post.

mod port;
mod receive;
mod send;
mod steps;
mod work;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use std::time::Instant;

use rpc_sync::{assert_unlocked, Flag, Serializer};

pub(crate) use self::work::{Awaiting, CallRef, Caller, Delivery, OpenCall, UnaryReply, Work};
use super::call::Encode;
use super::held_sends;
use super::port::{Dispatch, Port};
use super::service::ServedMethod;
use super::stream::StreamShared;
use super::Counters;
use crate::protocol::v2::{
    flags, Connection, ConnectionMemory, Hello, Keepalive, Kind, Outgoing, Payload as Body, Role,
    SendError, HEADER_LEN,
};
use crate::transport::{CreditsDue, Link, SendBuf};
use crate::Status;

type Core = Connection<CallRef, SendBuf>;

/// The state one thread at a time works on.
pub(crate) struct Owned {
    core: Core,
    /// Streams whose last message is queued in the core: their sender waits until it left.
    /// Bounded by `max_calls`.
    blocked: Vec<Arc<StreamShared>>,
    closed: bool,
    /// Server: the method of the last call opened (a server's methods are fixed for its
    /// life).
    last_method: Option<ServedMethod>,
    /// The owed credits as last published in the link's credit ledger (which starts at 0).
    published_owed: u32,
    /// Server: the box of the last call that waited for its message after its headers
    /// (`CallRef::Awaiting`), for the next one (at most one kept).
    spare_awaiting: Option<Box<Awaiting>>,
    /// Server: the earliest deadline last published in `Conn::earliest_deadline` (most new
    /// deadlines are later: publishing is then skipped).
    earliest_published: Option<Instant>,
    /// Server, shutting down: the [`DRAIN_PING`] went out after every answer; the connection
    /// closes when the client acknowledges it.
    draining: bool,
}

/// The value of the PING a server shutting down sends each client once its handlers are
/// done (`RP-CLOSE` on the wire; no extension's tag): the client's answer comes after it
/// received every frame sent before it, so closing then loses no answer still on its way,
/// over RDMA (where a disconnect flushes SENDs not yet completed) as over TCP.
pub(crate) const DRAIN_PING: u64 = u64::from_le_bytes(*b"RP-CLOSE");

/// The time limits a connection's core enforces.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConnTimeouts {
    /// A message in reassembly that makes no progress for this long is dropped.
    pub(crate) stall: Option<Duration>,
    /// Server: the longest a call may run ([`rpc_proto::Connection::set_call_time_limit`]).
    pub(crate) call_limit: Option<Duration>,
}

/// A link and its protocol state.
pub(crate) struct Conn {
    /// This connection, for payloads that outlive the delivery that made them.
    me: std::sync::Weak<Conn>,
    pub(crate) link: Arc<dyn Link>,
    pub(crate) peer: Arc<str>,
    /// The peer's HELLO (fixed for the connection's life).
    pub(crate) peer_hello: Hello,
    /// Our HELLO.
    pub(crate) local_hello: Hello,
    /// Payload bytes of a frame to the peer.
    pub(crate) max_segment: usize,
    state: Serializer<Owned, Work>,
    dispatch: Option<Arc<dyn Dispatch>>,
    pub(crate) counters: Arc<Counters>,
    closed: Flag,
    /// A server's connection: frames posted inside [`held_sends::holding_sends`] are held for one batch.
    serving: bool,
    /// Server: the earliest deadline the core watches, as [`deadline_mark`] (`u64::MAX`:
    /// none), published by the owner for the endpoint's tick, which sends the connection
    /// the time only once it passed: a hint (read relaxed), off by a tick at worst. A
    /// connection with one counts in [`Counters::watching_deadlines`].
    earliest_deadline: AtomicU64,
    /// [`Connection::credit_threshold`](crate::protocol::v2::Connection::credit_threshold):
    /// a thread that releases a receive slot asks the owner to look at the credits only when
    /// the owed credits the owner published ([`Link::publish_owed`]) and the re-posts not yet
    /// taken reach it (a CREDIT frame may be due); below it, the credits travel on the next
    /// frame out. Spares a serializer round per received message.
    credit_threshold: u32,
    /// Client: futures allowed to leave their reply in its receive slot (a polled future
    /// whose task waits to be woken decodes it as soon as it runs); at most a quarter of the
    /// connection's receive slots, so that replies nobody takes yet cannot starve the ring:
    /// beyond that, replies are copied out. A bound, not a hand-off (the reply reaches its
    /// future through the call's cell), hence relaxed.
    futures_holding_slots: AtomicU32,
    /// Client: the server accepted whole requests (PROTOCOL.md §22): a unary call with
    /// metadata opens in one frame ([`Conn::encode_whole_request`]). Raised once, by the
    /// owner that read the acceptance; callers encoding a request read it.
    whole_requests: Flag,
    /// Client: the server said GOODBYE (PROTOCOL.md §14): it takes no new call here, so new
    /// calls go to a new connection while this one finishes the calls it processes. Raised
    /// once, by the owner that read the GOODBYE; callers picking a connection read it.
    going_away: Flag,
}

impl Conn {
    /// Client: whether one more future may leave its reply in its receive slot (see
    /// `futures_holding_slots`); a `true` must be matched by [`Conn::release_reply_slot`].
    pub(crate) fn hold_reply_slot(&self) -> bool {
        // A quarter of the slots: the other three quarters keep the peer sending, and their
        // re-posts still reach the credit threshold (half the grant) that sends a CREDIT
        // frame; with half held, a peer short of credits could wait for a keepalive.
        let limit = self.local_hello.slot_count / 4;
        self.futures_holding_slots
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < limit).then_some(held + 1)
            })
            .is_ok()
    }

    /// A future that [held](Conn::hold_reply_slot) a reply slot is done with it.
    pub(crate) fn release_reply_slot(&self) {
        self.futures_holding_slots.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn new(
        link: Arc<dyn Link>,
        role: Role,
        dispatch: Option<Arc<dyn Dispatch>>,
        counters: Arc<Counters>,
        memory: ConnectionMemory,
        (keepalive, timeouts): (Option<Keepalive>, ConnTimeouts),
        offer_extensions: bool,
    ) -> Arc<Conn> {
        let local = link.local_hello();
        let peer = link.peer_hello();
        let mut core = Connection::new(role, local, peer, link.send_slot_size());
        core.set_memory(memory);
        if let Some(grant) = link.take_grant() {
            core.set_grant(grant);
        }
        core.set_keepalive(keepalive);
        core.set_stall_timeout(timeouts.stall);
        core.set_call_time_limit(timeouts.call_limit);
        // Calls beyond the server's `max_calls` wait in the core, in order (a client's only).
        core.queue_beyond_max_calls(role == Role::Client);
        // Whole requests spare a frame per call that carries metadata; a server without
        // them just echoes the offer.
        if offer_extensions {
            core.offer_extensions();
        }
        // The core holds a unary-request call's message until its half-close, and ends the
        // call INTERNAL if a second comes or none (PROTOCOL.md §16.1).
        if let Some(dispatch) = &dispatch {
            let dispatch = Arc::clone(dispatch);
            core.set_one_request(move |method| {
                dispatch
                    .method(method)
                    .is_some_and(|method| !method.kind.receives_stream())
            });
        }
        let credit_threshold = core.credit_threshold();
        Arc::new_cyclic(|me| {
            link.on_credits_due(
                me.clone() as std::sync::Weak<dyn CreditsDue>,
                credit_threshold,
            );
            Conn {
                me: me.clone(),
                peer: link.peer_name().into(),
                serving: role == Role::Server,
                peer_hello: peer,
                local_hello: local,
                max_segment: core.max_segment(),
                credit_threshold,
                futures_holding_slots: AtomicU32::new(0),
                earliest_deadline: AtomicU64::new(u64::MAX),
                link,
                state: Serializer::new(Owned {
                    core,
                    blocked: Vec::new(),
                    closed: false,
                    last_method: None,
                    published_owed: 0,
                    spare_awaiting: None,
                    earliest_published: None,
                    draining: false,
                }),
                dispatch,
                counters,
                closed: Flag::new(false),
                whole_requests: Flag::new(false),
                going_away: Flag::new(false),
            }
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_raised()
    }

    /// Client: whether this connection takes new calls: it is open and its server has not
    /// said GOODBYE.
    pub(crate) fn takes_new_calls(&self) -> bool {
        !self.closed.is_raised() && !self.going_away.is_raised()
    }

    /// Tears the link down; a `Closed` completion follows and fails the calls.
    pub(crate) fn close(&self) {
        if self.closed.raise() {
            self.link.close();
        }
    }

    /// Encodes `message` as the payload of a `kind` frame: straight into a send slot when it
    /// fits one frame and a slot is free (the one copy), else into a buffer the core cuts
    /// into segments.
    ///
    /// Generic: a caller that knows the message's type (a unary request) has prost's
    /// encoding inlined; one that does not passes a `&dyn Encode`.
    pub(crate) fn encode<M: Encode + ?Sized>(
        &self,
        kind: Kind,
        fl: u16,
        message: &M,
    ) -> Outgoing<SendBuf> {
        let len = message.encoded_len();
        Outgoing {
            kind,
            flags: fl,
            code: 0,
            payload: self.framed(
                len,
                |slot| message.encode_into(slot),
                || message.encode_to_vec(len),
            ),
        }
    }

    /// A unary request with `block` (a non-empty metadata block) as one frame, a whole
    /// request (PROTOCOL.md §22.2): `None` when the server did not accept them, or the block
    /// or the message is beyond its limits (the call then goes as HEADERS and MESSAGE,
    /// whose sending reports the limit).
    pub(crate) fn encode_whole_request(
        &self,
        block: &[u8],
        message: &dyn Encode,
    ) -> Option<Outgoing<SendBuf>> {
        let message_len = message.encoded_len();
        let fits = block.len() <= self.peer_hello.max_metadata_size as usize
            && message_len <= self.peer_hello.max_message_size as usize;
        if !(fits && self.whole_requests.is_raised()) {
            return None;
        }
        let len = 4 + block.len() + message_len;
        // The block's length, the block, the message: into a send slot, or a buffer of the
        // same bytes for the core to cut into segments.
        let write = |out: &mut [u8]| {
            let (head, rest) = out.split_at_mut(4 + block.len());
            head[..4].copy_from_slice(&(block.len() as u32).to_le_bytes());
            head[4..].copy_from_slice(block);
            message.encode_into(rest);
        };
        Some(Outgoing {
            kind: Kind::Message,
            flags: UNARY | flags::METADATA,
            code: 0,
            payload: self.framed(len, write, || {
                let mut bytes = vec![0; len];
                write(&mut bytes);
                bytes
            }),
        })
    }

    /// A metadata block as the payload of a HEADERS frame, in a send slot as [`Conn::encode`]
    /// puts a message: the frame can then leave at once, unqueued.
    pub(crate) fn headers_payload(&self, block: &[u8]) -> Body<SendBuf> {
        self.framed(
            block.len(),
            |slot| slot.copy_from_slice(block),
            || block.to_vec(),
        )
    }

    /// The payload of a frame of `len` bytes: `fill` writes them into a send slot when they
    /// fit one frame and a slot is free, else `spill` makes the buffer the core cuts into
    /// segments.
    fn framed(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        spill: impl FnOnce() -> Vec<u8>,
    ) -> Body<SendBuf> {
        match (len <= self.max_segment).then(|| self.link.alloc_send()) {
            Some(Some(mut buf)) => {
                fill(&mut buf[HEADER_LEN..HEADER_LEN + len]);
                Body::InBuffer(buf, len)
            }
            _ => Body::Bytes(spill()),
        }
    }

    /// Posts one frame, at once or (`batched`) held by the link until `flush_sends`; `false`
    /// if the link failed (it is then closed).
    fn post(&self, buf: SendBuf, len: usize, batched: bool) -> bool {
        assert_unlocked("posting a frame");
        self.counters.sent(len);
        let posted = if batched || self.held_here() {
            self.link.post_send_batched(buf, len)
        } else {
            self.link.post_send(buf, len)
        };
        match posted {
            Ok(()) => true,
            Err(e) => {
                self.send_failed(&e);
                false
            }
        }
    }

    fn send_failed(&self, e: &crate::Error) {
        tracing::warn!(peer = %self.peer, error = %e, "send failed; closing the connection");
        self.close();
    }

    fn post_result(
        &self,
        sent: Result<Option<(SendBuf, usize)>, SendError>,
    ) -> Result<(), SendError> {
        self.post_result_as(sent, false)
    }

    /// Posts the frame the core let go at once, if any (`batched`: held by the link until
    /// the next post or [`Conn::flush_held`]).
    fn post_result_as(
        &self,
        sent: Result<Option<(SendBuf, usize)>, SendError>,
        batched: bool,
    ) -> Result<(), SendError> {
        match sent {
            Ok(Some((buf, len))) => {
                self.post(buf, len, batched);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends what the link holds from batched posts, unless this thread holds the
    /// connection's frames for a batch of its own ([`held_sends::holding_sends`]).
    fn flush_held(&self) {
        if !self.held_here() {
            if let Err(e) = self.link.flush_sends() {
                self.send_failed(&e);
            }
        }
    }

    /// Posts what the core has ready, while send slots last, as one batch (over TCP: one
    /// write for all the segments of a message). Most steps have nothing queued (their frame
    /// left directly): they pay only the look at the core.
    #[inline]
    fn transmit(&self, owned: &mut Owned) {
        if owned.core.wants_transmit() {
            self.transmit_queued(owned);
        }
    }

    fn transmit_queued(&self, owned: &mut Owned) {
        let mut posted = false;
        while owned.core.wants_transmit() {
            match owned.core.poll_transmit(&mut || self.link.alloc_send()) {
                Some((buf, len)) => {
                    if !self.post(buf, len, true) {
                        return;
                    }
                    posted = true;
                }
                None => break,
            }
        }
        if posted {
            self.flush_held();
        }
    }

    /// Whether this thread holds this connection's frames back for now (see
    /// [`held_sends::holding_sends`]); if so, its link is flushed when the holding ends.
    fn held_here(&self) -> bool {
        self.serving && held_sends::hold(&self.link)
    }

    /// Server: publishes the earliest deadline the core watches if it changed (a frame
    /// opened a call with an earlier one, or a tick let some pass), for the endpoint's tick.
    fn publish_deadlines(&self, owned: &mut Owned) {
        let earliest = owned.core.earliest_deadline();
        if earliest == owned.earliest_published {
            return;
        }
        match (owned.earliest_published.is_some(), earliest.is_some()) {
            (false, true) => self.counters.watching_deadlines(true),
            (true, false) => self.counters.watching_deadlines(false),
            _ => {}
        }
        owned.earliest_published = earliest;
        let mark = earliest.map_or(u64::MAX, deadline_mark);
        self.earliest_deadline.store(mark, Ordering::Relaxed);
    }

    fn take_reposted(&self, owned: &mut Owned) {
        let reposted = self.link.take_reposted();
        if reposted > 0 {
            owned.core.released(reposted);
        }
    }

    /// Publishes the owed credits for the threads that re-post receive slots (see
    /// [`CreditsDue`]), then looks once more at the re-posts not yet taken: one released
    /// after this step took them may have read the previous figure and left its credit to
    /// this step. Nothing to do when the figure did not change since it was last published:
    /// every re-post since this step took them was judged by its releaser against the very
    /// figure this step would publish.
    fn publish_owed(&self, owned: &mut Owned) {
        loop {
            let owed = owned.core.owed();
            if owed == owned.published_owed {
                return;
            }
            // Pairs with a releaser's count: the figure is published and the re-posts read in
            // one step of the link's credit ledger, so a release and this step always see one
            // another (the loom model `credits_due_are_never_left_unsent`).
            let pending = self.link.publish_owed(owed);
            owned.published_owed = owed;
            if pending == 0 || owed.saturating_add(pending) < self.credit_threshold {
                return;
            }
            self.take_reposted(owned);
            self.transmit(owned);
            let owed = owned.core.owed();
            if owed >= self.credit_threshold {
                // No CREDIT could go (no send credit left): the frame that brings one back
                // runs a step, which sends it. Meanwhile every release asks again.
                self.link.publish_owed(owed);
                owned.published_owed = owed;
                return;
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if *self.earliest_deadline.get_mut() != u64::MAX {
            self.counters.watching_deadlines(false);
        }
    }
}

impl CreditsDue for Conn {
    /// Receive slots of this connection were re-posted (their messages consumed or copied
    /// out) up to the threshold: the owner looks at the credits, a CREDIT frame may be due.
    fn credits_due(&self) {
        self.submit(Work::Flush);
    }
}

impl Conn {
    fn fail_all(&self, owned: &mut Owned, reason: &str) -> Delivery {
        owned.closed = true;
        self.closed.raise();
        let status = Status::unavailable(format!("connection to {} lost: {reason}", self.peer));
        let mut failed: Vec<Delivery> = owned
            .core
            .drain_calls()
            .into_iter()
            .filter_map(|(_, user)| call_ended(user, status.clone()))
            .collect();
        // No call, no deadline: the endpoint stops ticking for this connection now, not when
        // the connection is dropped (which may be much later).
        self.publish_deadlines(owned);
        failed.extend(owned.blocked.drain(..).map(Delivery::Ready));
        Delivery::Batch(failed)
    }

    /// Runs a delivery: no state is owned here, so handlers may take their time and calls
    /// on this connection go on meanwhile.
    fn deliver(&self, delivery: Delivery) {
        match delivery {
            Delivery::Request(request) => {
                assert_unlocked("calling a handler");
                // The handler answers through this connection: it needs the connection's
                // `Arc` (gone only while the connection is being dropped: nobody to answer).
                match (&self.dispatch, self.me.upgrade()) {
                    (Some(d), Some(me)) => d.serve(me as Port, Arc::clone(&self.peer), request),
                    (Some(_), None) => {}
                    (None, _) => self.submit(Work::End {
                        call: request.call,
                        status: Status::unimplemented("this endpoint serves no methods"),
                    }),
                }
            }
            // `settle` turned these into the ones below before the state was let go.
            Delivery::Push { .. } | Delivery::HalfClosed(_) | Delivery::End { .. } => {
                unreachable!("a stream delivery that was not settled")
            }
            Delivery::Woken(wake) => {
                if wake.wake() {
                    super::woke_a_thread();
                }
            }
            Delivery::Unread { stream, len } => {
                // Nobody reads the stream any more: its window comes back at once.
                if let Some(bytes) = stream.consumed(len) {
                    self.submit(Work::Consumed { stream, bytes });
                }
            }
            Delivery::Ended {
                stream,
                wake,
                cancelled,
            } => {
                if wake.wake() {
                    super::woke_a_thread();
                }
                stream.finish();
                if cancelled {
                    stream.cancel_task();
                }
            }
            Delivery::Ready(stream) => {
                if stream.send_ready.raise() {
                    super::woke_a_thread();
                }
            }
            Delivery::CancelTask(task) => task.cancel(),
            Delivery::Batch(all) => {
                for d in all {
                    self.deliver(d);
                }
            }
        }
    }
}

/// A HEADERS frame (a metadata block) or a client's END (empty) of a call.
pub(crate) fn block_frame(kind: Kind, block: Vec<u8>) -> Outgoing<SendBuf> {
    Outgoing {
        kind,
        flags: 0,
        code: 0,
        payload: Body::Bytes(block),
    }
}

/// What to tell whoever waits on a call that ended with `status` (lost, cancelled,
/// refused).
fn call_ended(user: CallRef, status: Status) -> Option<Delivery> {
    match user {
        CallRef::Waiter(cell) => Delivery::outcome(&cell, Err(status)),
        CallRef::Stream(stream) => Some(Delivery::End {
            stream,
            end: Err(status),
        }),
        CallRef::Served(task) => Some(Delivery::CancelTask(task)),
        CallRef::Awaiting(_) => None,
    }
}

/// `at` as a number that orders as instants do (seconds since a process-wide origin above
/// 30 bits of nanoseconds: shifts, no 128-bit product), for the deadline hints connections
/// publish; an instant before the origin reads as 0.
pub(crate) fn deadline_mark(at: Instant) -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let since = at.saturating_duration_since(*ORIGIN.get_or_init(Instant::now));
    (since.as_secs() << 30) | u64::from(since.subsec_nanos())
}

pub(crate) fn closed_status() -> Status {
    Status::unavailable("the connection is closed")
}

/// The flags of a unary call's single message: it ends the sender's side.
pub(crate) const UNARY: u16 = flags::END;
#[cfg(test)]
mod tests {
    use std::mem::size_of;

    /// What a unary call moves by value between threads and steps (work for a connection's
    /// owner, what it delivers, a received body) stays within two cache lines: up to that
    /// size the compiler moves a value with a few vector stores, beyond it with a `memcpy`
    /// call (about 30 instructions each, a dozen of them per call before these were cut).
    #[test]
    fn hot_path_values_move_without_memcpy() {
        const TWO_CACHE_LINES: usize = 128;
        for (what, size) in [
            ("Work", size_of::<super::Work>()),
            ("Delivery", size_of::<super::Delivery>()),
            ("Payload", size_of::<super::super::call::Payload>()),
            (
                "Result<Reply, Status>",
                size_of::<Result<super::super::call::Reply, crate::Status>>(),
            ),
            ("RecvBuf", size_of::<crate::transport::RecvBuf>()),
        ] {
            assert!(size <= TWO_CACHE_LINES, "{what} is {size} bytes");
        }
    }
}
