//! The server's accept loops (threads `rpc-acceptor`, one per transport), and [`Starting`]:
//! its transports as they start, stopped and joined if the start fails half-way.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rpc_sync::Flag;

use crate::runtime::endpoint::Endpoint;
use crate::transport::{AcceptStopper, Acceptor, Link};
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
    accept_each(&mut *acceptor, wait, &stop, |link| {
        let served = || all.iter().map(|e| e.conns().len()).sum::<usize>();
        if max_connections.is_some_and(|max| served() >= max) {
            tracing::warn!(peer = %link.peer_name(), "connection limit reached; closing the new connection");
            endpoint.refuse_link(&link);
            return;
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
            return;
        };
        tracing::debug!(peer = %link.peer_name(), "accepted");
        endpoint.add_link(link, memory);
    });
}

/// Hands each link `acceptor` accepts to `on_link` until `stop` is raised, or until the
/// acceptor is gone for good ([`Acceptor::is_gone`]: its RDMA device was removed), after
/// which every call to it would return at once: the loop ends rather than spin. An error of
/// one connection attempt, whatever it is, does not end it.
fn accept_each(
    acceptor: &mut dyn Acceptor,
    wait: Duration,
    stop: &Flag,
    mut on_link: impl FnMut(Arc<dyn Link>),
) {
    while !stop.is_raised() {
        match acceptor.accept(wait) {
            Ok(Some(link)) => on_link(link),
            Ok(None) => {}
            Err(e) if acceptor.is_gone() => {
                tracing::error!(
                    error = %e,
                    listener = %acceptor.local_addr(),
                    "the listener is gone; no more connections are accepted on it"
                );
                return;
            }
            Err(e) => tracing::warn!(error = %e, "a connection attempt failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails its first accept with `first` (and is gone from then on if `gone`), then
    /// returns `Ok(None)` at once, as a stopped acceptor does; raises `stop` at its 100th
    /// call, so that a loop that keeps calling it ends all the same.
    struct FailingAcceptor {
        first: Option<Error>,
        gone: bool,
        calls: usize,
        stop: Arc<Flag>,
    }

    impl Acceptor for FailingAcceptor {
        fn accept(&mut self, _: Duration) -> Result<Option<Arc<dyn Link>>, Error> {
            self.calls += 1;
            if self.calls == 100 {
                self.stop.raise();
            }
            match self.first.take() {
                Some(e) => Err(e),
                None => Ok(None),
            }
        }

        fn local_addr(&self) -> String {
            "192.0.2.1:1".to_string()
        }

        fn is_gone(&self) -> bool {
            self.gone && self.calls > 0
        }
    }

    /// How many times the loop called an acceptor whose first accept fails with `first`
    /// (and which is `gone` from then on).
    fn calls_after(first: Error, gone: bool) -> usize {
        let stop = Arc::new(Flag::new(false));
        let mut acceptor = FailingAcceptor {
            first: Some(first),
            gone,
            calls: 0,
            stop: Arc::clone(&stop),
        };
        accept_each(&mut acceptor, Duration::ZERO, &stop, |_| {
            unreachable!("no link is accepted")
        });
        acceptor.calls
    }

    #[test]
    fn an_acceptor_gone_for_good_ends_its_loop_instead_of_spinning() {
        let unavailable = || Error::TransportUnavailable {
            transport: "verbs",
            reason: "the listener's RDMA device was removed".into(),
        };
        assert_eq!(
            calls_after(unavailable(), true),
            1,
            "one call, then the loop ends"
        );
        // One failed connection attempt does not stop the loop, whatever its error (a
        // request through a second device is refused TransportUnavailable): it goes on
        // until stopped.
        assert_eq!(calls_after(unavailable(), false), 100);
        let failed = Error::ConnectionClosed("the peer went away mid-handshake".into());
        assert_eq!(calls_after(failed, false), 100);
    }
}
