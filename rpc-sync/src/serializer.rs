//! [`Serializer`]: state that one thread at a time works on, with work handed to whoever owns
//! it instead of waiting for it. The runtime keeps each connection's protocol state in one.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::primitive::{AtomicUsize, Mutex, UnsafeCell};

/// The bit of [`Serializer::word`] that says a thread owns the state.
const OWNED: usize = 1;
/// One queued item in [`Serializer::word`]'s count (above the [`OWNED`] bit).
const ONE: usize = 2;

/// State `S` worked on by one thread at a time, and the work items `W` other threads left for
/// it. [`Serializer::submit`] runs a work item at once if nobody owns the state; otherwise it
/// queues the item and returns, and the owner runs it before letting go. Nobody ever waits,
/// so no thread can be blocked behind another, whatever the owner does.
///
/// A step may produce a delivery `D` (waking a caller, running a handler): deliveries run
/// after the state is let go, so other threads can work on it meanwhile, and in the order
/// their work items ran on the submitting thread.
///
/// Work items run in the order they were queued; a thread's own item runs after the items
/// already queued, so one thread's items run in the order it submitted them.
///
/// Ownership and the count of queued items share one atomic word, so taking the state,
/// counting an item and letting go are each one read-modify-write that every other thread
/// sees in one order: a submitter that counts its item either finds the state owned (its
/// owner then fails to let go while the count is not zero, and runs the item) or takes it
/// itself. No fence, and no lock on the way out of an uncontended step.
///
/// Bound: the queue holds what submitters left while the state was owned; each caller of
/// `submit` adds at most one item per call, so its length is bounded by what the runtime's
/// callers may have outstanding (documented where the runtime submits).
pub struct Serializer<S, W> {
    /// [`OWNED`] while a thread owns `state`, plus [`ONE`] per item counted in `items`.
    word: AtomicUsize,
    state: UnsafeCell<S>,
    /// Items left for the owner: a buffer under a short lock (never held but to push and
    /// count an item, or to pop one and take its count back) that grows to the most items
    /// ever queued at once and is reused from then on, so queueing allocates nothing in a
    /// steady state. Whenever the lock is free, it holds exactly the items `word` counts.
    items: Mutex<VecDeque<W>>,
}

// SAFETY: `state` is reached only by the thread that set `OWNED` in `word` (one successful
// read-modify-write sets it, the owner clears it), so sharing the serializer only ever
// moves `S` and `W` between threads: `Send` suffices for both.
unsafe impl<S: Send, W: Send> Sync for Serializer<S, W> {}

impl<S, W> Serializer<S, W> {
    /// Unowned state and an empty queue.
    pub fn new(state: S) -> Self {
        Serializer {
            word: AtomicUsize::new(0),
            state: UnsafeCell::new(state),
            // Room for what a tick or a racing caller leaves now and then, so that the
            // first such item allocates nothing in the middle of a busy connection's life.
            items: Mutex::new(VecDeque::with_capacity(4)),
        }
    }

    /// Runs `work` through `step` now or leaves it to the current owner; see the type's
    /// docs. `deliver` runs each delivery a step produced, with the state let go.
    #[inline]
    pub fn submit<D>(
        &self,
        work: W,
        step: impl FnMut(&mut S, W) -> Option<D>,
        deliver: impl FnMut(D),
    ) {
        self.submit_as(
            work,
            |state, work, step| step(state, work),
            |work| work,
            step,
            deliver,
        );
    }

    /// [`Serializer::submit`] of an item `I` of its own type: run at once by `run` if nobody
    /// owns the state, and made a work item by `queue` only if it has to wait for the owner
    /// (who runs it with `step`, as every queued item). An item of the common case is then
    /// neither wrapped in `W` nor matched out of it again.
    #[inline]
    pub fn submit_as<I, D, F>(
        &self,
        item: I,
        run: impl FnOnce(&mut S, I, &mut F) -> Option<D>,
        queue: impl FnOnce(I) -> W,
        mut step: F,
        mut deliver: impl FnMut(D),
    ) where
        F: FnMut(&mut S, W) -> Option<D>,
    {
        // The common case: nobody owns the state and nothing is queued, so `item` runs at
        // once, without being queued or moved around.
        if self
            .word
            .compare_exchange(0, OWNED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            let delivery = self.step_owned(|state| run(state, item, &mut step));
            if self
                .word
                .compare_exchange(OWNED, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                if let Some(d) = delivery {
                    deliver(d);
                }
                return;
            }
            // Items were left meanwhile: still the owner, this thread runs them.
            return self.run_owned(delivery, &mut step, &mut deliver);
        }
        if self.enqueue(queue(item)) {
            self.run_owned(None, &mut step, &mut deliver);
        }
    }

    /// Runs one step; the caller owns the state.
    #[inline]
    fn step_owned<D>(&self, run: impl FnOnce(&mut S) -> Option<D>) -> Option<D> {
        // A step that panics lets go of the state on its way out (what it left queued runs
        // at the next submission), rather than keeping every later item queued for ever.
        struct LetGoOnPanic<'a>(&'a AtomicUsize);
        impl Drop for LetGoOnPanic<'_> {
            fn drop(&mut self) {
                self.0.fetch_and(!OWNED, Ordering::Release);
            }
        }
        let on_panic = LetGoOnPanic(&self.word);
        // SAFETY: this thread set `OWNED` and has not cleared it: no other thread reaches
        // `state` until it does (see `Sync`), and the borrow ends with `run`.
        let delivery = self.state.with_mut(|state| run(unsafe { &mut *state }));
        std::mem::forget(on_panic);
        delivery
    }

    /// Queues `work` and counts it; `true` if this thread took the state with it (nobody
    /// owned it) and must run what is queued.
    fn enqueue(&self, work: W) -> bool {
        // Counted under the queue's lock, as the owner takes an item and its count back: the
        // count is the queue's length whenever the lock is free, so an owner never takes an
        // item another thread pushed but has not counted yet in place of the one counted
        // (that item's thread could then run a later item of its own first).
        let mut items = self.items.lock();
        items.push_back(work);
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            match self.word.compare_exchange_weak(
                word,
                (word + ONE) | OWNED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(previous) => return previous & OWNED == 0,
                Err(now) => word = now,
            }
        }
    }

    /// [`Serializer::submit`]'s general case, on the owning thread: delivers `delivery` (a
    /// step this thread ran) once it let go, runs the queued items, letting go to deliver
    /// what each produces, and takes the state back while items are left and nobody else
    /// did. Returns once nothing is left that this thread must run.
    #[cold]
    fn run_owned<D>(
        &self,
        mut delivery: Option<D>,
        step: &mut dyn FnMut(&mut S, W) -> Option<D>,
        deliver: &mut dyn FnMut(D),
    ) {
        loop {
            while delivery.is_none() && self.word.load(Ordering::Acquire) >= ONE {
                let work = {
                    let mut items = self.items.lock();
                    let work = items.pop_front().expect("a counted item is queued");
                    self.word.fetch_sub(ONE, Ordering::AcqRel);
                    work
                };
                delivery = self.step_owned(|state| step(state, work));
            }
            // Let go, keeping the count: items counted from here on are seen below, or
            // taken with the state by their submitter.
            let left = self.word.fetch_and(!OWNED, Ordering::AcqRel) & !OWNED;
            match delivery.take() {
                Some(d) => deliver(d),
                None if left == 0 => return,
                None => {}
            }
            if !self.reclaim() {
                return;
            }
        }
    }

    /// Takes the state back if items are queued and nobody owns it (`false`: nothing is
    /// left for this thread).
    fn reclaim(&self) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word < ONE || word & OWNED != 0 {
                return false;
            }
            match self.word.compare_exchange_weak(
                word,
                word | OWNED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Serializer;

    /// A step that panics lets go of the state: the connection's later work still runs.
    #[test]
    fn a_panicking_step_lets_go_of_the_state() {
        let s = Serializer::new(Vec::<u32>::new());
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.submit(
                1,
                |_: &mut Vec<u32>, _| -> Option<()> { panic!("a bug in a step") },
                |_| {},
            )
        }));
        assert!(panicked.is_err());
        let mut ran = Vec::new();
        s.submit(
            2,
            |log: &mut Vec<u32>, w| {
                log.push(w);
                ran = log.clone();
                None::<()>
            },
            |_| {},
        );
        assert_eq!(ran, vec![2], "the state was let go and the next item ran");
    }
}
