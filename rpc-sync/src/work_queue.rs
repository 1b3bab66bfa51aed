//! [`WorkQueue`]: items handed from any thread to a set of worker threads, which park while
//! it is empty. The worker pool's queue: a call for a handler, or a woken handler task.
//!
//! Its state is under a short internal lock that is never held while waking or running
//! anything: a producer queues under it and wakes a parked worker after letting go. Its
//! buffer grows to the most items ever queued at once and is reused from then on, so
//! queueing allocates nothing in a steady state. It is unbounded: whoever pushes bounds what
//! it pushes (the pool admits calls up to its `max_queued`; a task is queued at most once at
//! a time).

use std::collections::VecDeque;

use crate::primitive::{Condvar, Mutex};

/// A multi-producer, multi-consumer FIFO whose consumers block while it is empty.
pub struct WorkQueue<T> {
    items: Mutex<VecDeque<T>>,
    /// Consumers parked while the queue was empty.
    ready: Condvar,
}

impl<T> WorkQueue<T> {
    /// An empty queue with room for `capacity` items before its buffer grows.
    pub fn with_capacity(capacity: usize) -> Self {
        WorkQueue {
            items: Mutex::new(VecDeque::with_capacity(capacity)),
            ready: Condvar::new(),
        }
    }

    /// Queues `item` and wakes one parked consumer, if any (after letting go of the lock).
    pub fn push(&self, item: T) {
        self.items.lock().push_back(item);
        self.ready.notify_one();
    }

    /// The oldest item, blocking while there is none.
    pub fn pop(&self) -> T {
        let mut items = self.items.lock();
        loop {
            if let Some(item) = items.pop_front() {
                return item;
            }
            // The queue's own lock is released by the wait; no runtime lock may be held.
            crate::assert_unlocked("a park");
            items = self.ready.wait(items);
        }
    }

    /// The oldest item, if there is one.
    pub fn try_pop(&self) -> Option<T> {
        self.items.lock().pop_front()
    }

    /// Items queued and not taken yet.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
