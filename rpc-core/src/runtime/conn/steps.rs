//! What the state's owner does with each item submitted: the call path's items (a received
//! frame, a call to open, a reply) are run by steps of their own, straight from their
//! submitters unless they had to wait for the owner; the rest go through [`Work`].

use std::sync::Arc;
use std::time::Instant;

use super::{
    block_frame, closed_status, CallRef, Conn, Delivery, OpenCall, Owned, UnaryReply, Work,
};
use crate::protocol::v2::Kind;
use crate::transport::RecvBuf;

impl Conn {
    /// Runs `work` now or leaves it to the thread that owns the state; deliveries run here.
    #[inline]
    pub(crate) fn submit(&self, work: Work) {
        self.state.submit(
            work,
            |owned, work| self.step(owned, work),
            |delivery| self.deliver(delivery),
        );
    }

    /// [`Conn::submit`] of an item of the call path, run by `run` without becoming a
    /// [`Work`] unless it has to wait for the state's owner (`queue` makes it one then).
    #[inline(always)]
    fn submit_as<I>(
        &self,
        item: I,
        run: impl FnOnce(&Conn, &mut Owned, I) -> Option<Delivery>,
        queue: impl FnOnce(I) -> Work,
    ) {
        self.state.submit_as(
            item,
            |owned, item, _| run(self, owned, item),
            queue,
            |owned, work| self.step(owned, work),
            |delivery| self.deliver(delivery),
        );
    }

    /// A received frame ([`Work::Frame`]).
    pub(crate) fn submit_frame(&self, buf: RecvBuf, clock: Option<Instant>) {
        self.submit_as(
            (buf, clock),
            |conn, owned, (buf, clock)| conn.step_frame(owned, buf, clock),
            |(buf, clock)| Work::Frame(buf, clock),
        );
    }

    /// Client: a call to open ([`Work::Open`]).
    pub(crate) fn submit_open(&self, call: OpenCall) {
        self.submit_as(
            call,
            |conn, owned, call| conn.step_open(owned, call),
            Work::Open,
        );
    }

    /// Server: a unary call's reply ([`Work::Reply`]).
    pub(crate) fn submit_reply(&self, reply: UnaryReply) {
        self.submit_as(
            reply,
            |conn, owned, reply| conn.step_reply(owned, reply),
            Work::Reply,
        );
    }

    /// One work item, on the owning thread; what it delivers is settled (see
    /// [`Delivery::settle`]). The call path's items (a received frame, a call to open, a
    /// reply) each take a step of their own, which their submitters call directly
    /// ([`Conn::submit_frame`] and its siblings) unless the item had to be queued.
    fn step(&self, owned: &mut Owned, work: Work) -> Option<Delivery> {
        match work {
            Work::Frame(buf, clock) => self.step_frame(owned, buf, clock),
            Work::Open(call) => self.step_open(owned, call),
            Work::Reply(reply) => self.step_reply(owned, reply),
            work => {
                if owned.closed {
                    return step_closed(work);
                }
                self.take_reposted(owned);
                let delivery = self.step_other(owned, work);
                self.end_step(owned, delivery)
            }
        }
    }

    /// The step of a received frame.
    #[inline(always)]
    fn step_frame(
        &self,
        owned: &mut Owned,
        buf: RecvBuf,
        clock: Option<Instant>,
    ) -> Option<Delivery> {
        if owned.closed {
            // A frame after the close has no call left to reach; its slot goes back as `buf`
            // drops.
            return None;
        }
        let delivery = self.on_frame(owned, buf, clock);
        // The frame's slot, if it was released (its message copied out), counts now.
        self.take_reposted(owned);
        self.end_step(owned, delivery)
    }

    /// Client: the step of a call to open.
    #[inline(always)]
    fn step_open(&self, owned: &mut Owned, call: OpenCall) -> Option<Delivery> {
        if owned.closed {
            return step_closed(Work::Open(call));
        }
        self.take_reposted(owned);
        let delivery = self.open(owned, call);
        self.end_step(owned, delivery)
    }

    /// Server: the step of a unary call's reply.
    #[inline(always)]
    fn step_reply(&self, owned: &mut Owned, reply: UnaryReply) -> Option<Delivery> {
        if owned.closed {
            return None;
        }
        self.take_reposted(owned);
        let delivery = match self.expired_answer(owned, reply.call) {
            Some(expired) => expired,
            None => {
                self.reply(owned, reply);
                None
            }
        };
        self.end_step(owned, delivery)
    }

    /// What every step ends with: what the core has to send goes, the owed credits are
    /// published, and what the step delivers is settled.
    #[inline(always)]
    fn end_step(&self, owned: &mut Owned, delivery: Option<Delivery>) -> Option<Delivery> {
        self.transmit(owned);
        self.publish_owed(owned);
        if owned.blocked.is_empty() {
            match delivery {
                // Most steps deliver nothing: the answer is a constant, nothing to move.
                None => return None,
                // A request for a handler needs no settling.
                Some(Delivery::Request(_)) => return delivery,
                Some(_) => {}
            }
        }
        self.settle(owned, delivery)
    }

    /// The rest of a step that delivers something, or has senders waiting.
    #[inline(never)]
    fn settle(&self, owned: &mut Owned, mut delivery: Option<Delivery>) -> Option<Delivery> {
        if !owned.blocked.is_empty() {
            self.release_senders(owned, &mut delivery);
        }
        Delivery::settle_in_place(&mut delivery);
        delivery
    }

    /// The work items off the call path (the credits that frames of the step carry back
    /// were taken).
    #[inline(never)]
    fn step_other(&self, owned: &mut Owned, work: Work) -> Option<Delivery> {
        match work {
            Work::Frame(..) | Work::Open(_) | Work::Reply(_) => {
                unreachable!("a step of its own")
            }
            Work::Send { stream, frame } => {
                // A server's stream message past the call's deadline is not sent either.
                match self.expired_answer(owned, stream.id()) {
                    Some(expired) => expired,
                    None => self.send_stream(owned, stream, frame),
                }
            }
            Work::HalfClose(stream) => {
                self.send_stream(owned, stream, block_frame(Kind::End, Vec::new()))
            }
            Work::Headers { call, block } => {
                let frame = block_frame(Kind::Headers, block);
                let _ = self.post_result(owned.core.send(call, frame, 0, 0));
                None
            }
            Work::End { call, status } => match self.expired_answer(owned, call) {
                Some(expired) => expired,
                None => {
                    self.end_call(owned, call, &status);
                    None
                }
            },
            Work::Cancel { caller, status } => self.cancel(owned, caller, status),
            Work::Consumed { stream, bytes } => {
                owned.core.consumed(stream.id(), bytes);
                None
            }
            Work::Attach { call, task } => {
                if owned
                    .core
                    .set_user(call, CallRef::Served(Arc::clone(&task)))
                {
                    None
                } else {
                    // Cancelled (or over) before the task was attached.
                    Some(Delivery::CancelTask(task))
                }
            }
            Work::Timeout(now, keepalive) => {
                if owned.core.keepalive() != keepalive {
                    owned.core.set_keepalive(keepalive);
                }
                self.on_timeout(owned, now)
            }
            Work::Flush => None,
            Work::Goodbye => {
                owned.core.goodbye();
                None
            }
            Work::Drain => {
                owned.core.ping(super::DRAIN_PING);
                owned.draining = true;
                None
            }
            Work::Closed(reason) => Some(self.fail_all(owned, &reason)),
        }
    }
}

/// A step on a closed connection: a call to open fails, a stream's sender goes on (to find
/// the stream over), the rest is moot.
#[cold]
fn step_closed(work: Work) -> Option<Delivery> {
    let mut delivery = match work {
        Work::Open(call) => call.caller.fail_unsent(closed_status()),
        Work::Send { stream, .. } | Work::HalfClose(stream) => Some(Delivery::Ready(stream)),
        _ => None,
    };
    Delivery::settle_in_place(&mut delivery);
    delivery
}
