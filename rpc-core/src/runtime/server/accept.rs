//! The server's accept loops (threads `rpc-acceptor`, one per transport), and [`Starting`]:
//! its transports as they start, stopped and joined if the start fails half-way.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rpc_sync::Flag;

use crate::runtime::endpoint::Endpoint;
use crate::transport::{AcceptStopper, Acceptor};
use crate::Error;

/// How long an accept loop waits in one call to its acceptor: one with a
/// [stopper](Acceptor::stopper) is woken by it at shutdown, and the wait only backs that up
/// (an idle acceptor wakes once a second); one without looks at the stop flag this often.
const WAIT_WITH_STOPPER: Duration = Duration::from_secs(1);
const WAIT_WITHOUT_STOPPER: Duration = Duration::from_millis(50);

/// The threads of one transport: its acceptor, its poller.
pub(super) type Threads = (JoinHandle<()>, JoinHandle<()>);

/// A started server's transports: its endpoints, what stops its accept loops, and each
/// transport's threads.
pub(super) type Listening = (Arc<[Arc<Endpoint>]>, AcceptStop, Vec<Threads>);

/// What stops a server's accept loops: the flag they look at, and each acceptor's stopper,
/// which wakes a waiting accept (so that an idle acceptor does not wake to look at the flag).
#[derive(Default)]
pub(super) struct AcceptStop {
    flag: Arc<Flag>,
    stoppers: Vec<AcceptStopper>,
}

impl AcceptStop {
    /// Stops the accept loops: each returns from its acceptor at once and ends.
    pub(super) fn raise(&self) {
        self.flag.raise();
        for stopper in &self.stoppers {
            stopper();
        }
    }
}

/// The transports of a server that is starting: their endpoints (with their poller threads)
/// and acceptors. Dropped before [`Starting::spawn_acceptors`] returns them, it stops what
/// started: the acceptor threads, the endpoints, their pollers.
#[derive(Default)]
pub(super) struct Starting {
    endpoints: Vec<Arc<Endpoint>>,
    pollers: Vec<JoinHandle<()>>,
    /// Each acceptor, with how long its loop waits in one call to it.
    acceptors: Vec<(Box<dyn Acceptor>, Duration)>,
    accepting: Vec<JoinHandle<()>>,
    stop: AcceptStop,
}

impl Starting {
    /// A transport's endpoint, its poller thread and its acceptor.
    pub(super) fn add(
        &mut self,
        endpoint: Arc<Endpoint>,
        poller: JoinHandle<()>,
        acceptor: Box<dyn Acceptor>,
    ) {
        self.endpoints.push(endpoint);
        self.pollers.push(poller);
        let wait = match acceptor.stopper() {
            Some(stopper) => {
                self.stop.stoppers.push(stopper);
                WAIT_WITH_STOPPER
            }
            None => WAIT_WITHOUT_STOPPER,
        };
        self.acceptors.push((acceptor, wait));
    }

    /// Starts an accept loop per transport: the server's endpoints, the flag that stops
    /// the loops, and each transport's threads.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a thread cannot be spawned; what started is stopped then.
    pub(super) fn spawn_acceptors(
        mut self,
        max_connections: Option<usize>,
    ) -> Result<Listening, Error> {
        let all: Arc<[Arc<Endpoint>]> = self.endpoints.iter().cloned().collect();
        let acceptors = std::mem::take(&mut self.acceptors);
        for ((acceptor, wait), endpoint) in acceptors.into_iter().zip(self.endpoints.clone()) {
            let (all, stop) = (Arc::clone(&all), Arc::clone(&self.stop.flag));
            let thread = std::thread::Builder::new()
                .name("rpc-acceptor".to_string())
                .spawn(move || {
                    accept_loop((acceptor, wait), (endpoint, all), stop, max_connections)
                })?;
            self.accepting.push(thread);
        }
        let threads = std::mem::take(&mut self.accepting)
            .into_iter()
            .zip(std::mem::take(&mut self.pollers))
            .collect();
        self.endpoints.clear();
        Ok((all, std::mem::take(&mut self.stop), threads))
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // Handed over (all taken), there is nothing to stop; a failed start stops what it
        // started.
        if self.endpoints.is_empty() && self.pollers.is_empty() && self.accepting.is_empty() {
            return;
        }
        self.stop.raise();
        for thread in self.accepting.drain(..) {
            let _ = thread.join();
        }
        for endpoint in &self.endpoints {
            endpoint.stop();
        }
        for poller in self.pollers.drain(..) {
            let _ = poller.join();
        }
    }
}

/// Accepts `acceptor`'s connections onto `endpoint`, waiting `wait` in each call to it; `all`
/// the server's endpoints, whose connections together count against `max_connections`.
fn accept_loop(
    (mut acceptor, wait): (Box<dyn Acceptor>, Duration),
    (endpoint, all): (Arc<Endpoint>, Arc<[Arc<Endpoint>]>),
    stop: Arc<Flag>,
    max_connections: Option<usize>,
) {
    while !stop.is_raised() {
        match acceptor.accept(wait) {
            Ok(Some(link)) => {
                let served = || all.iter().map(|e| e.conns().len()).sum::<usize>();
                if max_connections.is_some_and(|max| served() >= max) {
                    tracing::warn!(peer = %link.peer_name(), "connection limit reached; closing the new connection");
                    endpoint.refuse_link(&link);
                    continue;
                }
                let Some(memory) = endpoint.admit(&link) else {
                    let budget = endpoint.memory();
                    tracing::warn!(
                        peer = %link.peer_name(),
                        used = budget.used(),
                        limit = budget.limit(),
                        "memory budget spent; closing the new connection"
                    );
                    endpoint.refuse_link(&link);
                    continue;
                };
                tracing::debug!(peer = %link.peer_name(), "accepted");
                endpoint.add_link(link, memory);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "a connection attempt failed"),
        }
    }
}
