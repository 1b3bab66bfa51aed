//! What a connection's owner is handed ([`Work`]) and what it hands out to run once it let
//! go of the state ([`Delivery`]), with the client's calls as they wait to be opened.

use std::sync::Arc;
use std::time::Instant;

use crate::runtime::service::{MethodKind, ServedMethod};

use rpc_sync::Wake;

use super::super::call::{CallCell, Reply, RequestDelivery};
use super::super::stream::{Cancel, Incoming, StreamShared};
use crate::protocol::v2::{Keepalive, Outgoing, Payload as Body};
use crate::transport::{RecvBuf, SendBuf};
use crate::{MetadataMap, Status};

/// What the protocol core keeps per call.
#[derive(Clone)]
pub(crate) enum CallRef {
    /// Client, unary: where the outcome goes.
    Waiter(Arc<CallCell>),
    /// Server, unary: the task of a call's handler that awaits (cancelled with the call).
    /// Until it awaits, a unary call keeps no data in the core.
    Served(Arc<dyn Cancel>),
    /// Either side: a streaming call.
    Stream(Arc<StreamShared>),
    /// Server: a one-request call opened by its headers, its message still to come.
    Awaiting(Box<Awaiting>),
}

/// Server: a call of a unary-request method (unary, server streaming) waiting for its
/// half-close (PROTOCOL.md §16.1: exactly one request message; a second one, or none, is
/// answered INTERNAL).
#[derive(Clone)]
pub(crate) struct Awaiting {
    /// Unary or server streaming, looked up when the call opened.
    pub(super) method: ServedMethod,
    pub(super) deadline: Option<Instant>,
    pub(super) headers: MetadataMap,
}

impl Awaiting {
    /// What a kept box holds between two such calls (nothing allocated).
    pub(super) const fn empty() -> Awaiting {
        Awaiting {
            method: ServedMethod {
                id: 0,
                kind: MethodKind::Unary,
                route: 0,
            },
            deadline: None,
            headers: MetadataMap::new(),
        }
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
    pub(super) fn id(&self) -> u64 {
        match self {
            Caller::Unary(c) => c.id(),
            Caller::Stream(s) => s.id(),
        }
    }

    pub(super) fn set_id(&self, id: u64) {
        match self {
            Caller::Unary(c) => c.set_id(id),
            Caller::Stream(s) => s.set_id(id),
        }
    }

    pub(super) fn call_ref(&self) -> CallRef {
        match self {
            Caller::Unary(c) => CallRef::Waiter(Arc::clone(c)),
            Caller::Stream(s) => CallRef::Stream(Arc::clone(s)),
        }
    }

    /// [`Caller::fail`] of a call that never went out: a unary call's caller may make it
    /// again on another connection ([`CallCell::was_unprocessed`]).
    pub(super) fn fail_unsent(self, status: Status) -> Option<Delivery> {
        if let Caller::Unary(cell) = &self {
            cell.mark_unprocessed();
        }
        self.fail(status)
    }

    pub(super) fn fail(self, status: Status) -> Option<Delivery> {
        match self {
            Caller::Unary(cell) => Delivery::outcome(&cell, Err(status)),
            Caller::Stream(stream) => Some(Delivery::End {
                stream,
                end: Err(status),
            }),
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
    /// The HEADERS frame's payload (its kind, flags and code are fixed): without the rest of
    /// an [`Outgoing`], [`Work`] stays within two cache lines, which moves it without a
    /// `memcpy` call.
    pub(crate) headers: Option<Body<SendBuf>>,
    pub(crate) message: Option<Outgoing<SendBuf>>,
}

/// Server: a unary call's reply: headers if any, the message, trailers if any (with
/// neither, one MESSAGE with END).
pub(crate) struct UnaryReply {
    pub(crate) call: u64,
    pub(crate) frame: Outgoing<SendBuf>,
    /// The response headers' metadata block (empty: none).
    pub(crate) headers: Vec<u8>,
    pub(crate) trailers: MetadataMap,
}

/// Work for the owner of a connection's state.
pub(crate) enum Work {
    /// A received frame, and the poll batch's clock reading if the poller took one (a call
    /// it opens with a timeout has its deadline from it; one clock read per batch).
    Frame(RecvBuf, Option<Instant>),
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
    /// Server: a unary call's reply.
    Reply(UnaryReply),
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
    /// (PING it, or give up on it) under the keepalive in force for the endpoint's number of
    /// connections, and at messages stalled in reassembly (drop them).
    Timeout(Instant, Option<Keepalive>),
    /// Send what credits and send slots now allow (slots re-posted, sends completed).
    Flush,
    /// Server: GOODBYE.
    Goodbye,
    /// Server, shutting down with every handler done: PING the client ([`DRAIN_PING`]) and
    /// close once it answers.
    ///
    /// [`DRAIN_PING`]: super::DRAIN_PING
    Drain,
    /// The link is gone.
    Closed(String),
}

/// What an owner hands out to run after letting go of the state.
pub(crate) enum Delivery {
    /// Server: a request for a handler.
    Request(RequestDelivery),
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
    /// Client: leaves a unary call's outcome in its cell now, while the connection's state
    /// is owned (whoever removes the call from the core decides the outcome, so the
    /// outcome is left there too); what remains is waking a caller that waits parked or as
    /// a task, once the state is let go. `None`: nothing to wake (the caller drives the
    /// connection and finds the outcome when its step returns, or an outcome was left
    /// already).
    #[inline]
    pub(super) fn outcome(cell: &CallCell, result: Result<Reply, Status>) -> Option<Delivery> {
        cell.complete_deferred(result)
            .filter(Wake::is_needed)
            .map(Delivery::Woken)
    }

    /// Puts what a delivery brings a stream into the stream's inbox now, while the
    /// connection's state is owned, and leaves the rest (waking the reader, stopping the
    /// sender, cancelling a task) for after it is let go. Deliveries run on whichever
    /// thread submitted the work, in parallel: pushed later, two messages of one stream
    /// could overtake each other, and a message overtaken by the stream's END be lost.
    pub(super) fn settle(self) -> Delivery {
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
    /// handler, a wake-up) are not moved.
    pub(super) fn settle_in_place(delivery: &mut Option<Delivery>) {
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
