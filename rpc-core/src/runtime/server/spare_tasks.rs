//! Each thread keeps the last finished task of each async handler (one per future type), so
//! that the handler's next call on that thread reuses the task's allocation
//! ([`rpc_sync::Task::renew`]): an async call whose handler finishes on its first poll
//! allocates nothing.
//!
//! Bound: at most [`SPARES`] spares per thread, one per handler future type (beyond that, a
//! new type takes the last one's place). A finished task has dropped its future, so a spare
//! holds the allocation (the size of the type's state machine) and a handle on the worker
//! pool's queue, nothing of the call it served.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use rpc_sync::Task;

use crate::runtime::pool::Spawner;

type HandlerTask<F> = Task<F, Spawner>;
/// A thread's spare of one future type (`None` while it is lent out); boxed once per type.
type Spare<F> = Option<Arc<HandlerTask<F>>>;

/// Spares a thread keeps (a server's busiest async methods on that thread).
const SPARES: usize = 8;

thread_local! {
    /// Spares by future type, each a boxed `Spare<F>`: a short list scanned in order, cheaper
    /// than hashing a type id for the few async methods a thread serves.
    static SPARE_TASKS: RefCell<Vec<(TypeId, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

/// A task for the future `make` returns: this thread's spare of its type renewed (the
/// future made in place), or a new one (one allocation). The task is scheduled: its caller
/// runs its first poll.
#[inline]
pub(super) fn task_for<F>(make: impl FnOnce() -> F, spawner: Spawner) -> Arc<HandlerTask<F>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let spare = SPARE_TASKS.with(|spares| spare_of::<F>(&mut spares.borrow_mut())?.take());
    match spare {
        Some(mut task) => match Task::renew(&mut task, make, spawner) {
            Ok(()) => task,
            Err((make, spawner)) => Task::new(make(), spawner),
        },
        None => Task::new(make(), spawner),
    }
}

/// Keeps `task`, which finished, as this thread's spare for its future type, if nobody else
/// holds it (a waker kept by the handler, say: then it is simply dropped).
pub(super) fn keep<F>(task: Arc<HandlerTask<F>>)
where
    F: Future<Output = ()> + Send + 'static,
{
    if !task.is_done() || Arc::strong_count(&task) != 1 {
        return;
    }
    SPARE_TASKS.with(|spares| {
        let mut spares = spares.borrow_mut();
        match spare_of::<F>(&mut spares) {
            Some(slot) => *slot = Some(task),
            None => {
                if spares.len() == SPARES {
                    spares.pop();
                }
                spares.push((TypeId::of::<F>(), Box::new(Some(task))));
            }
        }
    });
}

/// The thread's spare slot for future type `F`, if it has one.
fn spare_of<F: 'static>(spares: &mut [(TypeId, Box<dyn Any>)]) -> Option<&mut Spare<F>> {
    let (_, slot) = spares.iter_mut().find(|(id, _)| *id == TypeId::of::<F>())?;
    slot.downcast_mut::<Spare<F>>()
}
