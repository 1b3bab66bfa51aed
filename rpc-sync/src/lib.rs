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
//!   [`Schedule`] when woken: how async handlers run without an async runtime.
//! - [`WorkQueue`]: work from any thread to a pool of worker threads, which park while it
//!   is empty; its buffer is reused, so queueing allocates nothing in a steady state.
//! - [`Exclusive`]: a try-only lock. Whoever gets it owns the data until it lets go; nobody
//!   ever waits for it, so it cannot take part in a deadlock and may be held while calling out.
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
mod exclusive;
mod inbox;
mod lockdep;
mod locks;
mod oneshot;
mod park;
mod serializer;
mod task;
mod work_queue;

pub use budget::ByteBudget;
#[cfg(not(loom))]
pub use counting::CountingAllocator;
pub use exclusive::{Exclusive, ExclusiveGuard};
pub use inbox::{Inbox, Pushed, Signal, Wake};
pub use lockdep::{assert_unlocked, held_locks};
pub use locks::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use oneshot::{Completed, Oneshot};
pub use park::{park, park_timeout};
pub use serializer::Serializer;
pub use task::{Runnable, Schedule, Task};
pub use work_queue::WorkQueue;

/// Atomics, cells and parking: std's, or loom's under `--cfg loom`.
pub(crate) mod primitive {
    #[cfg(loom)]
    pub(crate) use loom::cell::UnsafeCell;
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
    #[cfg(loom)]
    pub(crate) use loom::thread::{current, park, Thread};

    /// Loom has no timed park: a spurious wake-up, which every caller tolerates.
    #[cfg(loom)]
    pub(crate) fn park_timeout(_: std::time::Duration) {
        loom::thread::yield_now();
    }

    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};

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
    #[cfg(not(loom))]
    pub(crate) use parking_lot::Mutex;

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
        pub(crate) fn wait<'a, T>(
            &self,
            guard: loom::sync::MutexGuard<'a, T>,
        ) -> loom::sync::MutexGuard<'a, T> {
            self.0
                .wait(guard)
                .expect("never poisoned: nothing panics under it")
        }
    }

    /// Parks threads until another notifies them, releasing a [`Mutex`] while they wait.
    #[cfg(not(loom))]
    pub(crate) struct Condvar(parking_lot::Condvar);
    #[cfg(not(loom))]
    impl Condvar {
        pub(crate) const fn new() -> Self {
            Condvar(parking_lot::Condvar::new())
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn wait<'a, T>(
            &self,
            mut guard: parking_lot::MutexGuard<'a, T>,
        ) -> parking_lot::MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
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
