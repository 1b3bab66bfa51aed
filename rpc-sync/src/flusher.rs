//! [`Flusher`]: who writes a queue out, one thread at a time, with the work of a stalled
//! writer handed to a designated thread. A TCP link's writer: posting threads write their
//! frames themselves while the socket takes them; once it is full, the I/O thread finishes
//! when it becomes writable.

use std::sync::atomic::Ordering;

use crate::primitive::{AtomicU8, UnsafeCell};

/// A thread holds the turn (writes).
const OWNED: u8 = 1;
/// Work was queued since the turn's holder last looked: it writes another round.
const PENDING: u8 = 2;
/// The last round met a full sink: posters leave their work to the designated thread.
const STALLED: u8 = 4;
/// The designated thread was asked to resume and has not taken the request yet.
const REQUESTED: u8 = 8;

/// The turn to write out a queue (which lives outside, lock-free or not), and the writer's
/// state `T`, held by one thread at a time. Nobody ever waits for the turn.
///
/// Protocol: a poster queues its work, then calls [`Flusher::try_flush`]. It gets the turn if
/// nobody holds it and the flusher is not stalled; otherwise it marks work pending and goes:
/// the holder writes another round before it lets go ([`FlushTurn::finish`]), and a stalled
/// flusher is resumed by the designated thread ([`Flusher::resume`]), which writes everything
/// queued. A holder that meets a full sink stalls the flusher ([`FlushTurn::stall`]) and asks
/// the designated thread (once per stall) to resume when the sink has room.
///
/// Guarantee: nothing queued is left behind. After every post, some thread that will write
/// runs: the poster itself, the holder of the turn (the pending mark and its look at it are
/// one atomic word, so one of the two sees the other), or, while stalled, the designated
/// thread (the loom models `flusher_leaves_nothing_behind` and
/// `flusher_hands_a_stall_to_the_resumer`). The turn is held by one thread at a time, and
/// what one holder wrote to `T` is seen by the next.
pub struct Flusher<T> {
    state: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is only reached through a `FlushTurn`, and one exists at a time (`OWNED`
// is set by the one successful compare-exchange and cleared when the turn ends), so sharing
// the `Flusher` only ever moves `T` between threads: `T: Send` suffices.
unsafe impl<T: Send> Sync for Flusher<T> {}
// SAFETY: owning the `Flusher` owns the `T`.
unsafe impl<T: Send> Send for Flusher<T> {}

/// The turn to write; dropping it lets go (without looking for pending work: the end of a
/// failed writer, whose link is closing).
#[must_use = "the turn ends when it is dropped"]
pub struct FlushTurn<'a, T> {
    flusher: &'a Flusher<T>,
}

impl<T> Flusher<T> {
    /// A flusher nobody holds, not stalled.
    pub fn new(value: T) -> Self {
        Flusher {
            state: AtomicU8::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// After queueing work: the turn, if this thread is to write now; `None` if the holder
    /// of the turn, or the designated thread of a stalled flusher, will write it.
    #[inline]
    pub fn try_flush(&self) -> Option<FlushTurn<'_, T>> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let (next, got) = if s & (OWNED | STALLED) != 0 {
                (s | PENDING, false)
            } else {
                ((s | OWNED) & !PENDING, true)
            };
            // Written even when unchanged (work already pending): the holder's next look at
            // the word then reads this write, and with it sees the work queued before it.
            match self
                .state
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return got.then(|| FlushTurn { flusher: self }),
                Err(now) => s = now,
            }
        }
    }

    /// The designated thread: the sink has room again (or it was asked to look). Ends the
    /// stall, takes the request if `requested` (the asking was received), and returns the
    /// turn to write what is queued, unless another thread holds it (which writes it).
    pub fn resume(&self, requested: bool) -> Option<FlushTurn<'_, T>> {
        let clear = if requested {
            STALLED | REQUESTED
        } else {
            STALLED
        };
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let (next, got) = if s & OWNED != 0 {
                (s & !clear, false)
            } else {
                ((s & !clear & !PENDING) | OWNED, true)
            };
            match self
                .state
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return got.then(|| FlushTurn { flusher: self }),
                Err(now) => s = now,
            }
        }
    }

    /// Whether the flusher is stalled (a hint: it may change at once).
    #[inline]
    pub fn is_stalled(&self) -> bool {
        self.state.load(Ordering::Acquire) & STALLED != 0
    }
}

impl<T> FlushTurn<'_, T> {
    /// Runs `f` on the writer's state.
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: this turn is the only one (see `Sync`), and `&mut self` keeps the access
        // unique for the duration of `f`.
        self.flusher.value.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// The holder wrote everything it found queued: it lets go, unless work was queued
    /// meanwhile, in which case it keeps the turn for another round (`Some`).
    pub fn finish(self) -> Option<Self> {
        let state = &self.flusher.state;
        let mut s = state.load(Ordering::Relaxed);
        loop {
            let next = if s & PENDING != 0 {
                s & !PENDING
            } else {
                s & !OWNED
            };
            match state.compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if s & PENDING != 0 => return Some(self),
                Ok(_) => {
                    std::mem::forget(self);
                    return None;
                }
                Err(now) => s = now,
            }
        }
    }

    /// The sink is full: the holder lets go and the flusher stalls until the designated
    /// thread resumes it. `ask`: the holder is not the designated thread, which must be asked
    /// to resume; returns `true` if this thread is to ask it (nobody asked since it took the
    /// last request).
    pub fn stall(self, ask: bool) -> bool {
        let state = &self.flusher.state;
        let mut s = state.load(Ordering::Relaxed);
        loop {
            let mut next = (s & !(OWNED | PENDING)) | STALLED;
            if ask {
                next |= REQUESTED;
            }
            match state.compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    std::mem::forget(self);
                    return ask && s & REQUESTED == 0;
                }
                Err(now) => s = now,
            }
        }
    }
}

impl<T> Drop for FlushTurn<'_, T> {
    fn drop(&mut self) {
        self.flusher.state.fetch_and(!OWNED, Ordering::AcqRel);
    }
}
