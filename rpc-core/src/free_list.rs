//! [`FreeList`]: things kept for reuse (free heap slots, finished call cells), given back and
//! taken from any thread.

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
}
