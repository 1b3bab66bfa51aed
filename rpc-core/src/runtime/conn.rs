//! A link plus its protocol state. The state lives in a [`Serializer`]: one thread at a time
//! drives it (the poller with a completion, a caller starting a call, a handler replying),
//! and a thread that finds it busy leaves its work to that owner instead of waiting. No lock
//! is held across a post, a park or user code: handlers run and calls complete as
//! [`Delivery`]s, after the owner let go of the state.
//!
//! Data flows one way: completion → owner → protocol core → delivery (handler or waiting
//! call) → protocol core (reply) → post.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt};
use rpc_sync::{assert_unlocked, Serializer, Wake};

use super::client::CallCell;
use super::stream::{Cancel, Incoming, Received, StreamShared};
use super::Counters;

use crate::codegen::MethodKind;
use crate::protocol::v2::{
    flags, metadata, Connection, ConnectionMemory, Event, Expiry, Hello, Keepalive, Kind, Outgoing,
    Payload as Body, Reservation, Role, SendError, HEADER_LEN,
};
use crate::transport::{Link, RecvBuf, SendBuf};
use crate::{Code, MetadataMap, Status};

/// What the protocol core keeps per call.
#[derive(Clone)]
pub(crate) enum CallRef {
    /// Client, unary: where the outcome goes.
    Waiter(Arc<CallCell>),
    /// Server, unary: a call handed to its handler, and the handler's task once it awaits
    /// (cancelled with the call).
    Served(Option<Arc<dyn Cancel>>),
    /// Either side: a streaming call.
    Stream(Arc<StreamShared>),
}

type Core = Connection<CallRef, SendBuf>;

/// Server: a call of a unary-request method (unary, server streaming) waiting for its
/// half-close (PROTOCOL.md §16.1: exactly one request message; a second one, or none, is
/// answered INTERNAL).
struct Awaiting {
    method: u32,
    /// The method's kind (unary or server streaming), looked up when the call opened.
    kind: MethodKind,
    deadline: Option<Instant>,
    headers: MetadataMap,
    /// The request message, once it arrived without the half-close.
    message: Option<Payload>,
}

/// Client, unary: what arrived before the call's END (a server that sends headers or
/// trailers answers HEADERS, MESSAGE, END instead of one MESSAGE with END).
#[derive(Default)]
struct PartialReply {
    headers: MetadataMap,
    message: Option<Payload>,
}

/// A unary call's reply as its caller gets it.
pub(crate) struct Reply {
    pub(crate) payload: Payload,
    pub(crate) headers: MetadataMap,
    pub(crate) trailers: MetadataMap,
}

/// The state one thread at a time works on.
pub(crate) struct Owned {
    core: Core,
    /// Server: unary-request calls opened but not yet half-closed. Bounded by `max_calls`,
    /// and each held message by `max_message_size` (a client's half-close normally comes
    /// with its message, which is then served at once and never held).
    awaiting_message: HashMap<u64, Awaiting>,
    /// Client: unary calls whose headers or message came before their END. Bounded by
    /// `max_calls`, each message by `max_message_size`.
    replies: HashMap<u64, PartialReply>,
    /// Streams whose last message is queued in the core: their sender waits until it left.
    /// Bounded by `max_calls`.
    blocked: Vec<Arc<StreamShared>>,
    /// Client: calls beyond the server's `max_calls`, waiting in order for calls to end
    /// (as gRPC queues streams beyond MAX_CONCURRENT_STREAMS). Bounded by what the
    /// application has started and not given up.
    waiting: std::collections::VecDeque<OpenCall>,
    closed: bool,
}

impl Owned {
    /// Drops what the runtime keeps of a call beside the core (a unary request waiting for
    /// its half-close, a unary reply waiting for its END): the call ended.
    fn forget(&mut self, call: u64) {
        self.awaiting_message.remove(&call);
        self.replies.remove(&call);
    }
}

/// Client: who waits for a call's outcome.
#[derive(Clone)]
pub(crate) enum Caller {
    /// A unary call's cell.
    Unary(Arc<CallCell>),
    /// A streaming call.
    Stream(Arc<StreamShared>),
}

impl Caller {
    fn id(&self) -> u64 {
        match self {
            Caller::Unary(c) => c.id(),
            Caller::Stream(s) => s.id(),
        }
    }

    fn set_id(&self, id: u64) {
        match self {
            Caller::Unary(c) => c.set_id(id),
            Caller::Stream(s) => s.set_id(id),
        }
    }

    fn call_ref(&self) -> CallRef {
        match self {
            Caller::Unary(c) => CallRef::Waiter(Arc::clone(c)),
            Caller::Stream(s) => CallRef::Stream(Arc::clone(s)),
        }
    }

    fn same(&self, other: &Caller) -> bool {
        match (self, other) {
            (Caller::Unary(a), Caller::Unary(b)) => Arc::ptr_eq(a, b),
            (Caller::Stream(a), Caller::Stream(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn fail(self, status: Status) -> Delivery {
        match self {
            Caller::Unary(cell) => Delivery::Complete {
                cell,
                result: Err(status),
            },
            Caller::Stream(stream) => Delivery::End {
                stream,
                end: Err(status),
            },
        }
    }
}

/// Client: a call to open: its request headers (the metadata block of a HEADERS frame, or
/// no HEADERS frame) and its first message (unary and server-streaming calls; with END).
pub(crate) struct OpenCall {
    pub(crate) caller: Caller,
    pub(crate) method: u32,
    pub(crate) timeout_us: u32,
    pub(crate) deadline: Option<Instant>,
    pub(crate) headers: Option<Vec<u8>>,
    pub(crate) message: Option<Outgoing<SendBuf>>,
}

impl OpenCall {
    /// The same call with its message copied out of its send slot: a call waiting to be
    /// opened must not hold slots (see the core's `send`).
    fn detached(self) -> OpenCall {
        OpenCall {
            message: self.message.map(Outgoing::detached),
            ..self
        }
    }
}

/// Work for the owner of a connection's state.
pub(crate) enum Work {
    /// A received frame.
    Frame(RecvBuf),
    /// Client: open a call.
    Open(OpenCall),
    /// A stream's next message (MESSAGE without END).
    Send {
        stream: Arc<StreamShared>,
        frame: Outgoing<SendBuf>,
    },
    /// Client: the end of a stream's requests (END).
    HalfClose(Arc<StreamShared>),
    /// Server: a call's response headers.
    Headers { call: u64, block: Vec<u8> },
    /// Server: a unary call's reply: headers if any, the message, trailers if any (with
    /// neither, one MESSAGE with END).
    Reply {
        call: u64,
        frame: Outgoing<SendBuf>,
        headers: Vec<u8>,
        trailers: MetadataMap,
    },
    /// Server: end a call with a status (OK included); its metadata goes as trailers.
    End { call: u64, status: Status },
    /// Client: give a call up (deadline passed, future or stream dropped).
    Cancel { caller: Caller, status: Status },
    /// A stream's reader consumed `bytes` of window: return them to the peer.
    Consumed {
        stream: Arc<StreamShared>,
        bytes: u32,
    },
    /// Server: a unary handler's task awaits; cancel it if the call is.
    Attach { call: u64, task: Arc<dyn Cancel> },
    /// The time is `now`: end the calls whose deadline passed, look at the peer's liveness
    /// (PING it, or give up on it) and at messages stalled in reassembly (drop them).
    Timeout(Instant),
    /// Send what credits and send slots now allow (slots re-posted, sends completed).
    Flush,
    /// Server: GOODBYE.
    Goodbye,
    /// The link is gone.
    Closed(String),
}

/// What an owner hands out to run after letting go of the state.
pub(crate) enum Delivery {
    /// Server: a request for a handler.
    Request(RequestDelivery),
    /// Client: a unary call's outcome.
    Complete {
        cell: Arc<CallCell>,
        result: Result<Reply, Status>,
    },
    /// A streaming call received something.
    Push {
        stream: Arc<StreamShared>,
        item: Incoming,
    },
    /// Server: the client half-closed a stream.
    HalfClosed(Arc<StreamShared>),
    /// A streaming call is over (client: its status; server: cancelled or lost).
    End {
        stream: Arc<StreamShared>,
        end: Result<MetadataMap, Status>,
    },
    /// A stream's sender may go on.
    Ready(Arc<StreamShared>),
    /// Server: cancel a handler's task.
    CancelTask(Arc<dyn Cancel>),
    /// More than one of the above.
    Batch(Vec<Delivery>),
    // What `Delivery::settle` leaves of the above once their items are in their inboxes:
    /// A stream's reader to wake.
    Woken(Wake),
    /// A message nobody reads any more: its window goes back.
    Unread {
        stream: Arc<StreamShared>,
        len: usize,
    },
    /// A stream that ended: its reader to wake, its sender to stop, and (cancelled) its
    /// task to cancel.
    Ended {
        stream: Arc<StreamShared>,
        wake: Wake,
        cancelled: bool,
    },
}

impl Delivery {
    /// Puts what a delivery brings a stream into the stream's inbox now, while the
    /// connection's state is owned, and leaves the rest (waking the reader, stopping the
    /// sender, cancelling a task) for after it is let go. Deliveries run on whichever
    /// thread submitted the work, in parallel: pushed later, two messages of one stream
    /// could overtake each other, and a message overtaken by the stream's END be lost.
    fn settle(self) -> Delivery {
        match self {
            Delivery::Push { stream, item } => {
                let len = match &item {
                    Incoming::Message(m) => Some(m.len()),
                    _ => None,
                };
                match (stream.inbox.push_deferred(item), len) {
                    (Ok(wake), _) => Delivery::Woken(wake),
                    (Err(_), Some(len)) => Delivery::Unread { stream, len },
                    (Err(_), None) => Delivery::Batch(Vec::new()),
                }
            }
            Delivery::HalfClosed(stream) => {
                let (_, wake) = stream
                    .inbox
                    .close_deferred(Some(Incoming::End(Ok(MetadataMap::new()))));
                Delivery::Woken(wake)
            }
            Delivery::End { stream, end } => {
                let cancelled = end.is_err();
                if cancelled {
                    stream.mark_cancelled();
                }
                let (_, wake) = stream.inbox.close_deferred(Some(Incoming::End(end)));
                Delivery::Ended {
                    stream,
                    wake,
                    cancelled,
                }
            }
            Delivery::Batch(all) => {
                Delivery::Batch(all.into_iter().map(Delivery::settle).collect())
            }
            other => other,
        }
    }

    /// [`Delivery::settle`] in place; the deliveries that need none (a request for a
    /// handler, a unary call's outcome) are not moved.
    fn settle_in_place(delivery: &mut Option<Delivery>) {
        if matches!(
            delivery,
            Some(
                Delivery::Push { .. }
                    | Delivery::HalfClosed(_)
                    | Delivery::End { .. }
                    | Delivery::Batch(_)
            )
        ) {
            *delivery = delivery.take().map(Delivery::settle);
        }
    }
}

/// Server: a call for a handler.
pub(crate) struct RequestDelivery {
    pub(crate) call: u64,
    pub(crate) method: u32,
    pub(crate) deadline: Option<Instant>,
    pub(crate) metadata: MetadataMap,
    pub(crate) body: RequestBody,
    /// The call's stream state: its requests (client-streaming and bidi methods), its
    /// responses (server-streaming and bidi), its cancellation. `None` for unary methods.
    pub(crate) stream: Option<Arc<StreamShared>>,
}

/// A request's messages: the one message of a unary-request call, or the call's stream.
pub(crate) enum RequestBody {
    Message(Payload),
    Stream,
}

/// How a connection hands requests to services.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// The kind of method `method`, or `None` when no service has it.
    fn kind(&self, method: u32) -> Option<MethodKind>;
    fn request(&self, conn: &Arc<Conn>, request: RequestDelivery);
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
    closed: AtomicBool,
    /// A server's connection: frames posted inside [`holding_sends`] are held for one batch.
    serving: bool,
    /// Server: some call has a deadline to watch (the endpoint's tick looks only at these).
    deadlines_pending: AtomicBool,
    /// The core's owed credits as of the end of the last step: a thread that releases a
    /// receive slot asks the owner to look at the credits only when these and the re-posts
    /// not yet taken reach `credit_threshold` (a CREDIT frame may be due); below it, the
    /// credits travel on the next frame out. Spares a serializer round per received message.
    owed_credits: AtomicU32,
    /// [`Connection::credit_threshold`](crate::protocol::v2::Connection::credit_threshold).
    credit_threshold: u32,
}

thread_local! {
    static HELD_SENDS: HeldSends = const {
        HeldSends {
            active: Cell::new(false),
            links: RefCell::new(Vec::new()),
        }
    };
}

/// Threads inside [`holding_sends`] now.
static HOLDING_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The links whose frames this thread holds back while it runs a handler or its task.
struct HeldSends {
    active: Cell<bool>,
    /// Links with held frames; kept (empty) between runs, so holding allocates nothing
    /// once a thread has held for as many links as it ever will at once.
    links: RefCell<Vec<Arc<dyn Link>>>,
}

impl HeldSends {
    /// Whether frames are held now; registers `link` for the flush if so.
    fn hold(&self, link: &Arc<dyn Link>) -> bool {
        if !self.active.get() {
            return false;
        }
        let mut links = self.links.borrow_mut();
        if !links.iter().any(|l| Arc::ptr_eq(l, link)) {
            links.push(Arc::clone(link));
        }
        true
    }
}

/// Ends a holding: posts what each link holds.
struct FlushHeld;

impl Drop for FlushHeld {
    fn drop(&mut self) {
        HOLDING_THREADS.fetch_sub(1, Ordering::Relaxed);
        HELD_SENDS.with(|held| {
            held.active.set(false);
            loop {
                let Some(link) = held.links.borrow_mut().pop() else {
                    return;
                };
                if let Err(e) = link.flush_sends() {
                    tracing::warn!(peer = %link.peer_name(), error = %e, "send failed; closing the connection");
                    link.close();
                }
            }
        });
    }
}

/// Runs `f`, a run of a server's handler task, with the frames it has this thread post on
/// server connections held by their links until it returns, then posted as one batch per
/// link: the messages a streaming handler sends in one go (until its window or the credits
/// run out, or it awaits something) cost one `ibv_post_send`, one doorbell and, on
/// Soft-RoCE, one system call, instead of one each. The frames wait only for `f` itself,
/// a future's poll, which does not block; client connections (a handler's own calls to other
/// servers) post at once. Nested holdings join the outermost.
pub(crate) fn holding_sends<R>(f: impl FnOnce() -> R) -> R {
    if HELD_SENDS.with(|held| held.active.replace(true)) {
        return f();
    }
    HOLDING_THREADS.fetch_add(1, Ordering::Relaxed);
    let _flush = FlushHeld;
    f()
}

/// A message body ready to be encoded: protobuf messages.
pub(crate) trait Encode {
    fn encoded_len(&self) -> usize;
    fn encode_into(&self, out: &mut [u8]);
    fn encode_to_vec(&self, len: usize) -> Vec<u8>;
}

impl<M: prost::Message> Encode for M {
    fn encoded_len(&self) -> usize {
        prost::Message::encoded_len(self)
    }
    fn encode_into(&self, mut out: &mut [u8]) {
        self.encode_raw(&mut out);
    }
    fn encode_to_vec(&self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        self.encode_raw(&mut out);
        out
    }
}

impl Conn {
    pub(crate) fn new(
        link: Arc<dyn Link>,
        role: Role,
        dispatch: Option<Arc<dyn Dispatch>>,
        counters: Arc<Counters>,
        memory: ConnectionMemory,
        keepalive: Option<Keepalive>,
        stall_timeout: Option<Duration>,
    ) -> Arc<Conn> {
        let local = link.local_hello();
        let peer = link.peer_hello();
        let mut core = Connection::new(role, local, peer, link.send_slot_size());
        core.set_memory(memory);
        core.set_keepalive(keepalive);
        core.set_stall_timeout(stall_timeout);
        Arc::new_cyclic(|me| Conn {
            me: me.clone(),
            peer: link.peer_name().into(),
            serving: role == Role::Server,
            peer_hello: peer,
            local_hello: local,
            max_segment: core.max_segment(),
            credit_threshold: core.credit_threshold(),
            deadlines_pending: AtomicBool::new(false),
            owed_credits: AtomicU32::new(0),
            link,
            state: Serializer::new(Owned {
                core,
                awaiting_message: HashMap::new(),
                replies: HashMap::new(),
                blocked: Vec::new(),
                waiting: std::collections::VecDeque::new(),
                closed: false,
            }),
            dispatch,
            counters,
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Tears the link down; a `Closed` completion follows and fails the calls.
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.link.close();
        }
    }

    /// Runs `work` now or leaves it to the thread that owns the state; deliveries run here.
    pub(crate) fn submit(self: &Arc<Self>, work: Work) {
        self.state.submit(
            work,
            |owned, work| self.step(owned, work),
            |delivery| self.deliver(delivery),
        );
    }

    /// Encodes `message` as the payload of a `kind` frame: straight into a send slot when it
    /// fits one frame and a slot is free (the one copy), else into a buffer the core cuts
    /// into segments.
    pub(crate) fn encode(&self, kind: Kind, fl: u16, message: &dyn Encode) -> Outgoing<SendBuf> {
        let len = message.encoded_len();
        let payload = match (len <= self.max_segment).then(|| self.link.alloc_send()) {
            Some(Some(mut buf)) => {
                message.encode_into(&mut buf[HEADER_LEN..HEADER_LEN + len]);
                Body::InBuffer(buf, len)
            }
            _ => Body::Bytes(message.encode_to_vec(len)),
        };
        Outgoing {
            kind,
            flags: fl,
            code: 0,
            payload,
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
        match sent {
            Ok(Some((buf, len))) => {
                self.post(buf, len, false);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Posts what the core has ready, while send slots last, as one batch (over TCP: one
    /// write for all the segments of a message).
    fn transmit(&self, owned: &mut Owned) {
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
        if posted && !self.held_here() {
            if let Err(e) = self.link.flush_sends() {
                self.send_failed(&e);
            }
        }
    }

    /// Whether this thread holds this connection's frames back for now (see
    /// [`holding_sends`]); if so, its link is flushed when the holding ends.
    fn held_here(&self) -> bool {
        // The count spares every other post the thread-local lookup: a thread that holds
        // counted itself before, so it sees its own count.
        self.serving
            && HOLDING_THREADS.load(Ordering::Relaxed) > 0
            && HELD_SENDS.with(|held| held.hold(&self.link))
    }

    /// One work item, on the owning thread; what it delivers is settled (see
    /// [`Delivery::settle`]).
    fn step(&self, owned: &mut Owned, work: Work) -> Option<Delivery> {
        if owned.closed {
            let mut delivery = match work {
                Work::Open(call) => Some(call.caller.fail(closed_status())),
                Work::Send { stream, .. } | Work::HalfClose(stream) => {
                    Some(Delivery::Ready(stream))
                }
                _ => None,
            };
            Delivery::settle_in_place(&mut delivery);
            return delivery;
        }
        self.take_reposted(owned);
        let received = matches!(work, Work::Frame(_));
        let mut delivery = match work {
            Work::Frame(buf) => self.on_frame(owned, buf),
            Work::Open(call) => {
                if owned.waiting.is_empty() {
                    self.open(owned, call)
                } else {
                    // Behind calls already waiting: keep the order.
                    owned.waiting.push_back(call.detached());
                    None
                }
            }
            Work::Send { stream, frame } => self.send_stream(owned, stream, frame),
            Work::HalfClose(stream) => {
                self.send_stream(owned, stream, block_frame(Kind::End, Vec::new()))
            }
            Work::Headers { call, block } => {
                let frame = block_frame(Kind::Headers, block);
                let _ = self.post_result(owned.core.send(call, frame, 0, 0));
                None
            }
            Work::Reply {
                call,
                frame,
                headers,
                trailers,
            } => {
                self.reply(owned, call, frame, headers, trailers);
                None
            }
            Work::End { call, status } => {
                self.end_call(owned, call, &status);
                None
            }
            Work::Cancel { caller, status } => self.cancel(owned, caller, status),
            Work::Consumed { stream, bytes } => {
                owned.core.consumed(stream.id(), bytes);
                None
            }
            Work::Attach { call, task } => {
                if owned
                    .core
                    .set_user(call, CallRef::Served(Some(Arc::clone(&task))))
                {
                    None
                } else {
                    // Cancelled (or over) before the task was attached.
                    Some(Delivery::CancelTask(task))
                }
            }
            Work::Timeout(now) => self.on_timeout(owned, now),
            Work::Flush => None,
            Work::Goodbye => {
                owned.core.goodbye();
                None
            }
            Work::Closed(reason) => Some(self.fail_all(owned, &reason)),
        };
        if !owned.waiting.is_empty() {
            self.open_waiting(owned, &mut delivery);
        }
        if received {
            // The frame's slot, if it was released (its message copied out), counts now.
            self.take_reposted(owned);
        }
        self.transmit(owned);
        self.publish_owed(owned);
        if !owned.blocked.is_empty() {
            self.release_senders(owned, &mut delivery);
        }
        Delivery::settle_in_place(&mut delivery);
        delivery
    }

    fn take_reposted(&self, owned: &mut Owned) {
        let reposted = self.link.take_reposted();
        if reposted > 0 {
            owned.core.released(reposted);
        }
    }

    /// Publishes the owed credits for [`Conn::slot_released`], then looks once more at the
    /// re-posts not yet taken: one released after this step took them may have read the
    /// previous figure and left its credit to this step.
    fn publish_owed(&self, owned: &mut Owned) {
        loop {
            let owed = owned.core.owed();
            // Pairs with `slot_released`: the releaser counts its re-post, then reads this;
            // here the figure is stored, then the re-posts read, each pair split by a SeqCst
            // fence. One of the two sees the other, so a credit that makes a CREDIT due is
            // never left unseen by both (the loom model `credits_due_are_never_left_unsent`).
            self.owed_credits.store(owed, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let pending = self.link.reposted_pending();
            if pending == 0 || owed.saturating_add(pending) < self.credit_threshold {
                return;
            }
            self.take_reposted(owned);
            self.transmit(owned);
            let owed = owned.core.owed();
            if owed >= self.credit_threshold {
                // No CREDIT could go (no send credit left): the frame that brings one back
                // runs a step, which sends it. Meanwhile every release asks again.
                self.owed_credits.store(owed, Ordering::SeqCst);
                return;
            }
        }
    }

    /// A receive slot of this connection was re-posted (its message consumed or copied
    /// out): the owner looks at the credits if a CREDIT frame may be due.
    pub(crate) fn slot_released(self: &Arc<Self>) {
        // After the re-post was counted (see `publish_owed`).
        fence(Ordering::SeqCst);
        let pending = self.link.reposted_pending();
        if pending.saturating_add(self.owed_credits.load(Ordering::SeqCst)) >= self.credit_threshold
        {
            self.submit(Work::Flush);
        }
    }

    /// Server: a unary reply; with headers or trailers it takes three frames.
    fn reply(
        &self,
        owned: &mut Owned,
        call: u64,
        frame: Outgoing<SendBuf>,
        headers: Vec<u8>,
        trailers: MetadataMap,
    ) {
        let plain = headers.is_empty() && trailers.is_empty();
        if !headers.is_empty() {
            let headers = block_frame(Kind::Headers, headers);
            let _ = self.post_result(owned.core.send(call, headers, 0, 0));
        }
        let frame = if plain {
            frame
        } else {
            Outgoing {
                flags: frame.flags & !flags::END,
                ..frame
            }
        };
        let sent = owned.core.send(call, frame, 0, 0);
        match self.post_result(sent) {
            // Too large for the client: tell it.
            Err(SendError::TooLarge(why) | SendError::OutOfMemory(why)) => {
                self.end_call(owned, call, &Status::resource_exhausted(why));
            }
            Ok(()) if !plain => {
                let status = Status::new(Code::Ok, "").with_metadata(trailers);
                self.end_call(owned, call, &status);
            }
            // Sent, or the call is gone (cancelled meanwhile).
            _ => {}
        }
    }

    /// Server: END with `status`, its metadata as trailers.
    fn end_call(&self, owned: &mut Owned, call: u64, status: &Status) {
        let trailers: Vec<(&str, &[u8])> = status.metadata().iter().collect();
        let _ = self.post_result(owned.core.end_call(call, status, &trailers));
    }

    /// A stream's frame: sent (or queued behind its window) and the sender told when it
    /// may go on.
    fn send_stream(
        &self,
        owned: &mut Owned,
        stream: Arc<StreamShared>,
        frame: Outgoing<SendBuf>,
    ) -> Option<Delivery> {
        let id = stream.id();
        match self.post_result(owned.core.send(id, frame, 0, 0)) {
            Ok(()) => {
                if owned.core.queued(id) > 0 {
                    owned.blocked.push(stream);
                    return None;
                }
            }
            Err(SendError::TooLarge(why) | SendError::OutOfMemory(why)) => {
                let status = Status::resource_exhausted(why);
                match owned.core.role() {
                    Role::Server => self.end_call(owned, id, &status),
                    Role::Client => {
                        owned.core.cancel(id, Code::ResourceExhausted);
                        return Some(Delivery::End {
                            stream,
                            end: Err(status),
                        });
                    }
                }
                stream.finish();
            }
            // Over, or this side already half-closed it: the sender finds out.
            Err(_) => stream.finish(),
        }
        Some(Delivery::Ready(stream))
    }

    /// Senders whose queued message left: they may go on (added to `delivery`).
    fn release_senders(&self, owned: &mut Owned, delivery: &mut Option<Delivery>) {
        let core = &owned.core;
        let (ready, blocked): (Vec<_>, Vec<_>) = std::mem::take(&mut owned.blocked)
            .into_iter()
            .partition(|s| core.queued(s.id()) == 0);
        owned.blocked = blocked;
        if ready.is_empty() {
            return;
        }
        let mut all: Vec<Delivery> = ready.into_iter().map(Delivery::Ready).collect();
        all.extend(delivery.take());
        *delivery = Some(Delivery::Batch(all));
    }

    /// Client: gives a call up; the outcome goes to its caller unless the call already
    /// ended.
    fn cancel(&self, owned: &mut Owned, caller: Caller, status: Status) -> Option<Delivery> {
        let id = caller.id();
        if id == 0 {
            // Still waiting to be opened: it never reaches the server.
            let before = owned.waiting.len();
            owned.waiting.retain(|w| !w.caller.same(&caller));
            return (owned.waiting.len() != before).then(|| caller.fail(status));
        }
        owned.replies.remove(&id);
        let user = owned.core.cancel(id, status.code())?;
        call_ended(user, status)
    }

    /// Opens waiting calls while the server's `max_calls` allows (what they deliver is added
    /// to `delivery`).
    fn open_waiting(&self, owned: &mut Owned, delivery: &mut Option<Delivery>) {
        let mut more = Vec::new();
        while !owned.closed
            && !owned.waiting.is_empty()
            && owned.core.open_calls() < owned.core.peer().max_calls
        {
            let call = owned.waiting.pop_front().expect("not empty");
            if let Some(d) = self.open(owned, call) {
                more.push(d);
            }
        }
        if more.is_empty() {
            return;
        }
        more.extend(delivery.take());
        *delivery = Some(Delivery::Batch(more));
    }

    fn open(&self, owned: &mut Owned, call: OpenCall) -> Option<Delivery> {
        if call.deadline.is_some_and(|d| d <= Instant::now()) {
            return Some(call.caller.fail(Status::deadline_exceeded(
                "the deadline passed while the call waited to be sent",
            )));
        }
        let id = match owned.core.open_call(call.caller.call_ref()) {
            Ok(id) => id,
            Err(SendError::AtCapacity) => {
                owned.waiting.push_front(call.detached());
                return None;
            }
            Err(e) => {
                let status = match e {
                    SendError::GoingAway => Status::unavailable(format!(
                        "{} is shutting down and accepts no new calls (not sent)",
                        self.peer
                    )),
                    other => Status::internal(format!("could not start the call: {other:?}")),
                };
                return Some(call.caller.fail(status));
            }
        };
        let OpenCall {
            caller,
            method,
            timeout_us,
            deadline,
            headers,
            message,
        } = call;
        caller.set_id(id);
        if let Some(d) = deadline {
            owned.core.set_deadline(id, d);
        }
        let mut sent = Ok(());
        if let Some(block) = headers {
            let frame = block_frame(Kind::Headers, block);
            sent = self.post_result(owned.core.send(id, frame, method, timeout_us));
        }
        if let (Ok(()), Some(frame)) = (&sent, message) {
            sent = self.post_result(owned.core.send(id, frame, method, timeout_us));
        }
        match sent {
            Ok(()) => match caller {
                Caller::Stream(stream) if owned.core.queued(id) > 0 => {
                    owned.blocked.push(stream);
                    None
                }
                Caller::Stream(stream) => Some(Delivery::Ready(stream)),
                Caller::Unary(_) => None,
            },
            Err(e) => {
                owned.core.cancel(id, Code::Cancelled);
                let status = match e {
                    SendError::TooLarge(why) | SendError::OutOfMemory(why) => {
                        Status::resource_exhausted(why)
                    }
                    other => Status::internal(format!("could not send the request: {other:?}")),
                };
                Some(caller.fail(status))
            }
        }
    }

    /// What the core's timers did by `now` (PROTOCOL.md §12.2, §13, §15.2), told to the
    /// calls' callers and handlers; calls still waiting to be opened fail at their deadline
    /// here.
    fn on_timeout(&self, owned: &mut Owned, now: Instant) -> Option<Delivery> {
        let mut ended = expire_waiting(owned, now);
        for expiry in owned.core.handle_timeout(now) {
            match expiry {
                Expiry::Deadline { call, user } => {
                    owned.forget(call);
                    let status = match owned.core.role() {
                        Role::Client => {
                            Status::deadline_exceeded("no response within the deadline")
                        }
                        Role::Server => {
                            Status::deadline_exceeded("the deadline passed at the server")
                        }
                    };
                    ended.extend(user.and_then(|user| call_ended(user, status)));
                }
                Expiry::Stalled { call, status, user } => {
                    tracing::warn!(peer = %self.peer, call, %status, "reassembly stalled; call refused");
                    owned.forget(call);
                    ended.extend(call_ended(user, status.into()));
                }
                Expiry::PeerSilent { silent } => {
                    tracing::warn!(peer = %self.peer, ?silent, "keepalive: the peer went silent; closing");
                    self.close();
                    let reason = format!("keepalive: no frame from the peer for {silent:?}");
                    ended.push(self.fail_all(owned, &reason));
                    break;
                }
            }
        }
        if !owned.core.has_deadlines() {
            self.deadlines_pending.store(false, Ordering::Relaxed);
        }
        (!ended.is_empty()).then_some(Delivery::Batch(ended))
    }

    fn on_frame(&self, owned: &mut Owned, buf: RecvBuf) -> Option<Delivery> {
        self.counters.received(buf.len());
        let event = match owned.core.handle_frame(&buf, Instant::now) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "protocol violation; disconnecting the peer");
                drop(buf);
                self.close();
                return Some(self.fail_all(owned, &e.to_string()));
            }
        };
        // Everything the event borrows from the frame becomes an owned value or a range.
        match event {
            Event::Message {
                call,
                opened,
                body,
                end,
                ended,
                held,
            } => {
                let body = Span::of(&buf, body, held);
                match owned.core.role() {
                    Role::Client => self.client_message(owned, call, body, buf, ended),
                    Role::Server => self.server_message(owned, call, opened, body, buf, end),
                }
            }
            Event::Opened {
                call,
                method,
                headers,
                ..
            } => {
                let metadata = MetadataMap::from_block(&headers);
                drop(buf);
                let deadline = self.served_deadline(owned, call);
                match self.method_kind(method) {
                    None => {
                        self.unknown_method(owned, call, method);
                        None
                    }
                    Some(kind) if receives_stream(kind) => {
                        Some(self.serve_stream(owned, call, method, deadline, metadata))
                    }
                    Some(kind) => {
                        owned.awaiting_message.insert(
                            call,
                            Awaiting {
                                method,
                                kind,
                                deadline,
                                headers: metadata,
                                message: None,
                            },
                        );
                        None
                    }
                }
            }
            Event::HalfClosed { call } => {
                drop(buf);
                match owned.awaiting_message.remove(&call) {
                    Some(mut awaiting) => match awaiting.message.take() {
                        Some(payload) => Some(self.serve(owned, call, awaiting, payload)),
                        None => {
                            let status =
                                Status::internal("a unary call ended without a request message");
                            self.end_call(owned, call, &status);
                            None
                        }
                    },
                    None => match owned.core.user(call) {
                        Some(CallRef::Stream(s)) => Some(Delivery::HalfClosed(Arc::clone(s))),
                        _ => None,
                    },
                }
            }
            Event::Headers { call, headers } => {
                let metadata = MetadataMap::from_block(&headers);
                drop(buf);
                match owned.core.user(call) {
                    Some(CallRef::Stream(s)) => Some(Delivery::Push {
                        stream: Arc::clone(s),
                        item: Incoming::Headers(metadata),
                    }),
                    Some(CallRef::Waiter(_)) => {
                        owned.replies.entry(call).or_default().headers = metadata;
                        None
                    }
                    _ => None,
                }
            }
            Event::Ended {
                call,
                code,
                trailers,
                user,
            } => {
                let status = status_from_trailers(code, &trailers);
                drop(buf);
                let partial = owned.replies.remove(&call);
                match user {
                    CallRef::Waiter(cell) => {
                        let result = match (code, partial) {
                            (
                                Code::Ok,
                                Some(PartialReply {
                                    headers,
                                    message: Some(payload),
                                }),
                            ) => Ok(Reply {
                                payload,
                                headers,
                                trailers: status.metadata().clone(),
                            }),
                            (Code::Ok, _) => Err(Status::internal(
                                "the server ended the call without a reply",
                            )),
                            _ => Err(status),
                        };
                        Some(Delivery::Complete { cell, result })
                    }
                    CallRef::Stream(stream) => {
                        let end = if code == Code::Ok {
                            Ok(status.metadata().clone())
                        } else {
                            Err(status)
                        };
                        Some(Delivery::End { stream, end })
                    }
                    CallRef::Served(_) => None,
                }
            }
            Event::Cancelled {
                call, reason, user, ..
            } => {
                drop(buf);
                owned.forget(call);
                let (code, message) = match (reason, owned.core.role()) {
                    (Code::Ok, Role::Client) => (Code::Cancelled, "the server cancelled the call"),
                    (code, Role::Client) => (code, "the server cancelled the call"),
                    (Code::Ok, Role::Server) => (Code::Cancelled, "the client cancelled the call"),
                    (code, Role::Server) => (code, "the client cancelled the call"),
                };
                call_ended(user, Status::new(code, message))
            }
            Event::Refused { call, status, user } => {
                drop(buf);
                owned.forget(call);
                call_ended(user, status.into())
            }
            Event::Goodbye {
                last_call,
                unprocessed,
            } => {
                drop(buf);
                tracing::debug!(peer = %self.peer, last_call, "peer said goodbye");
                let status = Status::unavailable(format!(
                    "{} is shutting down; the call was not processed",
                    self.peer
                ));
                let failed: Vec<_> = unprocessed
                    .into_iter()
                    .filter_map(|(id, user)| {
                        owned.replies.remove(&id);
                        call_ended(user, status.clone())
                    })
                    .collect();
                (!failed.is_empty()).then_some(Delivery::Batch(failed))
            }
            Event::None | Event::Pong { .. } => None,
        }
    }

    /// Client: a message of a call.
    fn client_message(
        &self,
        owned: &mut Owned,
        call: u64,
        body: Span,
        buf: RecvBuf,
        ended: Option<CallRef>,
    ) -> Option<Delivery> {
        match ended {
            // The last message, with END: the call ended with OK.
            Some(CallRef::Waiter(cell)) => {
                // Headers came first only from a server that sends metadata: no lookup
                // otherwise.
                let headers = if owned.replies.is_empty() {
                    MetadataMap::new()
                } else {
                    owned
                        .replies
                        .remove(&call)
                        .map(|p| p.headers)
                        .unwrap_or_default()
                };
                Some(Delivery::Complete {
                    cell,
                    result: Ok(Reply {
                        payload: body.into_payload(buf, self),
                        headers,
                        trailers: MetadataMap::new(),
                    }),
                })
            }
            Some(CallRef::Stream(stream)) => {
                let message = body.copy_out(&buf, owned.core.memory());
                drop(buf);
                let message = match message {
                    Ok(message) => message,
                    // The call is over: its last message is lost, and the reader told why.
                    Err(status) => {
                        return Some(Delivery::End {
                            stream,
                            end: Err(status),
                        })
                    }
                };
                Some(Delivery::Batch(vec![
                    Delivery::Push {
                        stream: Arc::clone(&stream),
                        item: Incoming::Message(message),
                    },
                    Delivery::End {
                        stream,
                        end: Ok(MetadataMap::new()),
                    },
                ]))
            }
            Some(CallRef::Served(_)) => None,
            None => match owned.core.user(call) {
                Some(CallRef::Stream(s)) => {
                    let stream = Arc::clone(s);
                    let message = body.copy_out(&buf, owned.core.memory());
                    drop(buf);
                    match message {
                        Ok(message) => Some(Delivery::Push {
                            stream,
                            item: Incoming::Message(message),
                        }),
                        Err(status) => self.refuse(owned, call, status),
                    }
                }
                Some(CallRef::Waiter(_)) => {
                    // A unary reply without END waits for the status, copied out of its
                    // slot so it holds no credit meanwhile.
                    let payload = match body
                        .into_payload(buf, self)
                        .detach_within(owned.core.memory())
                    {
                        Ok(payload) => payload,
                        Err(status) => return self.refuse(owned, call, status),
                    };
                    let partial = owned.replies.entry(call).or_default();
                    if partial.message.replace(payload).is_some() {
                        owned.replies.remove(&call);
                        let status = Status::internal("a unary call got more than one response");
                        let user = owned.core.cancel(call, Code::Internal)?;
                        return call_ended(user, status);
                    }
                    None
                }
                _ => None,
            },
        }
    }

    /// Server: a message of a call (`opened`: it opened the call).
    fn server_message(
        &self,
        owned: &mut Owned,
        call: u64,
        opened: Option<(u32, u32)>,
        body: Span,
        buf: RecvBuf,
        end: bool,
    ) -> Option<Delivery> {
        let mut awaiting = match opened {
            Some((method, _)) => {
                let deadline = self.served_deadline(owned, call);
                match self.method_kind(method) {
                    None => {
                        drop(buf);
                        self.unknown_method(owned, call, method);
                        return None;
                    }
                    Some(kind) if receives_stream(kind) => {
                        let message = body.copy_out(&buf, owned.core.memory());
                        drop(buf);
                        let message = match message {
                            Ok(message) => message,
                            Err(status) => return self.refuse(owned, call, status),
                        };
                        let request =
                            self.serve_stream(owned, call, method, deadline, MetadataMap::new());
                        let stream = match &request {
                            Delivery::Request(RequestDelivery {
                                stream: Some(stream),
                                ..
                            }) => Arc::clone(stream),
                            _ => unreachable!("serve_stream delivers a stream"),
                        };
                        let first = Delivery::Push {
                            stream: Arc::clone(&stream),
                            item: Incoming::Message(message),
                        };
                        let mut all = vec![request, first];
                        if end {
                            all.push(Delivery::HalfClosed(stream));
                        }
                        return Some(Delivery::Batch(all));
                    }
                    Some(kind) => Awaiting {
                        method,
                        kind,
                        deadline,
                        headers: MetadataMap::new(),
                        message: None,
                    },
                }
            }
            None => match owned.awaiting_message.remove(&call) {
                Some(awaiting) => awaiting,
                None => {
                    let Some(CallRef::Stream(s)) = owned.core.user(call) else {
                        return None;
                    };
                    let stream = Arc::clone(s);
                    let message = body.copy_out(&buf, owned.core.memory());
                    drop(buf);
                    let message = match message {
                        Ok(message) => message,
                        Err(status) => return self.refuse(owned, call, status),
                    };
                    let push = Delivery::Push {
                        stream: Arc::clone(&stream),
                        item: Incoming::Message(message),
                    };
                    if !end {
                        return Some(push);
                    }
                    return Some(Delivery::Batch(vec![push, Delivery::HalfClosed(stream)]));
                }
            },
        };
        let payload = body.into_payload(buf, self);
        if awaiting.message.is_some() {
            let status = Status::internal("a unary call got more than one request message");
            self.end_call(owned, call, &status);
            return None;
        }
        if !end {
            // Served at the half-close, unless a second message comes first. Copied out: a
            // held message must not keep a slot (and its credit) from the peer.
            match payload.detach_within(owned.core.memory()) {
                Ok(payload) => awaiting.message = Some(payload),
                Err(status) => return self.refuse(owned, call, status),
            }
            owned.awaiting_message.insert(call, awaiting);
            return None;
        }
        Some(self.serve(owned, call, awaiting, payload))
    }

    /// Gives up a call whose message this side cannot hold (PROTOCOL.md §15): a server ends
    /// it with `status`, a client cancels it and fails it with `status`.
    fn refuse(&self, owned: &mut Owned, call: u64, status: Status) -> Option<Delivery> {
        tracing::debug!(peer = %self.peer, call, %status, "refusing a call");
        owned.forget(call);
        let user = owned.core.refuse_call(call, status.as_ref().clone())?;
        call_ended(user, status)
    }

    /// Server: the deadline the core watches for a call that just opened, if it has one.
    fn served_deadline(&self, owned: &mut Owned, call: u64) -> Option<Instant> {
        let deadline = owned.core.deadline(call)?;
        self.deadlines_pending.store(true, Ordering::Relaxed);
        Some(deadline)
    }

    /// Server: whether some call's deadline is watched (the endpoint ticks such connections more often).
    pub(crate) fn deadlines_pending(&self) -> bool {
        // A hint for the endpoint's ticks: the deadlines themselves are in the core.
        self.deadlines_pending.load(Ordering::Relaxed)
    }

    fn method_kind(&self, method: u32) -> Option<MethodKind> {
        self.dispatch.as_ref().and_then(|d| d.kind(method))
    }

    /// Server: a call of a method no service has is answered at once.
    fn unknown_method(&self, owned: &mut Owned, call: u64, method: u32) {
        self.counters.call();
        self.counters.error();
        let status = if self.dispatch.is_some() {
            Status::unimplemented(format!(
                "no service on this server has a method with id {method:#010x}"
            ))
        } else {
            Status::unimplemented("this endpoint serves no methods")
        };
        self.end_call(owned, call, &status);
    }

    /// Hands a unary-request call (`request`, whose message is `payload`) to its handler.
    fn serve(&self, owned: &mut Owned, call: u64, request: Awaiting, payload: Payload) -> Delivery {
        let Awaiting {
            method,
            kind,
            deadline,
            headers: metadata,
            message: _,
        } = request;
        let stream = match kind {
            MethodKind::ServerStreaming => {
                let stream = StreamShared::new(call, self.local_hello.call_window, true);
                owned
                    .core
                    .set_user(call, CallRef::Stream(Arc::clone(&stream)));
                Some(stream)
            }
            _ => {
                owned.core.set_user(call, CallRef::Served(None));
                None
            }
        };
        Delivery::Request(RequestDelivery {
            call,
            method,
            deadline,
            metadata,
            body: RequestBody::Message(payload),
            stream,
        })
    }

    /// Server: a call whose requests are a stream goes to its handler as soon as it opens.
    fn serve_stream(
        &self,
        owned: &mut Owned,
        call: u64,
        method: u32,
        deadline: Option<Instant>,
        metadata: MetadataMap,
    ) -> Delivery {
        let stream = StreamShared::new(call, self.local_hello.call_window, true);
        owned
            .core
            .set_user(call, CallRef::Stream(Arc::clone(&stream)));
        Delivery::Request(RequestDelivery {
            call,
            method,
            deadline,
            metadata,
            body: RequestBody::Stream,
            stream: Some(stream),
        })
    }

    fn fail_all(&self, owned: &mut Owned, reason: &str) -> Delivery {
        owned.closed = true;
        self.closed.store(true, Ordering::Release);
        let status = Status::unavailable(format!("connection to {} lost: {reason}", self.peer));
        let mut failed: Vec<Delivery> = owned
            .core
            .drain_calls()
            .into_iter()
            .filter_map(|(_, user)| call_ended(user, status.clone()))
            .collect();
        failed.extend(
            owned
                .waiting
                .drain(..)
                .map(|w| w.caller.fail(status.clone())),
        );
        failed.extend(owned.blocked.drain(..).map(Delivery::Ready));
        owned.awaiting_message.clear();
        owned.replies.clear();
        Delivery::Batch(failed)
    }

    /// Runs a delivery: no state is owned here, so handlers may take their time and calls
    /// on this connection go on meanwhile.
    fn deliver(self: &Arc<Self>, delivery: Delivery) {
        match delivery {
            Delivery::Request(request) => {
                assert_unlocked("calling a handler");
                match &self.dispatch {
                    Some(d) => d.request(self, request),
                    None => self.submit(Work::End {
                        call: request.call,
                        status: Status::unimplemented("this endpoint serves no methods"),
                    }),
                }
            }
            Delivery::Complete { cell, result } => cell.complete(result),
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
                stream.consumed(&super::port::Port::Conn(Arc::clone(self)), &stream, len);
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

/// Whether a method's requests arrive as a stream (the handler starts at once).
fn receives_stream(kind: MethodKind) -> bool {
    matches!(
        kind,
        MethodKind::ClientStreaming | MethodKind::BidiStreaming
    )
}

/// What to tell whoever waits on a call that ended with `status` (lost, cancelled,
/// refused).
fn call_ended(user: CallRef, status: Status) -> Option<Delivery> {
    match user {
        CallRef::Waiter(cell) => Some(Delivery::Complete {
            cell,
            result: Err(status),
        }),
        CallRef::Stream(stream) => Some(Delivery::End {
            stream,
            end: Err(status),
        }),
        CallRef::Served(Some(task)) => Some(Delivery::CancelTask(task)),
        CallRef::Served(None) => None,
    }
}

/// Client: the calls still waiting to be opened whose deadline passed by `now`.
fn expire_waiting(owned: &mut Owned, now: Instant) -> Vec<Delivery> {
    if owned.waiting.is_empty() {
        return Vec::new();
    }
    let (late, waiting) = std::mem::take(&mut owned.waiting)
        .into_iter()
        .partition::<std::collections::VecDeque<_>, _>(|w| w.deadline.is_some_and(|d| d <= now));
    owned.waiting = waiting;
    late.into_iter()
        .map(|w| {
            w.caller.fail(Status::deadline_exceeded(
                "the deadline passed while the call waited to be sent",
            ))
        })
        .collect()
}

/// The status of a server's END: its code, `grpc-message`, `grpc-status-details-bin`, and
/// the other trailers as its metadata.
fn status_from_trailers(code: Code, trailers: &[u8]) -> Status {
    let mut message = String::new();
    let mut details = Vec::new();
    for (name, value) in metadata::entries(trailers).flatten() {
        match name {
            metadata::GRPC_MESSAGE => message = metadata::percent_decode(value),
            metadata::GRPC_STATUS_DETAILS => details = value.to_vec(),
            _ => {}
        }
    }
    Status::new(code, message)
        .with_details(details)
        .with_metadata(MetadataMap::from_block(trailers))
}

pub(crate) fn closed_status() -> Status {
    Status::unavailable("the connection is closed")
}

/// Where a message body is: a range of its frame, or reassembled bytes (with their
/// reservation).
enum Span {
    InFrame(usize, usize),
    Owned(Vec<u8>, Option<Box<Reservation>>),
}

impl Span {
    fn of(frame: &[u8], body: std::borrow::Cow<'_, [u8]>, held: Option<Box<Reservation>>) -> Span {
        match body {
            std::borrow::Cow::Borrowed(b) => {
                let offset = b.as_ptr() as usize - frame.as_ptr() as usize;
                Span::InFrame(offset, b.len())
            }
            std::borrow::Cow::Owned(v) => Span::Owned(v, held),
        }
    }

    /// The body as bytes of its own, counted against `memory` (the frame's slot can then be
    /// released); `Err` with RESOURCE_EXHAUSTED when a copy does not fit (PROTOCOL.md §15).
    fn copy_out(self, frame: &[u8], memory: &ConnectionMemory) -> Result<Received, Status> {
        match self {
            Span::InFrame(offset, len) => {
                let held = memory.reserve(Connection::<(), Vec<u8>>::message_cost(len) as usize);
                match held {
                    Some(held) => Ok(Received::new(
                        frame[offset..offset + len].to_vec(),
                        Some(held),
                    )),
                    None => Err(out_of_memory(len)),
                }
            }
            Span::Owned(v, held) => Ok(Received::new(v, held.map(|h| *h))),
        }
    }

    fn into_payload(self, buf: RecvBuf, conn: &Conn) -> Payload {
        match self {
            Span::InFrame(offset, len) => Payload {
                data: PayloadData::Slot { buf, offset, len },
                conn: conn.self_ref(),
            },
            Span::Owned(v, held) => {
                drop(buf);
                Payload {
                    data: PayloadData::Owned(v, held),
                    conn: None,
                }
            }
        }
    }
}

/// The status of a call refused because a message of `len` bytes does not fit in the memory
/// left for its connection.
fn out_of_memory(len: usize) -> Status {
    Status::resource_exhausted(format!(
        "a message of {len} bytes does not fit in the memory left for this connection"
    ))
}

impl Conn {
    /// A strong reference to this connection, for a payload that must tell it when its slot
    /// is re-posted.
    fn self_ref(&self) -> Option<Arc<Conn>> {
        self.me.upgrade()
    }
}

/// A received message body: still in its receive slot (decoded in place; the slot is
/// re-posted when this is dropped) or reassembled from segments.
pub struct Payload {
    data: PayloadData,
    conn: Option<Arc<Conn>>,
}

enum PayloadData {
    Slot {
        buf: RecvBuf,
        offset: usize,
        len: usize,
    },
    /// Bytes of their own, counted against the connection's memory while held for the peer.
    Owned(Vec<u8>, Option<Box<Reservation>>),
}

impl Payload {
    /// A body that was never in a receive slot (a message of the gRPC face).
    pub(crate) fn owned(bytes: Vec<u8>) -> Payload {
        Payload {
            data: PayloadData::Owned(bytes, None),
            conn: None,
        }
    }

    /// Copies a body out of its receive slot and releases the slot (and its credit): for a
    /// reply nobody is decoding yet, which must not hold the receive ring.
    pub(crate) fn detach(mut self) -> Payload {
        if let PayloadData::Slot { buf, offset, len } = &self.data {
            let owned = buf[*offset..offset + len].to_vec();
            self.data = PayloadData::Owned(owned, None);
            if let Some(conn) = self.conn.take() {
                conn.slot_released();
            }
        }
        self
    }

    /// [`Payload::detach`] for a body held on behalf of the peer (a message waiting for its
    /// call's end): the copy is counted against `memory`; `Err` with RESOURCE_EXHAUSTED (the
    /// slot released) when it does not fit.
    fn detach_within(self, memory: &ConnectionMemory) -> Result<Payload, Status> {
        if !matches!(self.data, PayloadData::Slot { .. }) {
            return Ok(self);
        }
        let held = memory.reserve(Connection::<(), Vec<u8>>::message_cost(self.len()) as usize);
        match held {
            Some(held) => {
                let mut detached = self.detach();
                if let PayloadData::Owned(_, slot) = &mut detached.data {
                    *slot = Some(Box::new(held));
                }
                Ok(detached)
            }
            None => Err(out_of_memory(self.len())),
        }
    }

    /// The body as a stream item: reassembled bytes keep their reservation; a body still in
    /// its slot is copied (one request message of a call the server serves as a stream).
    pub(crate) fn into_received(mut self) -> Received {
        match std::mem::replace(&mut self.data, PayloadData::Owned(Vec::new(), None)) {
            PayloadData::Owned(v, held) => Received::new(v, held.map(|h| *h)),
            PayloadData::Slot { buf, offset, len } => {
                Received::new(buf[offset..offset + len].to_vec(), None)
            }
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.data {
            PayloadData::Slot { buf, offset, len } => &buf[*offset..offset + len],
            PayloadData::Owned(v, _) => v,
        }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Re-post the slot first, then let its credit travel if enough are owed.
            self.data = PayloadData::Owned(Vec::new(), None);
            conn.slot_released();
        }
    }
}

/// The flags of a unary call's single message: it ends the sender's side.
pub(crate) const UNARY: u16 = flags::END;
