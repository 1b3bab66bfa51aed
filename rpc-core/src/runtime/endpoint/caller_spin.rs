//! How long a blocking caller polls for its reply before it sleeps on the queue: the client's
//! configured spin (`ClientBuilder::spin`) at least, lengthened up to [`MAX_CALLER_SPIN`]
//! when replies keep coming just after it.
//!
//! A reply that comes within the spin costs no thread wake-up; one that comes after costs
//! two (the caller sleeps, the queue's notification wakes it). Where the round trip is slow
//! (an emulated machine, a loaded host) the configured spin ends just before most replies,
//! and every call pays the wake-ups: a caller that slept, and whose reply came within
//! [`MAX_CALLER_SPIN`], sets the spin to half as much again as that reply took; each reply
//! within the spin shortens it by 1/2048, back towards the configured one (slowly: a few
//! thousand replies, as the late ones that lengthened it are the tail of a few percent). A
//! reply slower than [`MAX_CALLER_SPIN`] (a slow handler) puts the configured spin back:
//! spinning would not reach it. A longer spin costs CPU only while a reply is late: one
//! that comes early ends it.
//!
//! One relaxed atomic per client endpoint: a heuristic that callers share, not a hand-off
//! (no caller waits on it, and a lost update only delays the adaptation by a call).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The longest a blocking caller spins, as long as the poller thread's idle spin after work
/// (`RPC_IDLE_SPIN_US`, 1 ms by default): no thread of ours polls an empty queue longer.
pub(crate) const MAX_CALLER_SPIN: Duration = Duration::from_millis(1);

/// The adapted spin, in nanoseconds (0: the configured one).
#[derive(Debug, Default)]
pub(crate) struct CallerSpin {
    nanos: AtomicU32,
}

impl CallerSpin {
    /// The spin for the next caller: `configured` or the adapted one, whichever is longer.
    #[inline]
    pub(crate) fn spin(&self, configured: Duration) -> Duration {
        let adapted = self.nanos.load(Ordering::Relaxed);
        if adapted == 0 {
            return configured;
        }
        configured.max(Duration::from_nanos(u64::from(adapted)))
    }

    /// The reply came while the caller spun for `spun` (as [`CallerSpin::spin`] gave it).
    #[inline]
    pub(crate) fn came_within(&self, spun: Duration, configured: Duration) {
        if spun <= configured {
            return;
        }
        let ns = nanos(spun);
        self.nanos.store(ns - (ns >> 11).max(1), Ordering::Relaxed);
    }

    /// The caller slept, and its reply came `took` after it started to spin.
    pub(crate) fn came_after(&self, took: Duration, spun: Duration) {
        let want = match took > MAX_CALLER_SPIN {
            true => 0,
            false => nanos((took + took / 2).max(spun).min(MAX_CALLER_SPIN)),
        };
        self.nanos.store(want, Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIGURED: Duration = Duration::from_micros(200);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn the_configured_spin_stands_until_a_reply_comes_just_after_it() {
        let spin = CallerSpin::default();
        assert_eq!(spin.spin(CONFIGURED), CONFIGURED);
        spin.came_within(CONFIGURED, CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED), CONFIGURED);
        // Slept; the reply took 400 µs: the next callers spin 600 µs.
        spin.came_after(us(400), CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED), us(600));
    }

    #[test]
    fn a_reply_slower_than_the_longest_spin_puts_the_configured_one_back() {
        let spin = CallerSpin::default();
        spin.came_after(us(5_000), CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED), CONFIGURED);
        spin.came_after(us(300), CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED), us(450));
        spin.came_after(us(5_000), us(450));
        assert_eq!(spin.spin(CONFIGURED), CONFIGURED);
    }

    #[test]
    fn the_spin_never_passes_the_longest_and_never_shrinks_on_a_miss() {
        let spin = CallerSpin::default();
        spin.came_after(us(900), CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED), MAX_CALLER_SPIN);
        // A sleep after a long spin whose reply came soon after its start keeps the spin.
        spin.came_after(us(100), MAX_CALLER_SPIN);
        assert_eq!(spin.spin(CONFIGURED), MAX_CALLER_SPIN);
    }

    #[test]
    fn replies_within_the_spin_bring_it_back_to_the_configured_one() {
        let spin = CallerSpin::default();
        spin.came_after(us(600), CONFIGURED);
        let mut hits = 0;
        while spin.spin(CONFIGURED) > CONFIGURED {
            let now = spin.spin(CONFIGURED);
            spin.came_within(now, CONFIGURED);
            assert!(spin.spin(CONFIGURED) < now, "each reply within shortens it");
            hits += 1;
        }
        // From 900 µs by 1/2048 a reply: about 3,000 replies.
        assert!((2_500..=3_500).contains(&hits), "{hits} replies");
        assert_eq!(spin.spin(CONFIGURED), CONFIGURED);
    }
}
