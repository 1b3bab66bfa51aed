//! [`Task`]: a future in one allocation, polled by one thread at a time, re-scheduled through
//! a [`Schedule`] when woken. The runtime's async handlers run as tasks on its worker pool
//! (their first poll where the handler was called), so no async runtime is needed. A finished
//! task that nobody else holds can be renewed for another future of its type
//! ([`Task::renew`]): the runtime keeps one per handler and thread, so a handler that finishes
//! on its first poll costs no allocation.
//!
//! State machine (the loom models in `tests/loom.rs` check it): `SCHEDULED` (queued or
//! about to run) → `RUNNING` → `IDLE` (pending, waiting for a wake) or `DONE`. A wake of an
//! `IDLE` task makes it `SCHEDULED` and hands it to the scheduler, exactly once; a wake
//! while it runs makes it `NOTIFIED`, and the runner polls it again instead of going idle.
//! [`Task::cancel`] is a wake that makes the next run drop the future unpolled.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use crate::primitive::{AtomicBool, AtomicU8, UnsafeCell};

const IDLE: u8 = 0;
const SCHEDULED: u8 = 1;
const RUNNING: u8 = 2;
const NOTIFIED: u8 = 3;
const DONE: u8 = 4;

/// Where woken tasks go to be run (a worker pool's queue).
pub trait Schedule: Send + Sync + 'static {
    /// Queues `task`; some thread calls [`Runnable::run`] on it later. Called at most once
    /// per wake-up that finds the task idle, so the queue holds each task at most once.
    fn schedule(&self, task: Arc<dyn Runnable>);

    /// The task's future panicked while polled; it was dropped (default: nothing more).
    fn panicked(&self, panic: Box<dyn std::any::Any + Send>) {
        drop(panic);
    }
}

/// A task as a scheduler sees it.
pub trait Runnable: Send + Sync + 'static {
    /// Polls the future (once, or again if it was woken while being polled).
    fn run(self: Arc<Self>);
    /// Asks for the future to be dropped unpolled at its next run, and schedules that run.
    fn cancel(&self);
}

/// A future and its scheduling state; see the module docs.
pub struct Task<F, S> {
    state: AtomicU8,
    cancelled: AtomicBool,
    future: UnsafeCell<Option<F>>,
    scheduler: S,
}

// SAFETY: `future` is touched only by the thread that moved the state to `RUNNING` (only one
// can: every transition into `RUNNING` starts from `SCHEDULED`, which one wake or `spawn`
// creates and one `run` consumes); the rest is atomics and the `Sync` scheduler. The future
// moves between threads with the task, hence `F: Send`.
unsafe impl<F: Send, S: Sync> Sync for Task<F, S> {}
// SAFETY: as above.
unsafe impl<F: Send, S: Send> Send for Task<F, S> {}

impl<F, S> Task<F, S>
where
    F: Future<Output = ()> + Send + 'static,
    S: Schedule,
{
    /// A task for `future`, `SCHEDULED`: the caller runs it (its first poll) with
    /// [`Runnable::run`], or hands it to `scheduler`.
    pub fn new(future: F, scheduler: S) -> Arc<Self> {
        Arc::new(Task {
            state: AtomicU8::new(SCHEDULED),
            cancelled: AtomicBool::new(false),
            future: UnsafeCell::new(Some(future)),
            scheduler,
        })
    }

    /// Makes a finished task new again for the future `make` returns and `scheduler`, reusing
    /// its allocation: only if it is done and nobody else holds it (no waker, no queue entry,
    /// no canceller: `Arc::get_mut` is the proof), else gives both back unused. The future is
    /// made where it will live. The task is then `SCHEDULED`, as [`Task::new`] makes it.
    #[inline]
    pub fn renew<M>(this: &mut Arc<Self>, make: M, scheduler: S) -> Result<(), (M, S)>
    where
        M: FnOnce() -> F,
    {
        let Some(task) = Arc::get_mut(this) else {
            return Err((make, scheduler));
        };
        if task.state.load(Ordering::Acquire) != DONE {
            return Err((make, scheduler));
        }
        // SAFETY: `get_mut` gave this thread the only reference to the task, so nobody else
        // can touch `future`; it is `None` (a done task's future was dropped in place), and
        // the new one is written in place and never moved out, as pinning requires.
        task.future.with_mut(|f| unsafe { *f = Some(make()) });
        task.scheduler = scheduler;
        task.cancelled.store(false, Ordering::Relaxed);
        task.state.store(SCHEDULED, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the future finished or was dropped.
    pub fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    fn drop_future(&self) {
        // SAFETY: called by the runner only, which owns `future` while `RUNNING`. Assigning
        // drops the future where it is, as its pinning requires (it is never moved out).
        self.future.with_mut(|f| unsafe { *f = None });
        // A swap, not a store: a wake may be changing the state at the same time.
        self.state.swap(DONE, Ordering::AcqRel);
    }

    fn wake_task(self: &Arc<Self>) {
        if self.note_wake() {
            self.scheduler
                .schedule(Arc::clone(self) as Arc<dyn Runnable>);
        }
    }
}

impl<F, S> Task<F, S> {
    /// Records a wake: `IDLE` becomes `SCHEDULED` (true: the caller must get it run),
    /// `RUNNING` becomes `NOTIFIED`. Every outcome is a read-modify-write, the no-op ones
    /// included, so the wake is ordered after whatever the waker published before it, and
    /// the runner that next moves the state sees that.
    fn note_wake(&self) -> bool {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => SCHEDULED,
                RUNNING => NOTIFIED,
                other => other,
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return state == IDLE,
                Err(now) => state = now,
            }
        }
    }
}

impl<F, S> Runnable for Task<F, S>
where
    F: Future<Output = ()> + Send + 'static,
    S: Schedule,
{
    fn run(self: Arc<Self>) {
        if self
            .state
            .compare_exchange(SCHEDULED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Not ours to run (a stray second queue entry cannot happen, but be safe).
            return;
        }
        let waker = Waker::from(Arc::clone(&self));
        let mut cx = Context::from_waker(&waker);
        loop {
            if self.cancelled.load(Ordering::Acquire) {
                self.drop_future();
                return;
            }
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: this thread moved the state to `RUNNING`: nobody else touches
                // `future`. The future lives inside the task's `Arc` allocation and is never
                // moved: it is dropped in place (`drop_future`) once finished, panicked or
                // cancelled, so pinning it there is sound.
                self.future.with_mut(|f| unsafe {
                    match (*f).as_mut() {
                        Some(fut) => Pin::new_unchecked(fut).poll(&mut cx).is_ready(),
                        None => true,
                    }
                })
            }));
            let ready = match polled {
                Ok(ready) => ready,
                Err(panic) => {
                    // A panicked future is not polled again: drop it (its drop runs its
                    // clean-up, such as answering the call).
                    self.drop_future();
                    self.scheduler.panicked(panic);
                    return;
                }
            };
            if ready {
                self.drop_future();
                return;
            }
            match self
                .state
                .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                // Woken while polling: poll again at once.
                Err(_) => {
                    self.state.swap(RUNNING, Ordering::AcqRel);
                }
            }
        }
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        if self.note_wake() {
            // Idle, and now ours: nobody polls it until it is scheduled, and a cancelled
            // task only needs its future dropped, so do that here rather than queue it.
            self.state.swap(RUNNING, Ordering::AcqRel);
            self.drop_future();
        }
    }
}

impl<F, S> Wake for Task<F, S>
where
    F: Future<Output = ()> + Send + 'static,
    S: Schedule,
{
    fn wake(self: Arc<Self>) {
        self.wake_task();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_task();
    }
}
