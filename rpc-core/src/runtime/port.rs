//! [`Port`]: where a call's handles (a handler's [`ReplySink`](super::server::ReplySink),
//! a [`Streaming`](super::streaming::Streaming), a stream's sender) hand what they produce:
//! one of our connections, whose owner serializes it onto the link, or an HTTP/2 stream of
//! the standard gRPC face. The same handler code serves both.

use std::sync::Arc;

use super::call::RequestDelivery;
use super::conn::{Caller, Conn, Work, UNARY};
use super::grpc::GrpcCall;
use super::service::MethodKind;
use super::stream::{Cancel, StreamShared};
use crate::protocol::v2::Kind;
use crate::{MetadataMap, Response, Status};

/// Where requests go in: a server's services, as its connections and its gRPC face see them.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// The kind of method `method`, or `None` when no service has it.
    fn kind(&self, method: u32) -> Option<MethodKind>;
    /// The id and kind of the method at `path` (`/package.Service/Method`).
    fn lookup(&self, path: &str) -> Option<(u32, MethodKind)>;
    /// Hands a request to its handler; the handler answers through `port`.
    fn serve(&self, port: Port, peer: Arc<str>, delivery: RequestDelivery);
}

/// The far end of a call's handles. Cloning is an `Arc` clone.
#[derive(Clone)]
pub(crate) enum Port {
    /// A connection of this framework (verbs, TCP, memory).
    Conn(Arc<Conn>),
    /// One HTTP/2 stream of the gRPC face (or of the gRPC client transport).
    Grpc(Arc<GrpcCall>),
}

impl Port {
    /// The largest message the peer accepts.
    pub(crate) fn max_message_size(&self) -> usize {
        match self {
            Port::Conn(conn) => conn.peer_hello.max_message_size as usize,
            Port::Grpc(call) => call.max_send_size(),
        }
    }

    /// Server: answers a unary-response call with headers, one message and trailers.
    pub(crate) fn reply<M: prost::Message>(&self, call: u64, response: Response<M>) {
        let (headers, message, trailers) = response.into_parts();
        match self {
            Port::Conn(conn) => {
                let frame = conn.encode(Kind::Message, UNARY, &message);
                conn.submit(Work::Reply {
                    call,
                    frame,
                    headers: if headers.is_empty() {
                        Vec::new()
                    } else {
                        headers.encode()
                    },
                    trailers,
                });
            }
            Port::Grpc(grpc) => grpc.reply(headers, &message, trailers),
        }
    }

    /// Server: ends the call with `status` (OK: its metadata are the trailers).
    pub(crate) fn end(&self, call: u64, status: Status) {
        match self {
            Port::Conn(conn) => conn.submit(Work::End { call, status }),
            Port::Grpc(grpc) => grpc.end(status),
        }
    }

    /// Server: the response headers of a streaming response (before its first message).
    pub(crate) fn headers(&self, call: u64, headers: &MetadataMap) {
        match self {
            Port::Conn(conn) => conn.submit(Work::Headers {
                call,
                block: headers.encode(),
            }),
            Port::Grpc(grpc) => grpc.headers(headers.clone()),
        }
    }

    /// Hands one message of a stream over (after the stream's sender was ready).
    pub(crate) fn send<M: prost::Message>(&self, stream: &Arc<StreamShared>, message: &M) {
        match self {
            Port::Conn(conn) => {
                let frame = conn.encode(Kind::Message, 0, message);
                conn.submit(Work::Send {
                    stream: Arc::clone(stream),
                    frame,
                });
            }
            Port::Grpc(grpc) => grpc.send(message),
        }
    }

    /// Client: ends the requests of a streaming call.
    pub(crate) fn half_close(&self, stream: &Arc<StreamShared>) {
        match self {
            Port::Conn(conn) => conn.submit(Work::HalfClose(Arc::clone(stream))),
            Port::Grpc(grpc) => grpc.half_close(),
        }
    }

    /// Client: gives a streaming call up; its response stream ends with `status`.
    pub(crate) fn cancel(&self, stream: &Arc<StreamShared>, status: Status) {
        match self {
            Port::Conn(conn) => conn.submit(Work::Cancel {
                caller: Caller::Stream(Arc::clone(stream)),
                status,
            }),
            Port::Grpc(grpc) => grpc.cancel(status),
        }
    }

    /// The reader of `stream` consumed `bytes` of its window: the peer may send more.
    pub(crate) fn consumed(&self, stream: &Arc<StreamShared>, bytes: u32) {
        match self {
            Port::Conn(conn) => conn.submit(Work::Consumed {
                stream: Arc::clone(stream),
                bytes,
            }),
            Port::Grpc(grpc) => grpc.consumed(bytes),
        }
    }

    /// Server: cancels `task` when the (unary) call `call` is cancelled.
    pub(crate) fn attach(&self, call: u64, task: Arc<dyn Cancel>) {
        match self {
            Port::Conn(conn) => conn.submit(Work::Attach { call, task }),
            // Every call of the face has its stream state, which holds the task.
            Port::Grpc(grpc) => grpc.shared().attach(task),
        }
    }
}
