//! What a streaming call shares between the connection's owner and the call's handles: the
//! received items ([`Inbox`]), the sender's go-on ([`Signal`]), and the window the reader
//! has consumed. Both sides of a streaming call use it: a client's call handle and response
//! stream, a server's request stream and response sender.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rpc_sync::{Flag, Inbox, Mutex, Published, Pushed, Signal};

use crate::protocol::v2::{Connection, Reservation};
use crate::{MetadataMap, Status};

/// Something the connection's owner cancels when the peer gives the call up (a server
/// handler's task).
pub(crate) trait Cancel: Send + Sync {
    fn cancel(&self);
}

impl<T: rpc_sync::Runnable> Cancel for T {
    fn cancel(&self) {
        rpc_sync::Runnable::cancel(self);
    }
}

/// What a streaming call receives, in order.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// Client: the response headers.
    Headers(MetadataMap),
    /// A message, copied out of its receive slot.
    Message(Received),
    /// The end. Client: the status, with the trailers (`Ok`) or in the status' metadata.
    /// Server: `Ok` is the client's half-close, `Err` the call was cancelled or lost.
    End(Result<MetadataMap, Status>),
}

/// A received message's bytes, counted against the connection's memory (PROTOCOL.md §15)
/// until the reader drops them.
#[derive(Debug)]
pub(crate) struct Received {
    bytes: Vec<u8>,
    _held: Option<Reservation>,
}

impl Received {
    /// Bytes held under `held` (`None`: counted elsewhere, or not held for a peer).
    pub(crate) fn new(bytes: Vec<u8>, held: Option<Reservation>) -> Received {
        Received { bytes, _held: held }
    }
}

impl std::ops::Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// One streaming call's shared state.
pub(crate) struct StreamShared {
    /// The call id (a client's: once the owner opened the call).
    id: Published,
    pub(crate) inbox: Inbox<Incoming>,
    /// Raised by the owner when the sender may hand over its next message.
    pub(crate) send_ready: Signal,
    /// The call is over for the sender (ended, cancelled, lost).
    finished: Flag,
    /// Window bytes the reader consumed and the owner was not told of yet.
    consumed: AtomicU32,
    /// Consumed bytes worth a report: half the window this side grants per call.
    report_at: u32,
    /// Server: the handler's task, cancelled with the call.
    task: Mutex<Option<Arc<dyn Cancel>>>,
    cancelled: Flag,
}

impl StreamShared {
    /// State for a call whose windows are `local_window` bytes (what this side grants).
    pub(crate) fn new(id: u64, local_window: u32, may_send: bool) -> Arc<StreamShared> {
        Arc::new(StreamShared {
            id: Published::new(id),
            inbox: Inbox::new(),
            send_ready: Signal::new(may_send),
            finished: Flag::new(false),
            consumed: AtomicU32::new(0),
            report_at: (local_window / 2).max(1),
            task: Mutex::new(None),
            cancelled: Flag::new(false),
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id.get()
    }

    pub(crate) fn set_id(&self, id: u64) {
        self.id.set(id);
    }

    /// Whether the call is over for the sender.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.is_raised()
    }

    /// The call ended (owner side): the sender stops, a waiting sender goes on to find out.
    pub(crate) fn finish(&self) {
        self.finished.raise();
        if self.send_ready.raise() {
            super::woke_a_thread();
        }
    }

    /// Queues a received item for the reader (owner side); `false` if the reader is gone.
    pub(crate) fn push(&self, item: Incoming) -> bool {
        match self.inbox.push(item) {
            Pushed::Woke => {
                super::woke_a_thread();
                true
            }
            Pushed::Stored => true,
            Pushed::Refused => false,
        }
    }

    /// Ends the inbox with `end` and the call for the sender.
    pub(crate) fn end(&self, end: Result<MetadataMap, Status>) {
        self.inbox.close(Some(Incoming::End(end)));
        self.finish();
    }

    /// The reader took a message of `len` bytes: once half a window was consumed, the bytes
    /// to return to the peer (through the call's port, [`CallPort::consumed`]).
    ///
    /// [`CallPort::consumed`]: super::port::CallPort::consumed
    pub(crate) fn consumed(&self, len: usize) -> Option<u32> {
        let cost = Connection::<(), Vec<u8>>::message_cost(len);
        // A count of bytes only (the report goes through the owner's serializer): Relaxed.
        let total = self.consumed.fetch_add(cost, Ordering::Relaxed) + cost;
        if total < self.report_at {
            return None;
        }
        let bytes = self.consumed.swap(0, Ordering::Relaxed);
        (bytes > 0).then_some(bytes)
    }

    /// Server: the peer cancelled the call (or it was lost): the reader sees `status`, the
    /// sender stops, the handler's task is cancelled (its future dropped).
    pub(crate) fn cancel(&self, status: Status) {
        self.mark_cancelled();
        self.end(Err(status));
        self.cancel_task();
    }

    /// The peer gave the call up (the first part of [`StreamShared::cancel`]).
    pub(crate) fn mark_cancelled(&self) {
        self.cancelled.raise();
    }

    /// Cancels the handler's task, letting go of it: the call no longer keeps it (nor,
    /// through it, itself) alive.
    pub(crate) fn cancel_task(&self) {
        let task = self.task.lock().take();
        if let Some(t) = task {
            t.cancel();
        }
    }

    /// Whether the peer cancelled the call.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.is_raised()
    }

    /// Server: the task running the call's handler, cancelled if the call is.
    pub(crate) fn attach(&self, task: Arc<dyn Cancel>) {
        *self.task.lock() = Some(Arc::clone(&task));
        if self.cancelled.is_raised() {
            task.cancel();
        }
    }

    /// Drops the task reference (the handler finished): breaks the task ↔ call cycle.
    pub(crate) fn detach(&self) {
        let task = self.task.lock().take();
        drop(task);
    }

    /// Blocks until the sender may go on; `false` at the deadline.
    pub(crate) fn wait_ready(&self, deadline: Option<Instant>) -> bool {
        self.send_ready.take(deadline)
    }
}
