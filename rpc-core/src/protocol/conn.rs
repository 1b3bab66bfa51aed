//! [`Connection`]: the per-connection protocol state machine shared by both ends of a link.
//!
//! Receiving: [`Connection::on_frame`] validates a frame, does the credit accounting,
//! reassembles segmented messages and yields an [`Event`]. Sending: a message either goes
//! straight into a send slot ([`Connection::direct_header`], the zero-copy path when a credit
//! is available and the message fits one frame) or is queued ([`Connection::enqueue`]) and cut
//! into frames by [`Connection::poll_transmit`] as credits and send slots allow.
//!
//! Credits: the sender starts with the peer's slot count and spends one per frame (HELLO
//! excepted). Data frames leave one credit in reserve; only a CREDIT frame may spend the last
//! one. Re-posted receive slots are reported with [`Connection::note_reposted`] and returned
//! to the peer in the header of the next frame, or in a CREDIT frame once half the slots are
//! owed. `docs/PROTOCOL.md` argues why this cannot deadlock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::time::{Duration, Instant};

use super::frame::{FrameKind, Header, Hello, HEADER_LEN};
use crate::{Code, Error, Status};

/// Where a received message body is.
#[derive(Debug, PartialEq, Eq)]
pub enum Body {
    /// In the frame that completed it: `frame[offset..offset + len]` (zero-copy).
    InFrame {
        /// Start within the frame.
        offset: usize,
        /// Length.
        len: usize,
    },
    /// Reassembled from several segments.
    Owned(Vec<u8>),
}

/// What a received frame amounts to.
#[derive(Debug)]
pub enum Event<W> {
    /// Nothing for the application (a credit return, a middle segment, a discarded frame).
    None,
    /// A complete request to dispatch.
    Request {
        /// The request id to answer with.
        id: u64,
        /// The method id (FNV-1a of the gRPC path).
        method_id: u32,
        /// The caller's remaining timeout, if it set one (the runtime turns it into a
        /// deadline; the core reads no clock).
        timeout: Option<Duration>,
        /// The request message.
        body: Body,
    },
    /// A request refused before dispatch (too large): answer `id` with `status`.
    Reject {
        /// The request id.
        id: u64,
        /// The status to answer with.
        status: Status,
    },
    /// A complete response to one of our calls.
    Response {
        /// The request id.
        id: u64,
        /// The waiter registered with [`Connection::start_call`].
        waiter: W,
        /// The reply message, or the status the peer answered with.
        result: Result<Body, Status>,
    },
    /// The peer will start no new calls.
    Goodbye,
}

/// The header fields of an outgoing message that all its segments repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHead {
    /// REQUEST or RESPONSE.
    pub kind: FrameKind,
    /// Request id.
    pub request_id: u64,
    /// Method id (REQUEST) or status code (RESPONSE).
    pub code: u32,
    /// REQUEST: the caller's timeout in microseconds (0 = none).
    pub timeout_us: u32,
}

impl MessageHead {
    /// The head of a successful or failed response.
    pub fn response(request_id: u64, code: Code) -> MessageHead {
        MessageHead {
            kind: FrameKind::Response,
            request_id,
            code: code as u32,
            timeout_us: 0,
        }
    }
}

struct Queued {
    head: MessageHead,
    body: Vec<u8>,
    sent: usize,
}

struct Reassembly {
    head: MessageHead,
    message_len: u32,
    buf: Vec<u8>,
}

struct PendingCall<W> {
    waiter: W,
}

/// Per-connection protocol state. `W` is what the runtime keeps per outstanding call (the
/// thing to wake when the response arrives).
pub struct Connection<W> {
    local: Hello,
    peer: Hello,
    max_segment: usize,
    send_credits: u32,
    owed_credits: u32,
    recv_outstanding: u32,
    next_request_id: u64,
    calls: HashMap<u64, PendingCall<W>>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    serving: HashSet<u64>,
    partial: HashMap<(u8, u64), Reassembly>,
    partial_bytes: usize,
    discarding: HashSet<(u8, u64)>,
    queue: VecDeque<Queued>,
    goodbye_received: bool,
}

impl<W> Connection<W> {
    /// State for a connection whose handshake exchanged `local` and `peer`; frames we send are
    /// also bounded by our own send slots of `send_slot_size` bytes.
    pub fn new(local: Hello, peer: Hello, send_slot_size: usize) -> Connection<W> {
        let max_frame = (peer.slot_size as usize).min(send_slot_size);
        Connection {
            local,
            peer,
            max_segment: max_frame.saturating_sub(HEADER_LEN).max(1),
            send_credits: peer.slot_count,
            owed_credits: 0,
            recv_outstanding: 0,
            next_request_id: 1,
            calls: HashMap::new(),
            deadlines: BinaryHeap::new(),
            serving: HashSet::new(),
            partial: HashMap::new(),
            partial_bytes: 0,
            discarding: HashSet::new(),
            queue: VecDeque::new(),
            goodbye_received: false,
        }
    }

    /// The peer's announced parameters.
    pub fn peer(&self) -> Hello {
        self.peer
    }

    /// Credits currently available for sending.
    pub fn send_credits(&self) -> u32 {
        self.send_credits
    }

    /// Number of calls waiting for a response.
    pub fn outstanding_calls(&self) -> usize {
        self.calls.len()
    }

    /// Whether the peer said GOODBYE.
    pub fn goodbye_received(&self) -> bool {
        self.goodbye_received
    }

    // ----- receiving -------------------------------------------------------------------

    /// Processes one received frame. An error means the peer broke the protocol: the caller
    /// logs it and closes the connection.
    pub fn on_frame(&mut self, frame: &[u8]) -> Result<Event<W>, Error> {
        let h = Header::decode(frame)?;
        let needed = HEADER_LEN + h.segment_len as usize;
        if frame.len() != needed {
            return Err(Error::TruncatedFrame {
                len: frame.len(),
                needed,
            });
        }
        if frame.len() > self.local.slot_size as usize {
            return Err(Error::FrameTooLarge {
                len: frame.len(),
                slot_size: self.local.slot_size as usize,
            });
        }
        if h.kind == FrameKind::Hello {
            return Err(Error::ProtocolViolation(
                "HELLO after the handshake".to_string(),
            ));
        }
        self.recv_outstanding += 1;
        if self.recv_outstanding > self.local.slot_count {
            return Err(Error::ProtocolViolation(format!(
                "peer sent more than {} frames without credits",
                self.local.slot_count
            )));
        }
        let credits = self.send_credits + u32::from(h.credits);
        if credits > self.peer.slot_count {
            return Err(Error::ProtocolViolation(format!(
                "peer returned credits beyond its {} slots",
                self.peer.slot_count
            )));
        }
        self.send_credits = credits;
        match h.kind {
            FrameKind::Hello => unreachable!("handled above"),
            FrameKind::Credit | FrameKind::Goodbye => {
                if h.message_len != 0 || h.request_id != 0 || h.code != 0 || h.timeout_us != 0 {
                    return Err(Error::MalformedFrame(
                        "CREDIT/GOODBYE frames carry no payload and no call fields",
                    ));
                }
                if h.kind == FrameKind::Goodbye {
                    self.goodbye_received = true;
                    return Ok(Event::Goodbye);
                }
                Ok(Event::None)
            }
            FrameKind::Request => self.on_request(&h, frame),
            FrameKind::Response => self.on_response(&h, frame),
        }
    }

    fn on_request(&mut self, h: &Header, frame: &[u8]) -> Result<Event<W>, Error> {
        if h.request_id == 0 {
            return Err(Error::MalformedFrame("request id 0"));
        }
        let Some(body) = self.reassemble(h, frame)? else {
            return Ok(Event::None);
        };
        if h.message_len > self.local.max_message_size {
            // Refused on its first segment, before anything was allocated.
            return Ok(Event::Reject {
                id: h.request_id,
                status: Status::resource_exhausted(format!(
                    "request of {} bytes exceeds the server's limit of {} bytes",
                    h.message_len, self.local.max_message_size
                )),
            });
        }
        if !self.serving.insert(h.request_id) {
            return Err(Error::ProtocolViolation(format!(
                "duplicate request id {} while it is in progress",
                h.request_id
            )));
        }
        let timeout = (h.timeout_us != 0).then(|| Duration::from_micros(u64::from(h.timeout_us)));
        Ok(Event::Request {
            id: h.request_id,
            method_id: h.code,
            timeout,
            body,
        })
    }

    fn on_response(&mut self, h: &Header, frame: &[u8]) -> Result<Event<W>, Error> {
        if !self.calls.contains_key(&h.request_id) {
            // Late (the call timed out or was cancelled) or bogus: drop it and its segments.
            if h.is_first_segment() && !h.is_last_segment() {
                self.discarding
                    .insert((FrameKind::Response as u8, h.request_id));
            } else if !h.is_first_segment() {
                let key = (FrameKind::Response as u8, h.request_id);
                if !self.discarding.contains(&key) && !self.partial.contains_key(&key) {
                    return Err(Error::ProtocolViolation(format!(
                        "continuation segment for response {} that was never started",
                        h.request_id
                    )));
                }
                if h.is_last_segment() {
                    self.discarding.remove(&key);
                }
            }
            return Ok(Event::None);
        }
        let Some(body) = self.reassemble(h, frame)? else {
            return Ok(Event::None);
        };
        let waiter = self
            .calls
            .remove(&h.request_id)
            .expect("checked above")
            .waiter;
        let result = if h.message_len > self.local.max_message_size {
            Err(Status::resource_exhausted(format!(
                "response of {} bytes exceeds the client's limit of {} bytes",
                h.message_len, self.local.max_message_size
            )))
        } else if h.code == Code::Ok as u32 {
            Ok(body)
        } else {
            let message = match &body {
                Body::InFrame { offset, len } => {
                    String::from_utf8_lossy(&frame[*offset..offset + len]).into_owned()
                }
                Body::Owned(v) => String::from_utf8_lossy(v).into_owned(),
            };
            Err(Status::new(Code::from_u32(h.code), message))
        };
        Ok(Event::Response {
            id: h.request_id,
            waiter,
            result,
        })
    }

    /// Reassembly common to requests and responses. `Ok(None)`: the message is not complete
    /// (or is being discarded). Messages above our limit are not stored: the first segment
    /// comes back as an empty body so the caller can refuse it, the rest are discarded.
    fn reassemble(&mut self, h: &Header, frame: &[u8]) -> Result<Option<Body>, Error> {
        let key = (h.kind as u8, h.request_id);
        let payload = &frame[HEADER_LEN..];
        if h.is_first_segment() {
            if self.partial.contains_key(&key) || self.discarding.contains(&key) {
                return Err(Error::ProtocolViolation(format!(
                    "message {} started twice",
                    h.request_id
                )));
            }
            if h.message_len > self.local.max_message_size {
                if !h.is_last_segment() {
                    self.discarding.insert(key);
                }
                return Ok(Some(Body::Owned(Vec::new())));
            }
            if h.is_last_segment() {
                return Ok(Some(Body::InFrame {
                    offset: HEADER_LEN,
                    len: payload.len(),
                }));
            }
            self.reserve_partial(payload.len())?;
            self.partial.insert(
                key,
                Reassembly {
                    head: head_of(h),
                    message_len: h.message_len,
                    buf: payload.to_vec(),
                },
            );
            return Ok(None);
        }
        if self.discarding.contains(&key) {
            if h.is_last_segment() {
                self.discarding.remove(&key);
            }
            return Ok(None);
        }
        let Some(r) = self.partial.get(&key) else {
            return Err(Error::ProtocolViolation(format!(
                "continuation segment for message {} that was never started",
                h.request_id
            )));
        };
        if r.head != head_of(h) || r.message_len != h.message_len {
            return Err(Error::ProtocolViolation(format!(
                "segment of message {} changes its header fields",
                h.request_id
            )));
        }
        if r.buf.len() != h.segment_offset as usize {
            return Err(Error::ProtocolViolation(format!(
                "segment of message {} at offset {} where {} was expected",
                h.request_id,
                h.segment_offset,
                r.buf.len()
            )));
        }
        self.reserve_partial(payload.len())?;
        let r = self.partial.get_mut(&key).expect("checked above");
        r.buf.extend_from_slice(payload);
        if !h.is_last_segment() {
            return Ok(None);
        }
        let r = self.partial.remove(&key).expect("checked above");
        self.partial_bytes -= r.buf.len();
        Ok(Some(Body::Owned(r.buf)))
    }

    fn reserve_partial(&mut self, more: usize) -> Result<(), Error> {
        // Reassembly memory grows with what arrived, never with what was declared, and is
        // bounded per connection so interleaved partial messages cannot exhaust memory.
        let budget = 4 * self.local.max_message_size as usize;
        if self.partial_bytes + more > budget {
            return Err(Error::ProtocolViolation(format!(
                "more than {budget} bytes of partial messages in progress"
            )));
        }
        self.partial_bytes += more;
        Ok(())
    }

    /// Reports receive slots the transport re-posted: credits owed to the peer.
    pub fn note_reposted(&mut self, slots: u32) {
        self.owed_credits += slots;
        self.recv_outstanding = self.recv_outstanding.saturating_sub(slots);
    }

    // ----- calls -----------------------------------------------------------------------

    /// Registers a new outgoing call whose request body is `body_len` bytes. Returns its
    /// request id, or the waiter back with the status the call fails with (peer said GOODBYE,
    /// request larger than the peer accepts).
    pub fn start_call(
        &mut self,
        waiter: W,
        body_len: usize,
        deadline: Option<Instant>,
    ) -> Result<u64, (W, Status)> {
        if self.goodbye_received {
            return Err((
                waiter,
                Status::unavailable("the server is shutting down and accepts no new calls"),
            ));
        }
        if body_len > self.peer.max_message_size as usize {
            return Err((
                waiter,
                Status::resource_exhausted(format!(
                    "request of {body_len} bytes exceeds the server's limit of {} bytes",
                    self.peer.max_message_size
                )),
            ));
        }
        let id = self.next_request_id;
        self.next_request_id += 1;
        self.calls.insert(id, PendingCall { waiter });
        if let Some(d) = deadline {
            self.deadlines.push(Reverse((d, id)));
        }
        Ok(id)
    }

    /// Removes a call (the caller gave up); returns its waiter if it was still outstanding.
    pub fn cancel_call(&mut self, id: u64) -> Option<W> {
        self.calls.remove(&id).map(|c| c.waiter)
    }

    /// The earliest deadline of an outstanding call.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((d, id))) = self.deadlines.peek() {
            if self.calls.contains_key(id) {
                return Some(*d);
            }
            self.deadlines.pop();
        }
        None
    }

    /// Removes the calls whose deadline passed and appends them to `out`.
    pub fn expire_calls(&mut self, now: Instant, out: &mut Vec<(u64, W)>) {
        while let Some(Reverse((d, id))) = self.deadlines.peek().copied() {
            if d > now {
                break;
            }
            self.deadlines.pop();
            if let Some(c) = self.calls.remove(&id) {
                out.push((id, c.waiter));
            }
        }
    }

    /// Removes every outstanding call (the connection is gone).
    pub fn take_all_calls(&mut self) -> Vec<(u64, W)> {
        self.deadlines.clear();
        self.calls.drain().map(|(id, c)| (id, c.waiter)).collect()
    }

    // ----- sending ---------------------------------------------------------------------

    /// Whether a message of `len` bytes can go straight into a send slot now: nothing is
    /// queued ahead of it, it fits one frame and a data credit is available.
    pub fn can_send_direct(&self, len: usize) -> bool {
        self.queue.is_empty() && len <= self.max_segment && self.send_credits >= 2
    }

    /// The header of a single-frame message sent directly (after [`Self::can_send_direct`]).
    /// Spends a credit and carries the credits owed to the peer.
    pub fn direct_header(&mut self, head: MessageHead, len: usize) -> Header {
        debug_assert!(self.can_send_direct(len));
        self.sent_message(&head);
        let len = len as u32;
        self.frame_header(head, len, 0, len)
    }

    /// Queues a message to be cut into frames by [`Self::poll_transmit`].
    pub fn enqueue(&mut self, head: MessageHead, body: Vec<u8>) {
        self.sent_message(&head);
        self.queue.push_back(Queued {
            head,
            body,
            sent: 0,
        });
    }

    fn sent_message(&mut self, head: &MessageHead) {
        if head.kind == FrameKind::Response {
            self.serving.remove(&head.request_id);
        }
    }

    /// Whether [`Self::poll_transmit`] would produce a frame (given a send slot).
    pub fn wants_transmit(&self) -> bool {
        (!self.queue.is_empty() && self.send_credits >= 2)
            || (self.send_credits >= 1 && self.owed_credits >= self.credit_threshold())
    }

    fn credit_threshold(&self) -> u32 {
        (self.local.slot_count / 2).max(1)
    }

    /// Writes the next frame (a segment of the oldest queued message, or a CREDIT frame) into
    /// `slot` and returns its length, or `None` if there is nothing to send or no credit.
    pub fn poll_transmit(&mut self, slot: &mut [u8]) -> Option<usize> {
        let room = slot.len().saturating_sub(HEADER_LEN).min(self.max_segment);
        if self.send_credits >= 2 && room > 0 {
            if let Some(q) = self.queue.front_mut() {
                let n = (q.body.len() - q.sent).min(room);
                let (head, offset, total) = (q.head, q.sent, q.body.len());
                slot[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&q.body[offset..offset + n]);
                q.sent += n;
                if q.sent == total {
                    self.queue.pop_front();
                }
                let h = self.frame_header(head, total as u32, offset as u32, n as u32);
                h.encode(slot);
                return Some(HEADER_LEN + n);
            }
        }
        if self.send_credits >= 1 && self.owed_credits >= self.credit_threshold() {
            self.send_credits -= 1;
            let credits = self.take_owed();
            Header::control(FrameKind::Credit, credits).encode(slot);
            return Some(HEADER_LEN);
        }
        None
    }

    /// A GOODBYE frame header, if a data credit is available (spends it).
    pub fn goodbye_header(&mut self) -> Option<Header> {
        if self.send_credits < 2 {
            return None;
        }
        self.send_credits -= 1;
        let credits = self.take_owed();
        Some(Header::control(FrameKind::Goodbye, credits))
    }

    fn take_owed(&mut self) -> u16 {
        let n = self.owed_credits.min(u32::from(u16::MAX));
        self.owed_credits -= n;
        n as u16
    }

    fn frame_header(&mut self, head: MessageHead, total: u32, offset: u32, len: u32) -> Header {
        self.send_credits -= 1;
        Header {
            kind: head.kind,
            credits: self.take_owed(),
            request_id: head.request_id,
            code: head.code,
            timeout_us: head.timeout_us,
            message_len: total,
            segment_offset: offset,
            segment_len: len,
        }
    }
}

fn head_of(h: &Header) -> MessageHead {
    MessageHead {
        kind: h.kind,
        request_id: h.request_id,
        code: h.code,
        timeout_us: h.timeout_us,
    }
}

#[cfg(test)]
mod tests;
