//! [`DrainQueue`]: items pushed by producer threads and drained by whoever polls: consumer
//! threads that sleep while the queue is empty (an endpoint's poller thread, or a caller
//! waiting for its own reply), or a producer that drains what it queued itself when nobody
//! else is draining. The completion queue of the TCP and in-memory transports (`ChannelCq`).

use std::collections::VecDeque;
use std::time::Duration;

use crate::primitive::{Condvar, Mutex};

/// What the lock covers: the items, and the sleeper's state, so that a push and the
/// consumer's look before sleeping are ordered by the lock alone (no fences: the loom
/// models check the very code that runs).
struct State<T> {
    items: VecDeque<T>,
    /// Consumers sleeping in [`DrainQueue::wait`] (or about to).
    sleepers: u32,
    /// A wake-up is due to the consumers: their current waits, or the next one, return.
    rung: bool,
    /// Rings so far (wrapping): a consumer sleeping without a timeout tells its own wake-up
    /// from one that another consumer already took.
    rings: u32,
}

/// A multi-producer queue with sleeping consumers and any number of drainers.
///
/// Protocol and guarantees:
/// - [`DrainQueue::push`] queues an item and wakes every consumer sleeping in
///   [`DrainQueue::wait`]: no consumer sleeps through an item (each looks at the queue under
///   the lock it sleeps on; the loom models `drain_queue_wakes_a_sleeping_consumer` and
///   `drain_queue_wakes_every_sleeping_consumer`). All of them wake, not one: a caller that
///   waits for its own reply may sleep beside the endpoint's poller thread, which then stands
///   back, and the reply must reach the caller whichever of the two the lock favours.
/// - [`DrainQueue::drive`]: a producer that queued items ([`DrainQueue::enqueue`]) drains
///   them itself if it can own the draining, or leaves them to the owner. Nothing queued is
///   left behind: the owner looks at the queue again after letting go, and the look and the
///   producer's queueing are ordered by the queue's lock, so either the owner sees the item
///   or the producer sees the draining free (the loom model
///   `drain_queue_leaves_nothing_behind`). The owner that never calls `drive` (a poller
///   thread) must loop back to the queue itself: it does, through `wait`.
/// - [`DrainQueue::wake`] makes the consumers' current waits, or the next one, return.
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
                sleepers: 0,
                rung: false,
                rings: 0,
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

    /// Queues `item` and wakes the consumers that sleep; `true` if this woke one.
    #[inline]
    pub fn push(&self, item: T) -> bool {
        let wake = {
            let mut state = self.state.lock();
            state.items.push_back(item);
            Self::ring(&mut state)
        };
        if wake {
            self.bell.notify_all();
        }
        wake
    }

    /// Makes the consumers' current waits, or the next one, return at once; `true` if one
    /// slept (a thread woken).
    pub fn wake(&self) -> bool {
        let sleeping = {
            let mut state = self.state.lock();
            state.rung = true;
            state.rings = state.rings.wrapping_add(1);
            state.sleepers > 0
        };
        if sleeping {
            self.bell.notify_all();
        }
        sleeping
    }

    /// Wakes the consumers that sleep (nothing is due otherwise); `true` if one did.
    #[inline]
    pub fn wake_if_sleeping(&self) -> bool {
        let wake = Self::ring(&mut self.state.lock());
        if wake {
            self.bell.notify_all();
        }
        wake
    }

    /// Rings for sleeping consumers not rung yet; whether to notify them.
    fn ring(state: &mut State<T>) -> bool {
        if state.sleepers > 0 && !state.rung {
            state.rung = true;
            state.rings = state.rings.wrapping_add(1);
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

    /// A consumer sleeps until an item is queued, [`DrainQueue::wake`] is called, or
    /// `timeout` passes; returns at once if an item is queued or a wake is due. Spurious
    /// returns are possible (a timed wait returns after one wake-up, whatever woke it): the
    /// caller polls and waits again. No clock is read here; the condition variable times.
    pub fn wait(&self, timeout: Option<Duration>) {
        let mut state = self.state.lock();
        if !state.rung && state.items.is_empty() {
            state.sleepers += 1;
            // The queue's own lock is released by the wait; no runtime lock may be held.
            crate::assert_unlocked("waiting for completions");
            match timeout {
                None => {
                    let rings = state.rings;
                    while state.rings == rings && state.items.is_empty() {
                        state = self.bell.wait(state);
                    }
                }
                Some(t) => state = self.bell.wait_timeout(state, t).0,
            }
            state.sleepers -= 1;
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
