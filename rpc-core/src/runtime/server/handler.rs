//! What a handler gets: the request ([`IncomingRequest`]), where its answer goes
//! ([`ReplySink`]), and the trait generated services implement ([`Service`]).

use std::panic::{catch_unwind, AssertUnwindSafe};

use std::sync::Arc;
use std::time::Instant;

use rpc_sync::{assert_unlocked, Count};

use crate::protocol::v2::InlineDrop;
use crate::runtime::call::{Measured, Payload};
use crate::runtime::pool::{PoolJob, Spawner};
use crate::runtime::port::Port;
use crate::runtime::service::{MethodDescriptor, ServiceDescriptor};
use crate::runtime::stream::{Cancel, StreamShared};
use crate::runtime::streaming::{Reader, StreamSender, Streaming};
use crate::runtime::Counters;
use crate::{MetadataMap, Request, Response, Status};

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
    /// Whether the handler of method `method_index` is a blocking function (rpc-codegen's
    /// `sync_handlers`, or `sync_handlers_for` its service or method): a streaming method's
    /// waits for the peer's window or next request, so the server runs it on its worker pool
    /// even when asked to run it inline ([`crate::Execution::Inline`]).
    fn blocking_handler(&self, method_index: usize) -> bool {
        let _ = method_index;
        false
    }
}

/// What a server's calls share with it: one `Arc` in each call's [`ReplySink`].
pub(crate) struct Calls {
    pub(super) counters: Arc<Counters>,
    /// Calls handed to a handler and not answered yet (their sinks not dropped).
    pub(super) in_flight: Count,
    /// Where woken handler tasks go.
    pub(super) spawner: Spawner,
}

/// A call for a handler on the worker pool: queued as a plain value (no box, no allocation
/// per request).
pub(crate) struct Job {
    pub(crate) service: Arc<dyn Service>,
    pub(crate) index: usize,
    pub(crate) request: IncomingRequest,
    pub(crate) reply: ReplySink,
}

impl PoolJob for Job {
    fn run(self) {
        run_handler(&*self.service, self.index, self.request, self.reply);
    }

    fn refuse(self) {
        drop(self.request);
        self.reply.fail(Status::unavailable(
            "the server shut down before the call's handler ran",
        ));
    }
}

#[inline(always)]
pub(crate) fn run_handler(
    service: &dyn Service,
    index: usize,
    request: IncomingRequest,
    reply: ReplySink,
) {
    let path = request.method.path;
    // Only when traced: a disabled span still costs its entering and exit per call.
    let _span = InlineDrop::new(tracing::enabled!(tracing::Level::TRACE).then(|| {
        tracing::trace_span!("handle", method = path, id = reply.id, peer = %request.peer).entered()
    }));
    assert_unlocked("calling a handler");
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| service.call(index, request, reply))) {
        log_panic(path, &*panic);
    }
}

fn log_panic(path: &str, panic: &(dyn std::any::Any + Send)) {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(method = path, panic = %what, "handler panicked; answered INTERNAL");
}

/// A request as a service's `call` receives it: its message (undecoded, still in its
/// receive slot) or its message stream, and the call's metadata.
pub struct IncomingRequest {
    pub(super) body: Requests,
    pub(super) method: &'static MethodDescriptor,
    pub(super) deadline: Option<Instant>,
    pub(super) metadata: MetadataMap,
    pub(super) peer: Arc<str>,
    /// What the server's interceptor put into the request's extensions.
    pub(super) extensions: crate::request::Extras,
}

/// The messages of an [`IncomingRequest`].
pub(super) enum Requests {
    /// The one message of a unary-request method.
    Message(Payload),
    /// The request stream of a client-streaming or bidirectional method, and where its
    /// reader returns window.
    Stream(Arc<StreamShared>, Port),
}

impl IncomingRequest {
    /// The method being called.
    pub fn method(&self) -> &'static MethodDescriptor {
        self.method
    }

    /// The request metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// Decodes the one request message in place and releases the receive slot. An
    /// undecodable message gives INVALID_ARGUMENT; a method whose requests are a stream
    /// gives INTERNAL (use [`IncomingRequest::into_streaming`]).
    pub fn decode<M: prost::Message + Default>(self) -> Result<Request<M>, Status> {
        let Requests::Message(payload) = &self.body else {
            return Err(Status::internal(format!(
                "{}: the requests of this method are a stream",
                self.method.path
            )));
        };
        let message = super::super::call::decode::<M>(payload).map_err(|e| {
            Status::invalid_argument(format!(
                "{}: could not decode the request: {e}",
                self.method.path
            ))
        })?;
        drop(self.body);
        Ok(Request::from_incoming(
            message,
            self.metadata,
            self.deadline,
            self.peer,
            self.extensions,
        ))
    }

    /// The request stream of a client-streaming or bidirectional method (for a method with
    /// one request, a stream of that one message).
    pub fn into_streaming<M: prost::Message + Default>(self) -> Request<Streaming<M>> {
        let streaming = match self.body {
            Requests::Stream(shared, port) => {
                Streaming::new(shared, Some(port), Reader::Server, self.method.path)
            }
            Requests::Message(payload) => {
                // One message, already complete: a stream of its own (no window to return).
                let shared = StreamShared::new(0, u32::MAX, false);
                shared.inbox.push(crate::runtime::stream::Incoming::Message(
                    payload.into_received(),
                ));
                shared
                    .inbox
                    .close(Some(crate::runtime::stream::Incoming::End(Ok(
                        MetadataMap::new(),
                    ))));
                Streaming::new(shared, None, Reader::Server, self.method.path)
            }
        };
        Request::from_incoming(
            streaming,
            self.metadata,
            self.deadline,
            self.peer,
            self.extensions,
        )
    }
}

/// Sends a call's answer: one message (or a stream of them), or a status. A sink dropped
/// without an answer (a handler that panicked) answers INTERNAL.
pub struct ReplySink {
    pub(super) port: Port,
    pub(super) id: u64,
    pub(super) method: &'static MethodDescriptor,
    pub(super) calls: Arc<Calls>,
    pub(super) stream: Option<Arc<StreamShared>>,
    pub(super) done: bool,
    /// The method runs inline ([`Execution::Inline`]): its task, woken while a poller of
    /// this server polls, runs there too.
    pub(super) inline: bool,
}

impl ReplySink {
    /// Answers a unary-response call with `response`: its headers, message and trailers
    /// (RESOURCE_EXHAUSTED instead if the caller would not accept the message's size).
    #[inline(never)] // a stage of `make bench`'s instruction counts (BENCHMARKS.md)
    pub fn send<M: prost::Message>(mut self, response: Response<M>) {
        self.done = true;
        let limit = self.port.max_message_size();
        let len = response.get_ref().encoded_len();
        if len > limit {
            self.fail_inner(Status::resource_exhausted(format!(
                "{}: response of {len} bytes exceeds the client's limit of {limit} bytes",
                self.method.path
            )));
            return;
        }
        let (headers, message, trailers) = response.into_parts();
        let message = Measured {
            message: &message,
            len,
        };
        self.port.reply(self.id, headers, &message, trailers);
    }

    /// Answers with a status (its metadata as trailers).
    pub fn fail(mut self, status: Status) {
        self.done = true;
        self.fail_inner(status);
    }

    fn fail_inner(&self, status: Status) {
        self.calls.counters.error();
        self.port.end(self.id, status);
    }

    /// Whether the client cancelled the call (or its connection was lost): a handler may
    /// stop early. Known for streaming methods and for every call of the gRPC face; a unary
    /// call over verbs or TCP learns of its cancellation differently: an async handler's
    /// future is dropped.
    pub fn is_cancelled(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_cancelled())
    }

    /// Streaming responses: the response headers (sent before the first message).
    pub(crate) fn send_headers(&self, headers: &MetadataMap) {
        self.port.headers(self.id, headers);
    }

    /// Streaming responses: the sender of the messages.
    pub(crate) fn sender(&self) -> Option<StreamSender> {
        self.stream.as_ref().map(|shared| StreamSender {
            shared: Arc::clone(shared),
            port: self.port.clone(),
            path: self.method.path,
        })
    }

    /// Streaming responses: ends the call with OK and `trailers`.
    pub(crate) fn finish(mut self, trailers: MetadataMap) {
        self.done = true;
        self.port.end(
            self.id,
            Status::with_metadata(crate::Code::Ok, "", trailers),
        );
    }

    /// The call is over without an answer of ours (the client cancelled it).
    pub(crate) fn abandon(mut self) {
        self.done = true;
    }

    /// Where the call's handler task goes when woken.
    pub(crate) fn spawner(&self) -> Spawner {
        self.calls.spawner.with_inline(self.inline)
    }

    /// Cancels `task` when the call is cancelled (from now on).
    pub(crate) fn canceller(&self) -> TaskCanceller {
        TaskCanceller {
            port: self.port.clone(),
            id: self.id,
            stream: self.stream.clone(),
        }
    }
}

/// Ties a handler's task to its call, so that cancelling the call cancels the task.
pub(crate) struct TaskCanceller {
    port: Port,
    id: u64,
    stream: Option<Arc<StreamShared>>,
}

impl TaskCanceller {
    pub(crate) fn attach(self, task: Arc<dyn Cancel>) {
        match self.stream {
            Some(stream) => stream.attach(task),
            None => self.port.attach(self.id, task),
        }
    }
}

impl Drop for ReplySink {
    fn drop(&mut self) {
        if !self.done {
            self.fail_inner(Status::internal(format!(
                "{}: the handler panicked or returned no answer",
                self.method.path
            )));
        }
        if let Some(stream) = &self.stream {
            // The handler is done with the call: the call lets go of its task.
            stream.detach();
        }
        self.calls.in_flight.sub(1);
    }
}
