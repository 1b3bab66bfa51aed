//! Received frames: what the core's events mean for handlers and waiting calls.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::super::call::{out_of_memory, Payload, Reply, RequestBody, RequestDelivery};
use super::super::stream::{Incoming, Received, StreamShared};
use super::{call_ended, Awaiting, CallRef, Conn, Delivery, Owned};
use crate::protocol::v2::{
    metadata, whole_request_parts, Connection, ConnectionMemory, Event, HeldReply, Reservation,
    Role,
};
use crate::runtime::service::{MethodKind, ServedMethod};
use crate::transport::RecvBuf;
use crate::{Code, MetadataMap, Status};

impl Conn {
    pub(super) fn on_frame(
        &self,
        owned: &mut Owned,
        buf: RecvBuf,
        clock: Option<Instant>,
    ) -> Option<Delivery> {
        self.counters.received(buf.len());
        let now = || clock.unwrap_or_else(Instant::now);
        let event = match owned.core.handle_frame(&buf, now) {
            Ok(event) => event,
            Err(e) => {
                drop(buf);
                return Some(self.violated(owned, e));
            }
        };
        if self.serving {
            // The frame may have opened a call with a deadline (one whose message the core
            // holds included: the application hears of it only later).
            self.publish_deadlines(owned);
        }
        // Everything the event borrows from the frame becomes an owned value or a range.
        match event {
            Event::Message {
                call,
                opened,
                whole,
                body,
                end,
                ended,
                held,
            } => {
                match owned.core.role() {
                    Role::Client => {
                        let body = Span::of(&buf, body, held);
                        self.client_message(owned, call, body, buf, ended)
                    }
                    Role::Server => {
                        // A whole request's metadata (PROTOCOL.md §22.2) becomes the
                        // request's own.
                        let (headers, body) = match whole {
                            true => split_whole_request(body),
                            false => (MetadataMap::new(), body),
                        };
                        let body = Span::of(&buf, body, held);
                        self.server_message(owned, call, opened, headers, body, buf, end)
                    }
                }
            }
            Event::Opened {
                call,
                method,
                timeout_us,
                headers,
            } => {
                let metadata = MetadataMap::from_block(&headers);
                drop(buf);
                let deadline = self.served_deadline(owned, call, timeout_us);
                match self.served_method(owned, method) {
                    None => {
                        self.unknown_method(owned, call, method);
                        None
                    }
                    Some(method) if method.kind.receives_stream() => {
                        Some(self.serve_stream(owned, call, method, deadline, metadata))
                    }
                    Some(method) => {
                        // Its one message comes later, whole (the core holds it until the
                        // half-close): what the handler will need waits with the call.
                        let awaiting = Awaiting {
                            method,
                            deadline,
                            headers: metadata,
                        };
                        // In the box the previous such call left, if there is one.
                        let boxed = match owned.spare_awaiting.take() {
                            Some(mut boxed) => {
                                *boxed = awaiting;
                                boxed
                            }
                            None => Box::new(awaiting),
                        };
                        owned.core.set_user(call, CallRef::Awaiting(boxed));
                        None
                    }
                }
            }
            Event::HalfClosed { call } => {
                drop(buf);
                // Only streams hear of a half-close: a one-request call's comes with its
                // message (or ends it INTERNAL), in the core.
                match owned.core.user(call) {
                    Some(CallRef::Stream(s)) => Some(Delivery::HalfClosed(Arc::clone(s))),
                    _ => None,
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
                    // A unary call's headers wait in the core for its END.
                    _ => None,
                }
            }
            Event::Ended {
                code,
                trailers,
                user,
                reply,
                ..
            } => {
                // OK: the trailers alone (no status to build); else the status they carry.
                let end = match code {
                    Code::Ok => Ok(MetadataMap::from_block(&trailers)),
                    _ => Err(status_from_trailers(code, &trailers)),
                };
                drop(buf);
                match user {
                    CallRef::Waiter(cell) => {
                        let reply = reply.map(|r| *r);
                        let result = match (end, reply) {
                            (
                                Ok(trailers),
                                Some(HeldReply {
                                    headers,
                                    body: Some(body),
                                    held,
                                }),
                            ) => Ok(Reply {
                                payload: Payload::reassembled(body, held),
                                headers: MetadataMap::from_block(&headers),
                                trailers,
                            }),
                            (Ok(_), _) => Err(Status::internal(
                                "the server ended the call without a reply",
                            )),
                            (Err(status), _) => Err(status),
                        };
                        Delivery::outcome(&cell, result)
                    }
                    CallRef::Stream(stream) => Some(Delivery::End { stream, end }),
                    CallRef::Served(_) | CallRef::Awaiting(_) => None,
                }
            }
            Event::Cancelled { reason, user, .. } => {
                drop(buf);
                let (code, message) = match (reason, owned.core.role()) {
                    (Code::Ok, Role::Client) => (Code::Cancelled, "the server cancelled the call"),
                    (code, Role::Client) => (code, "the server cancelled the call"),
                    (Code::Ok, Role::Server) => (Code::Cancelled, "the client cancelled the call"),
                    (code, Role::Server) => (code, "the client cancelled the call"),
                };
                call_ended(user, Status::new(code, message))
            }
            Event::Refused { status, user, .. } => {
                drop(buf);
                call_ended(user, status.into())
            }
            Event::Goodbye {
                last_call,
                unprocessed,
            } => {
                drop(buf);
                tracing::debug!(peer = %self.peer, last_call, "peer said goodbye");
                // New calls go elsewhere (a new connection); this one finishes its calls.
                self.going_away.raise();
                let status = Status::unavailable(format!(
                    "{} is shutting down; the call was not processed",
                    self.peer
                ));
                let failed: Vec<_> = unprocessed
                    .into_iter()
                    .filter_map(|(_, user)| {
                        // A unary call's caller may make it again on another connection.
                        if let CallRef::Waiter(cell) = &user {
                            cell.mark_unprocessed();
                        }
                        call_ended(user, status.clone())
                    })
                    .collect();
                (!failed.is_empty()).then_some(Delivery::Batch(failed))
            }
            Event::Pong { data } => {
                drop(buf);
                if owned.draining && data == super::DRAIN_PING {
                    // The client has every frame sent before the PING: nothing is lost now.
                    tracing::debug!(peer = %self.peer, "client acknowledged the drain; closing");
                    self.close();
                    return None;
                }
                // The server's answer to our offer of extensions may have come (§22.1).
                if owned.core.whole_requests() {
                    self.whole_requests.raise();
                }
                None
            }
            Event::None => None,
        }
    }

    /// Client: a message of a call.
    pub(super) fn client_message(
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
                // One MESSAGE with END, and nothing before it (headers would have made the
                // core hold the reply for an END): read in place. The outcome is left now
                // (a caller driving the connection finds it when this step returns); only
                // waking a parked caller waits for the state to be let go.
                let reply = Reply {
                    payload: body.into_payload(buf),
                    headers: MetadataMap::new(),
                    trailers: MetadataMap::new(),
                };
                Delivery::outcome(&cell, Ok(reply))
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
            Some(CallRef::Served(_) | CallRef::Awaiting(_)) => None,
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
                // A unary call's message without END waits in the core for the END.
                _ => None,
            },
        }
    }

    /// Server: a message of a call (`opened`: it opened the call, with `headers` if it was a
    /// whole request).
    #[allow(clippy::too_many_arguments)] // the parts of one event, taken apart once
    pub(super) fn server_message(
        &self,
        owned: &mut Owned,
        call: u64,
        opened: Option<(u32, u32)>,
        headers: MetadataMap,
        body: Span,
        buf: RecvBuf,
        end: bool,
    ) -> Option<Delivery> {
        // A call opened by this very frame has its deadline from this step's clock read.
        let opened_here = opened.is_some();
        let awaiting = match opened {
            Some((method, timeout_us)) => {
                let deadline = self.served_deadline(owned, call, timeout_us);
                match self.served_method(owned, method) {
                    None => {
                        drop(buf);
                        self.unknown_method(owned, call, method);
                        return None;
                    }
                    Some(method) if method.kind.receives_stream() => {
                        let message = body.copy_out(&buf, owned.core.memory());
                        drop(buf);
                        let message = match message {
                            Ok(message) => message,
                            Err(status) => return self.refuse(owned, call, status),
                        };
                        let request = self.serve_stream(owned, call, method, deadline, headers);
                        let stream = match &request {
                            Delivery::Request(request) => Arc::clone(
                                request
                                    .stream
                                    .as_ref()
                                    .expect("serve_stream delivers a stream"),
                            ),
                            _ => unreachable!("serve_stream delivers a request"),
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
                    Some(method) => Awaiting {
                        method,
                        deadline,
                        headers,
                    },
                }
            }
            None => match owned.core.user(call) {
                Some(CallRef::Awaiting(_)) => {
                    let Some(CallRef::Awaiting(mut boxed)) = owned.core.take_user(call) else {
                        return None;
                    };
                    let awaiting = std::mem::replace(&mut *boxed, Awaiting::empty());
                    owned.spare_awaiting = Some(boxed);
                    awaiting
                }
                Some(CallRef::Stream(s)) => {
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
                _ => return None,
            },
        };
        if !end {
            // The core holds a one-request call's message until its half-close
            // (`Connection::set_one_request`): this is a core without the rule.
            drop(buf);
            let status = Status::internal("a unary call's message came without its end");
            self.end_call(owned, call, &status);
            return None;
        }
        let payload = body.into_payload(buf);
        Some(self.serve(owned, call, awaiting, payload, opened_here))
    }

    /// The peer broke the protocol: the connection closes, and its calls fail.
    #[cold]
    #[inline(never)]
    fn violated(&self, owned: &mut Owned, e: rpc_proto::Error) -> Delivery {
        tracing::warn!(peer = %self.peer, error = %e, "protocol violation; disconnecting the peer");
        self.close();
        self.fail_all(owned, &e.to_string())
    }

    /// Gives up a call whose message this side cannot hold (PROTOCOL.md §15): a server ends
    /// it with `status`, a client cancels it and fails it with `status`.
    pub(super) fn refuse(&self, owned: &mut Owned, call: u64, status: Status) -> Option<Delivery> {
        tracing::debug!(peer = %self.peer, call, %status, "refusing a call");
        let user = owned.core.refuse_call(call, status.as_ref().clone())?;
        call_ended(user, status)
    }

    /// Server: the deadline the core watches for a call that just opened with `timeout_us`
    /// (none for 0: the core then watches none, and is not asked).
    pub(super) fn served_deadline(
        &self,
        owned: &mut Owned,
        call: u64,
        timeout_us: u32,
    ) -> Option<Instant> {
        if timeout_us == 0 {
            return None;
        }
        owned.core.deadline(call)
    }

    /// Server: whether a deadline the core watches passed by `now` (as
    /// [`deadline_mark`](super::deadline_mark); a hint for the endpoint's ticks: the
    /// deadlines themselves are in the core).
    pub(crate) fn deadline_due(&self, now: u64) -> bool {
        self.earliest_deadline.load(Ordering::Relaxed) <= now
    }

    /// The method with wire id `id` on this server (`None`: no service has it); the last
    /// answer is kept, as calls mostly repeat their method.
    pub(super) fn served_method(&self, owned: &mut Owned, id: u32) -> Option<ServedMethod> {
        match owned.last_method {
            Some(last) if last.id == id => Some(last),
            _ => {
                let method = self.dispatch.as_ref().and_then(|d| d.method(id))?;
                owned.last_method = Some(method);
                Some(method)
            }
        }
    }

    /// Server: a call of a method no service has is answered at once.
    pub(super) fn unknown_method(&self, owned: &mut Owned, call: u64, method: u32) {
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
    pub(super) fn serve(
        &self,
        owned: &mut Owned,
        call: u64,
        request: Awaiting,
        payload: Payload,
        deadline_fresh: bool,
    ) -> Delivery {
        let Awaiting {
            method,
            deadline,
            headers: metadata,
        } = request;
        let stream = match method.kind {
            MethodKind::ServerStreaming => {
                let stream = StreamShared::new(call, self.local_hello.call_window, true);
                owned
                    .core
                    .set_user(call, CallRef::Stream(Arc::clone(&stream)));
                Some(stream)
            }
            // A unary call keeps no data in the core until its handler's task awaits
            // (`Work::Attach`): cancelled before, it has nothing to tell.
            _ => None,
        };
        Delivery::Request(RequestDelivery {
            call,
            method,
            deadline,
            deadline_fresh,
            metadata,
            body: RequestBody::Message(payload),
            stream,
        })
    }

    /// Server: a call whose requests are a stream goes to its handler as soon as it opens.
    pub(super) fn serve_stream(
        &self,
        owned: &mut Owned,
        call: u64,
        method: ServedMethod,
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
            // A stream is served in the step that opened its call.
            deadline_fresh: true,
            metadata,
            body: RequestBody::Stream,
            stream: Some(stream),
        })
    }
}

/// The status of a server's END: its code, `grpc-message`, `grpc-status-details-bin`, and
/// the other trailers as its metadata.
pub(super) fn status_from_trailers(code: Code, trailers: &[u8]) -> Status {
    let mut message = String::new();
    let mut details = Vec::new();
    for (name, value) in metadata::entries(trailers).flatten() {
        match name {
            metadata::GRPC_MESSAGE => message = metadata::percent_decode(value),
            metadata::GRPC_STATUS_DETAILS => details = value.to_vec(),
            _ => {}
        }
    }
    Status::with_details_and_metadata(code, message, details, MetadataMap::from_block(trailers))
}

/// A whole request's metadata, copied out, and its message, still in the frame unless it
/// was reassembled. Out of line: a bare call's path stays as short as it was.
#[inline(never)]
fn split_whole_request(payload: Cow<'_, [u8]>) -> (MetadataMap, Cow<'_, [u8]>) {
    match payload {
        Cow::Borrowed(bytes) => {
            let (block, message) = whole_request_parts(bytes);
            (MetadataMap::from_block(block), Cow::Borrowed(message))
        }
        Cow::Owned(mut bytes) => {
            let (block, message) = whole_request_parts(&bytes);
            let (headers, start) = (MetadataMap::from_block(block), bytes.len() - message.len());
            bytes.drain(..start);
            (headers, Cow::Owned(bytes))
        }
    }
}

/// Where a message body is: a range of its frame, or reassembled bytes (with their
/// reservation).
pub(super) enum Span {
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

    fn into_payload(self, buf: RecvBuf) -> Payload {
        match self {
            Span::InFrame(offset, len) => Payload::in_slot(buf, offset, len),
            Span::Owned(v, held) => {
                drop(buf);
                Payload::reassembled(v, held)
            }
        }
    }
}
