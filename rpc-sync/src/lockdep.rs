//! Counting the runtime locks a thread holds (debug builds only; release builds count
//! nothing and check nothing).

#[cfg(all(debug_assertions, not(loom)))]
std::thread_local! {
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Number of counted locks ([`crate::Mutex`], [`crate::RwLock`]) the current thread holds.
/// Always 0 in release builds.
pub fn held_locks() -> u32 {
    #[cfg(all(debug_assertions, not(loom)))]
    {
        HELD.with(|h| h.get())
    }
    #[cfg(not(all(debug_assertions, not(loom))))]
    {
        0
    }
}

/// Panics (debug builds) if the current thread holds a counted lock. Called where holding one
/// could hang or stall other threads: before parking or waiting, before posting or writing to
/// a transport, before calling into user code (handlers, wakers).
#[track_caller]
pub fn assert_unlocked(what: &str) {
    let held = held_locks();
    assert!(
        held == 0,
        "{held} runtime lock(s) held at {what}: a lock must never be held across a wait, a \
         post/write or a call into user code"
    );
}

#[inline]
pub(crate) fn acquired() {
    #[cfg(all(debug_assertions, not(loom)))]
    HELD.with(|h| h.set(h.get() + 1));
}

#[inline]
pub(crate) fn released() {
    #[cfg(all(debug_assertions, not(loom)))]
    HELD.with(|h| h.set(h.get() - 1));
}
