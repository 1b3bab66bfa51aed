//! [`ByteBudget`]: a count of bytes held against a limit, reserved and released from any
//! thread without a lock. A connection's owner reserves what a peer makes it hold (a message
//! in reassembly, a copied-out stream message); whichever thread drops the bytes (a handler,
//! a stream reader) releases them.

use std::sync::atomic::Ordering;

use crate::primitive::AtomicUsize;

/// Bytes in use against a fixed limit. `used` never exceeds the limit, whatever threads
/// reserve and release at once: a reservation is one compare-and-swap that fails rather than
/// overshoot (the loom model `byte_budget_never_exceeds_its_limit`).
#[derive(Debug)]
pub struct ByteBudget {
    limit: usize,
    used: AtomicUsize,
}

impl ByteBudget {
    /// A budget of `limit` bytes, none used.
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes reserved now (a snapshot: other threads may change it at once).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` if they fit in what is left; `false` (nothing reserved) otherwise.
    pub fn try_reserve(&self, bytes: usize) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(new) = used.checked_add(bytes).filter(|&n| n <= self.limit) else {
                return false;
            };
            match self
                .used
                .compare_exchange_weak(used, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// Reserves as much of `bytes` as is left, and returns how much that was (0 to `bytes`).
    pub fn reserve_up_to(&self, bytes: usize) -> usize {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let take = bytes.min(self.limit.saturating_sub(used));
            if take == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(
                used,
                used + take,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return take,
                Err(now) => used = now,
            }
        }
    }

    /// Gives back `bytes` reserved earlier (by [`ByteBudget::try_reserve`] or
    /// [`ByteBudget::reserve_up_to`]); releasing more than is reserved is a bug of the caller.
    pub fn release(&self, bytes: usize) {
        if bytes > 0 {
            let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
            debug_assert!(
                before >= bytes,
                "released {bytes} of {before} reserved bytes"
            );
        }
    }
}
