//! The receive slots a server shares among its connections, and each connection's grant of
//! them (`docs/PROTOCOL.md` §22.4, shared credits). No I/O, no clock, no threads of its own:
//! the counters are [`ByteBudget`]s counting slots, so a grant taken by one connection's owner
//! and one given back by another's never overshoot the pool.
//!
//! The rule, for a pool of `S` slots:
//!
//! - **Admission.** A connection takes its **base** grant (the server's `slot_count`, at least
//!   [`MIN_GRANT`]) when it is admitted; one whose base does not fit is refused.
//! - **Raising.** Beyond its base, a connection's grant grows up to the pool's `max_grant`,
//!   and all raises together take at most **half of `S`**: the other half is always left for
//!   the bases of new connections, however many connections keep raised grants.
//! - The sum of all grants never exceeds `S`: a frame never meets an empty ring.
//!
//! A [`Grant`] gives all its slots back when dropped (the connection closed).
//!
//! ```
//! use rpc_proto::CreditPool;
//!
//! let pool = CreditPool::with_max_grant(64, 16);    // 64 slots, at most 16 per connection
//! let mut conn = pool.admit(4).expect("fits");      // the base grant: 4 slots
//! assert_eq!(pool.granted(), 4);
//! assert_eq!(conn.raise(100), 12);                  // up to max_grant
//! assert_eq!(conn.total(), 16);
//! conn.lower(12);                                   // back to the base
//! drop(conn);                                       // everything back to the pool
//! assert_eq!(pool.granted(), 0);
//! ```

use std::sync::Arc;

use rpc_sync::ByteBudget;

/// The smallest grant that cannot stall (`docs/PROTOCOL.md` §7.5 and §22.4): the smallest
/// `slot_count`.
pub const MIN_GRANT: u32 = 3;

/// The most one connection is granted unless told otherwise: this implementation's
/// `slot_count` for connections with rings of their own.
pub const DEFAULT_MAX_GRANT: u32 = 64;

/// A server's pool of receive slots shared by its connections. Cloning shares it.
#[derive(Debug, Clone)]
pub struct CreditPool {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Every slot granted: bases and raises.
    granted: ByteBudget,
    /// Slots granted beyond the bases: at most half the pool.
    raised: ByteBudget,
    max_grant: u32,
}

impl CreditPool {
    /// A pool of `slots` receive slots, each connection granted at most
    /// [`DEFAULT_MAX_GRANT`].
    pub fn new(slots: u32) -> CreditPool {
        CreditPool::with_max_grant(slots, DEFAULT_MAX_GRANT)
    }

    /// A pool of `slots` receive slots, each connection granted at most `max_grant`
    /// (raised to [`MIN_GRANT`] if below it; at most 65535, the most a peer may hold).
    pub fn with_max_grant(slots: u32, max_grant: u32) -> CreditPool {
        CreditPool {
            inner: Arc::new(Shared {
                granted: ByteBudget::new(slots as usize),
                raised: ByteBudget::new(slots as usize / 2),
                max_grant: max_grant.clamp(MIN_GRANT, u32::from(u16::MAX)),
            }),
        }
    }

    /// The slots in the pool.
    pub fn slots(&self) -> u32 {
        self.inner.granted.limit() as u32
    }

    /// Slots granted now, bases and raises (a snapshot).
    pub fn granted(&self) -> u32 {
        self.inner.granted.used() as u32
    }

    /// Slots granted beyond the bases now (at most half the pool).
    pub fn raised(&self) -> u32 {
        self.inner.raised.used() as u32
    }

    /// The most one connection is granted.
    pub fn max_grant(&self) -> u32 {
        self.inner.max_grant
    }

    /// Admits a connection whose base grant is `base` slots (its HELLO's `slot_count`, at
    /// least [`MIN_GRANT`]): takes them from the pool, or `None` when they do not fit (the
    /// connection is to be refused).
    pub fn admit(&self, base: u32) -> Option<Grant> {
        let base = base.max(MIN_GRANT);
        if !self.inner.granted.try_reserve(base as usize) {
            return None;
        }
        Some(Grant {
            pool: Arc::clone(&self.inner),
            base,
            raised: 0,
        })
    }
}

/// One connection's grant of a [`CreditPool`]'s slots: its base, plus what it was raised.
/// Dropping it gives every slot back.
#[derive(Debug)]
pub struct Grant {
    pool: Arc<Shared>,
    base: u32,
    raised: u32,
}

impl Grant {
    /// The base grant: what the connection always has.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The grant in force: base plus raises.
    pub fn total(&self) -> u32 {
        self.base + self.raised
    }

    /// Slots granted beyond the base.
    pub fn raised(&self) -> u32 {
        self.raised
    }

    /// Takes up to `want` more slots, within the pool's `max_grant` for one connection and
    /// half the pool for all raises together; returns how many it got (0 when the pool has
    /// none to spare).
    pub fn raise(&mut self, want: u32) -> u32 {
        let want = want.min(self.pool.max_grant.saturating_sub(self.total()));
        let allowed = self.pool.raised.reserve_up_to(want as usize);
        let got = self.pool.granted.reserve_up_to(allowed);
        self.pool.raised.release(allowed - got);
        self.raised += got as u32;
        got as u32
    }

    /// Gives `n` raised slots back to the pool (at most [`Grant::raised`]; the base stays).
    pub fn lower(&mut self, n: u32) {
        let n = n.min(self.raised);
        self.raised -= n;
        self.pool.raised.release(n as usize);
        self.pool.granted.release(n as usize);
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.pool.raised.release(self.raised as usize);
        self.pool
            .granted
            .release((self.base + self.raised) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_always_fit_in_the_half_that_raises_cannot_take() {
        let pool = CreditPool::with_max_grant(40, 64);
        let mut first = pool.admit(4).expect("fits");
        // Raises stop at half the pool (20), whatever one connection asks.
        assert_eq!(first.raise(1000), 20);
        assert_eq!(pool.raised(), 20);
        let mut second = pool.admit(4).expect("the other half holds bases");
        assert_eq!(second.raise(10), 0, "no half left for raises");
        // Bases of new connections still fit until the pool is full: 4 + 20 + 4 + 3 × 4 = 40.
        let more: Vec<Grant> = (0..3).map(|_| pool.admit(4).expect("fits")).collect();
        assert!(pool.admit(3).is_none(), "a full pool refuses a base");
        assert_eq!(pool.granted(), 40);
        first.lower(8);
        assert_eq!(second.raise(10), 8, "what one gave back another may take");
        drop(more);
        drop(first);
        drop(second);
        assert_eq!((pool.granted(), pool.raised()), (0, 0));
    }

    #[test]
    fn a_grant_stays_between_its_base_and_the_max() {
        let pool = CreditPool::with_max_grant(1000, 10);
        let mut g = pool.admit(1).expect("fits");
        assert_eq!(
            g.base(),
            MIN_GRANT,
            "a base below the minimum is raised to it"
        );
        assert_eq!(g.raise(100), 7);
        assert_eq!(g.total(), 10);
        g.lower(100);
        assert_eq!(g.total(), MIN_GRANT, "lowering never takes the base");
        assert_eq!(pool.granted(), MIN_GRANT);
    }
}
