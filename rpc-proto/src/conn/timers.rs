//! Time in the core: call deadlines (`docs/PROTOCOL.md` §12.2), keepalive (§13) and stalled
//! reassembly (§15.2). This file keeps the timers' state and decides when each is due; the
//! connection ([`Connection`](crate::Connection)) acts on them. The core reads no clock. The runtime gives it the time in
//! [`Connection::handle_timeout`](crate::Connection::handle_timeout), at least as often as [`Connection::poll_timeout`](crate::Connection::poll_timeout) asks,
//! and sets each call's deadline ([`Connection::set_deadline`](crate::Connection::set_deadline)): a client's from its caller,
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

use crate::WireStatus;

/// How a side finds out that its peer died silently (`docs/PROTOCOL.md` §13): after
/// `interval` without a frame it sends a PING; after `interval + timeout` it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence before a PING.
    pub interval: Duration,
    /// Further silence before the connection is declared dead.
    pub timeout: Duration,
}

impl Keepalive {
    /// This keepalive on one of `connections` connections of an endpoint that sends at most
    /// `pings_per_second` keepalive PINGs in all: the interval stretches to `connections /
    /// pings_per_second` seconds when that is longer, and the timeout to at least that
    /// interval (the endpoint looks at each connection less often, so a PING's answer gets as
    /// much more time). Each connection PINGs at most once per interval of silence, so an
    /// endpoint's idle connections cost it at most that many PINGs a second, however many
    /// there are, and a silent peer is detected within the two.
    pub fn paced(self, connections: usize, pings_per_second: u32) -> Keepalive {
        let spread =
            Duration::from_secs_f64(connections as f64 / f64::from(pings_per_second.max(1)));
        self.at_least(spread)
    }

    /// This keepalive with an interval of at least `interval`, and then a timeout at least as
    /// long (see [`Keepalive::paced`]); unchanged if its interval is that long already.
    pub fn at_least(self, interval: Duration) -> Keepalive {
        if interval <= self.interval {
            return self;
        }
        Keepalive {
            interval,
            timeout: self.timeout.max(interval),
        }
    }
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

/// What [`Connection::handle_timeout`](crate::Connection::handle_timeout) did that the runtime must act on.
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
    /// [`Event::Refused`](crate::Event::Refused).
    Stalled {
        /// The call.
        call: u64,
        /// Why.
        status: WireStatus,
        /// The call's data.
        user: C,
    },
    /// No frame came for the keepalive's `interval + timeout`, PING included: the peer is
    /// gone. Close the connection and fail its calls ([`Connection::drain_calls`](crate::Connection::drain_calls)).
    PeerSilent {
        /// How long the peer was silent.
        silent: Duration,
    },
}

/// The timers' state of one connection.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// Call deadlines, earliest first. Entries of calls that ended stay until popped, dropped
    /// from the front at a timer step ([`Timers::drop_ended`]) or compacted
    /// ([`Timers::watch`]): at most `64 + 2 × max_calls`.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    keepalive: Option<Keepalive>,
    /// The least silence before a PING the peer asked for (a server's pace, §22.5).
    peer_pace: Duration,
    stall_timeout: Option<Duration>,
    /// Frames received so far, and the count the last keepalive step saw.
    frames_received: u64,
    frames_seen: u64,
    /// When a keepalive step last saw a new frame (or first ran).
    last_alive: Option<Instant>,
    /// A keepalive PING went out since then.
    pinged: bool,
    /// The last `handle_timeout`.
    last_tick: Option<Instant>,
}

/// What keepalive asks of the connection at a tick.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum KeepaliveStep {
    /// Nothing.
    Quiet,
    /// Send a PING carrying this value.
    Ping(u64),
    /// The peer was silent this long, past the interval and the timeout: give it up.
    GiveUp(Duration),
}

impl Timers {
    pub(super) fn set_keepalive(&mut self, keepalive: Option<Keepalive>) {
        self.keepalive = keepalive;
    }

    /// The keepalive in force: the one set, at the peer's pace if that is slower.
    pub(super) fn keepalive(&self) -> Option<Keepalive> {
        self.keepalive.map(|k| k.at_least(self.peer_pace))
    }

    /// The keepalive set, without the peer's pace.
    pub(super) fn own_keepalive(&self) -> Option<Keepalive> {
        self.keepalive
    }

    /// The peer asks for at least `pace` of silence before each PING.
    pub(super) fn set_peer_pace(&mut self, pace: Duration) {
        self.peer_pace = pace;
    }

    pub(super) fn set_stall_timeout(&mut self, timeout: Option<Duration>) {
        self.stall_timeout = timeout;
    }

    pub(super) fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// A frame arrived (one increment: the keepalive step compares counts).
    pub(super) fn frame_received(&mut self) {
        self.frames_received += 1;
    }

    /// Watches `call`'s deadline. Ended calls leave their entries behind: past
    /// `64 + 2 × max_calls` entries, those of calls that are no longer `open` are dropped at
    /// once.
    pub(super) fn watch(
        &mut self,
        call: u64,
        deadline: Instant,
        max_calls: u32,
        open: impl Fn(u64) -> bool,
    ) {
        self.deadlines.push(Reverse((deadline, call)));
        if self.deadlines.len() > 64 + 2 * max_calls as usize {
            self.deadlines.retain(|Reverse((_, id))| open(*id));
        }
    }

    /// Drops the entries of calls that are no longer `open` from the front, up to the first
    /// of a call still open: the earliest deadline watched is then one that may still end a
    /// call (entries further back are dropped as they reach the front, or by [`Timers::watch`]).
    pub(super) fn drop_ended(&mut self, open: impl Fn(u64) -> bool) {
        while let Some(&Reverse((_, call))) = self.deadlines.peek() {
            if open(call) {
                return;
            }
            self.deadlines.pop();
        }
    }

    /// The earliest deadline watched (its call may have ended since).
    pub(super) fn earliest_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }

    /// The next call whose deadline passed by `now` (the call may have ended since).
    pub(super) fn next_expired(&mut self, now: Instant) -> Option<u64> {
        match self.deadlines.peek() {
            Some(&Reverse((at, call))) if at <= now => {
                self.deadlines.pop();
                Some(call)
            }
            _ => None,
        }
    }

    /// Every call is gone: so are their deadlines.
    pub(super) fn forget_calls(&mut self) {
        self.deadlines.clear();
    }

    /// Keepalive at `now`: any frame since the last step shows the peer alive; silence past
    /// the interval gets a PING, past the interval and the timeout gives the peer up.
    pub(super) fn keepalive_step(&mut self, now: Instant) -> KeepaliveStep {
        let Some(keepalive) = self.keepalive() else {
            return KeepaliveStep::Quiet;
        };
        let last_alive = match self.last_alive {
            Some(at) if self.frames_received == self.frames_seen => at,
            _ => {
                self.frames_seen = self.frames_received;
                self.last_alive = Some(now);
                self.pinged = false;
                return KeepaliveStep::Quiet;
            }
        };
        let silent = now.saturating_duration_since(last_alive);
        if silent >= keepalive.interval + keepalive.timeout {
            return KeepaliveStep::GiveUp(silent);
        }
        if silent >= keepalive.interval && !self.pinged {
            self.pinged = true;
            // The count in the upper half: the lower one, 0, never reads as an offer or an
            // acceptance of extensions (their tags are there, §22.1).
            return KeepaliveStep::Ping(self.frames_received << 32);
        }
        KeepaliveStep::Quiet
    }

    /// A `handle_timeout` ran at `now`.
    pub(super) fn ticked(&mut self, now: Instant) {
        self.last_tick = Some(now);
    }

    /// When the timers are due next; `reassembling`: some frame is in reassembly (the stall
    /// timeout counts from the tick that first saw it unchanged).
    pub(super) fn next_due(&self, reassembling: bool) -> Option<Instant> {
        let deadline = self.deadlines.peek().map(|Reverse((at, _))| *at);
        let keepalive = match (self.keepalive(), self.last_alive) {
            (Some(k), Some(alive)) if self.pinged => Some(alive + k.interval + k.timeout),
            (Some(k), Some(alive)) => Some(alive + k.interval),
            _ => None,
        };
        let stall = match (self.stall_timeout, self.last_tick) {
            (Some(timeout), Some(tick)) if reassembling => Some(tick + timeout),
            _ => None,
        };
        [deadline, keepalive, stall].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension;

    #[test]
    fn a_keepalive_ping_never_reads_as_an_offer_or_an_acceptance() {
        let mut timers = Timers::default();
        timers.set_keepalive(Some(Keepalive::default()));
        let start = Instant::now();
        assert_eq!(timers.keepalive_step(start), KeepaliveStep::Quiet);
        // A count whose lower half spells an offer's tag ("RP-X"), bits in the upper half.
        let offer_like = extension::offer(1);
        timers.frames_received = offer_like;
        timers.frames_seen = offer_like;
        let later = start + Keepalive::default().interval;
        match timers.keepalive_step(later) {
            KeepaliveStep::Ping(value) => {
                assert_eq!(extension::offered(value), None);
                assert_eq!(extension::accepted(value), None);
            }
            other => panic!("expected a PING, got {other:?}"),
        }
    }
}
