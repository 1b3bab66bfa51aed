//! The handler worker pool: slow handlers run here so they never stall the poller, and
//! async handlers' tasks run here when woken. New calls are admitted up to a bound: a request
//! that finds `max_queued` calls already waiting is answered at once (UNAVAILABLE) instead of
//! waiting in memory without limit. Woken tasks are always queued, never refused and never
//! blocking their waker: each is queued at most once at a time (see `rpc_sync::Task`), so they
//! are bounded by the calls in progress.
//!
//! Calls and tasks share one [`WorkQueue`], whose buffer is reused: after it grew to the
//! deepest the queue has been, queueing allocates nothing (crossbeam's unbounded channel
//! allocated a block every 31 sends).

use std::sync::Arc;
use std::thread::JoinHandle;

use rpc_sync::{Count, Flag, Mutex, Runnable, Schedule, WorkQueue};

/// A call for a handler, queued by value (no box, no allocation per request): the server's
/// job type says how it runs and how it is answered when it never will.
pub(crate) trait PoolJob: Send + 'static {
    /// Runs the call's handler, on a worker.
    fn run(self);
    /// Answers the call without running it: the pool shut down first.
    fn refuse(self);
}

// Calls go by value, not boxed: no allocation per request (the variants' sizes differ).
#[allow(clippy::large_enum_variant)]
enum Work<J> {
    Call(J),
    Task(Arc<dyn Runnable>),
    Stop,
}

pub use crate::transport::ThreadContext;

/// Room in the queue's buffer before it first grows.
const INITIAL_CAPACITY: usize = 64;

struct Queue<J> {
    work: WorkQueue<Work<J>>,
    /// Calls queued and not picked up yet.
    queued_calls: Count,
    max_queued: usize,
    /// The workers stopped: whoever queues work must see that it is done. Raised before the
    /// final drain, which takes the queue's lock, and read after queueing under that lock:
    /// either the drain finds the item, or the queuer sees the flag and drains it itself.
    stopped: Flag,
}

impl<J: PoolJob> Queue<J> {
    /// Finishes what nobody will run: calls are answered UNAVAILABLE, tasks are cancelled
    /// and run once, which drops their futures (and what those hold: the call, its
    /// connection). A task woken by that lands here again and is handled the same way.
    fn drain(&self) {
        while let Some(work) = self.work.try_pop() {
            match work {
                Work::Call(job) => {
                    self.queued_calls.sub(1);
                    job.refuse();
                }
                Work::Task(task) => {
                    task.cancel();
                    task.run();
                }
                Work::Stop => {}
            }
        }
    }
}

/// A pool's queue as the tasks it runs see it, whatever its job type.
trait TaskQueue: Send + Sync {
    /// Queues a woken task (never refused: see the module docs).
    fn push_task(&self, task: Arc<dyn Runnable>);
}

impl<J: PoolJob> TaskQueue for Queue<J> {
    fn push_task(&self, task: Arc<dyn Runnable>) {
        // Unbounded by design, bounded in fact: see the module docs.
        self.work.push(Work::Task(task));
        super::woke_a_thread();
        // Woken after the workers stopped (by a timer, a late connection close): nobody
        // else will take it, and a task left queued would keep its future forever.
        if self.stopped.is_raised() {
            self.drain();
        }
    }
}

/// Where woken handler tasks go: the pool's queue; for an inline method's task woken while
/// a server's poller polls, that poller (see [`super::endpoint::run_on_this_poller`]).
#[derive(Clone)]
pub(crate) struct Spawner {
    queue: Arc<dyn TaskQueue>,
    inline: bool,
}

impl Spawner {
    /// This spawner, for tasks of inline methods (`true`) or not.
    pub(crate) fn with_inline(&self, inline: bool) -> Spawner {
        Spawner {
            queue: Arc::clone(&self.queue),
            inline,
        }
    }
}

impl Schedule for Spawner {
    fn schedule(&self, task: Arc<dyn Runnable>) {
        let task = if self.inline {
            match super::endpoint::run_on_this_poller(task) {
                Ok(()) => return,
                Err(task) => task,
            }
        } else {
            task
        };
        self.queue.push_task(task);
    }

    fn panicked(&self, panic: Box<dyn std::any::Any + Send>) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(panic = %what, "an async handler panicked; answered INTERNAL");
    }
}

/// The worker threads and their queue, for calls of type `J`.
pub(crate) struct WorkerPool<J: PoolJob> {
    queue: Arc<Queue<J>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<J: PoolJob> WorkerPool<J> {
    /// `size` workers sharing a queue of at most `max_queued` calls.
    pub(crate) fn new(
        size: usize,
        max_queued: usize,
        context: Option<ThreadContext>,
    ) -> Result<WorkerPool<J>, crate::Error> {
        let max_queued = max_queued.max(1);
        let queue = Arc::new(Queue {
            work: WorkQueue::with_capacity(INITIAL_CAPACITY.min(max_queued)),
            queued_calls: Count::new(0),
            max_queued,
            stopped: Flag::new(false),
        });
        let mut threads = Vec::with_capacity(size);
        for i in 0..size.max(1) {
            let queue = Arc::clone(&queue);
            let context = context.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("rpc-worker-{i}"))
                    .spawn(move || {
                        let mut run = || worker_loop(&queue);
                        match &context {
                            Some(wrap) => wrap(&mut run),
                            None => run(),
                        }
                    })?,
            );
        }
        Ok(WorkerPool {
            queue,
            threads: Mutex::new(threads),
        })
    }

    /// Where woken tasks of this pool's handlers go.
    pub(crate) fn spawner(&self) -> Spawner {
        Spawner {
            queue: Arc::clone(&self.queue) as Arc<dyn TaskQueue>,
            inline: false,
        }
    }

    /// Queues a call; gives it back if `max_queued` calls wait already (or the pool
    /// stopped).
    pub(crate) fn execute(&self, job: J) -> Option<J> {
        let q = &self.queue;
        if q.stopped.is_raised() {
            return Some(job);
        }
        if !q.queued_calls.try_add_below(q.max_queued) {
            return Some(job);
        }
        q.work.push(Work::Call(job));
        // A hand-off to another thread (counted as a wake-up whether or not a worker was
        // asleep).
        super::woke_a_thread();
        // Queued while the pool stopped: answered by the drain (here, if the shutdown's
        // drain ran before the push).
        if q.stopped.is_raised() {
            q.drain();
        }
        None
    }

    /// Lets queued work finish, then joins the workers; what is queued after that is
    /// finished by [`Queue::drain`] (tasks woken later too, by whoever wakes them).
    pub(crate) fn shutdown(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for _ in &threads {
            self.queue.work.push(Work::Stop);
        }
        for t in threads {
            let _ = t.join();
        }
        self.queue.stopped.raise();
        self.queue.drain();
    }
}

fn worker_loop<J: PoolJob>(queue: &Queue<J>) {
    loop {
        match queue.work.pop() {
            Work::Call(job) => {
                queue.queued_calls.sub(1);
                job.run();
            }
            Work::Task(task) => {
                rpc_sync::assert_unlocked("running a handler task");
                super::held_sends::holding_sends(|| task.run());
            }
            Work::Stop => break,
        }
    }
}

impl<J: PoolJob> Drop for WorkerPool<J> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
