//! The endpoint's rdma_cm event thread. Once a link is established its cm id is migrated to
//! the endpoint's link channel; this thread reads that channel and turns DISCONNECTED and
//! DEVICE_REMOVAL into a closed link, through the [`OnClose`] the endpoint gave it (the link's
//! `close_by_event`: QP to error, `Completion::Closed` through the link table's side queue,
//! poller woken).
//!
//! Events are matched to links by the id's address, looked up *before* the event is
//! acknowledged: until then `rdma_destroy_id` of that id cannot complete, so the address cannot
//! have been reused by a new id.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use rdma_sys::rdma_cm_event_type;
use rpc_sync::{Flag, Mutex};

use super::cm::{CmEvent, CmId, EventChannel};
use super::sys::{poll_readable, EventFd};
use crate::Error;

/// What the event thread does when a cm event closed a link: called with the key the link's id
/// was adopted under (`None` if no link adopted it), the event, and the reason to report.
pub(super) type OnClose = Box<dyn Fn(Option<u32>, &CmEvent, String) + Send + Sync>;

struct Shared {
    channel: Arc<EventChannel>,
    stop: EventFd,
    stopping: Flag,
    /// cm id address → link key.
    ids: Mutex<HashMap<usize, u32>>,
    on_close: OnClose,
}

/// Owns the event thread; the thread stops when the last owner (endpoint or link) is gone.
pub(super) struct CmDispatcher {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl CmDispatcher {
    pub(super) fn start(on_close: OnClose) -> Result<Arc<CmDispatcher>, Error> {
        let shared = Arc::new(Shared {
            channel: EventChannel::new()?,
            stop: EventFd::new()?,
            stopping: Flag::new(false),
            ids: Mutex::new(HashMap::new()),
            on_close,
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rpc-verbs-cm".into())
            .spawn(move || run(&thread_shared))
            .map_err(Error::Io)?;
        Ok(Arc::new(CmDispatcher {
            shared,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Moves an established link's id to the link channel; its disconnects are handled here
    /// from now on.
    pub(super) fn adopt(&self, id: &CmId, key: u32) -> Result<(), Error> {
        self.shared.ids.lock().insert(id.addr(), key);
        if let Err(e) = id.migrate(&self.shared.channel) {
            self.shared.ids.lock().remove(&id.addr());
            return Err(e);
        }
        Ok(())
    }

    /// Forgets an id about to be destroyed.
    pub(super) fn forget(&self, id_addr: usize) {
        self.shared.ids.lock().remove(&id_addr);
    }
}

impl Drop for CmDispatcher {
    fn drop(&mut self) {
        self.shared.stopping.raise();
        self.shared.stop.notify();
        if let Some(thread) = self.thread.lock().take() {
            // The last owner may be a link dropped by the event thread itself: it then exits
            // on its own at the top of its loop.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn run(shared: &Shared) {
    let fds = [shared.channel.fd(), shared.stop.raw()];
    loop {
        if shared.stopping.is_raised() {
            break;
        }
        if let Err(e) = poll_readable(&fds, None) {
            tracing::warn!(error = %e, "verbs: cm event thread poll(2) failed");
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        shared.stop.drain();
        loop {
            let got = shared
                .channel
                .try_get(|addr| shared.ids.lock().get(&addr).copied());
            match got {
                Ok(Some((event, key))) => handle(shared, event, key),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "verbs: reading cm events failed");
                    break;
                }
            }
        }
    }
    tracing::debug!("verbs: cm event thread stopped");
}

fn handle(shared: &Shared, event: CmEvent, key: Option<u32>) {
    let reason = match event.kind {
        rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED => "peer disconnected".to_string(),
        rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL => "RDMA device removed".to_string(),
        rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT => {
            tracing::trace!("verbs: timewait exit");
            return;
        }
        _ => {
            tracing::debug!(event = %event.describe(), "verbs: cm event on an established link");
            return;
        }
    };
    (shared.on_close)(key, &event, reason);
}
