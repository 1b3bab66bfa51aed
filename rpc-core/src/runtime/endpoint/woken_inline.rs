//! Handler tasks woken on a server's poller thread, run there after its poll.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;

use rpc_sync::Runnable;

/// Handler tasks of inline methods ([`crate::Execution::Inline`]) woken while this thread
/// polls a server's completion queue: it runs them itself once it let go of the queue, as it
/// runs those methods' handlers, instead of handing them to the worker pool (a wake-up of
/// another thread each). A streaming handler whose sends wait for credits or window resumes
/// on the thread that received them. Bounded as the pool's queue is: a task is queued at
/// most once at a time.
struct WokenInline {
    /// This thread is inside a server's `poll_once` (the outermost one drains `tasks`).
    polling: Cell<bool>,
    tasks: RefCell<VecDeque<Arc<dyn Runnable>>>,
}

thread_local! {
    static WOKEN_INLINE: WokenInline = const {
        WokenInline {
            polling: Cell::new(false),
            tasks: RefCell::new(VecDeque::new()),
        }
    };
}

/// Takes `task` to run on this thread if it is polling a server's completions; gives it back
/// otherwise.
pub(crate) fn run_on_this_poller(task: Arc<dyn Runnable>) -> Result<(), Arc<dyn Runnable>> {
    WOKEN_INLINE.with(|w| {
        if w.polling.get() {
            w.tasks.borrow_mut().push_back(task);
            Ok(())
        } else {
            Err(task)
        }
    })
}

/// Runs the tasks [`run_on_this_poller`] took (and those they wake), then stops taking more;
/// the frames they send go out together at the end (see [`crate::runtime::held_sends::holding_sends`]).
pub(super) fn run_woken_inline() {
    let none = WOKEN_INLINE.with(|w| {
        let none = w.tasks.borrow().is_empty();
        if none {
            w.polling.set(false);
        }
        none
    });
    if !none {
        crate::runtime::held_sends::holding_sends(run_woken_tasks);
    }
}

fn run_woken_tasks() {
    loop {
        let next = WOKEN_INLINE.with(|w| {
            let task = w.tasks.borrow_mut().pop_front();
            if task.is_none() {
                w.polling.set(false);
            }
            task
        });
        match next {
            Some(task) => {
                rpc_sync::assert_unlocked("running a handler task");
                task.run();
            }
            None => return,
        }
    }
}

/// Marks this thread as polling a server's completions; whether it is the outermost poll
/// (which runs the woken tasks, [`run_woken_inline`]).
pub(super) fn begin_polling() -> bool {
    WOKEN_INLINE.with(|w| !w.polling.replace(true))
}

/// Whether this thread is polling a server's completions.
pub(super) fn on_a_poller() -> bool {
    WOKEN_INLINE.try_with(|w| w.polling.get()).unwrap_or(false)
}
