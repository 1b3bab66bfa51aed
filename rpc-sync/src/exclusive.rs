//! [`Exclusive`]: ownership that is taken, never waited for.

#[cfg(not(loom))]
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;

use crate::primitive::{AtomicBool, UnsafeCell};

/// Data that one thread at a time may own. [`Exclusive::try_lock`] either hands over the data
/// or says someone else has it; there is no blocking `lock`. A thread that fails to get it
/// leaves the work to the owner, so an `Exclusive` can never be part of a deadlock and may be
/// held across calls out (the completion-queue poll state: whoever polls owns it).
///
/// Whoever leaves work for the owner must make sure the owner sees it: the owner re-checks for
/// work after [`ExclusiveGuard`] is dropped (the release is `SeqCst`, pairing with a `SeqCst`
/// fence after publishing the work).
pub struct Exclusive<T> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (`taken` is set by the one successful compare-exchange and cleared when that guard drops),
// so sharing the `Exclusive` only ever moves `T` between threads: `T: Send` suffices.
unsafe impl<T: Send> Sync for Exclusive<T> {}
// SAFETY: owning the `Exclusive` owns the `T`.
unsafe impl<T: Send> Send for Exclusive<T> {}

/// Proof of ownership of an [`Exclusive`]'s data; dropping it lets go.
#[must_use = "ownership ends when the guard is dropped"]
pub struct ExclusiveGuard<'a, T> {
    owner: &'a Exclusive<T>,
}

impl<T> Exclusive<T> {
    /// Unowned data.
    pub fn new(value: T) -> Self {
        Exclusive {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes ownership if nobody has it.
    pub fn try_lock(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ExclusiveGuard { owner: self })
    }

    /// Whether some thread owns the data right now (a hint: it may change at once).
    pub fn is_taken(&self) -> bool {
        self.taken.load(Ordering::SeqCst)
    }
}

impl<T> ExclusiveGuard<'_, T> {
    /// Runs `f` on the data.
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: this guard is the only one (see `Sync`), and `&mut self` keeps the access
        // unique for the duration of `f`.
        self.owner.value.with_mut(|p| f(unsafe { &mut *p }))
    }
}

#[cfg(not(loom))]
impl<T> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Sync`); the shared borrow of the guard
        // keeps `with`/`deref_mut` from running at the same time.
        self.owner.value.with(|p| unsafe { &*p })
    }
}

#[cfg(not(loom))]
impl<T> DerefMut for ExclusiveGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one (see `Sync`); the unique borrow of the guard
        // makes this the only access until it ends.
        self.owner.value.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T> Drop for ExclusiveGuard<'_, T> {
    fn drop(&mut self) {
        // SeqCst: a thread that published work and then found `taken` set relies on the owner
        // seeing that work in its re-check after this store.
        self.owner.taken.store(false, Ordering::SeqCst);
    }
}
