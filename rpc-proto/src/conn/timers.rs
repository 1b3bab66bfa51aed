//! Time in the core: call deadlines (`docs/PROTOCOL.md` §12.2), keepalive (§13) and stalled
//! reassembly (§15.2). The core reads no clock. The runtime gives it the time in
//! [`Connection::handle_timeout`], at least as often as [`Connection::poll_timeout`] asks,
//! and sets each call's deadline ([`Connection::set_deadline`]): a client's from its caller,
//! a server's from the `timeout_us` of the frame that opened the call, measured from the
//! frame's receipt (which only the runtime knows without a clock read per frame).
//!
//! Keepalive counts frames instead of timing them: receiving costs one increment, and each
//! `handle_timeout` compares the count with the previous one. The peer is heard from at the
//! first `handle_timeout` that sees a new frame, so silence is measured at the granularity of
//! the calls to it; the runtime calls it at least every quarter interval.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::{Connection, Event, Role, State};
use crate::{Code, Error, WireStatus};

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

/// What [`Connection::handle_timeout`] did that the runtime must act on.
#[derive(Debug)]
pub enum Expiry<C> {
    /// The call's deadline passed. A client's call is cancelled (CANCEL with
    /// DEADLINE_EXCEEDED queued, if the server knew of it); a server's is ended (END with
    /// DEADLINE_EXCEEDED queued): tell its caller or stop its handler. `user` is the call's
    /// data, if it was set.
    Deadline {
        /// The call.
        call: u64,
        /// The call's data.
        user: Option<C>,
    },
    /// A frame of the call made no progress in reassembly for the stall timeout: it was
    /// dropped and the call refused with `status` (RESOURCE_EXHAUSTED), as for
    /// [`Event::Refused`](super::Event::Refused).
    Stalled {
        /// The call.
        call: u64,
        /// Why.
        status: WireStatus,
        /// The call's data.
        user: C,
    },
    /// No frame came for the keepalive's `interval + timeout`, PING included: the peer is
    /// gone. Close the connection and fail its calls ([`Connection::drain_calls`]).
    PeerSilent {
        /// How long the peer was silent.
        silent: Duration,
    },
}

/// The timers' state of one connection.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// Call deadlines, earliest first. Entries of calls that ended stay until popped or
    /// compacted (see [`Connection::set_deadline`]): at most `64 + 2 × max_calls`.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    keepalive: Option<Keepalive>,
    stall_timeout: Option<Duration>,
    /// Frames received so far (counted by `on_frame`), and the count the last
    /// `handle_timeout` saw.
    pub(super) frames_received: u64,
    frames_seen: u64,
    /// When a `handle_timeout` last saw a new frame (or first ran).
    last_alive: Option<Instant>,
    /// A keepalive PING went out since then.
    pinged: bool,
    /// The last `handle_timeout`.
    last_tick: Option<Instant>,
}

impl Timers {
    /// Every call is gone: so are their deadlines.
    pub(super) fn forget_calls(&mut self) {
        self.deadlines.clear();
    }
}

impl<C, P> Connection<C, P>
where
    P: std::ops::DerefMut<Target = [u8]>,
{
    /// Watches the peer with `keepalive` (`None`: never PING, never give up on silence).
    pub fn set_keepalive(&mut self, keepalive: Option<Keepalive>) {
        self.timers.keepalive = keepalive;
    }

    /// Drops a frame that made no progress in reassembly for `timeout` (`None`: never).
    pub fn set_stall_timeout(&mut self, timeout: Option<Duration>) {
        self.timers.stall_timeout = timeout;
    }

    /// [`Connection::on_frame`], and a server watches the deadline of a call the frame opened
    /// with a timeout: `now` (called only then) tells the frame's receipt.
    pub fn handle_frame<'f>(
        &mut self,
        frame: &'f [u8],
        now: impl FnOnce() -> Instant,
    ) -> Result<Event<'f, C>, Error> {
        let event = self.on_frame(frame)?;
        if let Event::Opened {
            call, timeout_us, ..
        }
        | Event::Message {
            call,
            opened: Some((_, timeout_us)),
            ..
        } = event
        {
            if timeout_us != 0 {
                let deadline = now() + Duration::from_micros(u64::from(timeout_us));
                self.set_deadline(call, deadline);
            }
        }
        Ok(event)
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
        self.timers.deadlines.push(Reverse((deadline, call)));
        // Ended calls leave their entries behind: past the bound, those are dropped at once.
        let max_calls = match self.role {
            Role::Server => self.local.max_calls,
            Role::Client => self.peer.max_calls,
        };
        if self.timers.deadlines.len() > 64 + 2 * max_calls as usize {
            let calls = &self.calls;
            self.timers
                .deadlines
                .retain(|Reverse((_, id))| calls.get(id).is_some_and(|c| c.state == State::Open));
        }
    }

    /// Whether some call's deadline is watched (entries of calls that ended may still count
    /// until the next [`Connection::handle_timeout`] past them).
    pub fn has_deadlines(&self) -> bool {
        !self.timers.deadlines.is_empty()
    }

    /// When [`Connection::handle_timeout`] has something to do next: the earliest deadline,
    /// the next keepalive step, the next look at a frame in reassembly; `None` when nothing
    /// is timed. Keepalive counts only from the first `handle_timeout`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.timers.deadlines.peek().map(|Reverse((at, _))| *at);
        let keepalive = match (self.timers.keepalive, self.timers.last_alive) {
            (Some(k), Some(alive)) if self.timers.pinged => Some(alive + k.interval + k.timeout),
            (Some(k), Some(alive)) => Some(alive + k.interval),
            _ => None,
        };
        let stall = match (self.timers.stall_timeout, self.timers.last_tick) {
            (Some(timeout), Some(tick)) if self.calls.values().any(|c| c.partial.is_some()) => {
                Some(tick + timeout)
            }
            _ => None,
        };
        [deadline, keepalive, stall].into_iter().flatten().min()
    }

    /// Does what is due by `now`: ends the calls whose deadline passed, drops stalled
    /// reassembly, sends a keepalive PING or gives up on a silent peer. Frames it queues
    /// (END, CANCEL, PING) come out of [`Connection::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Expiry<C>> {
        let mut expired = Vec::new();
        self.expire_deadlines(now, &mut expired);
        if let Some(timeout) = self.timers.stall_timeout {
            expired.extend(self.expire_stalled(now, timeout));
        }
        if let Some(keepalive) = self.timers.keepalive {
            expired.extend(self.keepalive(now, keepalive));
        }
        self.timers.last_tick = Some(now);
        expired
    }

    fn expire_deadlines(&mut self, now: Instant, expired: &mut Vec<Expiry<C>>) {
        while let Some(&Reverse((at, call))) = self.timers.deadlines.peek() {
            if at > now {
                return;
            }
            self.timers.deadlines.pop();
            if !self.is_open(call) {
                continue;
            }
            let user = match self.role {
                Role::Client => match self.cancel(call, Code::DeadlineExceeded) {
                    Some(user) => Some(user),
                    None => continue,
                },
                Role::Server => {
                    let user = self.calls.get_mut(&call).and_then(|c| c.user.take());
                    let status = WireStatus::new(
                        Code::DeadlineExceeded,
                        "the deadline passed at the server",
                    );
                    // A status block goes out of `poll_transmit`, never straight back.
                    let _ = self.end_call(call, &status, &[]);
                    user
                }
            };
            expired.push(Expiry::Deadline { call, user });
        }
    }

    /// Any frame shows the peer alive; silence past the interval gets a PING, past the
    /// timeout gives the peer up.
    fn keepalive(&mut self, now: Instant, keepalive: Keepalive) -> Option<Expiry<C>> {
        let t = &mut self.timers;
        if t.frames_received != t.frames_seen || t.last_alive.is_none() {
            t.frames_seen = t.frames_received;
            t.last_alive = Some(now);
            t.pinged = false;
            return None;
        }
        let silent = now.saturating_duration_since(t.last_alive.unwrap_or(now));
        if silent >= keepalive.interval + keepalive.timeout {
            return Some(Expiry::PeerSilent { silent });
        }
        if silent >= keepalive.interval && !t.pinged {
            t.pinged = true;
            let data = t.frames_received;
            self.ping(data);
        }
        None
    }

    /// Drops every logical frame in reassembly that made no progress for `timeout` (§15): its
    /// bytes are released and its call refused with RESOURCE_EXHAUSTED (a server's END, a
    /// client's CANCEL). A frame is seen stalled from the first call that finds it
    /// unchanged, so with calls every `tick` it goes after between `timeout` and
    /// `timeout + tick` without progress.
    fn expire_stalled(&mut self, now: Instant, timeout: Duration) -> Vec<Expiry<C>> {
        let mut stalled = Vec::new();
        for (&id, call) in self.calls.iter_mut() {
            let Some(p) = call.partial.as_mut() else {
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
}
