//! Parking the current thread, checked: every park of the runtime goes through [`park`] or
//! [`park_timeout`], which assert first that the thread holds no runtime lock
//! ([`crate::assert_unlocked`]), so "no lock is held across a park" holds by construction.

use std::time::Duration;

use crate::lockdep::assert_unlocked;
use crate::primitive;

/// Parks the current thread until it is unparked (or spuriously woken), after checking that
/// it holds no runtime lock.
pub fn park() {
    assert_unlocked("a park");
    primitive::park();
}

/// Parks the current thread for at most `timeout`, after checking that it holds no runtime
/// lock.
pub fn park_timeout(timeout: Duration) {
    assert_unlocked("a park");
    primitive::park_timeout(timeout);
}
