//! How long a blocking caller polls for its reply before it sleeps on the queue: the client's
//! configured spin (`ClientBuilder::spin`) at least, lengthened up to [`MAX_CALLER_SPIN`]
//! (and never past the client's idle spin) when a reply comes just after it.
//!
//! A reply that comes within the spin costs no thread wake-up; one that comes after costs
//! two (the caller sleeps, the queue's notification wakes it). Where the round trip is about
//! as long as the spin (an emulated machine, a loaded host) the spin ends just before a
//! share of the replies, and those calls pay the wake-ups. A caller that slept, and whose
//! reply came within twice the spin, sets the spin to half as much again as that reply took;
//! each reply within the spin shortens it by 1/2048, back towards the configured one
//! (slowly: a few thousand replies, as the late ones that lengthened it are a tail of a few
//! percent). A reply later than that (a slow handler, not a round trip just over the spin)
//! puts the configured spin back: spinning for it would cost a CPU for the handler's whole
//! time to save one wake-up.
//!
//! One relaxed atomic per client endpoint: a heuristic that callers share, not a hand-off
//! (no caller waits on it, and a lost update only delays the adaptation by a call).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The longest a blocking caller spins (and no longer than the client's idle spin,
/// `ClientBuilder::idle_spin`, 1 ms by default: a client that asked its threads to busy-poll
/// less gets no longer spin than that).
pub(crate) const MAX_CALLER_SPIN: Duration = Duration::from_millis(1);

/// The adapted spin, in nanoseconds (0: the configured one).
#[derive(Debug, Default)]
pub(crate) struct CallerSpin {
    nanos: AtomicU32,
}

impl CallerSpin {
    /// The spin for the next caller: `configured` or the adapted one, whichever is longer,
    /// within the longest allowed (see [`MAX_CALLER_SPIN`]; `idle_spin` is the client's).
    #[inline]
    pub(crate) fn spin(&self, configured: Duration, idle_spin: Duration) -> Duration {
        let adapted = self.nanos.load(Ordering::Relaxed);
        if adapted == 0 {
            return configured;
        }
        let adapted = Duration::from_nanos(u64::from(adapted)).min(longest(idle_spin));
        configured.max(adapted)
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

    /// The caller slept after spinning for `spun`, and its reply came `took` after it
    /// started to spin.
    pub(crate) fn came_after(&self, took: Duration, spun: Duration, idle_spin: Duration) {
        let longest = longest(idle_spin);
        let want = match took <= 2 * spun && spun < longest {
            true => nanos((took + took / 2).min(longest)),
            false => 0,
        };
        self.nanos.store(want, Ordering::Relaxed);
    }
}

fn longest(idle_spin: Duration) -> Duration {
    MAX_CALLER_SPIN.min(idle_spin)
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIGURED: Duration = Duration::from_micros(200);
    const IDLE_SPIN: Duration = Duration::from_millis(1);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn the_configured_spin_stands_until_a_reply_comes_just_after_it() {
        let spin = CallerSpin::default();
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
        spin.came_within(CONFIGURED, CONFIGURED);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
        // Slept; the reply took 300 µs: the next callers spin 450 µs.
        spin.came_after(us(300), CONFIGURED, IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), us(450));
    }

    #[test]
    fn a_reply_well_after_the_spin_puts_the_configured_one_back() {
        let spin = CallerSpin::default();
        // A 500 µs handler: spinning through it would cost its whole time.
        spin.came_after(us(500), CONFIGURED, IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
        spin.came_after(us(300), CONFIGURED, IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), us(450));
        spin.came_after(us(5_000), us(450), IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
    }

    #[test]
    fn the_spin_never_passes_the_longest_nor_the_idle_spin() {
        let spin = CallerSpin::default();
        spin.came_after(us(390), CONFIGURED, IDLE_SPIN);
        spin.came_after(us(900), us(585), IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), MAX_CALLER_SPIN);
        // At the longest already, a sleep puts the configured spin back.
        spin.came_after(us(1_100), MAX_CALLER_SPIN, IDLE_SPIN);
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
        // A client whose threads busy-poll at most 300 µs spins no longer.
        spin.came_after(us(390), CONFIGURED, us(300));
        assert_eq!(spin.spin(CONFIGURED, us(300)), us(300));
        // Nor does it lengthen a spin already there.
        spin.came_after(us(390), us(300), us(300));
        assert_eq!(spin.spin(CONFIGURED, us(300)), CONFIGURED);
    }

    #[test]
    fn replies_within_the_spin_bring_it_back_to_the_configured_one() {
        let spin = CallerSpin::default();
        spin.came_after(us(390), CONFIGURED, IDLE_SPIN);
        spin.came_after(us(600), us(585), IDLE_SPIN);
        let mut hits = 0;
        while spin.spin(CONFIGURED, IDLE_SPIN) > CONFIGURED {
            let now = spin.spin(CONFIGURED, IDLE_SPIN);
            spin.came_within(now, CONFIGURED);
            assert!(
                spin.spin(CONFIGURED, IDLE_SPIN) < now,
                "each reply within shortens it"
            );
            hits += 1;
        }
        // From 900 µs by 1/2048 a reply: about 3,000 replies.
        assert!((2_500..=3_500).contains(&hits), "{hits} replies");
        assert_eq!(spin.spin(CONFIGURED, IDLE_SPIN), CONFIGURED);
    }
}
