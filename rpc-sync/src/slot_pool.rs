//! [`SlotPool`]: numbered slots shared by many holders (the send slots of a server's
//! connections), with a waiting list so that a holder that found the pool empty is handed the
//! next slot given back and never waits without being told.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::primitive::Mutex;

struct PoolState<T> {
    free: Vec<T>,
    /// Holders that found the pool empty, oldest first; each at most once.
    waiters: VecDeque<u64>,
    waiting: HashSet<u64>,
    /// Slots given back while holders waited, each kept for the waiter it was handed to
    /// until that one takes it (or is forgotten).
    handed: HashMap<u64, Vec<T>>,
}

/// Slots `0..count`, taken and given back from any thread. A [`SlotPool::take`] that finds
/// none leaves the taker's name; the [`SlotPool::give`] that next returns a slot keeps it for
/// the longest waiter and returns that name to its caller, whose job it is to tell the waiter;
/// the waiter's next `take` gets it. So slots go to waiters in turn, and a busy holder that
/// never waited cannot take every slot given back before a waiter comes for it. Taking and
/// giving are one short lock each, so either the taker sees the slot or the giver sees the
/// name (the loom model `slot_pool_never_strands_a_waiter`). The waiting list holds each name
/// once, so it never outgrows the number of holders; a holder that goes away is
/// [`SlotPool::forget`]ten, and the slots kept for it pass on.
///
/// A slot is a `T`: a number by default, or the slot itself (a buffer) when slots are
/// interchangeable things rather than places.
pub struct SlotPool<T = u32> {
    count: usize,
    state: Mutex<PoolState<T>>,
}

impl SlotPool<u32> {
    /// A pool of slots `0..count`, all free.
    pub fn new(count: u32) -> SlotPool<u32> {
        SlotPool::with_slots((0..count).rev().collect())
    }
}

impl<T> SlotPool<T> {
    /// A pool of `slots`, all free (the last one is taken first).
    pub fn with_slots(slots: Vec<T>) -> SlotPool<T> {
        SlotPool {
            count: slots.len(),
            state: Mutex::new(PoolState {
                free: slots,
                waiters: VecDeque::new(),
                waiting: HashSet::new(),
                handed: HashMap::new(),
            }),
        }
    }

    /// How many slots the pool has.
    pub fn count(&self) -> usize {
        self.count
    }

    /// A slot kept for `waiter`, else a free slot; or `None`, with `waiter` put on the
    /// waiting list (once, however often it asks) so that a later [`SlotPool::give`] hands it
    /// one.
    pub fn take(&self, waiter: u64) -> Option<T> {
        let mut state = self.state.lock();
        // No hashing on the common path, where nothing is kept for anyone.
        if !state.handed.is_empty() {
            if let Some(kept) = state.handed.get_mut(&waiter) {
                let slot = kept.pop();
                if kept.is_empty() {
                    state.handed.remove(&waiter);
                }
                return slot;
            }
        }
        if let Some(slot) = state.free.pop() {
            return Some(slot);
        }
        if state.waiting.insert(waiter) {
            state.waiters.push_back(waiter);
        }
        None
    }

    /// Gives `slot` back: kept for the longest-waiting holder, now off the list, whose name
    /// is returned for the caller to tell it; free if nobody waits.
    pub fn give(&self, slot: T) -> Option<u64> {
        let mut state = self.state.lock();
        let Some(waiter) = state.waiters.pop_front() else {
            state.free.push(slot);
            return None;
        };
        state.waiting.remove(&waiter);
        state.handed.entry(waiter).or_default().push(slot);
        Some(waiter)
    }

    /// Gives `slots` back under one lock, as [`SlotPool::give`] does each; the names of the
    /// waiters they are kept for are appended to `told`, for the caller to tell.
    pub fn give_many(&self, slots: impl IntoIterator<Item = T>, told: &mut Vec<u64>) {
        let mut state = self.state.lock();
        for slot in slots {
            match state.waiters.pop_front() {
                None => state.free.push(slot),
                Some(waiter) => {
                    state.waiting.remove(&waiter);
                    state.handed.entry(waiter).or_default().push(slot);
                    told.push(waiter);
                }
            }
        }
    }

    /// Forgets `holder` (it goes away): off the waiting list, and the slots kept for it given
    /// back; returns the waiters they were handed to, for the caller to tell.
    pub fn forget(&self, holder: u64) -> Vec<u64> {
        let kept = {
            let mut state = self.state.lock();
            if state.waiting.remove(&holder) {
                state.waiters.retain(|&w| w != holder);
            }
            state.handed.remove(&holder).unwrap_or_default()
        };
        kept.into_iter()
            .filter_map(|slot| self.give(slot))
            .collect()
    }

    /// Slots free now (a snapshot).
    pub fn free(&self) -> usize {
        self.state.lock().free.len()
    }
}

impl<T> std::fmt::Debug for SlotPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPool")
            .field("count", &self.count)
            .field("free", &self.free())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SlotPool;

    #[test]
    fn a_waiter_is_named_once_by_the_next_slot_given_back() {
        let pool = SlotPool::new(2);
        let a = pool.take(1).unwrap();
        let b = pool.take(1).unwrap();
        assert_ne!(a, b);
        assert_eq!(pool.take(7), None);
        assert_eq!(pool.take(7), None, "asking again");
        assert_eq!(pool.take(9), None);
        assert_eq!(pool.give(a), Some(7));
        assert_eq!(pool.take(3), None, "the slot is kept for 7");
        assert_eq!(pool.take(7), Some(a));
        assert_eq!(pool.give(b), Some(9));
        assert_eq!(pool.forget(9), vec![3], "9's slot passes to 3");
        assert_eq!(pool.take(3), Some(b));
        assert_eq!(pool.give(b), None, "nobody waits");
        assert_eq!(pool.give(a), None);
        assert_eq!(pool.free(), 2);
    }

    #[test]
    fn give_many_hands_each_slot_to_the_next_waiter() {
        let pool = SlotPool::with_slots(vec![(); 2]);
        let taken = [pool.take(1), pool.take(1)];
        assert_eq!(pool.take(7), None);
        assert_eq!(pool.take(9), None);
        let mut told = Vec::new();
        pool.give_many(taken.into_iter().flatten(), &mut told);
        assert_eq!(told, vec![7, 9]);
        assert_eq!(pool.take(3), None, "both are kept");
        assert_eq!((pool.take(7), pool.take(9)), (Some(()), Some(())));
    }
}
