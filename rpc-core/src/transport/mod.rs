//! Transports, shaped like verbs rather than sockets: every connection ("link") has a ring of
//! registered receive slots that the transport fills and hands up as completions, and a ring of
//! send slots that the runtime encodes frames into and posts. One [`CompletionQueue`] per
//! endpoint gathers the completions of all its links, and one poller thread drains it.
//!
//! Credit accounting sits on top: a receive slot goes back to the transport (is re-posted) when
//! its [`RecvBuf`] is dropped, and [`Link::take_reposted`] tells the runtime how many credits it
//! may return to the peer. A transport never needs to buffer beyond its posted slots: a peer that
//! sends without a free slot has broken the protocol and is disconnected.
//!
//! Here too, at tonic's paths (`tonic::transport::{Channel, Endpoint, Server, ...}`):
//! [`Channel`] (a connection), [`Endpoint`] (its builder), [`Server`], and the TLS settings
//! [`ClientTlsConfig`], [`Certificate`], [`ServerTlsConfig`], [`Identity`].

use std::sync::Arc;
use std::time::Duration;

use crate::protocol::v2::Hello;
use crate::Error;

pub use crate::runtime::client::channel::{Channel, Endpoint};
/// The server builder's entry point, at tonic's path (`tonic::transport::Server`).
pub use crate::runtime::server::Server;
pub use crate::runtime::tls_config::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
pub use reposts::CreditsDue;
use shared_bounds::SHARED_SIGNAL_EVERY;

pub mod heap;
pub mod memory;
mod reposts;
mod shared_bounds;
pub mod tcp;
#[cfg(feature = "verbs")]
pub mod verbs;

/// Identifies a link within its endpoint.
pub type LinkId = u64;

/// Runs something on each of a server's threads around its loop (entering an async
/// runtime's context, say): it must call the closure it gets. Defined here, below the
/// runtime, because transports run threads of their own (the TCP I/O thread).
pub type ThreadContext = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// Where a TCP server's listener sends a connection whose client speaks HTTP/2 (it sent the
/// whole HTTP/2 connection preface where this protocol's HELLO would be): the socket,
/// non-blocking, nothing read from it yet.
pub(crate) type Http2Handoff = Arc<dyn Fn(std::net::TcpStream) + Send + Sync>;

/// One connected peer: a reliable, message-preserving, in-order channel of frames.
pub trait Link: Send + Sync + 'static {
    /// This link's id within its endpoint (the `link` of its completions).
    fn id(&self) -> LinkId;
    /// A free send slot of [`Link::send_slot_size`] bytes, or `None` when all are in flight.
    fn alloc_send(&self) -> Option<SendBuf>;
    /// Size of each send slot (the largest frame this side can post).
    fn send_slot_size(&self) -> usize;
    /// Bytes of this link's own rings (receive and send), what it holds whatever its peer
    /// does: by default two rings of the local HELLO's `slot_count` × `slot_size`.
    fn ring_bytes(&self) -> usize {
        let local = self.local_hello();
        2 * local.slot_count as usize * local.slot_size as usize
    }
    /// Posts the first `len` bytes of `buf` as one frame. The slot returns to the free pool
    /// once the transport is done with it (for verbs: at the send completion).
    fn post_send(&self, buf: SendBuf, len: usize) -> Result<(), Error>;
    /// Like [`Link::post_send`], but the transport may hold the frame until
    /// [`Link::flush_sends`], which the caller must call after its last post of a batch, so
    /// that the frames of a segmented message go out in one system call. Default: posts at
    /// once.
    fn post_send_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        self.post_send(buf, len)
    }
    /// Sends what [`Link::post_send_batched`] held. Default: nothing is held.
    fn flush_sends(&self) -> Result<(), Error> {
        Ok(())
    }
    /// Receive slots re-posted since the last call: the credits owed to the peer.
    fn take_reposted(&self) -> u32;
    /// Publishes the credits the connection owes, for the re-posting threads' check (see
    /// [`Link::on_credits_due`]), and returns the re-posts not yet taken, read in the same
    /// atomic step as the publication ([`rpc_sync::CreditLedger::publish_owed`]): one of a
    /// re-post and a publication always sees the other, with no fence.
    fn publish_owed(&self, owed: u32) -> u32;
    /// Registers the connection to tell ([`CreditsDue::credits_due`]) when a re-post makes
    /// the re-posts not yet taken plus the owed credits last published reach `threshold`
    /// (once per link; the thread that re-posted tells it).
    fn on_credits_due(&self, conn: std::sync::Weak<dyn CreditsDue>, threshold: u32);
    /// Parameters this side announced in its HELLO.
    fn local_hello(&self) -> Hello;
    /// Parameters the peer announced in its HELLO.
    fn peer_hello(&self) -> Hello;
    /// A printable name of the peer (address).
    fn peer_name(&self) -> String;
    /// The link's grant of a pool of receive slots shared with other links (PROTOCOL.md
    /// §22.4), taken once by the connection's core, which raises and lowers it; `None` when
    /// the link has receive slots of its own.
    fn take_grant(&self) -> Option<rpc_proto::Grant> {
        None
    }
    /// Tears the link down: outstanding receives are flushed and a [`Completion::Closed`]
    /// follows on the completion queue. Idempotent.
    fn close(&self);
}

/// What a [`CompletionQueue`] reports.
pub enum Completion {
    /// A frame arrived in a receive slot. Dropping the buffer re-posts the slot.
    Recv {
        /// Link it arrived on.
        link: LinkId,
        /// The frame.
        buf: RecvBuf,
    },
    /// Send slots were freed (a signalled send completed); queued frames may proceed.
    SendDone {
        /// Link the sends were on.
        link: LinkId,
    },
    /// The link failed or was closed; no further completions follow for it.
    Closed {
        /// The link.
        link: LinkId,
        /// Why (verbs status string, I/O error, peer disconnect).
        reason: String,
    },
}

/// The per-endpoint completion queue that the poller thread drains.
pub trait CompletionQueue: Send + Sync + 'static {
    /// Appends the completions available now (at most `max`) to `out` without blocking;
    /// returns how many were appended.
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize;
    /// Sleeps until a completion may be available, [`CompletionQueue::wake`] is called, or
    /// `timeout` passes. Implementations arm their notification first and poll once more to
    /// close the race, so a completion that arrives while arming is never missed.
    fn wait(&self, timeout: Option<Duration>);
    /// Wakes a thread sleeping in [`CompletionQueue::wait`].
    fn wake(&self);
    /// Registers the endpoint that owns this queue: for transports whose completions are
    /// produced by threads of their own (the TCP I/O thread), such a thread may then handle
    /// what it produced itself instead of waking the poller; transports that queue a link's
    /// `Closed` outside the endpoint's poll (the in-memory links, the verbs link table)
    /// tell it through [`Driver::link_closed`]. Default: ignored.
    fn set_driver(&self, _driver: std::sync::Weak<dyn Driver>) {}
    /// Whether completions show up only when a thread of the endpoint polls for them (verbs:
    /// the device's queue; in-memory links: what peers pushed), rather than being handled by
    /// the transport's own threads (the TCP I/O thread): only then does a waiting caller or
    /// stream reader gain by polling, or sleeping on the queue, itself. Default: `true`.
    fn needs_polling(&self) -> bool {
        true
    }
    /// Bytes the endpoint registered with an RDMA device now (its links' rings and shared
    /// receive queue); 0 for transports that register nothing.
    fn registered_bytes(&self) -> u64 {
        0
    }
}

/// The endpoint that owns a completion queue, as its transport sees it.
pub trait Driver: Send + Sync {
    /// Polls and handles completions on the calling thread until the queue is empty and
    /// returns `true`; returns `false` at once if another thread is polling (which then
    /// re-checks the queue before it stops).
    fn drive_once(&self) -> bool;
    /// The transport queued the `Closed` of one of the endpoint's links (the peer went away,
    /// the connection manager or the endpoint ended it), possibly on a thread of its own: a
    /// poller that sleeps away from the queue (an idle client's, between its ticks) looks
    /// now, so that the next call reconnects instead of going out on the dead link. Rare: a
    /// close each. Default: nothing (an endpoint whose poller sleeps only on the queue).
    fn link_closed(&self) {}
}

/// A received frame sitting in its receive slot; dereferences to the frame bytes. Dropping it
/// re-posts the slot to the transport.
pub struct RecvBuf {
    pub(crate) inner: RecvInner,
    pub(crate) len: usize,
}

pub(crate) enum RecvInner {
    Heap(heap::HeapRecv),
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsRecv),
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match &self.inner {
            RecvInner::Heap(h) => &h.bytes()[..self.len],
            #[cfg(feature = "verbs")]
            RecvInner::Verbs(v) => &v.bytes()[..self.len],
        }
    }
}

/// A free send slot; dereferences to the whole slot for encoding a frame into it.
pub struct SendBuf {
    pub(crate) inner: SendInner,
}

pub(crate) enum SendInner {
    Heap(heap::HeapSend),
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsSend),
}

impl std::ops::Deref for SendBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.inner {
            SendInner::Heap(h) => h.bytes(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v) => v.bytes(),
        }
    }
}

impl std::ops::DerefMut for SendBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            SendInner::Heap(h) => h.bytes_mut(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v) => v.bytes_mut(),
        }
    }
}

/// Accepts incoming links for a server endpoint.
pub trait Acceptor: Send + 'static {
    /// Waits up to `timeout` for a peer to connect and complete its handshake; `Ok(None)` if
    /// none did. Errors of one failed handshake are returned and do not stop the acceptor.
    fn accept(&mut self, timeout: Duration) -> Result<Option<Arc<dyn Link>>, Error>;
    /// The bound local address (`ip:port`).
    fn local_addr(&self) -> String;
    /// A handle that stops this acceptor from another thread: a waiting
    /// [`Acceptor::accept`] returns `Ok(None)` at once, and so does every later one. With
    /// one, an accept loop waits for connections without waking; `None` (the default) for
    /// an acceptor that cannot be woken, whose loop waits in short slices instead.
    fn stopper(&self) -> Option<AcceptStopper> {
        None
    }
    /// Whether the acceptor is gone for good (its RDMA device was removed): every later
    /// [`Acceptor::accept`] would return at once, and the server's accept loop ends. `false`
    /// (the default) for one that lasts as long as it is not stopped.
    fn is_gone(&self) -> bool {
        false
    }
}

/// Stops an [`Acceptor`] from another thread ([`Acceptor::stopper`]).
pub type AcceptStopper = Box<dyn Fn() + Send + Sync>;

/// Slot ring sizes and the limits announced to the peer in the HELLO
/// (`docs/PROTOCOL.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Receive slots posted per connection (also: send slots per connection).
    pub slot_count: u32,
    /// Bytes per slot (frame header included).
    pub slot_size: u32,
    /// Largest message accepted.
    pub max_message_size: u32,
    /// Most calls open at once on a connection (a server refuses more; a client opens no
    /// more).
    pub max_calls: u32,
    /// Bytes of messages a call may have in flight towards this side before it returns
    /// window (per call and direction).
    pub call_window: u32,
    /// Largest metadata block (request headers, response headers, trailers) accepted.
    pub max_metadata_size: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl RingConfig {
    /// The defaults: 64 slots of 8 KiB, 4 MiB messages, 128 calls, 64 KiB call windows,
    /// 8 KiB metadata blocks.
    pub const DEFAULT: RingConfig = RingConfig {
        slot_count: 64,
        slot_size: 8192,
        max_message_size: 4 << 20,
        max_calls: 128,
        call_window: 64 << 10,
        max_metadata_size: 8 << 10,
    };

    /// The HELLO announcing this configuration.
    pub const fn hello(&self) -> Hello {
        Hello {
            slot_count: self.slot_count,
            slot_size: self.slot_size,
            max_message_size: self.max_message_size,
            max_calls: self.max_calls,
            call_window: self.call_window,
            max_metadata_size: self.max_metadata_size,
        }
    }

    /// Checks the values against the protocol's ranges.
    pub fn validate(&self) -> Result<(), Error> {
        self.hello()
            .validate()
            .map_err(|e| Error::InvalidConfig(format!("ring configuration: {e}")))
    }
}

/// A server's receive and send slots shared by all its connections, over verbs and TCP
/// (`docs/PROTOCOL.md` §22.4).
///
/// - **Receive slots** come in shards of `recv_slots` slots of `recv_slot_size` bytes, each a
///   shared receive queue with a completion queue of its own. A connection is admitted to a
///   shard with room for its `base_grant` (its HELLO's `slot_count` and `slot_size` are the
///   base and the shard's slot size) and raised up to `max_grant` while its client runs short.
///   A new shard is added when none has room, up to `recv_shards`; a connection that fits in
///   none is refused. So registered memory grows with the connections, a shard at a time:
///   about `base_grant × recv_slot_size` per connection (12 KiB at the defaults).
/// - **Send slots**: `send_slots` slots of the [`RingConfig`]'s `slot_size`, registered once,
///   that a connection takes one per frame in flight (a frame sent inline gives it back at
///   once), at most the [`RingConfig`]'s `slot_count` at a time (its send queue's depth). The
///   connections of a shard have at most `sends_in_flight` SENDs in flight together, inline
///   ones included, for which the shard's completion queue reserves entries.
///
/// Over TCP the same numbers hold with heap slots of the [`RingConfig`]'s `slot_size`,
/// allocated as frames arrive: one pool of `recv_slots × recv_shards` credits, and at most that
/// many slots (and an eighth more) out at once, so an idle connection holds none.
///
/// At the defaults: 16 shards of 4,096 slots of 4 KiB, 21,845 connections at a base grant of
/// 3, each taking 12 KiB of receive slots, and 2,048 send slots (16 MiB); a shard's completion
/// queue holds 4,608 receive completions and 24,576 SENDs (29,184 entries, within rdma_rxe's
/// 32,767).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRings {
    /// Receive slots per shard. Raises take at most half of them, so the other half always
    /// holds the base grants of new connections. Each shard's SRQ posts an eighth more (at
    /// least 64) that no grant counts on: room for what a peer overrunning its credits sends
    /// before its connection is closed.
    pub recv_slots: u32,
    /// Most receive shards (at most 1,024).
    pub recv_shards: u32,
    /// Bytes per receive slot: frames from clients are at most this long (longer messages
    /// are segmented).
    pub recv_slot_size: u32,
    /// Send slots shared by the connections (verbs). A connection that finds none free waits
    /// for the next one given back, in turn.
    pub send_slots: u32,
    /// SENDs the connections of one shard have in flight together (verbs): the shard's
    /// completion queue holds as many entries, besides one per posted receive.
    pub sends_in_flight: u32,
    /// Credits a connection always has: its HELLO's `slot_count` (at least 3).
    pub base_grant: u32,
    /// Most credits one connection is granted.
    pub max_grant: u32,
}

impl Default for SharedRings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl SharedRings {
    /// The defaults: up to 16 shards of 4,096 receive slots of 4 KiB, 2,048 send slots, 24,576
    /// SENDs in flight per shard, a base grant of 3, at most 64 per connection.
    pub const DEFAULT: SharedRings = SharedRings {
        recv_slots: 4096,
        recv_shards: 16,
        recv_slot_size: 4096,
        send_slots: 2048,
        sends_in_flight: 24_576,
        base_grant: 3,
        max_grant: 64,
    };

    /// Checks the values: a base of at least 3 (the smallest grant that cannot stall), a
    /// maximum no smaller than the base and at most 65535, room for one base per shard,
    /// 1 to 1,024 shards, a slot size a HELLO may announce, a send slot, and more SENDs in
    /// flight per shard than its connections can keep while idle (8 each: a connection
    /// signals every eighth SEND, at `recv_slots / base_grant` connections), so that a busy
    /// connection always finds one in turn.
    pub fn validate(&self) -> Result<(), Error> {
        let slot_sizes = rpc_proto::frame::MIN_SLOT_SIZE..=rpc_proto::frame::MAX_SLOT_SIZE;
        let ok = self.base_grant >= rpc_proto::credit_pool::MIN_GRANT
            && self.max_grant >= self.base_grant
            && self.max_grant <= u32::from(u16::MAX)
            && self.recv_slots >= self.base_grant
            && (1..=1024).contains(&self.recv_shards)
            && slot_sizes.contains(&self.recv_slot_size)
            && self.send_slots >= 1
            && self.sends_in_flight
                > SHARED_SIGNAL_EVERY.saturating_mul(self.recv_slots / self.base_grant.max(1));
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidConfig(format!(
                "shared rings: {self:?} (need 3 <= base_grant <= max_grant <= 65535, \
                 recv_slots >= base_grant, 1 <= recv_shards <= 1024, a recv_slot_size a \
                 HELLO allows, send_slots >= 1 and sends_in_flight > {} x recv_slots / \
                 base_grant)",
                SHARED_SIGNAL_EVERY
            )))
        }
    }
}
