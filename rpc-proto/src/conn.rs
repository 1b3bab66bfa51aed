//! [`Connection`]: the protocol state of one connection (version 2), without I/O, threads or
//! a clock. One owner at a time drives it: received frames go in through
//! [`Connection::on_frame`] and come out as [`Event`]s; outgoing frames go in through
//! [`Connection::send`] (straight back out when credits and the call's window allow, otherwise
//! queued) and come out of [`Connection::poll_transmit`].
//!
//! `C` is what the runtime keeps per call (given back when the call ends); `P` is an outgoing
//! frame buffer (a registered send slot in the runtime, a `Vec<u8>` in tests) into which the
//! payload was already encoded at offset [`HEADER_LEN`]: the core only writes headers, so a
//! message is encoded exactly once, straight into the buffer that is posted.
//!
//! Bounds (`docs/PROTOCOL.md` §10): at most `max_calls` calls; per call at most one frame
//! being reassembled (never more than the receiver's limits, grown with the bytes that
//! arrived), at most one pending WINDOW and one pending CANCEL; at most one pending PING
//! answer per connection. What the runtime queues with [`Connection::send`] is bounded by
//! the runtime (one message per unary call; the send window for streams).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::credit_pool::Grant;
use crate::extension;
use crate::frame::{
    flags, violation, Header, Hello, Kind, HEADER_LEN, MAX_WINDOW, MESSAGE_OVERHEAD,
};
use crate::memory::{ConnectionMemory, Reservation};
use crate::metadata;
use crate::InlineDrop;
use crate::Violation;
use crate::{Code, Error, WireStatus};

mod table;

use table::CallTable;
mod timers;
pub use timers::{Expiry, Keepalive};
use timers::{KeepaliveStep, Timers};

/// Which end of the connection this is: clients open calls, servers answer them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens calls.
    Client,
    /// Answers calls.
    Server,
}

/// What a received frame amounts to. Payloads borrow the frame when they arrived in one
/// segment and are owned when reassembled.
#[derive(Debug)]
pub enum Event<'f, C> {
    /// Nothing for the application (credits, a middle segment, a discarded frame, a PING
    /// whose answer is now queued).
    None,
    /// Server: a call opened with request headers (HEADERS with OPEN).
    Opened {
        /// The call.
        call: u64,
        /// The method id.
        method: u32,
        /// The caller's timeout in microseconds (0: none); the deadline starts now.
        timeout_us: u32,
        /// The request metadata block (validated).
        headers: Cow<'f, [u8]>,
    },
    /// Client: the response headers of a call.
    Headers {
        /// The call.
        call: u64,
        /// The metadata block (validated).
        headers: Cow<'f, [u8]>,
    },
    /// A message of a call.
    Message {
        /// The call.
        call: u64,
        /// Server: `Some((method, timeout_us))` when this message opened the call.
        opened: Option<(u32, u32)>,
        /// Server: this opening message is a whole request (§22.2): `body` starts with the
        /// request metadata block (validated) and its length; [`whole_request_parts`] tells
        /// them apart. (Not split here: a unary call's event stays small.)
        whole: bool,
        /// The message bytes.
        body: Cow<'f, [u8]>,
        /// Server: the client half-closed with this message. Client: this was the last
        /// message and the call ended with status OK (`ended` holds the call's data).
        end: bool,
        /// Client: the call's data, when `end` ended the call.
        ended: Option<C>,
        /// A reassembled body's bytes, reserved from the connection's memory (§15): keep it
        /// as long as the body is held. `None` for a body borrowed from its frame (boxed: a
        /// unary call's events stay small).
        held: Option<Box<Reservation>>,
    },
    /// Server: the client half-closed (END without a message).
    HalfClosed {
        /// The call.
        call: u64,
    },
    /// Client: the server ended the call with a status and trailers.
    Ended {
        /// The call.
        call: u64,
        /// The status code (values above 16 read as UNKNOWN).
        code: Code,
        /// The trailers block (validated); `grpc-message` and `grpc-status-details-bin`
        /// carry the status message and details.
        trailers: Cow<'f, [u8]>,
        /// The call's data.
        user: C,
        /// Client, unary call ([`Connection::open_unary_call`]): what came
        /// before the END, held until it (response headers, the message).
        reply: Option<Box<HeldReply>>,
    },
    /// The peer cancelled a call.
    Cancelled {
        /// The call.
        call: u64,
        /// The reason the peer gave (a status code).
        reason: Code,
        /// The call's data.
        user: C,
    },
    /// The core gave the call up because the peer exceeded one of our limits (a message or
    /// metadata block too large): a server's END with `status`, a client's CANCEL, are
    /// already queued.
    Refused {
        /// The call.
        call: u64,
        /// Why.
        status: WireStatus,
        /// The call's data.
        user: C,
    },
    /// The peer will process no call above `last_call`; calls above it that were open are
    /// given back (they were never processed, so they may be retried).
    Goodbye {
        /// The highest call id the peer processes.
        last_call: u64,
        /// The calls above it.
        unprocessed: Vec<(u64, C)>,
    },
    /// The answer to one of our PINGs.
    Pong {
        /// The value the PING carried.
        data: u64,
    },
}

/// What a client's core held of a one-response call's reply until its END
/// ([`Connection::open_unary_call`]).
#[derive(Debug, Default)]
pub struct HeldReply {
    /// The response headers block (validated; empty without a HEADERS frame).
    pub headers: Vec<u8>,
    /// The response message, if one came.
    pub body: Option<Vec<u8>>,
    /// The message's bytes, reserved from the connection's memory (§15) while held.
    pub held: Option<Box<Reservation>>,
}

/// An outgoing frame handed to [`Connection::send`].
#[derive(Debug)]
pub struct Outgoing<P> {
    /// HEADERS, MESSAGE or END.
    pub kind: Kind,
    /// [`flags`] bits (OPEN is set by the core for a call's first frame).
    pub flags: u16,
    /// Server END: the status code; otherwise 0.
    pub code: u32,
    /// The payload.
    pub payload: Payload<P>,
}

/// The payload of an outgoing frame.
#[derive(Debug)]
pub enum Payload<P> {
    /// Already encoded at `[HEADER_LEN..HEADER_LEN + len]` of a send buffer; `len` must fit
    /// one frame ([`Connection::max_segment`]).
    InBuffer(P, usize),
    /// Bytes to be cut into segments and copied into send buffers.
    Bytes(Vec<u8>),
}

impl<P> Payload<P> {
    fn len(&self) -> usize {
        match self {
            Payload::InBuffer(_, len) => *len,
            Payload::Bytes(v) => v.len(),
        }
    }
}

impl<P: std::ops::Deref<Target = [u8]>> Payload<P> {
    /// The payload's bytes.
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::InBuffer(buf, len) => &buf[HEADER_LEN..HEADER_LEN + len],
            Payload::Bytes(v) => v,
        }
    }
}

/// Why [`Connection::open_call`] or [`Connection::send`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The call is not open (it ended, was cancelled, or never existed).
    NotOpen,
    /// This side already ended its half of the call.
    Ended,
    /// The peer said GOODBYE: no new calls.
    GoingAway,
    /// `max_calls` calls are open; retry when one ends.
    AtCapacity,
    /// The frame breaks the peer's limits (`max_message_size`, `max_metadata_size`).
    TooLarge(String),
    /// The frame is not valid for this role or this point of the call.
    Invalid(&'static str),
    /// Queuing the frame would take this side past its memory budget (§15).
    OutOfMemory(String),
}

#[derive(Debug)]
struct Queued<P> {
    header: Header,
    payload: Payload<P>,
    sent: usize,
    /// A queued MESSAGE's bytes, reserved from the connection's memory.
    _held: Option<Reservation>,
}

/// Server, one-request call: its message held until the half-close (bytes and their
/// reservation), and the opening the application was not told of yet (method and timeout of
/// an opening MESSAGE without END).
#[derive(Debug)]
struct HeldRequest {
    body: Vec<u8>,
    held: Box<Reservation>,
    announce: Option<(u32, u32)>,
}

#[derive(Debug)]
struct Partial {
    first: Header,
    received: u32,
    buf: Vec<u8>,
    /// The whole logical frame's bytes, reserved at its first segment.
    held: Reservation,
    /// What [`Connection::handle_timeout`] saw last: the bytes received then, and since
    /// when that figure has not changed.
    seen: Option<(u32, Instant)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Both sides may still send.
    Open,
    /// This side gave the call up or finished it; frames for it are discarded. A client
    /// keeps counting the call until its CANCEL is emitted.
    Closing,
}

#[derive(Debug)]
struct Call<C, P> {
    user: Option<C>,
    state: State,
    /// This side may still send frames (has not ended its half).
    send_open: bool,
    /// Frames of this side sent or queued so far (the first one opens the call).
    frames_sent: u32,
    /// Whether a segment of this side's first frame was emitted (the peer knows the call).
    on_wire: bool,
    /// Whether this side sent a MESSAGE (response headers must come first).
    message_sent: bool,
    send_window: i64,
    in_ready: bool,
    /// The peer may still send frames.
    recv_open: bool,
    /// The peer sent a MESSAGE (a server's HEADERS must come first).
    message_received: bool,
    headers_received: bool,
    recv_window: i64,
    window_owed: u32,
    window_queued: bool,
    cancel: Option<Code>,
    /// When the call ends with DEADLINE_EXCEEDED (see [`Connection::set_deadline`]).
    deadline: Option<Instant>,
    /// Server: the call's method takes exactly one request message (see
    /// [`Connection::set_one_request`]).
    one_request: bool,
    /// Client: a unary call: its response headers and message are held until its END.
    one_response: bool,
    /// Client: opened beyond the server's `max_calls` and waiting for a call to end; its
    /// frames are queued and none leaves until then (see [`Connection::queue_beyond_max_calls`]).
    waiting: bool,
    /// What most calls never hold (see [`Rare`]); allocated the first time one does.
    rare: InlineDrop<Box<Rare<P>>>,
    /// The call's received metadata, reserved from the connection's memory while the call
    /// is open (its record is part of the connection's admission: [`CALL_RECORD`]).
    held: Reservation,
}

/// The parts of a call's record that most calls never use, boxed so that the record stays
/// within two cache lines: the call table then moves records without a `memcpy` call.
#[derive(Debug)]
struct Rare<P> {
    /// Frames queued behind window or credits (or a server's `max_calls`).
    out: VecDeque<Queued<P>>,
    /// Server, one-request call: its message, held until the half-close (most requests come
    /// whole, with the half-close).
    request: Option<Box<HeldRequest>>,
    /// Client, unary call: its response headers and message, held until its END.
    response: Option<Box<HeldReply>>,
    /// A frame in reassembly.
    partial: Option<Box<Partial>>,
}

impl<P> Default for Rare<P> {
    fn default() -> Self {
        Rare {
            out: VecDeque::new(),
            request: None,
            response: None,
            partial: None,
        }
    }
}

impl<C, P> Call<C, P> {
    fn new(user: Option<C>, peer_window: u32, local_window: u32) -> Self {
        Call {
            user,
            state: State::Open,
            send_open: true,
            frames_sent: 0,
            on_wire: false,
            message_sent: false,
            send_window: peer_window.into(),
            in_ready: false,
            recv_open: true,
            message_received: false,
            headers_received: false,
            recv_window: local_window.into(),
            window_owed: 0,
            window_queued: false,
            cancel: None,
            deadline: None,
            one_request: false,
            one_response: false,
            waiting: false,
            rare: InlineDrop::new(None),
            held: Reservation::default(),
        }
    }

    /// The call's rare parts, allocated if it had none.
    fn rare(&mut self) -> &mut Rare<P> {
        self.rare.get_or_insert_with(Box::default)
    }

    /// How many frames are queued for this call.
    fn queued(&self) -> usize {
        self.rare.as_ref().map_or(0, |r| r.out.len())
    }

    fn partial(&self) -> Option<&Partial> {
        self.rare.as_ref()?.partial.as_deref()
    }

    fn partial_mut(&mut self) -> Option<&mut Partial> {
        self.rare.as_mut()?.partial.as_deref_mut()
    }

    fn response(&self) -> Option<&HeldReply> {
        self.rare.as_ref()?.response.as_deref()
    }

    fn take_response(&mut self) -> Option<Box<HeldReply>> {
        self.rare.as_mut()?.response.take()
    }

    /// Drops the frames queued for the call and its frame in reassembly.
    fn drop_queued(&mut self) {
        if let Some(rare) = self.rare.as_mut() {
            rare.out.clear();
            rare.partial = None;
        }
    }

    /// Whether the first queued frame may start now as far as the call's window goes (never
    /// while the call waits for the server's `max_calls`).
    fn front_ready(&self) -> bool {
        if self.waiting {
            return false;
        }
        match self.rare.as_ref().and_then(|r| r.out.front()) {
            Some(q) => q.sent > 0 || q.header.kind != Kind::Message || self.send_window > 0,
            None => false,
        }
    }
}

/// Which methods take exactly one request message ([`Connection::set_one_request`]).
struct OneRequest(Box<dyn Fn(u32) -> bool + Send + Sync>);

impl std::fmt::Debug for OneRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OneRequest")
    }
}

/// Per-connection protocol state; see the module docs.
#[derive(Debug)]
pub struct Connection<C, P> {
    role: Role,
    local: Hello,
    peer: Hello,
    max_segment: usize,
    /// Credits we hold for the peer's slots.
    send_credits: u32,
    /// Credits we owe the peer (slots released, not yet returned).
    owed: u32,
    /// Credits the peer holds for our slots, as far as we know (never below the truth).
    peer_credits: u32,
    calls: CallTable<Call<C, P>>,
    /// Calls counted against `max_calls`.
    counted_calls: u32,
    /// Highest call id opened on this connection.
    highest_call: u64,
    /// Calls whose first queued frame waits only for credits, in arrival order.
    ready: VecDeque<u64>,
    /// Calls with a WINDOW or CANCEL to send.
    control: VecDeque<u64>,
    ping: Option<u64>,
    pong: Option<u64>,
    goodbye_to_send: Option<u64>,
    goodbye_sent: Option<u64>,
    goodbye_received: Option<u64>,
    /// Client: open beyond the server's `max_calls` instead of refusing (AtCapacity).
    queue_calls: bool,
    /// Server: which methods take exactly one request message.
    one_request: Option<OneRequest>,
    /// The call the last frame opened, with its `timeout_us` (for
    /// [`Connection::handle_frame`]'s deadline).
    opened_now: Option<(u64, u32)>,
    /// Server: the longest a call may run, whatever its client asked
    /// ([`Connection::set_call_time_limit`]).
    call_time_limit: Option<Duration>,
    /// Client: calls waiting for the server's `max_calls`, oldest first (ids of calls that
    /// ended meanwhile are skipped). Bounded by what the application opened and has not given
    /// up: the peer cannot add to it.
    waiting: VecDeque<u64>,
    /// What the peer makes this side hold, counted against the budget (§15).
    memory: ConnectionMemory,
    /// Deadlines, keepalive, stalled reassembly.
    timers: Timers,
    /// The extensions in force (§22, [`extension`] bits): server, those it accepted from the
    /// client's offer; client, those the server's acceptance named.
    extensions: u32,
    /// Server: the keepalive interval last announced to the client as its pace (§22.5).
    announced_pace: Option<Duration>,
    /// Server: a call was open at the last timer tick or opened since; the grant is kept
    /// while so (§22.4: withholding waits for a tick without calls).
    busy_since_tick: bool,
    /// Server: this connection's grant of a pool's receive slots (§22.4), if they are pooled;
    /// otherwise the grant is `local.slot_count`, always.
    grant: Option<Grant>,
    /// Server: the acceptance of shared credits has left, so raises may follow it on the wire.
    raising: bool,
    /// Server: the call records reserved so far ([`RECORD_CHUNK`] at a time, as calls open),
    /// and how many calls they cover. Kept until the connection goes.
    records: Reservation,
    records_for: u32,
}

/// Bytes a side counts for each call it may have open (§15): the call's records in the core
/// and the runtime, before any metadata or message. A client's admission holds `max_calls`
/// of them; a server reserves them as calls open, [`RECORD_CHUNK`] at a time, so that an idle
/// connection holds none.
pub const CALL_RECORD: usize = 1024;

/// Call records a server reserves at a time: when a call opens beyond those reserved, the
/// next chunk is (§15.2), and kept while the connection lives.
pub const RECORD_CHUNK: u32 = 8;

/// Bytes a MESSAGE costs against a call's window.
fn window_cost(len: u32) -> i64 {
    i64::from(len) + i64::from(MESSAGE_OVERHEAD)
}

/// How long a served call may run: what its client asked for (`None`: no deadline), capped
/// by the server's own limit ([`Connection::set_call_time_limit`]; the gRPC face applies the
/// same rule to `grpc-timeout`).
pub fn capped_call_time(asked: Option<Duration>, limit: Option<Duration>) -> Option<Duration> {
    match (asked, limit) {
        (Some(asked), Some(limit)) => Some(asked.min(limit)),
        (asked, limit) => asked.or(limit),
    }
}

impl<C, P> Connection<C, P>
where
    P: std::ops::DerefMut<Target = [u8]>,
{
    /// State for a connection whose handshake exchanged `local` and `peer`; frames we send
    /// also stay within our own send buffers of `send_buffer_size` bytes.
    pub fn new(role: Role, local: Hello, peer: Hello, send_buffer_size: usize) -> Self {
        let max_frame = (peer.slot_size as usize).min(send_buffer_size);
        Connection {
            role,
            local,
            peer,
            max_segment: max_frame.saturating_sub(HEADER_LEN).max(1),
            send_credits: peer.slot_count,
            owed: 0,
            peer_credits: local.slot_count,
            calls: CallTable::new(),
            counted_calls: 0,
            highest_call: 0,
            ready: VecDeque::new(),
            control: VecDeque::new(),
            ping: None,
            pong: None,
            goodbye_to_send: None,
            goodbye_sent: None,
            goodbye_received: None,
            queue_calls: false,
            one_request: None,
            opened_now: None,
            call_time_limit: None,
            waiting: VecDeque::new(),
            memory: ConnectionMemory::unlimited(),
            timers: Timers::default(),
            extensions: 0,
            announced_pace: None,
            busy_since_tick: false,
            grant: None,
            raising: false,
            records: Reservation::default(),
            records_for: 0,
        }
    }

    /// Server: the receive slots are pooled (§22.4) and `grant` is this connection's share,
    /// its base being our `slot_count`. The server then accepts shared credits, raises the
    /// grant while the client runs short and gives raised slots back while no call is open.
    /// Set before the first frame.
    pub fn set_grant(&mut self, grant: Grant) {
        debug_assert_eq!(
            grant.base(),
            self.local.slot_count.max(crate::credit_pool::MIN_GRANT)
        );
        if self.role == Role::Server {
            self.grant = Some(grant);
        }
    }

    /// The credits granted to the peer for our slots (§22.4): with pooled slots, the
    /// connection's grant in force; otherwise our `slot_count`.
    pub fn grant(&self) -> u32 {
        self.grant
            .as_ref()
            .map_or(self.local.slot_count, Grant::total)
    }

    /// Whether the peer and this side agreed on shared credits (§22.4).
    pub fn shared_credits(&self) -> bool {
        self.extensions & extension::SHARED_CREDITS != 0
    }

    /// The extensions this side accepts in an offer (server) or from an acceptance (client).
    fn acceptable(&self) -> u32 {
        match (self.role, &self.grant) {
            (Role::Server, None) => extension::SUPPORTED & !extension::SHARED_CREDITS,
            _ => extension::SUPPORTED,
        }
    }

    /// Client: offers the server the extensions this core implements (§22.1), in a PING
    /// sent with the next frames out. Until the server accepts, none is used.
    pub fn offer_extensions(&mut self) {
        if self.role == Role::Client {
            self.ping = Some(extension::offer(extension::SUPPORTED));
        }
    }

    /// Whether the peer and this side agreed on whole requests (§22.2): a client may then
    /// open a one-message call with its metadata in the same frame ([`flags::METADATA`]).
    pub fn whole_requests(&self) -> bool {
        self.extensions & extension::WHOLE_REQUESTS != 0
    }

    /// Counts what the peer makes this side hold against `memory` from now on (a new
    /// connection's, before its first frame). Without it a connection's memory is unlimited.
    pub fn set_memory(&mut self, memory: ConnectionMemory) {
        self.memory = memory;
    }

    /// The connection's memory account.
    pub fn memory(&self) -> &ConnectionMemory {
        &self.memory
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's HELLO.
    pub fn peer(&self) -> &Hello {
        &self.peer
    }

    /// Our HELLO.
    pub fn local(&self) -> &Hello {
        &self.local
    }

    /// Most payload bytes one frame to the peer carries.
    pub fn max_segment(&self) -> usize {
        self.max_segment
    }

    /// Credits we hold for sending.
    pub fn send_credits(&self) -> u32 {
        self.send_credits
    }

    /// Calls counted against `max_calls` (open, or cancelled with the CANCEL not yet sent).
    pub fn open_calls(&self) -> u32 {
        self.counted_calls
    }

    /// Whether the call is open.
    pub fn is_open(&self, call: u64) -> bool {
        is_open_in(&self.calls, call)
    }

    /// The call's data, if the call is open.
    pub fn user(&self, call: u64) -> Option<&C> {
        self.calls
            .get(&call)
            .filter(|c| c.state == State::Open)
            .and_then(|c| c.user.as_ref())
    }

    /// Takes the call's data out (the call stays open, without data until set again).
    pub fn take_user(&mut self, call: u64) -> Option<C> {
        self.calls
            .get_mut(&call)
            .filter(|c| c.state == State::Open)
            .and_then(|c| c.user.take())
    }

    /// Sets the call's data (a server sets it after [`Event::Opened`] or an opening
    /// [`Event::Message`]). Returns false if the call is not open.
    pub fn set_user(&mut self, call: u64, user: C) -> bool {
        match self.calls.get_mut(&call) {
            Some(c) if c.state == State::Open => {
                c.user = Some(user);
                true
            }
            _ => false,
        }
    }

    /// Frames of this side queued for `call` and not fully sent (0 for a call that is gone):
    /// a stream's sender waits for 0 before it hands over its next message, which bounds
    /// what the core queues per call to one message and its END.
    pub fn queued(&self, call: u64) -> usize {
        self.calls.get(&call).map_or(0, Call::queued)
    }

    /// The GOODBYE the peer sent, if any: the highest call id it processes.
    pub fn goodbye_received(&self) -> Option<u64> {
        self.goodbye_received
    }

    // ----- receiving ---------------------------------------------------------------------

    /// Processes one received frame (header and payload, exactly as it arrived). An error is
    /// a protocol violation: the caller closes the connection.
    // Always inlined: the runtime calls it from one place, and the event it returns is then
    // built in place rather than moved out.
    #[inline(always)]
    pub fn on_frame<'f>(&mut self, frame: &'f [u8]) -> Result<Event<'f, C>, Error> {
        self.timers.frame_received();
        let h = Header::decode(frame)?;
        let needed = HEADER_LEN + h.segment_len as usize;
        if frame.len() != needed {
            return Err(violation(
                Violation::LengthMismatch,
                format!("{} bytes, the header says {needed}", frame.len()),
            ));
        }
        if frame.len() > self.local.slot_size as usize {
            return Err(violation(
                Violation::FrameTooLarge,
                format!("{} bytes, slots are {}", frame.len(), self.local.slot_size),
            ));
        }
        if h.kind == Kind::Hello {
            return Err(violation(
                Violation::HelloRepeated,
                "HELLO after the handshake",
            ));
        }
        if h.has(flags::METADATA) && !(self.role == Role::Server && self.whole_requests()) {
            return Err(violation(
                Violation::BadFlags,
                "METADATA on a MESSAGE without the whole-requests extension",
            ));
        }
        self.take_credit(&h)?;
        let payload = &frame[HEADER_LEN..];
        match h.kind {
            Kind::Hello => unreachable!("refused above"),
            Kind::Credit => Ok(Event::None),
            Kind::Ping => Ok(self.on_ping(&h)),
            Kind::Goodbye => self.on_goodbye(&h),
            Kind::Window => self.on_window(&h).map(|()| Event::None),
            Kind::Cancel => self.on_cancel(&h),
            Kind::Headers | Kind::Message | Kind::End => self.on_call_frame(&h, payload),
        }
    }

    /// Credit accounting of one received frame: the peer must have held a credit (two for
    /// anything but CREDIT) and may not return more than it can owe.
    fn take_credit(&mut self, h: &Header) -> Result<(), Error> {
        match self.peer_credits {
            0 => {
                return Err(violation(
                    Violation::CreditOverrun,
                    format!("{} frame with no credit granted", h.kind.name()),
                ))
            }
            1 if h.kind != Kind::Credit => {
                return Err(violation(
                    Violation::ReserveSpent,
                    format!("{} frame on the reserve credit", h.kind.name()),
                ))
            }
            _ => self.peer_credits -= 1,
        }
        let credits = self.send_credits + u32::from(h.credits);
        // A server that agreed on shared credits may raise its grant up to 65535 (§22.4).
        let most = match self.role {
            Role::Client if self.shared_credits() => u32::from(u16::MAX),
            _ => self.peer.slot_count,
        };
        if credits > most {
            return Err(violation(
                Violation::CreditExcess,
                format!(
                    "{} credits returned, {} held, the peer grants at most {most}",
                    h.credits, self.send_credits
                ),
            ));
        }
        self.send_credits = credits;
        if self.raising && self.peer_credits < 2 {
            self.raise_grant();
        }
        Ok(())
    }

    /// The client is down to its reserve as far as we know (§22.4): its grant goes up to the
    /// pool's `max_grant` at once, as far as the pool can spare, and the new credits are owed
    /// at once. (Doubling from the base instead costs a round trip per doubling: a client
    /// pipelining 64 KiB calls over TCP then made half the calls a second.)
    fn raise_grant(&mut self) {
        if let Some(grant) = self.grant.as_mut() {
            self.owed += grant.raise(u32::from(u16::MAX));
        }
    }

    /// Owed credits this server keeps now rather than return (§22.4): once the connection
    /// had no call (none open, none with frames still to send) from one timer tick to the
    /// next, released slots above the base go back to the pool, so an idle connection holds
    /// its base grant and no more. (Not at once: a client pipelining calls often has none
    /// open for a moment, and a grant lowered then is raised again a doubling per round trip.)
    fn withholding(&self) -> u32 {
        match &self.grant {
            Some(grant) if self.calls.is_empty() && !self.busy_since_tick => {
                self.owed.min(grant.raised())
            }
            _ => 0,
        }
    }

    fn withhold_idle(&mut self) {
        let kept = self.withholding();
        if kept > 0 {
            if let Some(grant) = self.grant.as_mut() {
                grant.lower(kept);
                self.owed -= kept;
            }
        }
    }

    /// Whether the owed credits call for a CREDIT frame (§7.4): those left after any
    /// withholding reach the threshold of the grant left.
    fn credit_due(&self) -> bool {
        // The threshold is never below 2: most steps owe less (credits ride on every frame
        // out) and need not look at the grant.
        if self.owed < 2 {
            return false;
        }
        let kept = self.withholding();
        self.owed - kept >= ((self.grant() - kept) / 2).max(2)
    }

    fn on_ping(&mut self, h: &Header) -> Event<'static, C> {
        if self.role == Role::Client && self.extensions & extension::KEEPALIVE_PACE != 0 {
            if let Some(millis) = extension::paced(h.call_id).filter(|_| !h.has(flags::ACK)) {
                let millis = millis.min(extension::MAX_PACE_MS);
                self.timers
                    .set_peer_pace(Duration::from_millis(u64::from(millis)));
            }
        }
        if h.has(flags::ACK) {
            if self.role == Role::Client {
                if let Some(accepted) = extension::accepted(h.call_id) {
                    // Agreement only grows (§22.1): a later answer withdraws nothing.
                    self.extensions |= accepted & self.acceptable();
                }
            }
            return Event::Pong { data: h.call_id };
        }
        // Answer the latest PING only: a flood of PINGs queues one answer. A client's offer
        // of extensions is answered with what this server accepts of it (§22.1).
        let offered = match self.role {
            Role::Server => extension::offered(h.call_id),
            Role::Client => None,
        };
        self.pong = Some(match offered {
            Some(bits) => {
                // Agreement only grows: frames the client sends under an earlier acceptance
                // may be on their way.
                self.extensions |= bits & self.acceptable();
                // The pace follows the acceptance on the wire (a PONG leaves before a PING).
                self.announce_pace();
                extension::acceptance(self.extensions)
            }
            None => h.call_id,
        });
        Event::None
    }

    /// Server: tells the client the pace of its keepalive PINGs (§22.5), the keepalive
    /// interval in force, once bit 2 is agreed and whenever that interval moved by half since
    /// the last announcement (an endpoint's pace follows its number of connections).
    fn announce_pace(&mut self) {
        if self.role != Role::Server || self.extensions & extension::KEEPALIVE_PACE == 0 {
            return;
        }
        let Some(keepalive) = self.timers.own_keepalive() else {
            return;
        };
        let interval = keepalive.interval;
        let moved = self
            .announced_pace
            .is_none_or(|last| interval >= last * 3 / 2 || interval * 3 / 2 <= last);
        if moved {
            let millis = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
            self.ping = Some(extension::pace(millis));
            self.announced_pace = Some(interval);
        }
    }

    fn on_goodbye(&mut self, h: &Header) -> Result<Event<'static, C>, Error> {
        if let Some(previous) = self.goodbye_received {
            if h.call_id > previous {
                return Err(violation(
                    Violation::GoodbyeRaised,
                    format!("GOODBYE {} after GOODBYE {previous}", h.call_id),
                ));
            }
        }
        self.goodbye_received = Some(h.call_id);
        let mut unprocessed = Vec::new();
        if self.role == Role::Client {
            let above: Vec<u64> = self
                .calls
                .iter()
                .filter(|(&id, c)| id > h.call_id && c.state == State::Open)
                .map(|(&id, _)| id)
                .collect();
            for id in above {
                if let Some(user) = self.close_call(id) {
                    unprocessed.push((id, user));
                }
            }
            unprocessed.sort_by_key(|(id, _)| *id);
        }
        Ok(Event::Goodbye {
            last_call: h.call_id,
            unprocessed,
        })
    }

    /// Looks up the open call a non-opening frame is for: `Ok(None)` when it is not open any
    /// more (frames in flight after an END or CANCEL are discarded).
    fn open_call_for(&mut self, h: &Header) -> Result<Option<&mut Call<C, P>>, Error> {
        open_call_in(&mut self.calls, self.highest_call, h)
    }

    fn on_window(&mut self, h: &Header) -> Result<(), Error> {
        self.open_call_for(h)?;
        // A call this side ended may still have frames queued that wait for this window.
        let Some(call) = self.calls.get_mut(&h.call_id) else {
            return Ok(());
        };
        let window = call.send_window + i64::from(h.code);
        if window > i64::from(MAX_WINDOW) {
            return Err(violation(
                Violation::WindowExcess,
                format!("window of call {} would be {window}", h.call_id),
            ));
        }
        call.send_window = window;
        if !call.in_ready && call.front_ready() {
            call.in_ready = true;
            self.ready.push_back(h.call_id);
        }
        Ok(())
    }

    fn on_cancel(&mut self, h: &Header) -> Result<Event<'static, C>, Error> {
        if self.open_call_for(h)?.is_none() {
            // Ended on our side with frames still queued (waiting for window the peer will
            // never give now): drop them.
            if let Some(call) = self.calls.get_mut(&h.call_id) {
                call.drop_queued();
                if call.cancel.is_none() {
                    self.calls.remove(&h.call_id);
                }
            }
            return Ok(Event::None);
        }
        let user = self.close_call(h.call_id);
        Ok(match user {
            Some(user) => Event::Cancelled {
                call: h.call_id,
                reason: Code::from_u32(h.code),
                user,
            },
            None => Event::None,
        })
    }

    fn on_call_frame<'f>(&mut self, h: &Header, payload: &'f [u8]) -> Result<Event<'f, C>, Error> {
        if h.has(flags::OPEN) && h.is_first_segment() {
            self.open_incoming(h)?;
        }
        let role = self.role;
        let local = self.local;
        let Some(call) = open_call_in(&mut self.calls, self.highest_call, h)? else {
            return Ok(Event::None);
        };
        // Segments: one frame of a call at a time, in order, repeating the first's fields.
        let whole: (Cow<'f, [u8]>, Option<Box<Reservation>>) = if h.is_first_segment() {
            if call.partial().is_some() {
                return Err(violation(
                    Violation::SegmentRestart,
                    format!("new {} of call {} mid-frame", h.kind.name(), h.call_id),
                ));
            }
            check_call_order(role, call, h)?;
            let metadata_len = match h.has(flags::METADATA) {
                true => Some(metadata_len(h, payload)?),
                false => None,
            };
            if let Some(refusal) = over_limit(role, &local, h, metadata_len) {
                return Ok(self.refuse(h.call_id, refusal));
            }
            if h.kind == Kind::Message {
                if call.recv_window <= 0 {
                    return Err(violation(
                        Violation::WindowOverrun,
                        format!("MESSAGE on call {} with its window spent", h.call_id),
                    ));
                }
                call.recv_window -= window_cost(h.message_len);
            }
            if h.is_last_segment() {
                (Cow::Borrowed(payload), None)
            } else {
                // The declared length is reserved now (§15); the buffer grows with what
                // arrives, never past that length.
                let cost = match h.kind {
                    Kind::Message => window_cost(h.message_len) as usize,
                    _ => h.message_len as usize,
                };
                let Some(held) = self.memory.reserve(cost) else {
                    let status = WireStatus::new(
                        Code::ResourceExhausted,
                        format!(
                            "{} of {} bytes does not fit in the memory left for this connection",
                            h.kind.name(),
                            h.message_len
                        ),
                    );
                    return Ok(self.refuse(h.call_id, status));
                };
                call.rare().partial = Some(Box::new(Partial {
                    first: *h,
                    received: h.segment_len,
                    buf: payload.to_vec(),
                    held,
                    seen: None,
                }));
                return Ok(Event::None);
            }
        } else {
            let Some(p) = call.partial_mut() else {
                return Err(violation(
                    Violation::SegmentOrphan,
                    format!("continuation of call {} with no frame started", h.call_id),
                ));
            };
            if !h.same_frame_as(&p.first) {
                return Err(violation(
                    Violation::SegmentMismatch,
                    format!("segment of call {} changes its header", h.call_id),
                ));
            }
            if h.segment_offset != p.received {
                return Err(violation(
                    Violation::SegmentGap,
                    format!(
                        "segment of call {} at {} where {} was expected",
                        h.call_id, h.segment_offset, p.received
                    ),
                ));
            }
            // Doubling, but never past the declared length: what the buffer holds stays
            // within what was reserved.
            let needed = p.buf.len() + payload.len();
            if needed > p.buf.capacity() {
                let target = (p.buf.capacity() * 2).clamp(needed, h.message_len as usize);
                p.buf.reserve_exact(target - p.buf.len());
            }
            p.buf.extend_from_slice(payload);
            p.received += h.segment_len;
            if !h.is_last_segment() {
                return Ok(Event::None);
            }
            let done = *call.rare().partial.take().expect("checked above");
            (Cow::Owned(done.buf), Some(Box::new(done.held)))
        };
        self.complete_frame(h, whole)
    }

    /// Registers a call the peer opens (server) or refuses the attempt.
    fn open_incoming(&mut self, h: &Header) -> Result<(), Error> {
        if self.role == Role::Client {
            return Err(violation(
                Violation::WrongRole,
                format!("the server opened call {}", h.call_id),
            ));
        }
        if h.call_id <= self.highest_call {
            return Err(violation(
                Violation::CallIdOrder,
                format!("call {} opened after call {}", h.call_id, self.highest_call),
            ));
        }
        if self.counted_calls >= self.local.max_calls {
            return Err(violation(
                Violation::TooManyCalls,
                format!(
                    "call {} beyond max_calls {}",
                    h.call_id, self.local.max_calls
                ),
            ));
        }
        self.highest_call = h.call_id;
        let recorded = self.reserve_record();
        self.counted_calls += 1;
        let mut call = Call::new(None, self.peer.call_window, self.local.call_window);
        // A call that opens with its one message and END receives nothing more: the rule has
        // nothing to hold or refuse, and the method need not be looked up for it.
        let complete = h.kind == Kind::Message && h.has(flags::END);
        call.one_request = !complete && self.one_request.as_ref().is_some_and(|f| (f.0)(h.code));
        self.calls.insert(h.call_id, call);
        self.busy_since_tick = true;
        if !recorded {
            let status = WireStatus::new(
                Code::ResourceExhausted,
                "no memory left for this connection's call records",
            );
            let _ = self.end_call(h.call_id, &status, &[]);
            return Ok(());
        }
        if let Some(last) = self.goodbye_sent {
            if h.call_id > last {
                // Not processed: the client may retry it elsewhere.
                let status =
                    WireStatus::new(Code::Unavailable, "the server is going away (GOODBYE sent)");
                let _ = self.end_call(h.call_id, &status, &[]);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Server: makes sure the records cover one more open call, reserving the next
    /// [`RECORD_CHUNK`] from the connection's memory if needed; `false` when that does not fit.
    fn reserve_record(&mut self) -> bool {
        if self.counted_calls < self.records_for {
            return true;
        }
        match self.memory.reserve(RECORD_CHUNK as usize * CALL_RECORD) {
            Some(chunk) => {
                self.records.absorb(chunk);
                self.records_for += RECORD_CHUNK;
                true
            }
            None => false,
        }
    }

    /// A whole HEADERS, MESSAGE or END frame of an open call has arrived.
    fn complete_frame<'f>(
        &mut self,
        h: &Header,
        (whole, mut held): (Cow<'f, [u8]>, Option<Box<Reservation>>),
    ) -> Result<Event<'f, C>, Error> {
        let call_id = h.call_id;
        if matches!(h.kind, Kind::Headers | Kind::End) {
            metadata::validate(&whole)?;
        }
        let call = self.calls.get_mut(&call_id).expect("open call");
        if h.kind == Kind::Headers {
            // Metadata stays with the call (its copy lives as long): charged to it.
            let kept = match held.take() {
                Some(held) => {
                    call.held.absorb(*held);
                    true
                }
                None => match self.memory.reserve(whole.len()) {
                    Some(more) => {
                        call.held.absorb(more);
                        true
                    }
                    None => false,
                },
            };
            if !kept {
                let status = WireStatus::new(
                    Code::ResourceExhausted,
                    format!(
                        "metadata of {} bytes does not fit in the memory left for this connection",
                        whole.len()
                    ),
                );
                return Ok(self.refuse(call_id, status));
            }
        }
        let opening = h.has(flags::OPEN);
        if opening && self.role == Role::Server {
            // The opening frame is complete: the call's deadline runs from now.
            self.opened_now = Some((call_id, h.timeout_us));
        }
        match (h.kind, self.role) {
            (Kind::Headers, Role::Server) => Ok(Event::Opened {
                call: call_id,
                method: h.code,
                timeout_us: h.timeout_us,
                headers: whole,
            }),
            (Kind::Headers, Role::Client) if call.one_response => {
                call.headers_received = true;
                call.rare()
                    .response
                    .get_or_insert_with(Box::default)
                    .headers = whole.into_owned();
                Ok(Event::None)
            }
            (Kind::Message, Role::Client) if call.one_response => {
                let end = h.has(flags::END);
                let second = call.response().is_some_and(|r| r.body.is_some());
                if second {
                    let user = self.cancel(call_id, Code::Internal);
                    return Ok(match user {
                        Some(user) => Event::Refused {
                            call: call_id,
                            status: WireStatus::new(
                                Code::Internal,
                                "a unary call got more than one response",
                            ),
                            user,
                        },
                        None => Event::None,
                    });
                }
                call.message_received = true;
                if end && call.response().is_none() {
                    // The usual reply: one MESSAGE with END, read in place.
                    let ended = self.close_call(call_id);
                    return Ok(Event::Message {
                        call: call_id,
                        opened: None,
                        whole: false,
                        body: whole,
                        end,
                        ended,
                        held,
                    });
                }
                let (body, held) = match self.keep_message(call_id, whole, held) {
                    Ok(kept) => kept,
                    Err(refused) => return Ok(refused),
                };
                let call = self.calls.get_mut(&call_id).expect("open call");
                let reply = call.rare().response.get_or_insert_with(Box::default);
                reply.body = Some(body);
                reply.held = Some(held);
                if !end {
                    return Ok(Event::None);
                }
                // Headers, then the message with END: the call ended OK, without trailers.
                let reply = call.take_response();
                Ok(match self.close_call(call_id) {
                    Some(user) => Event::Ended {
                        call: call_id,
                        code: Code::Ok,
                        trailers: Cow::Borrowed(&[]),
                        user,
                        reply,
                    },
                    None => Event::None,
                })
            }
            (Kind::Headers, Role::Client) => {
                call.headers_received = true;
                Ok(Event::Headers {
                    call: call_id,
                    headers: whole,
                })
            }
            (Kind::Message, Role::Server) if call.one_request => {
                let end = h.has(flags::END);
                if std::mem::replace(&mut call.message_received, true) {
                    let status = WireStatus::new(
                        Code::Internal,
                        "a unary call got more than one request message",
                    );
                    return Ok(self.refuse(call_id, status));
                }
                if end {
                    call.recv_open = false;
                    return Ok(Event::Message {
                        call: call_id,
                        opened: opening.then_some((h.code, h.timeout_us)),
                        whole: false,
                        body: whole,
                        end,
                        ended: None,
                        held,
                    });
                }
                // Held until the half-close: the application gets the request whole, once.
                let (body, held) = match self.keep_message(call_id, whole, held) {
                    Ok(kept) => kept,
                    Err(refused) => return Ok(refused),
                };
                let call = self.calls.get_mut(&call_id).expect("open call");
                call.rare().request = Some(Box::new(HeldRequest {
                    body,
                    held,
                    announce: opening.then_some((h.code, h.timeout_us)),
                }));
                Ok(Event::None)
            }
            (Kind::Message, role) => {
                call.message_received = true;
                let end = h.has(flags::END);
                let whole_request = h.has(flags::METADATA);
                if whole_request {
                    let (block, _) = whole_request_parts(&whole);
                    metadata::validate(block)?;
                }
                let mut ended = None;
                if end {
                    call.recv_open = false;
                    if role == Role::Client {
                        ended = self.close_call(call_id);
                    }
                }
                Ok(Event::Message {
                    call: call_id,
                    opened: opening.then_some((h.code, h.timeout_us)),
                    whole: whole_request,
                    body: whole,
                    end,
                    ended,
                    held,
                })
            }
            (Kind::End, Role::Server) => {
                call.recv_open = false;
                if !call.one_request {
                    return Ok(Event::HalfClosed { call: call_id });
                }
                match call
                    .rare
                    .as_mut()
                    .and_then(|r| r.request.take())
                    .map(|r| *r)
                {
                    Some(HeldRequest {
                        body,
                        held,
                        announce,
                    }) => Ok(Event::Message {
                        call: call_id,
                        opened: announce,
                        whole: false,
                        body: Cow::Owned(body),
                        end: true,
                        ended: None,
                        held: Some(held),
                    }),
                    None => {
                        let status = WireStatus::new(
                            Code::Internal,
                            "a unary call ended without a request message",
                        );
                        Ok(self.refuse(call_id, status))
                    }
                }
            }
            (Kind::End, Role::Client) => {
                let reply = call.take_response();
                let user = self.close_call(call_id);
                Ok(match user {
                    Some(user) => Event::Ended {
                        call: call_id,
                        code: Code::from_u32(h.code),
                        trailers: whole,
                        user,
                        reply,
                    },
                    None => Event::None,
                })
            }
            _ => unreachable!("only call frames get here"),
        }
    }

    /// Keeps a whole message the core holds for the application (a split unary request or
    /// reply): its bytes, counted against the connection's memory (§15) under the
    /// reassembly's reservation or a new one; `Err` with the call refused (RESOURCE_EXHAUSTED)
    /// when they do not fit.
    fn keep_message<'f>(
        &mut self,
        call_id: u64,
        whole: Cow<'f, [u8]>,
        held: Option<Box<Reservation>>,
    ) -> Result<(Vec<u8>, Box<Reservation>), Event<'f, C>> {
        let held = match held {
            Some(held) => held,
            None => match self
                .memory
                .reserve(Self::message_cost(whole.len()) as usize)
            {
                Some(reserved) => Box::new(reserved),
                None => {
                    let status = WireStatus::new(
                        Code::ResourceExhausted,
                        format!(
                            "a message of {} bytes does not fit in the memory left for this \
                             connection",
                            whole.len()
                        ),
                    );
                    return Err(self.refuse(call_id, status));
                }
            },
        };
        Ok((whole.into_owned(), held))
    }

    /// Gives up a call the peer overloaded: a server answers END with `status`, a client
    /// cancels.
    fn refuse<'f>(&mut self, call: u64, status: WireStatus) -> Event<'f, C> {
        let user = match self.role {
            Role::Server => {
                let user = self.calls.get_mut(&call).and_then(|c| c.user.take());
                let _ = self.end_call(call, &status, &[]);
                user
            }
            Role::Client => self.cancel(call, status.code()),
        };
        match user {
            Some(user) => Event::Refused { call, status, user },
            // A server call whose runtime data was not set yet: nothing to tell.
            None => Event::None,
        }
    }

    /// Gives up a call whose data this side cannot hold (a message it would have to copy out
    /// beyond its memory, §15), as for a message above its limits: a server queues END with
    /// `status`, a client a CANCEL with its code. Returns the call's data, if it was open.
    pub fn refuse_call(&mut self, call: u64, status: WireStatus) -> Option<C> {
        match self.refuse(call, status) {
            Event::Refused { user, .. } => Some(user),
            _ => None,
        }
    }

    /// Marks a call closed on this side; returns its data. Counting: a server stops counting
    /// it now; a client when the server ended it (now) or when its CANCEL is emitted.
    #[inline]
    fn close_call(&mut self, id: u64) -> Option<C> {
        let call = self.calls.get_mut(&id)?;
        if call.state != State::Open {
            return None;
        }
        let waiting = call.waiting;
        let user = if call.cancel.is_none() {
            if !waiting {
                self.counted_calls -= 1;
            }
            // Frames queued for it, a frame in reassembly and its metadata go with it.
            self.calls.remove(&id).and_then(|call| call.user)
        } else {
            // Kept until its CANCEL leaves; frames queued for it are pointless now (a
            // started frame's remaining segments included: the receiver drops a partial
            // frame when the call ends).
            call.state = State::Closing;
            call.drop_queued();
            call.held = Reservation::default();
            call.user.take()
        };
        if waiting {
            self.waiting.retain(|&w| w != id);
        } else if !self.waiting.is_empty() {
            self.start_waiting();
        }
        user
    }

    // ----- time ---------------------------------------------------------------------------

    /// Watches the peer with `keepalive` (`None`: never PING, never give up on silence).
    /// May change at any time (see [`Keepalive::paced`]): the silence measured so far
    /// counts against the new values.
    pub fn set_keepalive(&mut self, keepalive: Option<Keepalive>) {
        self.timers.set_keepalive(keepalive);
        self.announce_pace();
    }

    /// The keepalive in force (a client's at its server's pace, §22.5, if that is slower).
    pub fn keepalive(&self) -> Option<Keepalive> {
        self.timers.keepalive()
    }

    /// Server: every call ends by `limit` after its opening frame arrived, or by its own
    /// deadline if that is sooner (`None`: only by its own; tonic's server `timeout`). A call
    /// past it ends as one past its deadline does.
    pub fn set_call_time_limit(&mut self, limit: Option<Duration>) {
        self.call_time_limit = limit;
    }

    /// Drops a frame that made no progress in reassembly for `timeout` (`None`: never).
    pub fn set_stall_timeout(&mut self, timeout: Option<Duration>) {
        self.timers.set_stall_timeout(timeout);
    }

    /// [`Connection::on_frame`], and a server watches the deadline of a call the frame opened
    /// with a timeout (from the receipt of its opening frame, even when the application hears
    /// of the call only later): `now` (called only then) tells the frame's receipt.
    #[inline(always)]
    pub fn handle_frame<'f>(
        &mut self,
        frame: &'f [u8],
        now: impl FnOnce() -> Instant,
    ) -> Result<Event<'f, C>, Error> {
        self.opened_now = None;
        // The result is returned as it is, not taken apart by `?` and built again: the event
        // is not moved.
        let result = self.on_frame(frame);
        if let (Ok(_), Some((call, timeout_us))) = (&result, self.opened_now.take()) {
            let asked = (timeout_us != 0).then(|| Duration::from_micros(u64::from(timeout_us)));
            if let Some(limit) = capped_call_time(asked, self.call_time_limit) {
                self.set_deadline(call, now() + limit);
            }
        }
        result
    }

    /// The call's deadline, if it is open and has one.
    pub fn deadline(&self, call: u64) -> Option<Instant> {
        self.calls
            .get(&call)
            .filter(|c| c.state == State::Open)
            .and_then(|c| c.deadline)
    }

    /// Sets an open call's deadline: at the first [`Connection::handle_timeout`] at or after
    /// it, the call ends with DEADLINE_EXCEEDED ([`Expiry::Deadline`]).
    pub fn set_deadline(&mut self, call: u64, deadline: Instant) {
        match self.calls.get_mut(&call) {
            Some(c) if c.state == State::Open => c.deadline = Some(deadline),
            _ => return,
        }
        // The server's own limit counts the calls a server watches; a client's, the server's.
        let max_calls = match self.role {
            Role::Server => self.local.max_calls,
            Role::Client => self.peer.max_calls,
        };
        let calls = &self.calls;
        self.timers
            .watch(call, deadline, max_calls, |id| is_open_in(calls, id));
    }

    /// Whether some call's deadline is watched (entries of calls that ended may still count
    /// until the next [`Connection::handle_timeout`]).
    pub fn has_deadlines(&self) -> bool {
        self.earliest_deadline().is_some()
    }

    /// The earliest deadline watched, if any: [`Connection::handle_timeout`] has no deadline
    /// to end before it (it may be that of a call that ended since).
    pub fn earliest_deadline(&self) -> Option<Instant> {
        self.timers.earliest_deadline()
    }

    /// When [`Connection::handle_timeout`] has something to do next: the earliest deadline,
    /// the next keepalive step, the next look at a frame in reassembly; `None` when nothing
    /// is timed. Keepalive counts only from the first `handle_timeout`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let reassembling = self.timers.stall_timeout().is_some()
            && self.calls.values().any(|c| c.partial().is_some());
        self.timers.next_due(reassembling)
    }

    /// Does what is due by `now`: ends the calls whose deadline passed, drops stalled
    /// reassembly, sends a keepalive PING or gives up on a silent peer. Frames it queues
    /// (END, CANCEL, PING) come out of [`Connection::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Expiry<C>> {
        let mut expired = Vec::new();
        // No call from the last tick to this one: the grant above the base may go back.
        self.busy_since_tick = !self.calls.is_empty();
        self.withhold_idle();
        while let Some(call) = self.timers.next_expired(now) {
            if let Some(expiry) = self.expire(call) {
                expired.push(expiry);
            }
        }
        // Calls that ended are watched no more: a connection whose calls all ended has no
        // deadline left (its endpoint need not tick for it until the latest would have passed).
        let calls = &self.calls;
        self.timers.drop_ended(|id| is_open_in(calls, id));
        if let Some(timeout) = self.timers.stall_timeout() {
            expired.extend(self.expire_stalled(now, timeout));
        }
        match self.timers.keepalive_step(now) {
            KeepaliveStep::Quiet => {}
            KeepaliveStep::Ping(data) => self.ping(data),
            KeepaliveStep::GiveUp(silent) => expired.push(Expiry::PeerSilent { silent }),
        }
        self.timers.ticked(now);
        expired
    }

    /// Server: ends `call` as its deadline does ([`Expiry::Deadline`]) if that passed by
    /// `now()`, which is read only when the call has a deadline. A handler's reply or status
    /// that comes after the deadline, before a [`Connection::handle_timeout`] looked, must
    /// not reach the client as an answer in time (PROTOCOL.md §12.2): how late the timer
    /// runs does not decide the outcome.
    pub fn expire_if_past(
        &mut self,
        call: u64,
        now: impl FnOnce() -> Instant,
    ) -> Option<Expiry<C>> {
        if self.role != Role::Server || !self.has_deadlines() {
            return None;
        }
        let deadline = self.deadline(call)?;
        if now() < deadline {
            return None;
        }
        self.expire(call)
    }

    /// Ends `call` at its deadline: a client cancels it, a server ends it.
    fn expire(&mut self, call: u64) -> Option<Expiry<C>> {
        if !self.is_open(call) {
            return None;
        }
        let user = match self.role {
            Role::Client => Some(self.cancel(call, Code::DeadlineExceeded)?),
            Role::Server => {
                let user = self.calls.get_mut(&call).and_then(|c| c.user.take());
                let status =
                    WireStatus::new(Code::DeadlineExceeded, "the deadline passed at the server");
                // A status block goes out of `poll_transmit`, never straight back.
                let _ = self.end_call(call, &status, &[]);
                user
            }
        };
        Some(Expiry::Deadline { call, user })
    }

    /// Drops every logical frame in reassembly that made no progress for `timeout` (§15): its
    /// bytes are released and its call refused with RESOURCE_EXHAUSTED (a server's END, a
    /// client's CANCEL). A frame is seen stalled from the first call that finds it
    /// unchanged, so with calls every `tick` it goes after between `timeout` and
    /// `timeout + tick` without progress.
    fn expire_stalled(&mut self, now: Instant, timeout: Duration) -> Vec<Expiry<C>> {
        let mut stalled = Vec::new();
        for (&id, call) in self.calls.iter_mut() {
            let Some(p) = call.partial_mut() else {
                continue;
            };
            match p.seen {
                Some((received, since)) if received == p.received => {
                    if now.saturating_duration_since(since) >= timeout {
                        stalled.push((id, p.first.kind, p.received, p.first.message_len));
                    }
                }
                _ => p.seen = Some((p.received, now)),
            }
        }
        stalled.sort_unstable_by_key(|s| s.0);
        stalled
            .into_iter()
            .filter_map(|(id, kind, received, len)| {
                let status = WireStatus::new(
                    Code::ResourceExhausted,
                    format!(
                        "{} stalled in reassembly at {received} of {len} bytes for {timeout:?}; \
                         dropped",
                        kind.name()
                    ),
                );
                match self.refuse(id, status) {
                    Event::Refused { call, status, user } => {
                        Some(Expiry::Stalled { call, status, user })
                    }
                    _ => None,
                }
            })
            .collect()
    }

    // ----- slots and windows -------------------------------------------------------------

    /// Credits owed to the peer and not yet sent.
    pub fn owed(&self) -> u32 {
        self.owed
    }

    /// Reports `slots` receive slots released (re-posted, their frames consumed): credits
    /// owed to the peer.
    pub fn released(&mut self, slots: u32) {
        self.owed += slots;
        self.withhold_idle();
    }

    /// Reports that the application consumed `bytes` of a call's received messages (their
    /// window cost, see [`Connection::message_cost`]), so the window can be returned.
    pub fn consumed(&mut self, call: u64, bytes: u32) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        if c.state != State::Open || !c.recv_open {
            return;
        }
        c.recv_window += i64::from(bytes);
        c.window_owed = c.window_owed.saturating_add(bytes);
        // Return the window in halves of the initial one: few WINDOW frames, no stall.
        if c.window_owed >= (self.local.call_window / 2).max(1) && !c.window_queued {
            c.window_queued = true;
            self.control.push_back(call);
        }
    }

    /// The window cost of a message of `len` bytes.
    pub fn message_cost(len: usize) -> u32 {
        (len as u32).saturating_add(MESSAGE_OVERHEAD)
    }

    // ----- sending -----------------------------------------------------------------------

    /// Server: `takes_one(method)` says whether a method takes exactly one request message
    /// (unary and server-streaming methods; PROTOCOL.md §16.1). For such a call the core
    /// holds a message that comes without END until the half-close and reports it then, with
    /// END, as one [`Event::Message`] (opening the call if it did); a second message, or a
    /// half-close without one, ends the call with INTERNAL ([`Event::Refused`] if its data
    /// was set). Without it (the default) every message is reported as it comes. A call that
    /// opens with a MESSAGE carrying END is not asked about: nothing follows it.
    pub fn set_one_request(&mut self, takes_one: impl Fn(u32) -> bool + Send + Sync + 'static) {
        self.one_request = Some(OneRequest(Box::new(takes_one)));
    }

    /// Client: whether [`Connection::open_call`] beyond the server's `max_calls` opens a call
    /// that waits (`true`) or refuses with [`SendError::AtCapacity`] (`false`, the default).
    /// A waiting call has its id; its frames are queued ([`Connection::send`]) and leave, in
    /// the order the calls were opened, as calls end (as gRPC queues streams beyond
    /// MAX_CONCURRENT_STREAMS). Cancelled, past its deadline or given back by a GOODBYE
    /// before it started, it ends here without a frame.
    pub fn queue_beyond_max_calls(&mut self, queue: bool) {
        self.queue_calls = queue;
    }

    /// Calls waiting for the server's `max_calls` (see
    /// [`Connection::queue_beyond_max_calls`]).
    pub fn waiting_calls(&self) -> usize {
        self.waiting.len()
    }

    /// Starts waiting calls, oldest first, while the server's `max_calls` allows.
    fn start_waiting(&mut self) {
        while self.counted_calls < self.peer.max_calls {
            let Some(id) = self.waiting.pop_front() else {
                return;
            };
            let Some(call) = self.calls.get_mut(&id).filter(|c| c.waiting) else {
                continue;
            };
            call.waiting = false;
            self.counted_calls += 1;
            if !call.in_ready && call.front_ready() {
                call.in_ready = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Opens a call (client): registers `user` and returns the call id. The call's first
    /// frame, sent with [`Connection::send`], carries OPEN, `method` and `timeout_us`.
    pub fn open_call(&mut self, user: C) -> Result<u64, SendError> {
        self.open_call_as(user, false)
    }

    /// [`Connection::open_call`] for a unary call: the core holds its response headers and a
    /// message without END until the call's END, and reports them with it
    /// ([`Event::Ended`]'s `reply`); a reply that is one MESSAGE with END is reported as it
    /// comes, in place. A second message cancels the call INTERNAL ([`Event::Refused`]).
    pub fn open_unary_call(&mut self, user: C) -> Result<u64, SendError> {
        self.open_call_as(user, true)
    }

    fn open_call_as(&mut self, user: C, one_response: bool) -> Result<u64, SendError> {
        if self.role != Role::Client {
            return Err(SendError::Invalid("only clients open calls"));
        }
        if self.goodbye_received.is_some() {
            return Err(SendError::GoingAway);
        }
        let at_capacity = self.counted_calls >= self.peer.max_calls || !self.waiting.is_empty();
        if at_capacity && !self.queue_calls {
            return Err(SendError::AtCapacity);
        }
        self.highest_call += 1;
        let id = self.highest_call;
        let mut call = Call::new(Some(user), self.peer.call_window, self.local.call_window);
        call.one_response = one_response;
        if at_capacity {
            // Behind the calls already waiting: ids reach the server in order.
            call.waiting = true;
            self.waiting.push_back(id);
        } else {
            self.counted_calls += 1;
        }
        self.calls.insert(id, call);
        Ok(id)
    }

    /// Sends a frame on an open call: returns the buffer with its header written and the
    /// frame's length when it may be posted now, or `None` when the core queued it (it comes
    /// out of [`Connection::poll_transmit`]). A call's first frame (client) must be HEADERS
    /// or MESSAGE and gets OPEN, `method` and `timeout_us` (ignored afterwards).
    pub fn send(
        &mut self,
        call_id: u64,
        frame: Outgoing<P>,
        method: u32,
        timeout_us: u32,
    ) -> Result<Option<(P, usize)>, SendError> {
        let role = self.role;
        let (peer_max_message, peer_max_metadata) =
            (self.peer.max_message_size, self.peer.max_metadata_size);
        let max_segment = self.max_segment;
        let Some(call) = self
            .calls
            .get_mut(&call_id)
            .filter(|c| c.state == State::Open)
        else {
            return Err(SendError::NotOpen);
        };
        if !call.send_open {
            return Err(SendError::Ended);
        }
        let len = frame.payload.len();
        let limit = match frame.kind {
            Kind::Message => peer_max_message,
            _ => peer_max_metadata,
        };
        if frame.flags & flags::METADATA != 0 {
            let whole = self.extensions & extension::WHOLE_REQUESTS != 0;
            check_whole_request(&frame, whole, call.frames_sent, &self.peer)?;
        } else if len > limit as usize {
            return Err(SendError::TooLarge(format!(
                "{} of {len} bytes exceeds the peer's limit of {limit} bytes",
                frame.kind.name()
            )));
        }
        if let Payload::InBuffer(_, n) = frame.payload {
            if n > max_segment {
                return Err(SendError::Invalid(
                    "an in-buffer payload must fit one frame",
                ));
            }
        }
        let mut fl = frame.flags & !flags::OPEN;
        let (mut code, mut timeout) = (frame.code, 0);
        match (role, frame.kind) {
            (Role::Client, Kind::Headers) if call.frames_sent > 0 => {
                return Err(SendError::Invalid("a client sends HEADERS only to open"))
            }
            (Role::Client, Kind::End) if call.frames_sent == 0 => {
                return Err(SendError::Invalid("a call opens with HEADERS or MESSAGE"))
            }
            (Role::Client, Kind::End) if code != 0 || len != 0 => {
                return Err(SendError::Invalid("a client's END is empty"))
            }
            (Role::Client, _) if call.frames_sent == 0 => {
                fl |= flags::OPEN;
                code = method;
                timeout = timeout_us;
            }
            (Role::Client, Kind::Message) => code = 0,
            (Role::Server, Kind::Headers) if call.message_sent || call.frames_sent > 0 => {
                return Err(SendError::Invalid("response headers come first, once"))
            }
            (Role::Server, Kind::Message) | (Role::Server, Kind::Headers) => code = 0,
            _ => {}
        }
        let ends = frame.kind == Kind::End || fl & flags::END != 0;
        if ends && !(frame.kind == Kind::Message || frame.kind == Kind::End) {
            return Err(SendError::Invalid("END only on MESSAGE"));
        }
        // The fast path: nothing of this call or of others is waiting, window and credits
        // allow, and the payload is already in its buffer: the frame goes now, unqueued.
        let direct = call.queued() == 0
            && !call.waiting
            && (frame.kind != Kind::Message || call.send_window > 0)
            && self.ready.is_empty()
            && self.send_credits >= 2
            && matches!(frame.payload, Payload::InBuffer(..));
        // A queued message is held here until it leaves: counted (§15).
        let mut held = None;
        if !direct && frame.kind == Kind::Message {
            match self.memory.reserve(window_cost(len as u32) as usize) {
                Some(r) => held = Some(r),
                None => {
                    return Err(SendError::OutOfMemory(format!(
                        "a message of {len} bytes waiting to be sent does not fit in the \
                         memory left for this connection"
                    )))
                }
            }
        }
        call.frames_sent += 1;
        call.message_sent |= frame.kind == Kind::Message;
        if ends {
            call.send_open = false;
        }
        let header = Header {
            kind: frame.kind,
            flags: fl,
            credits: 0,
            call_id,
            code,
            timeout_us: timeout,
            message_len: len as u32,
            segment_offset: 0,
            segment_len: len as u32,
        };
        let server_done = role == Role::Server && ends;
        if direct {
            if frame.kind == Kind::Message {
                call.send_window -= window_cost(header.message_len);
            }
            call.on_wire = true;
            let Payload::InBuffer(mut buf, len) = frame.payload else {
                unreachable!("checked above")
            };
            if server_done {
                // Counted no more from now: the client counts it until our END reaches it.
                self.counted_calls -= 1;
                self.calls.remove(&call_id);
            }
            self.send_credits -= 1;
            let header = Header {
                credits: self.take_owed(),
                ..header
            };
            header.encode(&mut buf);
            return Ok(Some((buf, HEADER_LEN + len)));
        }
        call.rare().out.push_back(Queued {
            header,
            payload: frame.payload,
            sent: 0,
            _held: held,
        });
        if server_done {
            self.counted_calls -= 1;
            let call = self.calls.get_mut(&call_id).expect("present");
            call.state = State::Closing;
            if let Some(rare) = call.rare.as_mut() {
                rare.partial = None;
            }
            call.held = Reservation::default();
        }
        let call = self.calls.get_mut(&call_id).expect("present");
        // A queued frame must not hold its send buffer: buffers are few, and one held
        // while waiting for credits could be the one a CREDIT frame needs to get them.
        if let Some(q) = call.rare().out.back_mut() {
            if let Payload::InBuffer(buf, len) = &q.payload {
                let bytes = buf[HEADER_LEN..HEADER_LEN + len].to_vec();
                q.payload = Payload::Bytes(bytes);
            }
        }
        if !call.in_ready && call.front_ready() {
            call.in_ready = true;
            self.ready.push_back(call_id);
        }
        Ok(None)
    }

    /// Server: ends a call with `status` (OK included) and `trailers` (name, value pairs,
    /// already valid: see [`metadata::valid_name`]). The status message is cut, and details
    /// or trailers dropped, so the block fits the client's `max_metadata_size`.
    pub fn end_call(
        &mut self,
        call: u64,
        status: &(impl AsRef<WireStatus> + ?Sized),
        trailers: &[(&str, &[u8])],
    ) -> Result<Option<(P, usize)>, SendError> {
        let status = status.as_ref();
        if self.role != Role::Server {
            return Err(SendError::Invalid("only servers end calls with a status"));
        }
        let block = status_block(status, trailers, self.peer.max_metadata_size as usize);
        self.send(
            call,
            Outgoing {
                kind: Kind::End,
                flags: 0,
                code: status.code() as u32,
                payload: Payload::Bytes(block),
            },
            0,
            0,
        )
    }

    /// Gives up a call: drops what is queued for it, queues a CANCEL with `reason` and
    /// returns the call's data (`None` if it was not open).
    pub fn cancel(&mut self, call_id: u64, reason: Code) -> Option<C> {
        let call = self.calls.get_mut(&call_id)?;
        if call.state != State::Open {
            return None;
        }
        call.send_open = false;
        if self.role == Role::Client && !call.on_wire {
            // The server never heard of it: no CANCEL (it would name an unknown call).
            return self.close_call(call_id);
        }
        call.cancel = Some(reason);
        self.control.push_back(call_id);
        self.close_call(call_id)
    }

    /// Queues a PING carrying `data` (a later PING replaces one not sent yet).
    pub fn ping(&mut self, data: u64) {
        self.ping = Some(data);
    }

    /// Queues a GOODBYE (server): calls opened after this are refused with UNAVAILABLE.
    pub fn goodbye(&mut self) {
        if self.goodbye_sent.is_none() {
            self.goodbye_sent = Some(self.highest_call);
            self.goodbye_to_send = Some(self.highest_call);
        }
    }

    /// Whether [`Connection::poll_transmit`] has something to send (given buffers).
    pub fn wants_transmit(&self) -> bool {
        let data = self.send_credits >= 2
            && (!self.ready.is_empty()
                || !self.control.is_empty()
                || self.ping.is_some()
                || self.pong.is_some()
                || self.goodbye_to_send.is_some());
        data || (self.send_credits >= 1 && self.credit_due())
    }

    /// Owed credits that make a CREDIT frame worth sending: half the slots, and never fewer
    /// than 2, so that a CREDIT spent from the reserve always leaves its receiver better off
    /// by at least one credit (`docs/PROTOCOL.md` §6 argues why this never stalls).
    pub fn credit_threshold(&self) -> u32 {
        (self.grant() / 2).max(2)
    }

    /// The next frame to post, written into a buffer from `alloc` (or into a queued
    /// payload's own buffer), with its length; `None` when nothing can go now.
    pub fn poll_transmit(&mut self, alloc: &mut dyn FnMut() -> Option<P>) -> Option<(P, usize)> {
        if self.send_credits >= 2 {
            if let Some(frame) = self.poll_control(alloc) {
                return Some(frame);
            }
            while let Some(id) = self.ready.pop_front() {
                if !self.calls.get(&id).is_some_and(|c| c.front_ready()) {
                    // Cancelled, or its window closed: it re-enters when that changes.
                    if let Some(c) = self.calls.get_mut(&id) {
                        c.in_ready = false;
                    }
                    continue;
                }
                let Some(frame) = self.emit_call_frame(id, alloc) else {
                    self.ready.push_front(id);
                    return None;
                };
                // Round robin: a call with more to send goes to the back.
                if let Some(c) = self.calls.get_mut(&id) {
                    c.in_ready = c.front_ready();
                    if c.in_ready {
                        self.ready.push_back(id);
                    }
                }
                return Some(frame);
            }
        }
        if self.send_credits >= 1 && self.credit_due() {
            let mut buf = alloc()?;
            self.send_credits -= 1;
            let credits = self.take_owed();
            Header {
                credits,
                ..Header::new(Kind::Credit)
            }
            .encode(&mut buf);
            return Some((buf, HEADER_LEN));
        }
        None
    }

    /// CANCEL, WINDOW, PING answers, PINGs and GOODBYE, before data.
    fn poll_control(&mut self, alloc: &mut dyn FnMut() -> Option<P>) -> Option<(P, usize)> {
        let mut header = None;
        if let Some(data) = self.pong {
            header = Some(Header {
                flags: flags::ACK,
                call_id: data,
                ..Header::new(Kind::Ping)
            });
        } else if let Some(data) = self.ping {
            header = Some(Header {
                call_id: data,
                ..Header::new(Kind::Ping)
            });
        } else if let Some(last) = self.goodbye_to_send {
            header = Some(Header {
                call_id: last,
                ..Header::new(Kind::Goodbye)
            });
        } else {
            while let Some(&id) = self.control.front() {
                let Some(call) = self.calls.get(&id) else {
                    self.control.pop_front();
                    continue;
                };
                if let Some(reason) = call.cancel {
                    // A started frame's remaining segments are dropped; CANCEL goes now.
                    header = Some(Header {
                        call_id: id,
                        code: reason as u32,
                        ..Header::new(Kind::Cancel)
                    });
                } else if call.window_queued && call.state == State::Open && call.recv_open {
                    header = Some(Header {
                        call_id: id,
                        code: call.window_owed.min(MAX_WINDOW),
                        ..Header::new(Kind::Window)
                    });
                } else {
                    self.control.pop_front();
                    if let Some(c) = self.calls.get_mut(&id) {
                        c.window_queued = false;
                    }
                    continue;
                }
                break;
            }
        }
        let mut header = header?;
        let mut buf = alloc()?;
        match header.kind {
            Kind::Ping if header.has(flags::ACK) => {
                // Raises may follow an acceptance of shared credits on the wire, never
                // precede it (nor ride on it: its credits were owed before).
                self.raising |= extension::accepted(header.call_id)
                    .is_some_and(|bits| bits & extension::SHARED_CREDITS != 0);
                self.pong = None;
            }
            Kind::Ping => self.ping = None,
            Kind::Goodbye => self.goodbye_to_send = None,
            Kind::Cancel => {
                self.control.pop_front();
                let id = header.call_id;
                self.calls.remove(&id);
                // A call cancelled by this side counts until its CANCEL leaves: a new call
                // opened after it can then never reach the peer first.
                self.counted_calls -= 1;
                self.start_waiting();
            }
            Kind::Window => {
                self.control.pop_front();
                let call = self.calls.get_mut(&header.call_id).expect("present");
                call.window_owed = 0;
                call.window_queued = false;
            }
            _ => unreachable!("control kinds only"),
        }
        self.send_credits -= 1;
        header.credits = self.take_owed();
        header.encode(&mut buf);
        Some((buf, HEADER_LEN))
    }

    /// Emits the next frame (or segment) of call `id`, whose front frame may start (or has
    /// started); spends a credit and, on a MESSAGE's first segment, the call's window.
    fn emit_call_frame(
        &mut self,
        id: u64,
        alloc: &mut dyn FnMut() -> Option<P>,
    ) -> Option<(P, usize)> {
        let max_segment = self.max_segment;
        let call = self.calls.get_mut(&id)?;
        let q = call.rare.as_mut()?.out.front_mut()?;
        let mut header = q.header;
        let total = header.message_len as usize;
        let offset = q.sent;
        let n = (total - offset).min(max_segment);
        let mut buf = match &q.payload {
            Payload::InBuffer(..) => None,
            Payload::Bytes(_) => Some(alloc()?),
        };
        if offset == 0 && header.kind == Kind::Message {
            call.send_window -= window_cost(header.message_len);
        }
        call.on_wire = true;
        header.segment_offset = offset as u32;
        header.segment_len = n as u32;
        q.sent += n;
        if let (Some(out), Payload::Bytes(bytes)) = (buf.as_mut(), &q.payload) {
            out[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&bytes[offset..offset + n]);
        }
        if q.sent == total {
            if let Some(Queued {
                payload: Payload::InBuffer(b, _),
                ..
            }) = call.rare().out.pop_front()
            {
                buf = Some(b);
            }
        }
        let finished = call.state == State::Closing && call.queued() == 0 && call.cancel.is_none();
        if finished {
            self.calls.remove(&id);
        }
        let mut buf = buf.expect("a buffer from the queue or from alloc");
        self.send_credits -= 1;
        header.credits = self.take_owed();
        header.encode(&mut buf);
        Some((buf, HEADER_LEN + n))
    }

    fn take_owed(&mut self) -> u16 {
        self.withhold_idle();
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        self.peer_credits += n;
        n as u16
    }

    /// Every call still open, with its data (the connection is gone). The state is left
    /// empty.
    pub fn drain_calls(&mut self) -> Vec<(u64, C)> {
        self.ready.clear();
        self.control.clear();
        let mut calls: Vec<(u64, C)> = self
            .calls
            .drain()
            .into_iter()
            .filter_map(|(id, c)| c.user.map(|u| (id, u)))
            .collect();
        calls.sort_by_key(|(id, _)| *id);
        self.counted_calls = 0;
        self.waiting.clear();
        self.timers.forget_calls();
        calls
    }
}

/// [`Connection::is_open`] on the call table alone (the timers, say, stay free to borrow).
fn is_open_in<C, P>(calls: &CallTable<Call<C, P>>, call: u64) -> bool {
    calls.get(&call).is_some_and(|c| c.state == State::Open)
}

/// [`Connection::open_call_for`] on the call table alone (the rest of the connection stays
/// free to borrow).
fn open_call_in<'c, C, P>(
    calls: &'c mut CallTable<Call<C, P>>,
    highest_call: u64,
    h: &Header,
) -> Result<Option<&'c mut Call<C, P>>, Error> {
    if h.call_id > highest_call {
        return Err(violation(
            Violation::UnknownCall,
            format!(
                "{} for call {} that was never opened",
                h.kind.name(),
                h.call_id
            ),
        ));
    }
    Ok(calls.get_mut(&h.call_id).filter(|c| c.state == State::Open))
}

/// The order of frames within a call (`docs/PROTOCOL.md` §7), checked on each frame's first
/// segment.
fn check_call_order<C, P>(role: Role, call: &Call<C, P>, h: &Header) -> Result<(), Error> {
    if !call.recv_open {
        return Err(violation(
            Violation::AfterEnd,
            format!(
                "{} on call {} after its sender ended it",
                h.kind.name(),
                h.call_id
            ),
        ));
    }
    match (role, h.kind) {
        (Role::Server, Kind::Headers) if !h.has(flags::OPEN) => Err(violation(
            Violation::HeadersOutOfOrder,
            format!("HEADERS without OPEN on call {}", h.call_id),
        )),
        (Role::Server, Kind::End) if h.code != 0 || h.message_len != 0 => Err(violation(
            Violation::NonzeroField,
            format!(
                "a client's END (call {}) with a status or trailers",
                h.call_id
            ),
        )),
        (Role::Client, Kind::Headers) if call.headers_received || call.message_received => {
            Err(violation(
                Violation::HeadersOutOfOrder,
                format!(
                    "response HEADERS of call {} twice or after a MESSAGE",
                    h.call_id
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A frame above this side's limits: the call fails with RESOURCE_EXHAUSTED (not a
/// violation).
#[inline]
fn over_limit(
    role: Role,
    local: &Hello,
    h: &Header,
    metadata_len: Option<u32>,
) -> Option<WireStatus> {
    if let Some(block) = metadata_len {
        // A whole request (§22.2): its block and its message, each against its own limit.
        let message = h.message_len - 4 - block;
        if block > local.max_metadata_size {
            return Some(over_limit_status(
                role,
                false,
                block,
                local.max_metadata_size,
            ));
        }
        if message > local.max_message_size {
            return Some(over_limit_status(
                role,
                true,
                message,
                local.max_message_size,
            ));
        }
        return None;
    }
    let limit = match h.kind {
        Kind::Message => local.max_message_size,
        _ => local.max_metadata_size,
    };
    if h.message_len <= limit {
        return None;
    }
    Some(over_limit_status(
        role,
        h.kind == Kind::Message,
        h.message_len,
        limit,
    ))
}

/// Whether a client may send `frame` as a whole request (§22.2): the extension agreed,
/// the call's first frame, a MESSAGE with END, its block and message within the peer's
/// limits.
#[inline(never)]
fn check_whole_request<P: std::ops::Deref<Target = [u8]>>(
    frame: &Outgoing<P>,
    agreed: bool,
    frames_sent: u32,
    peer: &Hello,
) -> Result<(), SendError> {
    if !agreed {
        return Err(SendError::Invalid(
            "whole requests need the server's acceptance",
        ));
    }
    if frame.kind != Kind::Message || frame.flags & flags::END == 0 || frames_sent > 0 {
        return Err(SendError::Invalid(
            "a whole request is a call's only frame, a MESSAGE with END",
        ));
    }
    let bytes = frame.payload.bytes();
    let Some(block) = bytes
        .first_chunk::<4>()
        .map(|b| u32::from_le_bytes(*b) as usize)
    else {
        return Err(SendError::Invalid(
            "a whole request starts with its block length",
        ));
    };
    let Some(message) = bytes.len().checked_sub(4 + block) else {
        return Err(SendError::Invalid("a whole request's block overruns it"));
    };
    let too_large = |what: &str, len: usize, limit: u32| {
        Err(SendError::TooLarge(format!(
            "{what} of {len} bytes exceeds the peer's limit of {limit} bytes"
        )))
    };
    if block > peer.max_metadata_size as usize {
        return too_large("a metadata block", block, peer.max_metadata_size);
    }
    if message > peer.max_message_size as usize {
        return too_large("MESSAGE", message, peer.max_message_size);
    }
    Ok(())
}

/// A whole request's payload (§22.2) as its metadata block and its message; the core
/// checked the block's length at the first segment.
pub fn whole_request_parts(payload: &[u8]) -> (&[u8], &[u8]) {
    let len = u32::from_le_bytes(
        *payload
            .first_chunk::<4>()
            .expect("checked at the first segment"),
    );
    payload[4..].split_at(len as usize)
}

/// The block length a whole request's first segment starts with (§22.2), checked against
/// the logical frame it belongs to.
#[inline(never)]
fn metadata_len(h: &Header, payload: &[u8]) -> Result<u32, Error> {
    let Some(bytes) = payload.first_chunk::<4>() else {
        return Err(violation(
            Violation::MalformedMetadata,
            "a whole request's first segment holds less than its 4-byte metadata length",
        ));
    };
    let len = u32::from_le_bytes(*bytes);
    if u64::from(len) + 4 > u64::from(h.message_len) {
        return Err(violation(
            Violation::MalformedMetadata,
            format!(
                "a metadata block of {len} bytes in a whole request of {} bytes",
                h.message_len
            ),
        ));
    }
    Ok(len)
}

#[cold]
fn over_limit_status(role: Role, message: bool, len: u32, limit: u32) -> WireStatus {
    let what = match message {
        true => "message",
        false => "metadata block",
    };
    let side = match role {
        Role::Server => "server",
        Role::Client => "client",
    };
    WireStatus::new(
        Code::ResourceExhausted,
        format!("{what} of {len} bytes exceeds the {side}'s limit of {limit} bytes"),
    )
}

/// The END block for `status`: `grpc-message` (cut to fit), `grpc-status-details-bin`, then
/// `trailers`, each only if the block stays within `limit` bytes. `status` is a [`WireStatus`]
/// or anything that holds one (the runtime's user-facing status).
pub fn status_block(
    status: &(impl AsRef<WireStatus> + ?Sized),
    trailers: &[(&str, &[u8])],
    limit: usize,
) -> Vec<u8> {
    let status = status.as_ref();
    let mut block = Vec::new();
    if !status.message().is_empty() {
        let mut text = metadata::percent_encode(status.message());
        let room = limit.saturating_sub(metadata::entry_len(metadata::GRPC_MESSAGE, &[]));
        if text.len() > room {
            let mut cut = room;
            // Never split a %XX escape.
            while cut > 0 && text[..cut].iter().rev().take(2).any(|&b| b == b'%') {
                cut -= 1;
            }
            text.truncate(cut);
        }
        metadata::push_entry(&mut block, metadata::GRPC_MESSAGE, &text);
    }
    let details = status.details();
    let extra = (!details.is_empty()).then_some((metadata::GRPC_STATUS_DETAILS, details));
    for (name, value) in extra.into_iter().chain(trailers.iter().copied()) {
        if block.len() + metadata::entry_len(name, value) <= limit {
            metadata::push_entry(&mut block, name, value);
        }
    }
    block
}

#[cfg(test)]
pub(crate) mod tests;
