//! The endpoint's ticks: when its poller hands its connections the time (`Work::Timeout`),
//! and the keepalive in force for its number of connections ([`KEEPALIVE_PINGS_PER_SECOND`]).

use std::time::{Duration, Instant};

use super::{Endpoint, DEADLINE_TICK};
use crate::protocol::v2::Role;
use crate::protocol::Keepalive;
use crate::runtime::conn::{deadline_mark, Work};
use crate::runtime::KEEPALIVE_PINGS_PER_SECOND;

impl Endpoint {
    /// Hands each connection the time (`Work::Timeout`: its core's timers) when they may be
    /// due: every connection at the connection tick (keepalive, stalled reassembly), and at
    /// the deadline tick a client's connections and those of a server that watch a deadline
    /// (a server's mostly watch none). Once per connection when both ticks are due.
    #[inline]
    pub(super) fn tick(
        &self,
        now: Instant,
        next_deadline_tick: &mut Instant,
        next_conn_tick: &mut Option<Instant>,
    ) {
        if now < *next_deadline_tick && next_conn_tick.is_none_or(|at| now < at) {
            // The common case, every loop of a busy poller: nothing is due.
            return;
        }
        self.tick_due(now, next_deadline_tick, next_conn_tick);
    }

    /// The keepalive of each of `connections` connections, and how often every connection
    /// gets the time: the endpoint's keepalive paced to [`KEEPALIVE_PINGS_PER_SECOND`] for its number of
    /// connections, looked at 4 times per interval; stalled reassembly 4 times per stall
    /// timeout (at most a second apart). Past 1,000 connections both stretch by
    /// `connections / 1,000`: a silent peer or a stall is found that much later, but the tick
    /// costs at most about 4,000 connection steps a second, however many connections.
    pub(super) fn paced(&self, connections: usize) -> (Option<Keepalive>, Option<Duration>) {
        let keepalive = (self.keepalive).map(|k| k.paced(connections, KEEPALIVE_PINGS_PER_SECOND));
        let stretch = (connections as u32 / KEEPALIVE_PINGS_PER_SECOND).max(1);
        let every = [
            keepalive.map(|k| k.interval / 4),
            (self.timeouts.stall).map(|t| (t / 4).min(Duration::from_secs(1)) * stretch),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| t.max(Duration::from_millis(10)));
        (keepalive, every)
    }

    fn tick_due(
        &self,
        now: Instant,
        next_deadline_tick: &mut Instant,
        next_conn_tick: &mut Option<Instant>,
    ) {
        let deadlines = now >= *next_deadline_tick;
        if deadlines {
            *next_deadline_tick = now + DEADLINE_TICK;
        }
        let server = self.role == Role::Server;
        // A server looks at deadlines only while one of its connections watches one, a
        // client while a call with one the core watches is outstanding: without, the
        // deadline ticks cost nothing (no walk over the connections, no pacing).
        let deadlines = deadlines
            && if server {
                self.counters.deadlines_watched()
            } else {
                self.duty.deadline_calls() > 0
            };
        let conn_due = next_conn_tick.is_some_and(|at| now >= at);
        if !deadlines && !conn_due {
            return;
        }
        let conns = self.conns();
        // The pacing is worked out only when some connection gets the time: a server's
        // deadline tick mostly finds none due.
        let mut paced = None;
        let mut paced = || *paced.get_or_insert_with(|| self.paced(conns.len()));
        let every_conn = match conn_due {
            true => match paced().1 {
                Some(every) => {
                    *next_conn_tick = Some(now + every);
                    true
                }
                None => false,
            },
            false => false,
        };
        if !deadlines && !every_conn {
            return;
        }
        let mark = match server && !every_conn {
            true => deadline_mark(now),
            false => 0,
        };
        for conn in conns.iter() {
            if every_conn || !server || conn.deadline_due(mark) {
                conn.submit(Work::Timeout(now, paced().0));
            }
        }
    }
}
