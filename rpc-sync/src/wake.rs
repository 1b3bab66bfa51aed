//! [`Wake`]: a wake-up left for later, and the waiter it wakes (a parked thread or a task).

use std::task::{Context, Waker};

use crate::primitive::Thread;

/// Who waits for a hand-off: a parked thread or a task.
pub(crate) enum Waiter {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    pub(crate) fn wake(self) {
        match self {
            Waiter::Thread(t) => t.unpark(),
            Waiter::Task(w) => w.wake(),
        }
    }

    /// Replaces `slot` with the current task's waker, unless it already holds one that
    /// would wake the same task.
    pub(crate) fn register_task(slot: &mut Option<Waiter>, cx: &Context<'_>) {
        if let Some(Waiter::Task(w)) = slot {
            if w.will_wake(cx.waker()) {
                return;
            }
        }
        *slot = Some(Waiter::Task(cx.waker().clone()));
    }
}

/// A wake-up of a receiver, left for the producer to do once it let go of what it holds
/// ([`Inbox::push_deferred`](crate::Inbox::push_deferred),
/// [`Oneshot::complete_deferred`](crate::Oneshot::complete_deferred)). Dropping it without
/// [`Wake::wake`] loses the wake-up.
#[must_use = "the receiver sleeps until woken"]
pub struct Wake(pub(crate) Option<Waiter>);

impl Wake {
    /// Wakes the receiver if it was waiting; whether it was.
    pub fn wake(self) -> bool {
        match self.0 {
            Some(waiter) => {
                waiter.wake();
                true
            }
            None => false,
        }
    }

    /// Whether waking would wake anybody (nobody waited: nothing to do later).
    pub fn is_needed(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Wake").field(&self.0.is_some()).finish()
    }
}
