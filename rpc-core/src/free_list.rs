//! [`FreeList`] and [`FreeStack`]: things kept for reuse (finished call cells, free heap
//! slots), given back and taken from any thread. Both are one bounded pool under a short lock;
//! they differ only in which item comes back first ([`Order`]).

use std::collections::VecDeque;

use rpc_sync::Mutex;

/// Oldest first: call cells, the most recently finished of which may still be held by their
/// completer for a moment. A `VecDeque` keeps its capacity, so reuse allocates nothing.
pub(crate) type FreeList<T> = Pool<VecDeque<T>>;

/// Newest first: interchangeable things (free heap slots), whose most recently given back is
/// the most likely to be in cache; a push or pop on a `Vec` costs less than on a ring buffer.
pub(crate) type FreeStack<T> = Pool<Vec<T>>;

/// The buffer of a [`Pool`], which decides the order its items come back in.
pub(crate) trait Order {
    type Item;
    /// An empty buffer for a pool of at most `bound` items.
    fn empty(bound: usize) -> Self;
    fn put(&mut self, item: Self::Item);
    fn get(&mut self) -> Option<Self::Item>;
    fn count(&self) -> usize;
}

impl<T> Order for VecDeque<T> {
    type Item = T;
    /// Grows as items come (a client's cell pool is mostly far from full).
    fn empty(_bound: usize) -> Self {
        VecDeque::new()
    }
    fn put(&mut self, item: T) {
        self.push_back(item);
    }
    fn get(&mut self) -> Option<T> {
        self.pop_front()
    }
    fn count(&self) -> usize {
        self.len()
    }
}

impl<T> Order for Vec<T> {
    type Item = T;
    /// Room for all of them now (a ring's slots are all given at its start).
    fn empty(bound: usize) -> Self {
        Vec::with_capacity(bound)
    }
    fn put(&mut self, item: T) {
        self.push(item);
    }
    fn get(&mut self) -> Option<T> {
        self.pop()
    }
    fn count(&self) -> usize {
        self.len()
    }
}

/// A bounded pool of reusable things under a short lock (never held but to take or give). A
/// lock and a plain buffer cost fewer instructions per item than a lock-free queue's sequence
/// stamps.
///
/// Bound: at most `bound` items; one given beyond that is dropped.
pub(crate) struct Pool<O> {
    items: Mutex<O>,
    bound: usize,
}

impl<O: Order> Pool<O> {
    /// An empty pool keeping at most `bound` items.
    pub(crate) fn new(bound: usize) -> Self {
        Pool {
            items: Mutex::new(O::empty(bound)),
            bound,
        }
    }

    /// The next item kept (in the pool's [`Order`]), if any.
    #[inline(always)]
    pub(crate) fn take(&self) -> Option<O::Item> {
        self.items.lock().get()
    }

    /// Keeps `item`; `false` (and the item dropped) if `bound` items are kept already.
    #[inline(always)]
    pub(crate) fn give(&self, item: O::Item) -> bool {
        let mut items = self.items.lock();
        if items.count() >= self.bound {
            return false;
        }
        items.put(item);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_oldest_first_and_keeps_at_most_its_bound() {
        let list = FreeList::new(2);
        assert!(list.give(1));
        assert!(list.give(2));
        assert!(!list.give(3), "beyond the bound");
        assert_eq!(list.take(), Some(1));
        assert_eq!(list.take(), Some(2));
        assert_eq!(list.take(), None);
    }

    #[test]
    fn stack_gives_back_newest_first_and_keeps_at_most_its_bound() {
        let stack = FreeStack::new(2);
        assert!(stack.give(1));
        assert!(stack.give(2));
        assert!(!stack.give(3), "beyond the bound");
        assert_eq!(stack.take(), Some(2));
        assert_eq!(stack.take(), Some(1));
        assert_eq!(stack.take(), None);
    }
}
