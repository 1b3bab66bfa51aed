//! [`FreeList`] and [`FreeStack`]: things kept for reuse (finished call cells, free heap
//! slots), given back and taken from any thread.

use std::collections::VecDeque;

use rpc_sync::Mutex;

/// A bounded queue of reusable things under a short lock (never held but to take or give),
/// oldest first. A lock and a `VecDeque` cost fewer instructions per item than a lock-free
/// queue's sequence stamps, and the buffer keeps its capacity, so reuse allocates nothing.
///
/// Bound: at most `bound` items; one given beyond that is dropped.
pub(crate) struct FreeList<T> {
    items: Mutex<VecDeque<T>>,
    bound: usize,
}

impl<T> FreeList<T> {
    /// An empty list keeping at most `bound` items.
    pub(crate) fn new(bound: usize) -> FreeList<T> {
        FreeList {
            items: Mutex::new(VecDeque::new()),
            bound,
        }
    }

    /// The oldest item kept, if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        self.items.lock().pop_front()
    }

    /// Keeps `item`; `false` (and the item dropped) if `bound` items are kept already.
    #[inline]
    pub(crate) fn give(&self, item: T) -> bool {
        let mut items = self.items.lock();
        if items.len() >= self.bound {
            return false;
        }
        items.push_back(item);
        true
    }
}

/// A bounded stack of interchangeable reusable things (free heap slots) under a short lock:
/// the most recently given back is taken first (its memory is the most likely to be in
/// cache), and a push or pop on a `Vec` costs less than on a ring buffer.
///
/// Bound: at most `bound` items; one given beyond that is dropped.
pub(crate) struct FreeStack<T> {
    items: Mutex<Vec<T>>,
    bound: usize,
}

impl<T> FreeStack<T> {
    /// An empty stack keeping at most `bound` items (room for all of them made now).
    pub(crate) fn new(bound: usize) -> FreeStack<T> {
        FreeStack {
            items: Mutex::new(Vec::with_capacity(bound)),
            bound,
        }
    }

    /// The item given back last, if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        self.items.lock().pop()
    }

    /// Keeps `item`; `false` (and the item dropped) if `bound` items are kept already.
    #[inline]
    pub(crate) fn give(&self, item: T) -> bool {
        let mut items = self.items.lock();
        if items.len() >= self.bound {
            return false;
        }
        items.push(item);
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
