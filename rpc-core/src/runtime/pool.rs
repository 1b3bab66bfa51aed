//! The handler worker pool: slow handlers run here so they never stall the poller.

use std::thread::JoinHandle;

use crossbeam::channel::{self, Sender};

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct WorkerPool {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub(crate) fn new(size: usize) -> Result<WorkerPool, crate::Error> {
        let (tx, rx) = channel::unbounded::<Job>();
        let mut threads = Vec::with_capacity(size);
        for i in 0..size.max(1) {
            let rx = rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("rpc-worker-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })?,
            );
        }
        Ok(WorkerPool {
            jobs: Some(tx),
            threads,
        })
    }

    pub(crate) fn execute(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            // The receivers live as long as the pool, so sending cannot fail before shutdown.
            let _ = jobs.send(job);
        }
    }

    /// Lets queued jobs finish, then joins the workers.
    pub(crate) fn shutdown(&mut self) {
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
