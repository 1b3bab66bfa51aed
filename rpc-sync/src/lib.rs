//! The hand-off primitives of `rpc-core`'s data path, kept apart so that each can be
//! model-checked with [loom](https://docs.rs/loom) quickly, and the one place outside the verbs
//! module where `unsafe` code is allowed.
//!
//! - [`Mutex`] and [`RwLock`]: `parking_lot` locks that, in debug builds, count the locks the
//!   current thread holds, so [`assert_unlocked`] can check at every park, post and call into
//!   user code that no runtime lock is held there (a lock held across a wait is how the client
//!   hung in issue 7).
//! - [`park`] and [`park_timeout`]: the thread parks of the runtime, each checked by
//!   [`assert_unlocked`] first.
//! - [`Oneshot`]: a reusable single-value slot where a completer leaves a call's outcome and
//!   the waiting thread or task picks it up, without a lock.
//! - [`Serializer`]: state worked on by one thread at a time, with work left for its owner
//!   instead of waited for (a connection's protocol state).
//! - [`ByteBudget`]: bytes held against a limit, reserved by a connection's owner and
//!   released by whichever thread drops them (the memory a peer makes a server hold).
//! - [`CountingAllocator`]: the system allocator, counting allocations and live bytes (for
//!   benchmarks and memory-bound tests).
//! - [`Inbox`] and [`Signal`]: a streaming call's received messages, from the connection's
//!   owner to the thread or task reading them; and the owner's "send the next message" to a
//!   stream's sender.
//! - [`Task`]: a future in one allocation, polled by one thread at a time and handed to a
//!   [`Schedule`] when woken: how async handlers run without an async runtime; renewable for
//!   the next future once done and unshared, so the allocation is reused.
//! - [`WorkQueue`]: work from any thread to a pool of worker threads, which park while it
//!   is empty; its buffer is reused, so queueing allocates nothing in a steady state.
//! - [`Exclusive`]: a try-only lock. Whoever gets it owns the data until it lets go; nobody
//!   ever waits for it, so it cannot take part in a deadlock and may be held while calling out.
//! - [`DrainQueue`]: items pushed by any thread and drained by whoever polls: a consumer
//!   that sleeps while it is empty, or a producer draining in place (the TCP and in-memory
//!   transports' completion queue).
//! - [`Flusher`]: the turn to write a queue out, one thread at a time, re-checked before it is
//!   let go, with a stalled writer's work handed to a designated thread (a TCP link's writer
//!   and its I/O thread).
//! - [`PollDuty`]: who polls a client endpoint's completion queue, its poller thread or a
//!   caller driving it while it waits, and when the poller thread stands back.
//! - [`CreditLedger`]: receive slots re-posted by any thread and the credits the connection's
//!   owner owes, so that credits due are never left unsent.
//! - [`SlotPool`]: numbered slots shared by many holders, where one that found none is named
//!   by the next slot given back (a verbs server's shared send slots).
//! - [`SingleFlight`]: work one thread runs for all that need it at once, the others waiting
//!   for its result (a client's reconnect, shared by the callers that found the connection
//!   gone).
//! - [`Flag`], [`Count`] and [`Published`]: a boolean, a count and a `u64` published with
//!   release/acquire (closed and stopped flags, calls in flight, a stream's call id); and
//!   [`woke_a_thread`], the process-wide count of wake-ups (a statistic).
//!
//! Outside this crate the workspace's library code uses no atomic ordering stronger than
//! `Relaxed` and no `parking_lot` (`scripts/check-sync`, part of `make test`): every
//! hand-off between threads is one of these primitives.
//!
//! Quick start:
//!
//! ```
//! use rpc_sync::{assert_unlocked, Exclusive, Mutex};
//!
//! let queue = Mutex::new(Vec::new());
//! queue.lock().push(1);            // the guard is dropped at the end of the statement
//! assert_unlocked("before a post"); // panics in debug builds if a counted lock is held
//!
//! let owner = Exclusive::new(0u32);
//! if let Some(mut state) = owner.try_lock() {
//!     *state += 1;                  // only one thread at a time gets here; others go on
//! }
//! assert_eq!(*owner.try_lock().unwrap(), 1);
//! ```
//!
//! Under `--cfg loom` the primitives are built on loom's atomics and cells; `tests/loom.rs`
//! holds the models (`RUSTFLAGS="--cfg loom" cargo test -p rpc-sync --release --test loom`).

mod budget;
#[cfg(not(loom))]
mod counting;
mod credits;
mod drain_queue;
mod exclusive;
mod flag;
mod flusher;
mod inbox;
mod lockdep;
mod locks;
mod oneshot;
mod park;
mod poll_duty;
mod serializer;
mod single_flight;
mod slot_pool;
mod task;
mod wake;
mod work_queue;

pub use budget::ByteBudget;
#[cfg(not(loom))]
pub use counting::CountingAllocator;
pub use credits::CreditLedger;
pub use drain_queue::DrainQueue;
pub use exclusive::{Exclusive, ExclusiveGuard};
pub use flag::{wakeups_issued, woke_a_thread, Count, Flag, Published};
pub use flusher::{FlushTurn, Flusher};
pub use inbox::{Inbox, Pushed, Signal};
pub use lockdep::{assert_unlocked, held_locks};
pub use locks::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use oneshot::{Completed, Oneshot};
pub use park::{park, park_timeout};
pub use poll_duty::{CallBack, PollDuty};
pub use serializer::Serializer;
pub use single_flight::SingleFlight;
pub use slot_pool::SlotPool;
pub use task::{Runnable, Schedule, Task};
pub use wake::Wake;
pub use work_queue::WorkQueue;

/// Atomics, cells and parking: std's, or loom's under `--cfg loom`.
pub(crate) mod primitive {
    #[cfg(loom)]
    pub(crate) use loom::cell::UnsafeCell;
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
    #[cfg(loom)]
    pub(crate) use loom::thread::{current, park, Thread};

    /// Loom has no timed park: a spurious wake-up, which every caller tolerates.
    #[cfg(loom)]
    pub(crate) fn park_timeout(_: std::time::Duration) {
        loom::thread::yield_now();
    }

    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};

    /// A short internal lock (never held across a wake or a park): loom's under loom.
    #[cfg(loom)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);
    #[cfg(loom)]
    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .expect("never poisoned: nothing panics under it")
        }
    }
    /// A short internal lock (never held across a wake or a park). `std`'s futex lock:
    /// nothing panics under these locks, so a poisoned one is used as it is.
    #[cfg(not(loom))]
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);
    #[cfg(not(loom))]
    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Self {
            Mutex(std::sync::Mutex::new(value))
        }
        #[inline]
        pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// Parks threads until another notifies them, releasing a [`Mutex`] while they wait.
    #[cfg(loom)]
    pub(crate) struct Condvar(loom::sync::Condvar);
    #[cfg(loom)]
    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
        pub(crate) fn wait<'a, T>(
            &self,
            guard: loom::sync::MutexGuard<'a, T>,
        ) -> loom::sync::MutexGuard<'a, T> {
            self.0
                .wait(guard)
                .expect("never poisoned: nothing panics under it")
        }
        /// Loom has no timed wait: it waits for a notification (`false`: not timed out).
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            guard: loom::sync::MutexGuard<'a, T>,
            timeout: std::time::Duration,
        ) -> (loom::sync::MutexGuard<'a, T>, bool) {
            let (guard, result) = self
                .0
                .wait_timeout(guard, timeout)
                .expect("never poisoned: nothing panics under it");
            (guard, result.timed_out())
        }
    }

    /// Parks threads until another notifies them, releasing a [`Mutex`] while they wait.
    /// `std`'s futex condition variable: a notification reads no clock (parking_lot's reads
    /// one for its fairness timeout on every wake-up).
    #[cfg(not(loom))]
    pub(crate) struct Condvar(std::sync::Condvar);
    #[cfg(not(loom))]
    impl Condvar {
        pub(crate) const fn new() -> Self {
            Condvar(std::sync::Condvar::new())
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
        pub(crate) fn wait<'a, T>(
            &self,
            guard: std::sync::MutexGuard<'a, T>,
        ) -> std::sync::MutexGuard<'a, T> {
            self.0
                .wait(guard)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        /// Waits for a notification or `timeout`; `true` if it timed out.
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            guard: std::sync::MutexGuard<'a, T>,
            timeout: std::time::Duration,
        ) -> (std::sync::MutexGuard<'a, T>, bool) {
            let (guard, result) = self
                .0
                .wait_timeout(guard, timeout)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (guard, result.timed_out())
        }
    }
    #[cfg(not(loom))]
    pub(crate) use std::thread::{current, park, park_timeout, Thread};

    /// `std`'s `UnsafeCell` with loom's closure-based access, so one body serves both.
    #[cfg(not(loom))]
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}
