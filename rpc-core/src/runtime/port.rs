//! Where a call's ends meet what carries the call. [`Dispatch`]: where requests go in (a
//! server's services). [`CallPort`]: where a call's handles (a handler's
//! [`ReplySink`](super::server::ReplySink), a [`Streaming`](super::streaming::Streaming), a
//! stream's sender) hand what they produce: one of our connections, whose owner serializes it
//! onto the link, or an HTTP/2 stream of the standard gRPC face. The same handler code serves
//! both; each engine implements the trait in its own module.

use std::sync::Arc;

use super::call::{Encode, RequestDelivery};
use super::service::ServedMethod;
use super::stream::{Cancel, StreamShared};
use crate::{MetadataMap, Status};

/// Where requests go in: a server's services, as its connections and its gRPC face see them.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// The method with wire id `id`, or `None` when no service has it.
    fn method(&self, id: u32) -> Option<ServedMethod>;
    /// The method at `path` (`/package.Service/Method`).
    fn lookup(&self, path: &str) -> Option<ServedMethod>;
    /// Hands a request to its handler; the handler answers through `port`.
    fn serve(&self, port: Port, peer: Arc<str>, delivery: RequestDelivery);
}

/// The far end of a call's handles: what carries the call. Cloning a [`Port`] is an `Arc`
/// clone.
pub(crate) trait CallPort: Send + Sync {
    /// The largest message the peer accepts.
    fn max_message_size(&self) -> usize;
    /// Server: answers a unary-response call with headers, one message and trailers.
    fn reply(&self, call: u64, headers: MetadataMap, message: &dyn Encode, trailers: MetadataMap);
    /// Server: ends the call with `status` (OK: its metadata are the trailers).
    fn end(&self, call: u64, status: Status);
    /// Server: the response headers of a streaming response (before its first message).
    fn headers(&self, call: u64, headers: &MetadataMap);
    /// Hands one message of a stream over (after the stream's sender was ready).
    fn send(&self, stream: &Arc<StreamShared>, message: &dyn Encode);
    /// Client: ends the requests of a streaming call.
    fn half_close(&self, stream: &Arc<StreamShared>);
    /// Client: gives a streaming call up; its response stream ends with `status`.
    fn cancel(&self, stream: &Arc<StreamShared>, status: Status);
    /// The reader of `stream` consumed `bytes` of its window: the peer may send more.
    fn consumed(&self, stream: &Arc<StreamShared>, bytes: u32);
    /// Server: cancels `task` when the (unary) call `call` is cancelled.
    fn attach(&self, call: u64, task: Arc<dyn Cancel>);
}

/// A call's far end, shared by its handles.
pub(crate) type Port = Arc<dyn CallPort>;
