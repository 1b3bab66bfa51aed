//! Small published values: [`Flag`], [`Count`] and [`Published`]. Each change is a release
//! and each read an acquire, so a thread that reads a value sees what the thread that wrote
//! it did before: the runtime's "closed", "stopped", "cancelled" flags, its counts of calls in
//! flight, a stream's call id. Nothing stronger (no store-then-load ordering between two of
//! them): a protocol that needs one of two threads to see the other is a primitive of its own.

use std::sync::atomic::Ordering;

use crate::primitive::{AtomicBool, AtomicU64, AtomicUsize};

/// A boolean published with release/acquire: whoever sees it raised sees what the raiser did
/// before raising it. [`Flag::raise`] says whether this call raised it, so exactly one of
/// several racing raisers wins (the loom model `flag_publishes_and_one_raiser_wins`).
#[derive(Debug, Default)]
pub struct Flag(AtomicBool);

impl Flag {
    /// A flag, raised or not.
    pub fn new(raised: bool) -> Flag {
        Flag(AtomicBool::new(raised))
    }

    /// Raises the flag; `true` if this call raised it (it was lowered).
    #[inline]
    pub fn raise(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    /// Raises or lowers the flag without asking whether it changed (a release store: no
    /// read-modify-write, cheap on a hot path).
    #[inline]
    pub fn set(&self, raised: bool) {
        self.0.store(raised, Ordering::Release);
    }

    /// Lowers the flag (a release store: no read-modify-write, cheap on a hot path).
    #[inline]
    pub fn lower(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether the flag is raised.
    #[inline]
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A count changed from any thread, each change a release and each read an acquire: a thread
/// that reads a count sees what the threads whose changes it reads did before them (a
/// shutdown that waits for the calls in flight to reach 0 sees what those calls did).
#[derive(Debug, Default)]
pub struct Count(AtomicUsize);

impl Count {
    /// A count starting at `n`.
    pub fn new(n: usize) -> Count {
        Count(AtomicUsize::new(n))
    }

    /// Adds `n`; returns the count before.
    #[inline]
    pub fn add(&self, n: usize) -> usize {
        self.0.fetch_add(n, Ordering::AcqRel)
    }

    /// Subtracts `n` (which must not exceed the count); returns the count before.
    #[inline]
    pub fn sub(&self, n: usize) -> usize {
        self.0.fetch_sub(n, Ordering::AcqRel)
    }

    /// Adds 1 unless the count is at `bound` or beyond; `false` (nothing added) then. A count
    /// of things admitted up to a bound (frames queued, calls queued): it never passes
    /// `bound` for long, as one that got over it takes itself off at once.
    #[inline]
    pub fn try_add_below(&self, bound: usize) -> bool {
        if self.0.fetch_add(1, Ordering::AcqRel) >= bound {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The count now (a snapshot).
    #[inline]
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// A `u64` published with release/acquire: whoever reads a value sees what the thread that
/// stored it did before (a stream's call id, set once the owner opened the call).
#[derive(Debug, Default)]
pub struct Published(AtomicU64);

impl Published {
    /// A published `value`.
    pub fn new(value: u64) -> Published {
        Published(AtomicU64::new(value))
    }

    /// Publishes `value`.
    #[inline]
    pub fn set(&self, value: u64) {
        self.0.store(value, Ordering::Release);
    }

    /// The value last published.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Thread wake-ups issued (process-wide): a statistic, so `Relaxed`.
static WAKEUPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts one thread wake-up the runtime issues (a parked caller unparked, a sleeping poller
/// woken, work handed to another thread): a statistic for the `wakeups_per_call` benchmark,
/// kept here so that every layer (transports, runtime) can count without reaching up.
#[inline]
pub fn woke_a_thread() {
    WAKEUPS.fetch_add(1, Ordering::Relaxed);
}

/// The wake-ups [`woke_a_thread`] counted in this process so far.
pub fn wakeups_issued() -> u64 {
    WAKEUPS.load(Ordering::Relaxed)
}
