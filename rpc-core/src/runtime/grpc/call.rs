//! [`GrpcCall`]: one call on an HTTP/2 stream, as the call's handles see it. What they
//! produce (headers, messages, the end) queues in `out` for the HTTP/2 body that sends it;
//! what arrives is pushed into the call's [`StreamShared`] by the task that reads the body.
//!
//! Bounds: a sender hands over one message, then waits for the body to take it (the
//! stream's `send_ready`), so `out` holds at most one message plus the headers and the end.
//! Received messages not yet read are held under a window: the reading task stops reading
//! the HTTP/2 body while more than `WINDOW` bytes wait, and HTTP/2's own flow control then
//! holds the peer back.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use rpc_sync::{Flag, Inbox, Mutex, Signal};

use super::frame_message;
use crate::protocol::v2::Connection;
use crate::runtime::call::Encode;
use crate::runtime::port::CallPort;
use crate::runtime::stream::Cancel;
use crate::runtime::stream::{Incoming, Received, StreamShared};
use crate::{Code, MetadataMap, Status};

/// Bytes of received, unread messages after which the reading task pauses.
pub(crate) const WINDOW: u32 = 256 * 1024;

/// What a call sends, in order.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// Server: the response headers.
    Headers(MetadataMap),
    /// One message, prefixed.
    Message(Bytes),
    /// Server: the status and trailers (the last item).
    End(Status),
}

/// The task serving the call's HTTP/2 side (a client's request, a server's request reader),
/// aborted when the call is given up.
#[derive(Default)]
struct Driver {
    handle: Option<tokio::task::AbortHandle>,
    aborted: bool,
}

/// One call on an HTTP/2 stream.
pub(crate) struct GrpcCall {
    shared: Arc<StreamShared>,
    pub(crate) out: Inbox<Outbound>,
    max_send: usize,
    headers_sent: Flag,
    /// Client: the call was given up; the request body resets the HTTP/2 stream.
    given_up: Flag,
    /// Window bytes of received messages the reader has not consumed. A count only
    /// (`Relaxed`): the messages travel through the inbox, and the reader's "room again"
    /// through `room`, which carries the hand-off.
    unread: AtomicU32,
    /// Raised when the reader consumed some.
    room: Signal,
    driver: Mutex<Driver>,
}

impl GrpcCall {
    /// A call whose peer accepts messages of up to `max_send` bytes.
    pub(crate) fn new(max_send: usize) -> Arc<GrpcCall> {
        Arc::new(GrpcCall {
            shared: StreamShared::new(0, WINDOW, true),
            out: Inbox::new(),
            max_send,
            headers_sent: Flag::new(false),
            given_up: Flag::new(false),
            unread: AtomicU32::new(0),
            room: Signal::new(false),
            driver: Mutex::new(Driver::default()),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<StreamShared> {
        &self.shared
    }

    pub(crate) fn max_send_size(&self) -> usize {
        self.max_send
    }

    /// Ties `handle` to the call: aborted when the call is given up (at once if it was).
    pub(crate) fn set_driver(&self, handle: tokio::task::AbortHandle) {
        let mut driver = self.driver.lock();
        if driver.aborted {
            drop(driver);
            handle.abort();
        } else {
            driver.handle = Some(handle);
        }
    }

    /// Stops the call's driver task (its HTTP/2 stream is reset if still open).
    pub(crate) fn abort_driver(&self) {
        let handle = {
            let mut driver = self.driver.lock();
            driver.aborted = true;
            driver.handle.take()
        };
        if let Some(h) = handle {
            h.abort();
        }
    }

    /// Server: answers with headers, one message and trailers.
    pub(crate) fn reply(&self, headers: MetadataMap, message: &dyn Encode, trailers: MetadataMap) {
        self.headers(headers);
        self.out.push(Outbound::Message(frame_message(message)));
        self.end(Status::with_metadata(Code::Ok, "", trailers));
    }

    /// Server: ends the call with `status` (OK: its metadata are the trailers).
    pub(crate) fn end(&self, status: Status) {
        self.out.close(Some(Outbound::End(status)));
    }

    /// Server: the response headers (once; later ones are dropped).
    pub(crate) fn headers(&self, headers: MetadataMap) {
        if self.headers_sent.raise() {
            self.out.push(Outbound::Headers(headers));
        }
    }

    /// One message of a stream (the sender waited for `send_ready`).
    pub(crate) fn send(&self, message: &dyn Encode) {
        self.out.push(Outbound::Message(frame_message(message)));
    }

    /// Client: ends the requests.
    pub(crate) fn half_close(&self) {
        self.out.close(None);
    }

    /// Client: gives the call up: the reader sees `status`, the HTTP/2 stream is reset
    /// (RST_STREAM CANCEL, by the request body, which ending the inbox wakes: while the
    /// request body is open, dropping the response alone resets nothing).
    pub(crate) fn cancel(&self, status: Status) {
        self.shared.end(Err(status));
        self.given_up.raise();
        self.out.close(None);
        self.abort_driver();
    }

    /// Client: whether the call was given up.
    pub(crate) fn is_given_up(&self) -> bool {
        self.given_up.is_raised()
    }

    /// The reader consumed `bytes` of the window.
    pub(crate) fn consumed(&self, bytes: u32) {
        let before = self
            .unread
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |unread| {
                Some(unread.saturating_sub(bytes))
            })
            .unwrap_or(0);
        if before >= WINDOW && self.room.raise() {
            rpc_sync::woke_a_thread();
        }
    }

    /// Driver: hands a received message to the reader (whose consumption returns its
    /// window); `false` once the reader is gone.
    pub(crate) fn deliver(&self, message: Bytes) -> bool {
        let cost = Connection::<(), Vec<u8>>::message_cost(message.len());
        self.unread.fetch_add(cost, Ordering::Relaxed);
        if self
            .shared
            .push(Incoming::Message(Received::new(message.to_vec(), None)))
        {
            true
        } else {
            self.unread.fetch_sub(cost, Ordering::Relaxed);
            false
        }
    }

    /// Driver: ready while fewer than [`WINDOW`] received bytes wait to be read.
    pub(crate) fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.unread.load(Ordering::Relaxed) < WINDOW {
                return Poll::Ready(());
            }
            match self.room.poll_take(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => continue,
            }
        }
    }
}

/// An HTTP/2 stream as the far end of its call's handles.
impl CallPort for GrpcCall {
    fn max_message_size(&self) -> usize {
        self.max_send_size()
    }

    fn reply(&self, _call: u64, headers: MetadataMap, message: &dyn Encode, trailers: MetadataMap) {
        GrpcCall::reply(self, headers, message, trailers);
    }

    fn end(&self, _call: u64, status: Status) {
        GrpcCall::end(self, status);
    }

    fn headers(&self, _call: u64, headers: &MetadataMap) {
        GrpcCall::headers(self, headers.clone());
    }

    fn send(&self, _stream: &Arc<StreamShared>, message: &dyn Encode) {
        GrpcCall::send(self, message);
    }

    fn half_close(&self, _stream: &Arc<StreamShared>) {
        GrpcCall::half_close(self);
    }

    fn cancel(&self, _stream: &Arc<StreamShared>, status: Status) {
        GrpcCall::cancel(self, status);
    }

    fn consumed(&self, _stream: &Arc<StreamShared>, bytes: u32) {
        GrpcCall::consumed(self, bytes);
    }

    fn attach(&self, _call: u64, task: Arc<dyn Cancel>) {
        // Every call of the face has its stream state, which holds the task.
        self.shared().attach(task);
    }
}
