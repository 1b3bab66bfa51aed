//! The memory a side holds on behalf of its peers, counted against a budget
//! (`docs/PROTOCOL.md` §15): no I/O, no clock, no threads of its own; the counters are
//! [`ByteBudget`]s, so a reservation made by a connection's owner can be released by
//! whichever thread drops the bytes.
//!
//! The rule, for a budget of `B` bytes:
//!
//! - **Admission.** Each connection reserves its **fixed** bytes when it is admitted: its
//!   receive and send rings plus a **floor** ([`MemoryBudget::floor`], default 32 KiB) that
//!   only it may use. A connection whose fixed bytes do not fit in `B` is refused.
//! - **Borrowing.** Beyond its floor, a connection borrows: at most its **share**
//!   (`min(B / 8, its protocol bound)`) and, all connections together, at most **half of
//!   `B`**. So the other half is always left for admissions and floors: however many
//!   connections attack, a new one is admitted while the fixed bytes of all fit in `B / 2`,
//!   and its calls within its floor are served.
//! - Everything counts against `B`: fixed bytes plus borrowed bytes never exceed it.
//!
//! A [`Reservation`] gives its bytes back when dropped.
//!
//! ```
//! use rpc_proto::MemoryBudget;
//!
//! let budget = MemoryBudget::new(64 << 20);          // 64 MiB for the whole server
//! let conn = budget.admit(1 << 20).expect("fits");   // 1 MiB of rings, plus the floor
//! let message = conn.reserve(4 << 20).expect("within the share");
//! assert!(budget.used() >= (5 << 20));
//! drop(message);                                      // released
//! assert!(conn.reserve(16 << 20).is_none());          // above the share: B / 8 = 8 MiB
//! ```

use std::sync::Arc;

use rpc_sync::ByteBudget;

/// The floor a connection may always use, whatever the others hold (32 KiB: a server's first
/// chunk of call records and a few small messages; small enough that a budget of 1 GiB
/// admits 32,768 idle connections).
pub const DEFAULT_FLOOR: usize = 32 << 10;

/// A server-wide (or client-wide) budget of bytes held for peers. Cloning shares it.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Everything: fixed bytes of admitted connections and borrowed bytes.
    total: ByteBudget,
    /// Bytes connections hold beyond their floors: at most half the budget.
    borrowed: ByteBudget,
    floor: usize,
}

impl MemoryBudget {
    /// A budget of `bytes` with the default floor per connection.
    pub fn new(bytes: usize) -> MemoryBudget {
        MemoryBudget::with_floor(bytes, DEFAULT_FLOOR)
    }

    /// A budget of `bytes` whose connections each get `floor` bytes of their own.
    pub fn with_floor(bytes: usize, floor: usize) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(Shared {
                total: ByteBudget::new(bytes),
                borrowed: ByteBudget::new(bytes / 2),
                floor,
            }),
        }
    }

    /// A budget nothing exceeds (tests, and sides that were given no budget).
    pub fn unlimited() -> MemoryBudget {
        MemoryBudget::with_floor(usize::MAX, 0)
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.inner.total.limit()
    }

    /// Bytes reserved now: fixed bytes of admitted connections plus borrowed bytes.
    pub fn used(&self) -> usize {
        self.inner.total.used()
    }

    /// Bytes borrowed now, beyond the connections' floors (at most half the budget).
    pub fn borrowed(&self) -> usize {
        self.inner.borrowed.used()
    }

    /// The floor each connection gets.
    pub fn floor(&self) -> usize {
        self.inner.floor
    }

    /// The most one connection may borrow beyond its floor: an eighth of the budget.
    pub fn share(&self) -> usize {
        self.inner.total.limit() / 8
    }

    /// Admits a connection whose rings take `fixed` bytes: reserves them and its floor, or
    /// `None` when they do not fit (the connection is to be refused).
    pub fn admit(&self, fixed: usize) -> Option<ConnectionMemory> {
        self.admit_with_share(fixed, usize::MAX)
    }

    /// [`MemoryBudget::admit`] for a connection that can never need to borrow more than
    /// `bound` bytes (its protocol bound, `docs/PROTOCOL.md` §15): its share is the smaller
    /// of that and [`MemoryBudget::share`].
    pub fn admit_with_share(&self, fixed: usize, bound: usize) -> Option<ConnectionMemory> {
        let admitted = fixed.checked_add(self.inner.floor)?;
        if !self.inner.total.try_reserve(admitted) {
            return None;
        }
        Some(ConnectionMemory {
            account: Arc::new(Account {
                budget: Arc::clone(&self.inner),
                admitted,
                floor: ByteBudget::new(self.inner.floor),
                share: ByteBudget::new(self.share().min(bound)),
            }),
        })
    }
}

/// One connection's part of a [`MemoryBudget`]: its admission (released when the last
/// reservation and the connection are gone), its floor and its share.
#[derive(Debug, Clone)]
pub struct ConnectionMemory {
    account: Arc<Account>,
}

#[derive(Debug)]
struct Account {
    budget: Arc<Shared>,
    admitted: usize,
    floor: ByteBudget,
    share: ByteBudget,
}

impl Drop for Account {
    fn drop(&mut self) {
        self.budget.total.release(self.admitted);
    }
}

impl ConnectionMemory {
    /// A connection of its own unlimited budget (tests, the fuzzer).
    pub fn unlimited() -> ConnectionMemory {
        MemoryBudget::unlimited()
            .admit(0)
            .expect("an unlimited budget admits")
    }

    /// Reserves `bytes`: from the floor first, the rest borrowed within the connection's
    /// share and the budget's borrowing half. `None` (nothing reserved) when they do not fit.
    pub fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let a = &self.account;
        let from_floor = a.floor.reserve_up_to(bytes);
        let borrowed = bytes - from_floor;
        if borrowed > 0 && !borrow(a, borrowed) {
            a.floor.release(from_floor);
            return None;
        }
        Some(Reservation {
            account: Some(Arc::clone(a)),
            from_floor,
            borrowed,
        })
    }

    /// Bytes this connection holds now beyond its admission (floor and borrowed).
    pub fn used(&self) -> usize {
        self.account.floor.used() + self.account.share.used()
    }

    /// The most this connection may borrow beyond its floor.
    pub fn share(&self) -> usize {
        self.account.share.limit()
    }
}

/// Takes `bytes` from the connection's share, the budget's borrowing half and its total, or
/// nothing.
fn borrow(a: &Account, bytes: usize) -> bool {
    if !a.share.try_reserve(bytes) {
        return false;
    }
    if !a.budget.borrowed.try_reserve(bytes) {
        a.share.release(bytes);
        return false;
    }
    if !a.budget.total.try_reserve(bytes) {
        a.budget.borrowed.release(bytes);
        a.share.release(bytes);
        return false;
    }
    true
}

/// Bytes reserved from a connection's memory, given back when dropped.
#[derive(Debug, Default)]
pub struct Reservation {
    account: Option<Arc<Account>>,
    from_floor: usize,
    borrowed: usize,
}

impl Reservation {
    /// The bytes reserved.
    pub fn bytes(&self) -> usize {
        self.from_floor + self.borrowed
    }

    /// Adds `other`'s bytes to this reservation (both of one connection, or `self` empty).
    pub fn absorb(&mut self, mut other: Reservation) {
        if self.account.is_none() {
            self.account = other.account.take();
        }
        self.from_floor += std::mem::take(&mut other.from_floor);
        self.borrowed += std::mem::take(&mut other.borrowed);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(a) = self.account.take() {
            a.floor.release(self.from_floor);
            if self.borrowed > 0 {
                a.share.release(self.borrowed);
                a.budget.borrowed.release(self.borrowed);
                a.budget.total.release(self.borrowed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_come_first_then_the_share_then_nothing() {
        let budget = MemoryBudget::with_floor(800, 100);
        let conn = budget.admit(50).unwrap();
        assert_eq!(budget.used(), 150);
        assert_eq!(conn.share(), 100);
        let within_floor = conn.reserve(100).unwrap();
        assert_eq!(budget.used(), 150, "the floor was reserved at admission");
        let borrowed = conn.reserve(100).unwrap();
        assert_eq!((budget.used(), budget.borrowed()), (250, 100));
        assert!(conn.reserve(1).is_none(), "floor and share are spent");
        drop(within_floor);
        let again = conn.reserve(60).unwrap();
        assert_eq!(again.bytes(), 60);
        drop((borrowed, again));
        assert_eq!((budget.used(), budget.borrowed(), conn.used()), (150, 0, 0));
        drop(conn);
        assert_eq!(
            budget.used(),
            0,
            "the admission is released with the connection"
        );
    }

    #[test]
    fn borrowing_stops_at_half_the_budget_and_admissions_go_on() {
        let budget = MemoryBudget::with_floor(1600, 10);
        // Eight connections would each borrow their share of 200: only half the budget may
        // be borrowed, so four get it.
        let conns: Vec<_> = (0..8).map(|_| budget.admit(0).unwrap()).collect();
        let held: Vec<_> = conns.iter().filter_map(|c| c.reserve(210)).collect();
        assert_eq!(held.len(), 4);
        assert_eq!(budget.borrowed(), 800);
        // A newcomer is admitted and uses its floor.
        let newcomer = budget.admit(500).unwrap();
        assert!(newcomer.reserve(10).is_some());
        assert!(budget.admit(1000).is_none(), "beyond the budget");
        assert!(budget.used() <= budget.limit());
    }

    #[test]
    fn reservations_absorb_each_other_within_the_share() {
        let budget = MemoryBudget::with_floor(1000, 0);
        let conn = budget.admit_with_share(0, 50).unwrap();
        assert_eq!(conn.share(), 50);
        let mut r = Reservation::default();
        r.absorb(conn.reserve(20).unwrap());
        r.absorb(conn.reserve(20).unwrap());
        assert!(conn.reserve(20).is_none(), "beyond the share of 50");
        r.absorb(conn.reserve(10).unwrap());
        assert_eq!((r.bytes(), budget.used()), (50, 50));
        drop(r);
        assert_eq!(budget.used(), 0);
    }
}
