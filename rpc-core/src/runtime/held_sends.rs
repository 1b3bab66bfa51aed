//! Frames a server's handler task posts, held back while the task runs and posted as one
//! batch per link when it returns ([`holding_sends`]).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::transport::Link;

thread_local! {
    static HELD_SENDS: HeldSends = const {
        HeldSends {
            active: Cell::new(false),
            links: RefCell::new(Vec::new()),
        }
    };
}

/// Threads inside [`holding_sends`] now.
static HOLDING_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The links whose frames this thread holds back while it runs a handler or its task.
struct HeldSends {
    active: Cell<bool>,
    /// Links with held frames; kept (empty) between runs, so holding allocates nothing
    /// once a thread has held for as many links as it ever will at once.
    links: RefCell<Vec<Arc<dyn Link>>>,
}

impl HeldSends {
    /// Whether frames are held now; registers `link` for the flush if so.
    fn hold(&self, link: &Arc<dyn Link>) -> bool {
        if !self.active.get() {
            return false;
        }
        let mut links = self.links.borrow_mut();
        if !links.iter().any(|l| Arc::ptr_eq(l, link)) {
            links.push(Arc::clone(link));
        }
        true
    }
}

/// Ends a holding: posts what each link holds.
struct FlushHeld;

impl Drop for FlushHeld {
    fn drop(&mut self) {
        HOLDING_THREADS.fetch_sub(1, Ordering::Relaxed);
        HELD_SENDS.with(|held| {
            held.active.set(false);
            loop {
                let Some(link) = held.links.borrow_mut().pop() else {
                    return;
                };
                if let Err(e) = link.flush_sends() {
                    tracing::warn!(peer = %link.peer_name(), error = %e, "send failed; closing the connection");
                    link.close();
                }
            }
        });
    }
}

/// Runs `f`, a run of a server's handler task, with the frames it has this thread post on
/// server connections held by their links until it returns, then posted as one batch per
/// link: the messages a streaming handler sends in one go (until its window or the credits
/// run out, or it awaits something) cost one `ibv_post_send`, one doorbell and, on
/// Soft-RoCE, one system call, instead of one each. The frames wait only for `f` itself,
/// a future's poll, which does not block; client connections (a handler's own calls to other
/// servers) post at once. Nested holdings join the outermost.
pub(crate) fn holding_sends<R>(f: impl FnOnce() -> R) -> R {
    if HELD_SENDS.with(|held| held.active.replace(true)) {
        return f();
    }
    HOLDING_THREADS.fetch_add(1, Ordering::Relaxed);
    let _flush = FlushHeld;
    f()
}

/// Whether this thread holds frames back now (it runs inside [`holding_sends`]); if so,
/// `link` is registered to be flushed when the holding ends.
pub(crate) fn hold(link: &Arc<dyn Link>) -> bool {
    // The count spares every other post the thread-local lookup: a thread that holds
    // counted itself before, so it sees its own count.
    HOLDING_THREADS.load(Ordering::Relaxed) > 0 && HELD_SENDS.with(|held| held.hold(link))
}
