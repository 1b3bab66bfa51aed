//! The handler worker pool: slow handlers run here so they never stall the poller. Its queue
//! is bounded: a request that finds it full is answered at once (UNAVAILABLE) instead of
//! waiting in memory without limit.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use rpc_sync::Mutex;

use super::server::{IncomingRequest, ReplySink};
use crate::codegen::Service;

/// A request for a handler: queued as a plain value (no box, no allocation per request).
pub(crate) struct Job {
    pub(crate) service: Arc<dyn Service>,
    pub(crate) index: usize,
    pub(crate) request: IncomingRequest,
    pub(crate) reply: ReplySink,
}

pub(crate) struct WorkerPool {
    /// `None` asks a worker to stop.
    jobs: Sender<Option<Job>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl WorkerPool {
    /// `size` workers sharing a queue of at most `max_queued` requests.
    pub(crate) fn new(size: usize, max_queued: usize) -> Result<WorkerPool, crate::Error> {
        let (tx, rx) = channel::bounded::<Option<Job>>(max_queued.max(1));
        let mut threads = Vec::with_capacity(size);
        for i in 0..size.max(1) {
            let rx: Receiver<Option<Job>> = rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("rpc-worker-{i}"))
                    .spawn(move || {
                        while let Ok(Some(job)) = rx.recv() {
                            super::server::run_handler(
                                &*job.service,
                                job.index,
                                job.request,
                                job.reply,
                            );
                        }
                    })?,
            );
        }
        Ok(WorkerPool {
            jobs: tx,
            threads: Mutex::new(threads),
        })
    }

    /// Queues a job; gives it back if the queue is full (or the pool stopped).
    pub(crate) fn execute(&self, job: Job) -> Option<Job> {
        match self.jobs.try_send(Some(job)) {
            Ok(()) => {
                // A hand-off to another thread (counted as a wake-up whether or not a worker
                // was asleep).
                super::woke_a_thread();
                None
            }
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => job,
        }
    }

    /// Lets queued jobs finish, then joins the workers.
    pub(crate) fn shutdown(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for _ in &threads {
            // Blocking is fine here: workers drain the queue ahead of the stop marks.
            let _ = self.jobs.send(None);
        }
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
