//! A link plus its protocol state. The state lives in a [`Serializer`]: one thread at a time
//! drives it (the poller with a completion, a caller starting a call, a handler replying),
//! and a thread that finds it busy leaves its work to that owner instead of waiting. No lock
//! is held across a post, a park or user code: handlers run and calls complete as
//! [`Delivery`]s, after the owner let go of the state.
//!
//! Data flows one way: completion → owner → protocol core → delivery (handler or waiting
//! call) → protocol core (reply) → post.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt};
use rpc_sync::{assert_unlocked, Serializer};

use super::client::CallCell;
use super::Counters;

use crate::protocol::v2::{
    flags, metadata, Connection, Event, Hello, Kind, Outgoing, Payload as Body, Role, SendError,
    HEADER_LEN,
};
use crate::transport::{Link, RecvBuf, SendBuf};
use crate::{Code, Status};

/// What the protocol core keeps per call.
pub(crate) enum CallRef {
    /// Client: where the outcome goes.
    Waiter(Arc<CallCell>),
    /// Server: a call handed to a handler.
    Served,
}

type Core = Connection<CallRef, SendBuf>;

/// Server: a unary call waiting for its half-close (PROTOCOL.md §16.1: exactly one request
/// message; a second one, or none, is answered INTERNAL).
struct Awaiting {
    method: u32,
    deadline: Option<Instant>,
    /// The request message, once it arrived without the half-close.
    message: Option<Payload>,
}

/// The state one thread at a time works on.
pub(crate) struct Owned {
    core: Core,
    /// Server: unary calls opened but not yet half-closed. Bounded by `max_calls`, and each
    /// held message by `max_message_size` (a client's half-close normally comes with its
    /// message, which is then served at once and never held).
    awaiting_message: HashMap<u64, Awaiting>,
    /// Client: call deadlines, earliest first (stale entries are skipped when popped).
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Client: calls beyond the server's `max_calls`, waiting in order for calls to end
    /// (as gRPC queues streams beyond MAX_CONCURRENT_STREAMS). Bounded by what the
    /// application has started and not given up.
    waiting: std::collections::VecDeque<PendingOpen>,
    /// Frames received so far, and the count at the last keepalive check.
    frames_received: u64,
    frames_seen: u64,
    /// When the last keepalive check saw a new frame (or the connection started).
    last_alive: Instant,
    /// A keepalive PING went out since then.
    pinged: bool,
    closed: bool,
}

/// How a side finds out that its peer died silently (`docs/PROTOCOL.md` §13): after
/// `interval` without a frame it sends a PING; after `interval + timeout` it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence before a PING.
    pub interval: Duration,
    /// Further silence before the connection is declared dead.
    pub timeout: Duration,
}

impl Default for Keepalive {
    /// 1 s and 4 s: a silent peer is detected within 5 s.
    fn default() -> Self {
        Keepalive {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(4),
        }
    }
}

/// A call waiting to be opened.
struct PendingOpen {
    cell: Arc<CallCell>,
    method: u32,
    timeout_us: u32,
    deadline: Option<Instant>,
    frame: Outgoing<SendBuf>,
}

/// Work for the owner of a connection's state.
pub(crate) enum Work {
    /// A received frame.
    Frame(RecvBuf),
    /// Client: open a call whose request is encoded in `frame`.
    Open {
        cell: Arc<CallCell>,
        method: u32,
        timeout_us: u32,
        deadline: Option<Instant>,
        frame: Outgoing<SendBuf>,
    },
    /// Server: a call's final message (status OK).
    Reply { call: u64, frame: Outgoing<SendBuf> },
    /// Server: end a call with a status.
    Fail { call: u64, status: Status },
    /// Client: give a call up (deadline passed, future dropped).
    Cancel { cell: Arc<CallCell>, status: Status },
    /// Client: fail the calls whose deadline passed by `now`.
    Expire(Instant),
    /// Check the peer is alive (PING it, or give up on it).
    Keepalive(Instant, Keepalive),
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
    Request {
        call: u64,
        method: u32,
        deadline: Option<Instant>,
        payload: Payload,
    },
    /// Client: a call's outcome.
    Complete {
        cell: Arc<CallCell>,
        result: Result<Payload, Status>,
    },
    /// Several calls fail at once (connection lost, GOODBYE, deadlines).
    FailMany(Vec<(Arc<CallCell>, Status)>),
    /// More than one of the above.
    Batch(Vec<Delivery>),
}

/// How a connection hands requests to services.
pub(crate) trait Dispatch: Send + Sync + 'static {
    fn request(
        &self,
        conn: &Arc<Conn>,
        call: u64,
        method: u32,
        deadline: Option<Instant>,
        payload: Payload,
    );
}

/// A link and its protocol state.
pub(crate) struct Conn {
    /// This connection, for payloads that outlive the delivery that made them.
    me: std::sync::Weak<Conn>,
    pub(crate) link: Arc<dyn Link>,
    pub(crate) peer: Arc<str>,
    /// The peer's HELLO (fixed for the connection's life).
    pub(crate) peer_hello: Hello,
    /// Payload bytes of a frame to the peer.
    pub(crate) max_segment: usize,
    state: Serializer<Owned, Work>,
    dispatch: Option<Arc<dyn Dispatch>>,
    pub(crate) counters: Arc<Counters>,
    closed: AtomicBool,
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
    ) -> Arc<Conn> {
        let local = link.local_hello();
        let peer = link.peer_hello();
        let core = Connection::new(role, local, peer, link.send_slot_size());
        Arc::new_cyclic(|me| Conn {
            me: me.clone(),
            peer: link.peer_name().into(),
            peer_hello: peer,
            max_segment: core.max_segment(),
            link,
            state: Serializer::new(Owned {
                core,
                awaiting_message: HashMap::new(),
                deadlines: BinaryHeap::new(),
                waiting: std::collections::VecDeque::new(),
                frames_received: 0,
                frames_seen: 0,
                last_alive: Instant::now(),
                pinged: false,
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
            &mut |owned, work| self.step(owned, work),
            &mut |delivery| self.deliver(delivery),
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
        let posted = if batched {
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
        if posted {
            if let Err(e) = self.link.flush_sends() {
                self.send_failed(&e);
            }
        }
    }

    /// One work item, on the owning thread.
    fn step(&self, owned: &mut Owned, work: Work) -> Option<Delivery> {
        if owned.closed {
            return match work {
                Work::Open { cell, .. } => Some(Delivery::Complete {
                    cell,
                    result: Err(closed_status()),
                }),
                _ => None,
            };
        }
        let reposted = self.link.take_reposted();
        if reposted > 0 {
            owned.core.released(reposted);
        }
        let delivery = match work {
            Work::Frame(buf) => self.on_frame(owned, buf),
            Work::Open {
                cell,
                method,
                timeout_us,
                deadline,
                frame,
            } => {
                let call = PendingOpen {
                    cell,
                    method,
                    timeout_us,
                    deadline,
                    frame,
                };
                if owned.waiting.is_empty() {
                    self.open(owned, call)
                } else {
                    // Behind calls already waiting: keep the order.
                    owned.waiting.push_back(PendingOpen {
                        frame: call.frame.detached(),
                        ..call
                    });
                    None
                }
            }
            Work::Reply { call, frame } => {
                let sent = owned.core.send(call, frame, 0, 0);
                // Cancelled meanwhile (dropped), or too large for the client: tell it.
                if let Err(SendError::TooLarge(why)) = self.post_result(sent) {
                    let status = Status::resource_exhausted(why);
                    let _ = self.post_result(owned.core.end_call(call, &status, &[]));
                }
                None
            }
            Work::Fail { call, status } => {
                let _ = self.post_result(owned.core.end_call(call, &status, &[]));
                None
            }
            Work::Cancel { cell, status } => {
                let id = cell.id();
                if id == 0 {
                    // Still waiting to be opened: it never reaches the server.
                    owned.waiting.retain(|w| !Arc::ptr_eq(&w.cell, &cell));
                    Some(Delivery::Complete {
                        cell,
                        result: Err(status),
                    })
                } else {
                    match owned.core.cancel(id, status.code()) {
                        Some(CallRef::Waiter(cell)) => Some(Delivery::Complete {
                            cell,
                            result: Err(status),
                        }),
                        _ => None,
                    }
                }
            }
            Work::Expire(now) => expire(owned, now),
            Work::Keepalive(now, keepalive) => self.keepalive(owned, now, keepalive),
            Work::Flush => None,
            Work::Goodbye => {
                owned.core.goodbye();
                None
            }
            Work::Closed(reason) => Some(self.fail_all(owned, &reason)),
        };
        let delivery = self.open_waiting(owned, delivery);
        self.transmit(owned);
        delivery
    }

    /// Opens waiting calls while the server's `max_calls` allows.
    fn open_waiting(&self, owned: &mut Owned, delivery: Option<Delivery>) -> Option<Delivery> {
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
            return delivery;
        }
        more.extend(delivery);
        Some(Delivery::Batch(more))
    }

    fn open(&self, owned: &mut Owned, call: PendingOpen) -> Option<Delivery> {
        if call.deadline.is_some_and(|d| d <= Instant::now()) {
            return Some(Delivery::Complete {
                cell: call.cell,
                result: Err(Status::deadline_exceeded(
                    "the deadline passed while the call waited to be sent",
                )),
            });
        }
        let PendingOpen {
            cell,
            method,
            timeout_us,
            deadline,
            frame,
        } = call;
        let id = match owned.core.open_call(CallRef::Waiter(Arc::clone(&cell))) {
            Ok(id) => id,
            Err(SendError::AtCapacity) => {
                // Waiting calls must not hold send slots (see the core's `send`).
                let frame = frame.detached();
                owned.waiting.push_front(PendingOpen {
                    cell,
                    method,
                    timeout_us,
                    deadline,
                    frame,
                });
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
                return Some(Delivery::Complete {
                    cell,
                    result: Err(status),
                });
            }
        };
        cell.set_id(id);
        if let Some(d) = deadline {
            owned.deadlines.push(Reverse((d, id)));
            if owned.deadlines.len() > 64 + 2 * owned.core.peer().max_calls as usize {
                // Finished calls leave their entries behind: drop them all at once.
                let core = &owned.core;
                owned
                    .deadlines
                    .retain(|Reverse((_, id))| core.user(*id).is_some());
            }
        }
        let sent = owned.core.send(id, frame, method, timeout_us);
        match self.post_result(sent) {
            Ok(()) => None,
            Err(e) => {
                owned.core.cancel(id, Code::Cancelled);
                let status = match e {
                    SendError::TooLarge(why) => Status::resource_exhausted(why),
                    other => Status::internal(format!("could not send the request: {other:?}")),
                };
                Some(Delivery::Complete {
                    cell,
                    result: Err(status),
                })
            }
        }
    }

    /// Any frame shows the peer alive; silence past the interval gets a PING, past the
    /// timeout closes the connection.
    fn keepalive(&self, owned: &mut Owned, now: Instant, keepalive: Keepalive) -> Option<Delivery> {
        if owned.frames_received != owned.frames_seen {
            owned.frames_seen = owned.frames_received;
            owned.last_alive = now;
            owned.pinged = false;
            return None;
        }
        let silent = now.saturating_duration_since(owned.last_alive);
        if silent >= keepalive.interval + keepalive.timeout {
            tracing::warn!(peer = %self.peer, ?silent, "keepalive: the peer went silent; closing");
            self.close();
            let reason = format!("keepalive: no frame from the peer for {silent:?}");
            return Some(self.fail_all(owned, &reason));
        }
        if silent >= keepalive.interval && !owned.pinged {
            owned.pinged = true;
            owned.core.ping(owned.frames_received);
        }
        None
    }

    fn on_frame(&self, owned: &mut Owned, buf: RecvBuf) -> Option<Delivery> {
        owned.frames_received += 1;
        self.counters.received(buf.len());
        let event = match owned.core.on_frame(&buf) {
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
            } => {
                let body = Span::of(&buf, body);
                match owned.core.role() {
                    Role::Client => {
                        let Some(CallRef::Waiter(cell)) = ended else {
                            // A unary call's messages end it; a reply without END waits
                            // for the status, keeping its bytes.
                            return None;
                        };
                        Some(Delivery::Complete {
                            cell,
                            result: Ok(body.into_payload(buf, self)),
                        })
                    }
                    Role::Server => {
                        let payload = body.into_payload(buf, self);
                        let mut awaiting = match opened {
                            Some((method, timeout_us)) => Awaiting {
                                method,
                                deadline: deadline_of(timeout_us),
                                message: None,
                            },
                            None => owned.awaiting_message.remove(&call)?,
                        };
                        if awaiting.message.is_some() {
                            let status =
                                Status::internal("a unary call got more than one request message");
                            let _ = self.post_result(owned.core.end_call(call, &status, &[]));
                            return None;
                        }
                        if !end {
                            // Served at the half-close, unless a second message comes
                            // first. Copied out: a held message must not keep a slot (and
                            // its credit) from the peer.
                            awaiting.message = Some(payload.detach());
                            owned.awaiting_message.insert(call, awaiting);
                            return None;
                        }
                        Some(self.serve(owned, call, awaiting.method, awaiting.deadline, payload))
                    }
                }
            }
            Event::Opened {
                call,
                method,
                timeout_us,
                ..
            } => {
                owned.awaiting_message.insert(
                    call,
                    Awaiting {
                        method,
                        deadline: deadline_of(timeout_us),
                        message: None,
                    },
                );
                None
            }
            Event::HalfClosed { call } => match owned.awaiting_message.remove(&call)? {
                Awaiting {
                    method,
                    deadline,
                    message: Some(payload),
                } => Some(self.serve(owned, call, method, deadline, payload)),
                Awaiting { message: None, .. } => {
                    let status = Status::internal("a unary call ended without a request message");
                    let _ = self.post_result(owned.core.end_call(call, &status, &[]));
                    None
                }
            },
            Event::Ended {
                code,
                trailers,
                user: CallRef::Waiter(cell),
                ..
            } => {
                let status = status_from_trailers(code, &trailers);
                let result = if code == Code::Ok {
                    Err(Status::internal(
                        "the server ended the call without a reply",
                    ))
                } else {
                    Err(status)
                };
                Some(Delivery::Complete { cell, result })
            }
            Event::Cancelled {
                call, reason, user, ..
            } => {
                owned.awaiting_message.remove(&call);
                match user {
                    CallRef::Waiter(cell) => Some(Delivery::Complete {
                        cell,
                        result: Err(Status::new(
                            if reason == Code::Ok {
                                Code::Cancelled
                            } else {
                                reason
                            },
                            "the server cancelled the call",
                        )),
                    }),
                    CallRef::Served => None,
                }
            }
            Event::Refused {
                status,
                user: CallRef::Waiter(cell),
                ..
            } => Some(Delivery::Complete {
                cell,
                result: Err(status),
            }),
            Event::Goodbye {
                last_call,
                unprocessed,
            } => {
                tracing::debug!(peer = %self.peer, last_call, "peer said goodbye");
                let failed: Vec<_> = unprocessed
                    .into_iter()
                    .filter_map(|(_, user)| match user {
                        CallRef::Waiter(cell) => Some((
                            cell,
                            Status::unavailable(format!(
                                "{} is shutting down; the call was not processed",
                                self.peer
                            )),
                        )),
                        CallRef::Served => None,
                    })
                    .collect();
                (!failed.is_empty()).then_some(Delivery::FailMany(failed))
            }
            Event::None
            | Event::Headers { .. }
            | Event::Pong { .. }
            | Event::Ended { .. }
            | Event::Refused { .. } => None,
        }
    }

    /// Hands a unary call's request to its handler.
    fn serve(
        &self,
        owned: &mut Owned,
        call: u64,
        method: u32,
        deadline: Option<Instant>,
        payload: Payload,
    ) -> Delivery {
        owned.core.set_user(call, CallRef::Served);
        Delivery::Request {
            call,
            method,
            deadline,
            payload,
        }
    }

    fn fail_all(&self, owned: &mut Owned, reason: &str) -> Delivery {
        owned.closed = true;
        self.closed.store(true, Ordering::Release);
        let status = Status::unavailable(format!("connection to {} lost: {reason}", self.peer));
        let failed = owned
            .core
            .drain_calls()
            .into_iter()
            .filter_map(|(_, user)| match user {
                CallRef::Waiter(cell) => Some((cell, status.clone())),
                CallRef::Served => None,
            })
            .collect();
        let mut failed: Vec<_> = failed;
        failed.extend(owned.waiting.drain(..).map(|w| (w.cell, status.clone())));
        owned.deadlines.clear();
        owned.awaiting_message.clear();
        Delivery::FailMany(failed)
    }

    /// Runs a delivery: no state is owned here, so handlers may take their time and calls
    /// on this connection go on meanwhile.
    fn deliver(self: &Arc<Self>, delivery: Delivery) {
        match delivery {
            Delivery::Request {
                call,
                method,
                deadline,
                payload,
            } => {
                assert_unlocked("calling a handler");
                match &self.dispatch {
                    Some(d) => d.request(self, call, method, deadline, payload),
                    None => self.submit(Work::Fail {
                        call,
                        status: Status::unimplemented("this endpoint serves no methods"),
                    }),
                }
            }
            Delivery::Complete { cell, result } => cell.complete(result),
            Delivery::FailMany(calls) => {
                for (cell, status) in calls {
                    cell.complete(Err(status));
                }
            }
            Delivery::Batch(all) => {
                for d in all {
                    self.deliver(d);
                }
            }
        }
    }
}

/// The client calls whose deadline passed by `now`.
fn expire(owned: &mut Owned, now: Instant) -> Option<Delivery> {
    let mut failed = Vec::new();
    if !owned.waiting.is_empty() {
        let (late, waiting) = std::mem::take(&mut owned.waiting)
            .into_iter()
            .partition::<std::collections::VecDeque<_>, _>(|w| {
            w.deadline.is_some_and(|d| d <= now)
        });
        owned.waiting = waiting;
        failed.extend(late.into_iter().map(|w| {
            (
                w.cell,
                Status::deadline_exceeded("the deadline passed while the call waited to be sent"),
            )
        }));
    }
    while let Some(Reverse((d, id))) = owned.deadlines.peek().copied() {
        if d > now {
            break;
        }
        owned.deadlines.pop();
        if let Some(CallRef::Waiter(cell)) = owned.core.cancel(id, Code::DeadlineExceeded) {
            failed.push((
                cell,
                Status::deadline_exceeded("no response within the deadline"),
            ));
        }
    }
    (!failed.is_empty()).then_some(Delivery::FailMany(failed))
}

/// A server call's deadline: the caller's timeout from now (the opening frame's receipt).
fn deadline_of(timeout_us: u32) -> Option<Instant> {
    (timeout_us != 0).then(|| Instant::now() + Duration::from_micros(u64::from(timeout_us)))
}

/// The status of a server's END: its code, `grpc-message` and `grpc-status-details-bin`.
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
    Status::new(code, message).with_details(details)
}

pub(crate) fn closed_status() -> Status {
    Status::unavailable("the connection is closed")
}

/// Where a message body is: a range of its frame, or reassembled bytes.
enum Span {
    InFrame(usize, usize),
    Owned(Vec<u8>),
}

impl Span {
    fn of(frame: &[u8], body: std::borrow::Cow<'_, [u8]>) -> Span {
        match body {
            std::borrow::Cow::Borrowed(b) => {
                let offset = b.as_ptr() as usize - frame.as_ptr() as usize;
                Span::InFrame(offset, b.len())
            }
            std::borrow::Cow::Owned(v) => Span::Owned(v),
        }
    }

    fn into_payload(self, buf: RecvBuf, conn: &Conn) -> Payload {
        match self {
            Span::InFrame(offset, len) => Payload {
                data: PayloadData::Slot { buf, offset, len },
                conn: conn.self_ref(),
            },
            Span::Owned(v) => {
                drop(buf);
                Payload {
                    data: PayloadData::Owned(v),
                    conn: None,
                }
            }
        }
    }
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
    Owned(Vec<u8>),
}

impl Payload {
    /// Copies a body out of its receive slot and releases the slot (and its credit): for a
    /// reply nobody is decoding yet, which must not hold the receive ring.
    pub(crate) fn detach(mut self) -> Payload {
        if let PayloadData::Slot { buf, offset, len } = &self.data {
            let owned = buf[*offset..offset + len].to_vec();
            self.data = PayloadData::Owned(owned);
            if let Some(conn) = self.conn.take() {
                conn.submit(Work::Flush);
            }
        }
        self
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.data {
            PayloadData::Slot { buf, offset, len } => &buf[*offset..offset + len],
            PayloadData::Owned(v) => v,
        }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Re-post the slot first, then let its credit travel if enough are owed.
            self.data = PayloadData::Owned(Vec::new());
            conn.submit(Work::Flush);
        }
    }
}

/// The flags of a unary call's single message: it ends the sender's side.
pub(crate) const UNARY: u16 = flags::END;
