//! A client core and a server core connected in memory, on a virtual clock: no threads, no
//! sleeps, no real time. Each side's frames travel on a wire of their own, in order; a side
//! can be cut off (its frames lost, as from a peer that died), and the application's
//! behaviour is what each test does between [`Pair::drive`] and [`Pair::advance`]: the server
//! sets a call's data when the call opens, as the runtime does, and releases receive slots
//! at once unless told to hold them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::conn::tests::{hello, out};
use crate::{Code, Connection, Event, Expiry, Hello, Kind, Role, SendError};

pub(crate) type Core = Connection<u32, Vec<u8>>;

/// What a side's application saw, owned (events and expiries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Opened(u64),
    Headers(u64),
    /// Call, body, END, the call's data when END ended the call (client).
    Message(u64, Vec<u8>, bool, Option<u32>),
    HalfClosed(u64),
    Ended(u64, Code, u32),
    Cancelled(u64, Code, u32),
    Refused(u64, Code, u32),
    Goodbye(u64, Vec<u64>),
    Pong(u64),
    Deadline(u64, Option<u32>),
    Stalled(u64, u32),
    PeerSilent,
}

/// One end of the pair.
pub(crate) struct Side {
    pub(crate) core: Core,
    /// Frames on their way to this side, in order.
    inbound: VecDeque<Vec<u8>>,
    /// Everything this side's application was told, oldest first.
    pub(crate) seen: Vec<Seen>,
    /// Receive slots released as soon as their frame was handled (otherwise counted in
    /// `held` until [`Pair::release`]).
    pub(crate) release_at_once: bool,
    pub(crate) held: u32,
    /// Frames this side sends arrive nowhere (a peer that died silently).
    pub(crate) cut_off: bool,
    /// Frames this side transmitted so far, by kind.
    pub(crate) sent: Vec<Kind>,
}

impl Side {
    fn new(core: Core) -> Side {
        Side {
            core,
            inbound: VecDeque::new(),
            seen: Vec::new(),
            release_at_once: true,
            held: 0,
            cut_off: false,
            sent: Vec::new(),
        }
    }

    /// What was seen since the last call, taken.
    pub(crate) fn take_seen(&mut self) -> Vec<Seen> {
        std::mem::take(&mut self.seen)
    }
}

/// A client core and a server core with a wire each way and a virtual clock.
pub(crate) struct Pair {
    pub(crate) client: Side,
    pub(crate) server: Side,
    pub(crate) now: Instant,
}

/// More exchanges than this in one [`Pair::drive`] is a livelock.
const MAX_ROUNDS: usize = 10_000;

impl Pair {
    /// Both sides with the tests' small HELLO.
    pub(crate) fn new() -> Pair {
        Pair::with(hello(), hello())
    }

    pub(crate) fn with(client: Hello, server: Hello) -> Pair {
        Pair {
            client: Side::new(Connection::new(
                Role::Client,
                client,
                server,
                server.slot_size as usize,
            )),
            server: Side::new(Connection::new(
                Role::Server,
                server,
                client,
                client.slot_size as usize,
            )),
            now: Instant::now(),
        }
    }

    /// Moves frames both ways until neither side has anything to send or handle.
    pub(crate) fn drive(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let moved = transmit(&mut self.client, &mut self.server, true)
                + transmit(&mut self.server, &mut self.client, true);
            let handled = deliver(&mut self.server, self.now) + deliver(&mut self.client, self.now);
            if moved + handled == 0 {
                return;
            }
        }
        panic!("the pair still exchanges frames after {MAX_ROUNDS} rounds");
    }

    /// Moves the clock by `by`, runs both sides' timers, then [`Pair::drive`].
    pub(crate) fn advance(&mut self, by: Duration) {
        self.now += by;
        self.timers(Role::Client);
        self.timers(Role::Server);
        self.drive();
    }

    /// One side's timers at the current time (`handle_timeout`), what expired recorded.
    pub(crate) fn timers(&mut self, role: Role) {
        let now = self.now;
        let side = self.side(role);
        for expiry in side.core.handle_timeout(now) {
            side.seen.push(seen(expiry));
        }
    }

    /// `to`'s application hands its core the frame at the head of its wire, if any (what it
    /// saw recorded); false when the wire was empty.
    pub(crate) fn deliver_one(&mut self, to: Role) -> bool {
        let now = self.now;
        deliver_one(self.side(to), now)
    }

    /// Everything `from` can transmit now goes onto its wire; without `buffers`, every send
    /// buffer it asks for is refused (a runtime out of buffers). Returns the frames moved.
    pub(crate) fn transmit(&mut self, from: Role, buffers: bool) -> usize {
        let (side, peer) = self.sides(from);
        transmit(side, peer, buffers)
    }

    pub(crate) fn side(&mut self, role: Role) -> &mut Side {
        self.sides(role).0
    }

    /// `role`'s side and its peer.
    fn sides(&mut self, role: Role) -> (&mut Side, &mut Side) {
        match role {
            Role::Client => (&mut self.client, &mut self.server),
            Role::Server => (&mut self.server, &mut self.client),
        }
    }

    /// Credits are conserved in each direction (`docs/PROTOCOL.md` §7): the sender's
    /// credits, the credits on their way back to it, its frames on the wire, the frames the
    /// receiver's application holds and the credits the receiver owes add up to the
    /// receiver's grant (its slot count, or its share of a pool): none is lost to a race.
    pub(crate) fn credits_conserved(&self) -> Result<(), String> {
        for (sender, receiver) in [(&self.client, &self.server), (&self.server, &self.client)] {
            let returning: u32 = sender
                .inbound
                .iter()
                .map(|f| u32::from(u16::from_le_bytes([f[6], f[7]])))
                .sum();
            let total = sender.core.send_credits()
                + returning
                + receiver.inbound.len() as u32
                + receiver.held
                + receiver.core.owed();
            // The receiver's grant (§22.4): its slot count, unless its slots are pooled.
            let slots = receiver.core.grant();
            if total != slots {
                return Err(format!(
                    "credits not conserved from {:?} to {:?}: {total} for {slots} slots",
                    sender.core.role(),
                    receiver.core.role()
                ));
            }
        }
        Ok(())
    }

    /// Runs the clock forward in `step`s until `until` has passed.
    pub(crate) fn run_for(&mut self, until: Duration, step: Duration) {
        let end = self.now + until;
        while self.now < end {
            self.advance(step);
        }
    }

    /// Client: opens a call with data `user` and sends `payload` as its only message (with
    /// END), with a deadline `timeout` from now if given. Returns the call id.
    pub(crate) fn call(&mut self, user: u32, payload: &[u8], timeout: Option<Duration>) -> u64 {
        let id = self
            .client
            .core
            .open_call(user)
            .expect("the client may open a call");
        self.request(id, payload, timeout);
        id
    }

    /// [`Pair::call`] opened as a unary call ([`crate::Connection::open_unary_call`]), without
    /// a deadline.
    pub(crate) fn unary_call(&mut self, user: u32, payload: &[u8]) -> u64 {
        let id = self
            .client
            .core
            .open_unary_call(user)
            .expect("the client may open a call");
        self.request(id, payload, None);
        id
    }

    /// Client: the request of `id`, one MESSAGE with END, with a deadline `timeout` from now.
    fn request(&mut self, id: u64, payload: &[u8], timeout: Option<Duration>) {
        let core = &mut self.client.core;
        let timeout_us = timeout.map_or(0, |t| t.as_micros() as u32);
        if let Some(t) = timeout {
            core.set_deadline(id, self.now + t);
        }
        let frame = out(core, Kind::Message, crate::flags::END, 0, payload);
        self.send(Role::Client, id, frame, 7, timeout_us);
    }

    /// Server: answers `call` with one MESSAGE with END (status OK), unless the call's
    /// deadline passed by now (then, as the runtime does, the call ends as expired).
    pub(crate) fn reply(&mut self, call: u64, payload: &[u8]) {
        let now = self.now;
        if let Some(expiry) = self.server.core.expire_if_past(call, || now) {
            self.server.seen.push(seen(expiry));
            return;
        }
        let frame = out(
            &self.server.core,
            Kind::Message,
            crate::flags::END,
            0,
            payload,
        );
        self.send(Role::Server, call, frame, 0, 0);
    }

    /// Sends a frame from one side, posting it if the core returns it at once.
    pub(crate) fn send(
        &mut self,
        from: Role,
        call: u64,
        frame: crate::Outgoing<Vec<u8>>,
        method: u32,
        timeout_us: u32,
    ) {
        let sent = self.side(from).core.send(call, frame, method, timeout_us);
        self.posted(from, sent).expect("send accepted");
    }

    /// What `from`'s core answered to a send or an end of a call: a frame it returned at
    /// once goes onto the wire.
    pub(crate) fn posted(
        &mut self,
        from: Role,
        sent: Result<Option<(Vec<u8>, usize)>, SendError>,
    ) -> Result<(), SendError> {
        if let Some(frame) = sent? {
            let (side, peer) = self.sides(from);
            post(side, peer, frame);
        }
        Ok(())
    }

    /// The side releases the receive slots it held.
    pub(crate) fn release(&mut self, role: Role) {
        let side = self.side(role);
        side.core.released(std::mem::take(&mut side.held));
    }
}

fn post(from: &mut Side, to: &mut Side, (mut buf, len): (Vec<u8>, usize)) {
    buf.truncate(len);
    from.sent
        .push(crate::Header::decode(&buf).expect("a valid frame").kind);
    if !from.cut_off {
        to.inbound.push_back(buf);
    }
}

/// Everything `from` can transmit now, onto the wire to `to` (its send buffers refused
/// unless `buffers`).
fn transmit(from: &mut Side, to: &mut Side, buffers: bool) -> usize {
    let size = from.core.max_segment() + crate::HEADER_LEN;
    let mut n = 0;
    while let Some(frame) = from
        .core
        .poll_transmit(&mut || buffers.then(|| vec![0; size]))
    {
        post(from, to, frame);
        n += 1;
    }
    n
}

/// Handles every frame on the wire to `side`.
fn deliver(side: &mut Side, now: Instant) -> usize {
    let mut n = 0;
    while deliver_one(side, now) {
        n += 1;
    }
    n
}

/// What an application records of a call its core expired.
fn seen(expiry: Expiry<u32>) -> Seen {
    match expiry {
        Expiry::Deadline { call, user } => Seen::Deadline(call, user),
        Expiry::Stalled { call, user, .. } => Seen::Stalled(call, user),
        Expiry::PeerSilent { .. } => Seen::PeerSilent,
    }
}

/// Handles the frame at the head of the wire to `side`, if any.
fn deliver_one(side: &mut Side, now: Instant) -> bool {
    let Some(frame) = side.inbound.pop_front() else {
        return false;
    };
    let event = side
        .core
        .handle_frame(&frame, || now)
        .expect("a correct peer sends valid frames");
    let seen = match event {
        Event::None => None,
        Event::Opened { call, .. } => {
            side.core.set_user(call, call as u32);
            Some(Seen::Opened(call))
        }
        Event::Message {
            call,
            opened,
            body,
            end,
            ended,
            ..
        } => {
            if opened.is_some() {
                side.core.set_user(call, call as u32);
            }
            Some(Seen::Message(call, body.to_vec(), end, ended))
        }
        Event::Headers { call, .. } => Some(Seen::Headers(call)),
        Event::HalfClosed { call } => Some(Seen::HalfClosed(call)),
        Event::Ended {
            call, code, user, ..
        } => Some(Seen::Ended(call, code, user)),
        Event::Cancelled { call, reason, user } => Some(Seen::Cancelled(call, reason, user)),
        Event::Refused { call, status, user } => Some(Seen::Refused(call, status.code(), user)),
        Event::Goodbye {
            last_call,
            unprocessed,
        } => Some(Seen::Goodbye(
            last_call,
            unprocessed.into_iter().map(|(id, _)| id).collect(),
        )),
        Event::Pong { data } => Some(Seen::Pong(data)),
    };
    side.seen.extend(seen);
    if side.release_at_once {
        side.core.released(1);
    } else {
        side.held += 1;
    }
    true
}

mod shared;
mod sim;
mod tests;
