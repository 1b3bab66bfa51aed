//! [`Serializer`]: state that one thread at a time works on, with work handed to whoever owns
//! it instead of waiting for it. The runtime keeps each connection's protocol state in one.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use crate::primitive::{AtomicUsize, Mutex};

use crate::{Exclusive, ExclusiveGuard};

/// The queue of work left for the owner: a buffer under a short lock (never held but to push,
/// pop or look) that grows to the most items ever queued at once and is reused from then on,
/// so queueing allocates nothing in a steady state (a lock-free segment queue allocated a
/// block every 31 items queued). The lock also orders a pusher's item before its look at the
/// owner against the owner's letting go before its look at the queue, so one of the two sees
/// the other without relying on fences (which loom models only as acquire/release: this way
/// the loom models check the very queue that runs).
struct Queue<W> {
    items: Mutex<VecDeque<W>>,
    /// How many items `items` holds, kept under the lock: read without it, a hint only.
    queued: AtomicUsize,
}

impl<W> Queue<W> {
    fn new() -> Self {
        Queue {
            // Room for what a tick or a racing caller leaves now and then, so that the
            // first such item allocates nothing in the middle of a busy connection's life.
            items: Mutex::new(VecDeque::with_capacity(4)),
            queued: AtomicUsize::new(0),
        }
    }

    fn push(&self, w: W) {
        let mut items = self.items.lock();
        items.push_back(w);
        self.queued.store(items.len(), Ordering::Relaxed);
    }

    fn pop(&self) -> Option<W> {
        let mut items = self.items.lock();
        let w = items.pop_front();
        self.queued.store(items.len(), Ordering::Relaxed);
        w
    }

    /// Whether items may be queued: without the lock, so possibly stale either way. Only
    /// where a stale answer costs nothing but order among items racing each other: the
    /// checks that decide whether work is left behind take the lock ([`Queue::is_empty`]).
    fn maybe_queued(&self) -> bool {
        self.queued.load(Ordering::Relaxed) > 0
    }

    fn is_empty(&self) -> bool {
        self.items.lock().is_empty()
    }
}

/// State `S` worked on by one thread at a time, and the work items `W` other threads left for
/// it. [`Serializer::submit`] runs a work item at once if nobody owns the state; otherwise it
/// queues the item and returns, and the owner runs it before letting go. Nobody ever waits,
/// so no thread can be blocked behind another, whatever the owner does.
///
/// A step may produce a delivery `D` (completing a call, running a handler): deliveries run
/// after the state is let go, so other threads can work on it meanwhile, and in the order
/// their work items ran on the submitting thread.
///
/// Work items run in the order they were queued; a thread's own item runs after the items
/// already queued, so one thread's items run in the order it submitted them.
///
/// Bound: the queue holds what submitters left while the state was owned; each caller of
/// `submit` adds at most one item per call, so its length is bounded by what the runtime's
/// callers may have outstanding (documented where the runtime submits).
pub struct Serializer<S, W> {
    owner: Exclusive<S>,
    inbox: Queue<W>,
}

impl<S, W> Serializer<S, W> {
    /// Unowned state and an empty queue.
    pub fn new(state: S) -> Self {
        Serializer {
            owner: Exclusive::new(state),
            inbox: Queue::new(),
        }
    }

    /// Runs `work` through `step` now or leaves it to the current owner; see the type's
    /// docs. `deliver` runs each delivery a step produced, with the state let go.
    #[inline]
    pub fn submit<D>(
        &self,
        work: W,
        mut step: impl FnMut(&mut S, W) -> Option<D>,
        mut deliver: impl FnMut(D),
    ) {
        let Some(mut guard) = self.owner.try_lock() else {
            return self.run(None, Some(work), &mut step, &mut deliver);
        };
        if self.inbox.maybe_queued() {
            // Items left earlier run first.
            return self.run(Some(guard), Some(work), &mut step, &mut deliver);
        }
        // The common case: the state was free and nothing was left for it, so `work` runs at
        // once, without being queued or moved around.
        let delivery = guard.with(|state| step(state, work));
        drop(guard);
        // Pairs with a submitter's fence after queueing: see `run`.
        fence(Ordering::SeqCst);
        if let Some(d) = delivery {
            deliver(d);
        }
        if !self.inbox.is_empty() {
            self.run(None, None, &mut step, &mut deliver);
        }
    }

    /// [`Serializer::submit`]'s general case: owns the state (`guard`, or when it gets it)
    /// and runs what was left for it, then `own`, delivering as it goes; or leaves `own` to
    /// the owner. Returns once nothing is left that this thread must run.
    fn run<D>(
        &self,
        mut guard: Option<ExclusiveGuard<'_, S>>,
        mut own: Option<W>,
        step: &mut dyn FnMut(&mut S, W) -> Option<D>,
        deliver: &mut dyn FnMut(D),
    ) {
        loop {
            let Some(mut owner) = guard.take().or_else(|| self.owner.try_lock()) else {
                match own.take() {
                    Some(w) => {
                        self.inbox.push(w);
                        // Pairs with the owner's fence after letting go: either it sees this
                        // item, or this thread sees the state free and takes it.
                        fence(Ordering::SeqCst);
                        continue;
                    }
                    None => return,
                }
            };
            let mut delivery = None;
            while delivery.is_none() {
                // The count first: no lock in the common case, nothing left for the owner.
                // A stale zero is caught by the locked check after letting go, below.
                let left = if self.inbox.maybe_queued() {
                    self.inbox.pop()
                } else {
                    None
                };
                let Some(w) = left.or_else(|| own.take()) else {
                    break;
                };
                delivery = owner.with(|state| step(state, w));
            }
            drop(owner);
            fence(Ordering::SeqCst);
            if let Some(d) = delivery {
                deliver(d);
            }
            // Whatever was queued before the fence above is seen here; what is queued after
            // it is run by its submitter, which then finds the state free, or by the owner
            // it found.
            if own.is_none() && self.inbox.is_empty() {
                return;
            }
        }
    }

    /// Runs `f` on the state if nobody owns it (`None` otherwise). Work queued meanwhile is
    /// left for the next [`Serializer::submit`]: use this only for things that can be
    /// retried, such as a periodic check.
    pub fn try_with<R>(&self, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        let mut guard = self.owner.try_lock()?;
        Some(guard.with(f))
    }
}
