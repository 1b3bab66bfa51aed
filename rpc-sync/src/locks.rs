//! `parking_lot` locks whose guards are counted by [`crate::lockdep`].

use std::ops::{Deref, DerefMut};

use crate::lockdep::{acquired, released};

/// A mutex (`parking_lot`'s) whose guards count as held runtime locks in debug builds.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(parking_lot::Mutex<T>);

/// The guard of a [`Mutex`].
#[must_use = "the lock is released when the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized>(parking_lot::MutexGuard<'a, T>);

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Self {
        Mutex(parking_lot::Mutex::new(value))
    }

    /// Consumes the mutex, returning the data.
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, blocking until the lock is free.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let guard = self.0.lock();
        acquired();
        MutexGuard(guard)
    }

    /// Locks if free.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let guard = self.0.try_lock()?;
        acquired();
        Some(MutexGuard(guard))
    }

    /// Mutable access without locking (the borrow proves exclusivity).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        released();
    }
}

/// A reader-writer lock (`parking_lot`'s) whose guards count as held runtime locks in debug
/// builds.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(parking_lot::RwLock<T>);

/// A shared guard of a [`RwLock`].
#[must_use = "the lock is released when the guard is dropped"]
pub struct RwLockReadGuard<'a, T: ?Sized>(parking_lot::RwLockReadGuard<'a, T>);

/// An exclusive guard of a [`RwLock`].
#[must_use = "the lock is released when the guard is dropped"]
pub struct RwLockWriteGuard<'a, T: ?Sized>(parking_lot::RwLockWriteGuard<'a, T>);

impl<T> RwLock<T> {
    /// A new unlocked lock.
    pub const fn new(value: T) -> Self {
        RwLock(parking_lot::RwLock::new(value))
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Shared access, blocking while a writer holds the lock.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let guard = self.0.read();
        acquired();
        RwLockReadGuard(guard)
    }

    /// Exclusive access, blocking while anyone holds the lock.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        let guard = self.0.write();
        acquired();
        RwLockWriteGuard(guard)
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        released();
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        released();
    }
}

#[cfg(all(test, debug_assertions, not(loom)))]
mod tests {
    use super::*;
    use crate::{assert_unlocked, held_locks};

    #[test]
    fn guards_are_counted_while_they_live() {
        let m = Mutex::new(1);
        let rw = RwLock::new(2);
        assert_eq!(held_locks(), 0);
        {
            let _a = m.lock();
            let _b = rw.read();
            assert_eq!(held_locks(), 2);
        }
        assert_eq!(held_locks(), 0);
        *rw.write() += 1;
        assert_eq!(held_locks(), 0);
        assert_unlocked("after statements whose guards were temporaries");
    }

    #[test]
    #[should_panic(expected = "runtime lock(s) held at a park")]
    fn asserting_with_a_lock_held_panics() {
        let m = Mutex::new(());
        let _guard = m.lock();
        assert_unlocked("a park");
    }
}
