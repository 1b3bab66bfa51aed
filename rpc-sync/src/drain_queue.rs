//! [`DrainQueue`]: items pushed by producer threads and drained by whoever polls: a consumer
//! thread that sleeps while the queue is empty, or a producer that drains what it queued
//! itself when nobody else is draining. The completion queue of the TCP and in-memory
//! transports (`ChannelCq`).

use std::collections::VecDeque;
use std::time::Duration;

use crate::primitive::{Condvar, Mutex};

/// What the lock covers: the items, and the sleeper's state, so that a push and the
/// consumer's look before sleeping are ordered by the lock alone (no fences: the loom
/// models check the very code that runs).
struct State<T> {
    items: VecDeque<T>,
    /// The consumer sleeps in [`DrainQueue::wait`] (or is about to).
    sleeping: bool,
    /// A wake-up is due to the consumer: its next (or current) wait returns at once.
    rung: bool,
}

/// A multi-producer queue with one sleeping consumer and any number of drainers.
///
/// Protocol and guarantees:
/// - [`DrainQueue::push`] queues an item and wakes the consumer if it sleeps in
///   [`DrainQueue::wait`]: the consumer never sleeps through an item (it looks at the queue
///   under the lock it sleeps on; the loom model `drain_queue_wakes_a_sleeping_consumer`).
/// - [`DrainQueue::drive`]: a producer that queued items ([`DrainQueue::enqueue`]) drains
///   them itself if it can own the draining, or leaves them to the owner. Nothing queued is
///   left behind: the owner looks at the queue again after letting go, and the look and the
///   producer's queueing are ordered by the queue's lock, so either the owner sees the item
///   or the producer sees the draining free (the loom model
///   `drain_queue_leaves_nothing_behind`). The owner that never calls `drive` (a poller
///   thread) must loop back to the queue itself: it does, through `wait`.
/// - [`DrainQueue::wake`] makes the consumer's current or next wait return at once.
///
/// The lock is short (no I/O, no waiting, no waking under it) and the buffer keeps its
/// capacity, so steady traffic allocates nothing.
pub struct DrainQueue<T> {
    state: Mutex<State<T>>,
    bell: Condvar,
}

impl<T> DrainQueue<T> {
    /// An empty queue with room for `capacity` items before its buffer grows.
    pub fn with_capacity(capacity: usize) -> Self {
        DrainQueue {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity),
                sleeping: false,
                rung: false,
            }),
            bell: Condvar::new(),
        }
    }

    /// Queues `item` without waking anyone: the caller follows with [`DrainQueue::drive`]
    /// (a producer batching several items).
    #[inline]
    pub fn enqueue(&self, item: T) {
        self.state.lock().items.push_back(item);
    }

    /// Queues `item` and wakes the consumer if it sleeps; `true` if this woke it.
    #[inline]
    pub fn push(&self, item: T) -> bool {
        let wake = {
            let mut state = self.state.lock();
            state.items.push_back(item);
            Self::ring(&mut state)
        };
        if wake {
            self.bell.notify_one();
        }
        wake
    }

    /// Makes the consumer's current wait, or its next one, return at once; `true` if it
    /// slept (a thread woken).
    pub fn wake(&self) -> bool {
        let sleeping = {
            let mut state = self.state.lock();
            state.rung = true;
            state.sleeping
        };
        if sleeping {
            self.bell.notify_one();
        }
        sleeping
    }

    /// Wakes the consumer if it sleeps (nothing is due otherwise); `true` if it did.
    #[inline]
    pub fn wake_if_sleeping(&self) -> bool {
        let wake = Self::ring(&mut self.state.lock());
        if wake {
            self.bell.notify_one();
        }
        wake
    }

    /// Rings for a sleeping consumer not rung yet; whether to notify it.
    fn ring(state: &mut State<T>) -> bool {
        if state.sleeping && !state.rung {
            state.rung = true;
            return true;
        }
        false
    }

    /// Moves up to `max` items, oldest first, to `out`; returns how many.
    #[inline]
    pub fn drain_into(&self, out: &mut Vec<T>, max: usize) -> usize {
        let mut state = self.state.lock();
        let n = state.items.len().min(max);
        // One by one: a `drain` range costs a drop guard and a tail move, for a few items.
        for _ in 0..n {
            out.extend(state.items.pop_front());
        }
        n
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.state.lock().items.is_empty()
    }

    /// The consumer sleeps until an item is queued, [`DrainQueue::wake`] is called, or
    /// `timeout` passes; returns at once if an item is queued or a wake is due. Spurious
    /// returns are possible (a timed wait returns after one wake-up, whatever woke it): the
    /// caller polls and waits again. No clock is read here; the condition variable times.
    pub fn wait(&self, timeout: Option<Duration>) {
        let mut state = self.state.lock();
        if !state.rung && state.items.is_empty() {
            state.sleeping = true;
            // The queue's own lock is released by the wait; no runtime lock may be held.
            crate::assert_unlocked("waiting for completions");
            match timeout {
                None => {
                    while !state.rung && state.items.is_empty() {
                        state = self.bell.wait(state);
                    }
                }
                Some(t) => state = self.bell.wait_timeout(state, t).0,
            }
            state.sleeping = false;
        }
        state.rung = false;
    }

    /// Drains what is queued on this thread through `drain`, for as long as something is
    /// queued. `drain` owns the draining and empties the queue (`true`), or finds another
    /// thread owning it (`false`): that owner looks at the queue again after letting go, so
    /// this thread may leave.
    pub fn drive(&self, mut drain: impl FnMut() -> bool) {
        while !self.is_empty() {
            if !drain() {
                return;
            }
        }
    }
}
