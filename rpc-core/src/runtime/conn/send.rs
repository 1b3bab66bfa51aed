//! Sending: opening a client's calls (and queueing them beyond the server's `max_calls`),
//! replies and ends, streams' messages, cancels, and what the core's timers expired.

use std::sync::Arc;
use std::time::Instant;

use super::super::stream::StreamShared;
use super::{
    block_frame, call_ended, CallRef, Caller, Conn, Delivery, OpenCall, Owned, UnaryReply,
};
use crate::protocol::v2::{flags, Expiry, Kind, Outgoing, Role, SendError, WireStatus};
use crate::transport::SendBuf;
use crate::{Code, MetadataMap, Status};

impl Conn {
    /// Server: a unary reply; with headers or trailers it takes three frames.
    pub(super) fn reply(&self, owned: &mut Owned, reply: UnaryReply) {
        let UnaryReply {
            call,
            frame,
            headers,
            trailers,
        } = reply;
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
                let ok = WireStatus::new(Code::Ok, String::new());
                self.end_call_with(owned, call, &ok, &trailers);
            }
            // Sent, or the call is gone (cancelled meanwhile).
            _ => {}
        }
    }

    /// Server: END with `status`, its metadata as trailers.
    pub(super) fn end_call(&self, owned: &mut Owned, call: u64, status: &Status) {
        self.end_call_with(owned, call, status.as_ref(), status.metadata());
    }

    /// Server: END with `status` and `trailers`.
    fn end_call_with(
        &self,
        owned: &mut Owned,
        call: u64,
        status: &WireStatus,
        trailers: &MetadataMap,
    ) {
        let trailers: Vec<(&str, &[u8])> = trailers.iter().collect();
        let _ = self.post_result(owned.core.end_call(call, status, &trailers));
    }

    /// A stream's frame: sent (or queued behind its window) and the sender told when it
    /// may go on.
    pub(super) fn send_stream(
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
    pub(super) fn release_senders(&self, owned: &mut Owned, delivery: &mut Option<Delivery>) {
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
    pub(super) fn cancel(
        &self,
        owned: &mut Owned,
        caller: Caller,
        status: Status,
    ) -> Option<Delivery> {
        // The call was opened before (work is run in the order it was submitted): a call
        // waiting for the server's `max_calls` ends in the core without a frame.
        let id = caller.id();
        let user = owned.core.cancel(id, status.code())?;
        call_ended(user, status)
    }

    pub(super) fn open(&self, owned: &mut Owned, call: OpenCall) -> Option<Delivery> {
        // Beyond the server's `max_calls` the core opens the call waiting, with its frames
        // queued (copied out of their send slots), and starts it as calls end.
        // A unary call's reply is one message: headers and a message split from the END
        // wait in the core, which reports them with the END.
        let user = call.caller.call_ref();
        let opened = match call.caller {
            Caller::Unary(_) => owned.core.open_unary_call(user),
            Caller::Stream(_) => owned.core.open_call(user),
        };
        let id = match opened {
            Ok(id) => id,
            Err(SendError::GoingAway) => {
                let status = Status::unavailable(format!(
                    "{} is shutting down and accepts no new calls (not sent)",
                    self.peer
                ));
                return call.caller.fail_unsent(status);
            }
            Err(other) => {
                let status = Status::internal(format!("could not start the call: {other:?}"));
                return call.caller.fail(status);
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
        // With a message behind it, the HEADERS waits in the link to leave with it: one
        // doorbell (verbs) or one write (TCP) for the two frames.
        let together = headers.is_some() && message.is_some();
        if let Some(payload) = headers {
            let frame = Outgoing {
                kind: Kind::Headers,
                flags: 0,
                code: 0,
                payload,
            };
            sent = self.post_result_as(owned.core.send(id, frame, method, timeout_us), together);
        }
        if let Some(frame) = message {
            if sent.is_ok() {
                sent = self.post_result(owned.core.send(id, frame, method, timeout_us));
            }
        }
        if together {
            // Posting the message flushed the HEADERS with it, unless the message was queued
            // or refused: then it goes alone.
            self.flush_held();
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
                caller.fail(status)
            }
        }
    }

    /// What a server's answer for `call` (its reply, a stream message or its status) finds
    /// if the call's deadline passed: the call ended as its timer would end it (PROTOCOL.md
    /// §12.1), however late the timer runs, and the answer does not go out. `None`: it goes.
    /// The clock is read only for a call with a deadline.
    #[inline(always)]
    pub(super) fn expired_answer(&self, owned: &mut Owned, call: u64) -> Option<Option<Delivery>> {
        let expiry = owned.core.expire_if_past(call, Instant::now)?;
        Some(self.expired(owned, expiry))
    }

    /// Server: a call that the handler's reply or status found past its deadline
    /// ([`Connection::expire_if_past`](crate::protocol::v2::Connection::expire_if_past)) ended
    /// as one the timer expired.
    #[cold]
    pub(super) fn expired(&self, owned: &mut Owned, expiry: Expiry<CallRef>) -> Option<Delivery> {
        let delivery = match expiry {
            Expiry::Deadline {
                user: Some(user), ..
            } => self.past_deadline(owned, user),
            _ => None,
        };
        self.publish_deadlines(owned);
        delivery
    }

    /// What a call's deadline passing means for its caller or handler.
    fn past_deadline(&self, owned: &Owned, user: CallRef) -> Option<Delivery> {
        let status = match owned.core.role() {
            Role::Client => Status::deadline_exceeded("no response within the deadline"),
            Role::Server => Status::deadline_exceeded("the deadline passed at the server"),
        };
        call_ended(user, status)
    }

    /// What the core's timers did by `now` (PROTOCOL.md §12.2, §13, §15.2), told to the
    /// calls' callers and handlers.
    pub(super) fn on_timeout(&self, owned: &mut Owned, now: Instant) -> Option<Delivery> {
        let mut ended = Vec::new();
        for expiry in owned.core.handle_timeout(now) {
            match expiry {
                Expiry::Deadline { user, .. } => {
                    ended.extend(user.and_then(|user| self.past_deadline(owned, user)));
                }
                Expiry::Stalled { call, status, user } => {
                    tracing::warn!(peer = %self.peer, call, %status, "reassembly stalled; call refused");
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
        self.publish_deadlines(owned);
        (!ended.is_empty()).then_some(Delivery::Batch(ended))
    }
}
