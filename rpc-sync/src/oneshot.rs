//! [`Oneshot`]: where a call's outcome is left by the thread that completes it and picked up by
//! the thread or task that waits for it, without a lock. Reusable: [`Oneshot::reset`] makes a
//! taken slot empty again, so the runtime can pool them (no allocation per call).

use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::park::{park, park_timeout};
use crate::primitive::{AtomicU8, UnsafeCell};
use crate::wake::{Waiter, Wake};

/// A waiter is registered in `waiter`.
const WAITER: u8 = 0b001;
/// The value is in `value`.
const VALUE: u8 = 0b010;
/// A completer claimed the slot (it is writing the value): later completers give up.
const CLAIMED: u8 = 0b100;

/// What [`Oneshot::complete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// The slot was completed already: the value was dropped.
    Lost,
    /// The value is in the slot; nobody was waiting for it yet.
    Stored,
    /// The value is in the slot and the waiting thread or task was woken.
    Woke,
}

/// A single-value hand-off between one completer and one receiver.
///
/// Protocol (the loom models in `tests/loom.rs` check it): the completer claims the slot
/// (`CLAIMED`), writes the value, then sets `VALUE`; if `WAITER` was set at that moment it
/// wakes the registered waiter, which the receiver no longer touches once `VALUE` is set. The
/// receiver writes its waiter only while `WAITER` is clear, then sets it and re-checks
/// `VALUE`, so a completion racing the registration is seen by one side or the other.
pub struct Oneshot<T> {
    state: AtomicU8,
    value: UnsafeCell<Option<T>>,
    waiter: UnsafeCell<Option<Waiter>>,
}

// SAFETY: `value` is written by the one completer that claimed the slot before it sets
// `VALUE`, and read by the receiver only after it saw `VALUE` (acquire/release on `state`);
// `waiter` is written by the receiver only while `WAITER` is clear and read by the completer
// only after it saw `WAITER` set together with its own `VALUE` (from then on the receiver
// leaves it alone). `T` and the waiter move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Oneshot<T> {}
// SAFETY: as above; owning the slot owns the `T`.
unsafe impl<T: Send> Send for Oneshot<T> {}

impl<T> Default for Oneshot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Oneshot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Oneshot {
            state: AtomicU8::new(0),
            value: UnsafeCell::new(None),
            waiter: UnsafeCell::new(None),
        }
    }

    /// Leaves `value` for the receiver and wakes it if it waits. The first completion wins:
    /// a later one drops its value ([`Completed::Lost`]).
    pub fn complete(&self, value: T) -> Completed {
        match self.complete_deferred(value).map(Wake::wake) {
            None => Completed::Lost,
            Some(true) => Completed::Woke,
            Some(false) => Completed::Stored,
        }
    }

    /// Leaves `value` for the receiver, and the wake-up of a receiver that waits to the
    /// returned [`Wake`]: a completer that holds something the receiver may want (a
    /// connection's state) leaves the value now and wakes the receiver once it let go.
    /// `None`: the slot was completed already, and `value` dropped.
    pub fn complete_deferred(&self, value: T) -> Option<Wake> {
        if self.state.fetch_or(CLAIMED, Ordering::Acquire) & CLAIMED != 0 {
            return None;
        }
        // SAFETY: `CLAIMED` makes this the only completer; the receiver reads `value` only
        // after `VALUE`, which is set below with release ordering.
        self.value.with_mut(|v| unsafe { *v = Some(value) });
        let prev = self.state.fetch_or(VALUE, Ordering::AcqRel);
        if prev & WAITER == 0 {
            return Some(Wake(None));
        }
        // SAFETY: `WAITER` was set when `VALUE` was: the receiver registered its waiter and,
        // seeing `VALUE` from now on, never touches it again.
        Some(Wake(self.waiter.with_mut(|w| unsafe { (*w).take() })))
    }

    /// Whether the value is there (it may have been taken already).
    pub fn is_complete(&self) -> bool {
        self.state.load(Ordering::Acquire) & VALUE != 0
    }

    /// Takes the value if it is there.
    pub fn try_take(&self) -> Option<T> {
        if self.state.load(Ordering::Acquire) & VALUE == 0 {
            return None;
        }
        // SAFETY: `VALUE` is set, so the completer is done with `value`; only the receiver
        // (this thread: one receiver per slot) takes it.
        self.value.with_mut(|v| unsafe { (*v).take() })
    }

    /// Registers `waiter` to be woken by the completion; `false` if the value is already
    /// there (then nothing is registered and the caller takes it).
    fn register(&self, waiter: Waiter) -> bool {
        // Withdraw a previous registration before touching the cell.
        let prev = self.state.fetch_and(!WAITER, Ordering::AcqRel);
        if prev & VALUE != 0 {
            return false;
        }
        // SAFETY: `WAITER` is clear and `VALUE` was not set: the completer will not read the
        // cell unless it sees `WAITER`, which is set only after this write.
        self.waiter.with_mut(|w| unsafe { *w = Some(waiter) });
        let prev = self.state.fetch_or(WAITER, Ordering::AcqRel);
        prev & VALUE == 0
    }

    /// Blocks the calling thread until the value arrives (`Some`) or `deadline` passes
    /// (`None`; the slot stays as it is, a later completion still lands in it).
    pub fn wait(&self, deadline: Option<Instant>) -> Option<T> {
        loop {
            if let Some(v) = self.try_take() {
                return Some(v);
            }
            if !self.register(Waiter::Thread(crate::primitive::current())) {
                continue;
            }
            while self.state.load(Ordering::Acquire) & VALUE == 0 {
                match deadline {
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            return self.try_take();
                        }
                        park_timeout(d - now);
                    }
                    None => park(),
                }
            }
        }
    }

    /// Polls from a task: the value, or `Pending` with the task's waker registered.
    pub fn poll_take(&self, cx: &mut Context<'_>) -> Poll<T> {
        loop {
            if let Some(v) = self.try_take() {
                return Poll::Ready(v);
            }
            if self.register(Waiter::Task(cx.waker().clone())) {
                return Poll::Pending;
            }
        }
    }

    /// Empties a slot for reuse. Requires exclusive access (no completer or receiver left).
    pub fn reset(&mut self) {
        self.state = AtomicU8::new(0);
        // SAFETY: `&mut self`: nobody else can reach the cells.
        self.value.with_mut(|v| unsafe { *v = None });
        // SAFETY: as above.
        self.waiter.with_mut(|w| unsafe { *w = None });
    }
}
