//! The one module that generated code imports, like `tonic::codegen`. Its items are public so
//! that generated stubs can use them, but applications normally do not touch them directly.
//!
//! A service is described by a [`ServiceDescriptor`]; each method by a [`MethodDescriptor`]
//! whose [`MethodDescriptor::id`] is [`method_id`] of its gRPC path (`/package.Service/Method`):
//! that 32-bit id is what REQUEST frames carry.

use std::future::Future;

pub use crate::request::{IntoIterRequest, IntoRequest, IntoStreamingRequest, Request, Response};
pub use crate::runtime::client::{Client, ResponseFuture, StreamingCall};
pub use crate::runtime::server::{IncomingRequest, ReplySink};
pub use crate::runtime::streaming::Streaming;
pub use crate::{Code, Status};
pub use crate::{Error, MetadataMap};
pub use futures_core::Stream;
pub use prost;

use crate::runtime::streaming::StreamSender;

/// The four RPC shapes of protobuf services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    /// One request, one response.
    Unary,
    /// A stream of requests, one response.
    ClientStreaming,
    /// One request, a stream of responses.
    ServerStreaming,
    /// Streams both ways.
    BidiStreaming,
}

/// Static description of one RPC method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodDescriptor {
    /// Fully qualified service name (`calc.Calculator`).
    pub service: &'static str,
    /// Method name as written in the `.proto` (`Add`).
    pub name: &'static str,
    /// gRPC path (`/calc.Calculator/Add`).
    pub path: &'static str,
    /// Wire id: `method_id(path)`.
    pub id: u32,
    /// Unary or streaming.
    pub kind: MethodKind,
}

impl MethodDescriptor {
    /// A descriptor whose id is computed from its path.
    pub const fn new(
        service: &'static str,
        name: &'static str,
        path: &'static str,
        kind: MethodKind,
    ) -> MethodDescriptor {
        MethodDescriptor {
            service,
            name,
            path,
            id: method_id(path),
            kind,
        }
    }
}

/// Static description of a service: its name and methods, in `.proto` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceDescriptor {
    /// Fully qualified service name (`calc.Calculator`).
    pub name: &'static str,
    /// The methods, in declaration order; `Service::call` takes an index into this.
    pub methods: &'static [MethodDescriptor],
}

/// The wire id of a method: 32-bit FNV-1a over the bytes of its gRPC path
/// (`/package.Service/Method`). `docs/PROTOCOL.md` specifies it for third-party peers.
pub const fn method_id(path: &str) -> u32 {
    let bytes = path.as_bytes();
    let mut hash: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u32;
        hash = hash.wrapping_mul(0x0100_0193);
        i += 1;
    }
    hash
}

/// A server-side service implementation, as generated for `<Name>Server<T>`.
pub trait Service: Send + Sync + 'static {
    /// The service's static description.
    fn descriptor(&self) -> &'static ServiceDescriptor;
    /// Runs method `method_index` (an index into `descriptor().methods`) on `request`, and
    /// answers through `reply`. A `reply` dropped unanswered sends INTERNAL.
    fn call(&self, method_index: usize, request: IncomingRequest, reply: ReplySink);
    /// The encoded `google.protobuf.FileDescriptorSet` of the `.proto` file that defines the
    /// service and of every file it imports: what server reflection hands to tools that
    /// list and call services without the `.proto` files. Empty when unknown.
    fn file_descriptor_set(&self) -> &'static [u8] {
        &[]
    }
    /// Whether the handlers are blocking functions (rpc-codegen's `sync_handlers`): those of
    /// streaming methods wait for the peer's window or next request, so the server runs them
    /// on its worker pool even when asked to run them inline ([`crate::Execution::Inline`]).
    fn blocking_handlers(&self) -> bool {
        false
    }
}

// ----- synchronous handlers ------------------------------------------------------------

/// Decodes a unary request, runs `handler`, and sends its result. An undecodable request is
/// answered with INVALID_ARGUMENT without running the handler.
pub fn unary<Req, Resp, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    F: FnOnce(Request<Req>) -> Result<Response<Resp>, Status>,
{
    match request.decode::<Req>() {
        Ok(req) => answer(reply, handler(req)),
        Err(status) => reply.fail(status),
    }
}

/// A server-streaming call with a blocking handler: its responses come from an iterator,
/// each sent once the client's window lets it go (the worker thread waits meanwhile).
pub fn server_streaming<Req, Resp, S, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
    F: FnOnce(Request<Req>) -> Result<Response<S>, Status>,
{
    match request.decode::<Req>() {
        Ok(req) => match handler(req) {
            Ok(response) => send_all(reply, response),
            Err(status) => reply.fail(status),
        },
        Err(status) => reply.fail(status),
    }
}

/// A client-streaming call with a blocking handler (it reads its requests as a blocking
/// iterator).
pub fn client_streaming<Req, Resp, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    F: FnOnce(Request<Streaming<Req>>) -> Result<Response<Resp>, Status>,
{
    answer(reply, handler(request.into_streaming()))
}

/// A bidirectional call with a blocking handler: requests as a blocking iterator, responses
/// from the iterator it returns (which may read requests as it goes).
pub fn bidi_streaming<Req, Resp, S, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
    F: FnOnce(Request<Streaming<Req>>) -> Result<Response<S>, Status>,
{
    match handler(request.into_streaming()) {
        Ok(response) => send_all(reply, response),
        Err(status) => reply.fail(status),
    }
}

fn answer<Resp: prost::Message>(reply: ReplySink, result: Result<Response<Resp>, Status>) {
    match result {
        Ok(response) => reply.send(response),
        Err(status) => reply.fail(status),
    }
}

/// Sends a response stream from an iterator, then the trailers.
fn send_all<Resp, S>(reply: ReplySink, response: Response<S>)
where
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
{
    let (headers, items, trailers) = response.into_parts();
    let sender = match response_sender(&reply, &headers) {
        Ok(sender) => sender,
        Err(status) => return reply.fail(status),
    };
    for item in items {
        let sent = item.and_then(|m| sender.send_blocking(&m));
        if let Err(status) = sent {
            stream_failed(reply, &sender, status);
            return;
        }
    }
    reply.finish(trailers);
}

/// Sends a response stream's headers and returns the sender of its messages.
fn response_sender(reply: &ReplySink, headers: &MetadataMap) -> Result<StreamSender, Status> {
    let sender = reply
        .sender()
        .ok_or_else(|| Status::internal("a streaming response on a unary method"))?;
    reply.send_headers(headers);
    Ok(sender)
}

/// A response stream stops with `status`: sent, unless the call is already over (the
/// client cancelled it), when there is nobody to tell.
fn stream_failed(reply: ReplySink, sender: &StreamSender, status: Status) {
    if sender.shared.is_finished() {
        reply.abandon();
    } else {
        reply.fail(status);
    }
}

// ----- async handlers ------------------------------------------------------------------

/// Runs `future` as a task: its first poll here and now (where `Service::call` runs: a
/// worker, or the receiving thread for `Execution::Inline`), later ones on the worker pool
/// when woken (for `Execution::Inline`, on the server's poller when that is what woke it);
/// cancelling the call drops it.
fn spawn<Fut>(reply: ReplySink, future: impl FnOnce(ReplySink) -> Fut)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let canceller = reply.canceller();
    let spawner = reply.spawner();
    let task = rpc_sync::Task::new(future(reply), spawner);
    rpc_sync::Runnable::run(std::sync::Arc::clone(&task));
    if !task.is_done() {
        canceller.attach(task);
    }
}

/// A unary call with an async handler. The handler's future runs as a task (one allocation):
/// polled first where `Service::call` runs (a worker, or the receiving thread for
/// `Execution::Inline`), then on the worker pool each time it is woken. Dropped unfinished if the client cancels the call.
pub fn unary_async<Req, Resp, F, Fut>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    let handling = match request.decode::<Req>() {
        Ok(req) => handler(req),
        Err(status) => return reply.fail(status),
    };
    spawn(
        reply,
        move |reply| async move { answer(reply, handling.await) },
    );
}

/// A server-streaming call with an async handler returning a `Stream` of responses.
pub fn server_streaming_async<Req, Resp, S, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default,
    Resp: prost::Message + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let handling = match request.decode::<Req>() {
        Ok(req) => handler(req),
        Err(status) => return reply.fail(status),
    };
    spawn(reply, move |reply| async move {
        match handling.await {
            Ok(response) => stream_all(reply, response).await,
            Err(status) => reply.fail(status),
        }
    });
}

/// A client-streaming call with an async handler reading a `Streaming` of requests.
pub fn client_streaming_async<Req, Resp, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default,
    Resp: prost::Message + 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    let handling = handler(request.into_streaming());
    spawn(
        reply,
        move |reply| async move { answer(reply, handling.await) },
    );
}

/// A bidirectional call with an async handler: a `Streaming` of requests in, a `Stream` of
/// responses out.
pub fn bidi_streaming_async<Req, Resp, S, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default,
    Resp: prost::Message + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let handling = handler(request.into_streaming());
    spawn(reply, move |reply| async move {
        match handling.await {
            Ok(response) => stream_all(reply, response).await,
            Err(status) => reply.fail(status),
        }
    });
}

/// Sends a response stream, each message once the client's window lets it go, then the
/// trailers.
async fn stream_all<Resp, S>(reply: ReplySink, response: Response<S>)
where
    Resp: prost::Message,
    S: Stream<Item = Result<Resp, Status>>,
{
    let (headers, items, trailers) = response.into_parts();
    let sender = match response_sender(&reply, &headers) {
        Ok(sender) => sender,
        Err(status) => return reply.fail(status),
    };
    let mut items = std::pin::pin!(items);
    loop {
        if let Err(status) = std::future::poll_fn(|cx| sender.poll_ready(cx)).await {
            return stream_failed(reply, &sender, status);
        }
        match std::future::poll_fn(|cx| items.as_mut().poll_next(cx)).await {
            Some(Ok(message)) => {
                if let Err(status) = sender.send(&message) {
                    return stream_failed(reply, &sender, status);
                }
            }
            Some(Err(status)) => return stream_failed(reply, &sender, status),
            None => return reply.finish(trailers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_id_is_fnv1a_of_the_path() {
        // FNV-1a 32 reference values: "" and "a".
        assert_eq!(method_id(""), 0x811c_9dc5);
        assert_eq!(method_id("a"), 0xe40c_292c);
        assert_ne!(
            method_id("/calc.Calculator/Add"),
            method_id("/calc.Calculator/Subtract")
        );
        const ADD: MethodDescriptor = MethodDescriptor::new(
            "calc.Calculator",
            "Add",
            "/calc.Calculator/Add",
            MethodKind::Unary,
        );
        assert_eq!(ADD.id, method_id("/calc.Calculator/Add"));
    }
}
