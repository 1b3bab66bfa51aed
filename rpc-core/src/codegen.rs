//! The one module that generated code imports, like `tonic::codegen`. Its items are public so
//! that generated stubs can use them, but applications normally do not touch them directly.
//!
//! A service is described by a [`ServiceDescriptor`]; each method by a [`MethodDescriptor`]
//! whose [`MethodDescriptor::id`] is [`method_id`] of its gRPC path (`/package.Service/Method`):
//! that 32-bit id is what REQUEST frames carry.

pub use crate::request::{IntoRequest, Request};
pub use crate::runtime::client::{Client, ResponseFuture};
pub use crate::runtime::server::{IncomingRequest, ReplySink};
pub use crate::status::{Code, Status};
pub use crate::Error;
pub use prost;

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
}

/// Decodes a unary request, runs `handler`, and sends its result. An undecodable request is
/// answered with INVALID_ARGUMENT without running the handler.
pub fn unary<Req, Resp, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    F: FnOnce(Request<Req>) -> Result<Resp, Status>,
{
    match request.decode::<Req>() {
        Ok(req) => match handler(req) {
            Ok(resp) => reply.send(&resp),
            Err(status) => reply.fail(status),
        },
        Err(status) => reply.fail(status),
    }
}

/// Answers a call of a method this build cannot serve (streaming methods for now) with
/// UNIMPLEMENTED.
pub fn unimplemented(request: IncomingRequest, reply: ReplySink) {
    let path = request.method().path;
    reply.fail(Status::unimplemented(format!(
        "{path}: streaming methods are not supported yet"
    )));
}

/// The status a client gets from a streaming method until streaming is implemented.
pub fn streaming_unimplemented(method: &'static MethodDescriptor) -> Status {
    Status::unimplemented(format!(
        "{}: streaming methods are not supported yet",
        method.path
    ))
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
