//! # rpc-core
//!
//! gRPC-style RPC whose every request and reply is a two-sided RDMA SEND on a reliable
//! connected queue pair, landing in a ring of receive slots the receiver posted in advance;
//! one completion-queue poller thread per endpoint dispatches requests to handlers and replies
//! to waiting calls. Where no RDMA device serves the address, the same API runs over TCP; a
//! server can also serve its services as standard gRPC over HTTP/2
//! ([`ServerBuilder::grpc_listen`]), and a client can call any gRPC server
//! ([`TransportKind::Grpc`]).
//!
//! ## Quick start
//!
//! ```toml
//! # Cargo.toml
//! [dependencies]
//! rpc-core = "0.1"
//! prost = "0.14"
//! futures = "0.3"   # for the stream below
//! [build-dependencies]
//! rpc-codegen = "0.1"
//! ```
//!
//! ```ignore
//! // build.rs
//! fn main() -> std::io::Result<()> {
//!     rpc_codegen::compile_protos("proto/echo.proto")
//! }
//! ```
//!
//! With `proto/echo.proto` declaring `rpc Echo(EchoRequest) returns (EchoReply)` and
//! `rpc EchoRepeat(EchoRepeatRequest) returns (stream EchoReply)` (the repository's
//! `proto/echo.proto`; its README has the complete program, compiled by its tests):
//!
//! ```ignore
//! pub mod echo { rpc_core::include_proto!("echo"); }
//! use echo::echo_server::{Echo, EchoServer};
//! use echo::{echo_client::blocking::EchoClient, EchoRepeatRequest, EchoReply, EchoRequest};
//! use futures::stream::{self, BoxStream, StreamExt};
//! use rpc_core::{Request, Response, Server, Status, TransportKind};
//!
//! struct MyEcho;
//! impl Echo for MyEcho {
//!     // Handlers are async by default and need no async runtime; rpc-codegen's
//!     // `configure().sync_handlers(true)` generates blocking ones instead.
//!     async fn echo(&self, req: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
//!         Ok(Response::new(EchoReply { payload: req.into_inner().payload }))
//!     }
//!
//!     type EchoRepeatStream = BoxStream<'static, Result<EchoReply, Status>>;
//!     async fn echo_repeat(
//!         &self,
//!         req: Request<EchoRepeatRequest>,
//!     ) -> Result<Response<Self::EchoRepeatStream>, Status> {
//!         let EchoRepeatRequest { payload, count, .. } = req.into_inner();
//!         let copies = stream::iter(0..count)
//!             .map(move |_| Ok(EchoReply { payload: payload.clone() }));
//!         Ok(Response::new(copies.boxed()))
//!     }
//! }
//!
//! let server = Server::builder()
//!     .add_service(EchoServer::new(MyEcho))
//!     .start("127.0.0.1:50051", TransportKind::Auto)?;
//! // The blocking client; `echo_client::EchoClient` is the async one, tonic's shape
//! // (`EchoClient::connect("http://127.0.0.1:50051").await?`, `client.echo(req).await?`).
//! let client = EchoClient::connect("127.0.0.1:50051")?;
//! let reply = client.echo(EchoRequest { payload: b"hi".to_vec() })?;
//! assert_eq!(reply.into_inner().payload, b"hi");
//! // Server streaming: the responses as a blocking iterator (or `message().await`).
//! let repeat = EchoRepeatRequest { payload: b"hi".to_vec(), count: 3, interval_ms: 0 };
//! for copy in client.echo_repeat(repeat)?.into_inner().into_blocking_iter() {
//!     assert_eq!(copy?.payload, b"hi");
//! }
//! ```
//!
//! ## Where things are
//!
//! - Serving: [`Server::builder`] ([`ServerBuilder`]: services, [`Execution`], worker pool,
//!   [`ServerBuilder::thread_context`] for an async runtime's context, the gRPC face,
//!   interceptor, standard services). Calling: [`Client::builder`] ([`ClientBuilder`]) and the
//!   generated clients: [`ResponseFuture`] for async unary calls, [`StreamingCall`] for
//!   bidirectional ones, [`Streaming`] for received message streams.
//! - A call's parts: [`Request`], [`Response`] (headers and trailers), [`MetadataMap`],
//!   [`Status`] (code, message, details, metadata).
//! - [`Interceptor`]: client and server interceptors. [`standard`]: gRPC health checking and
//!   server reflection, offered by every server unless turned off. [`codegen`]: what
//!   generated code uses.
//!
//! `docs/PROTOCOL.md` specifies the wire format; `docs/ARCHITECTURE.md` the layers.

// The generated code of the standard services names this crate `rpc_core`, as users'
// generated code does.
extern crate self as rpc_core;

pub mod codegen;
mod error;
mod free_list;
mod interceptor;
pub mod metadata;
pub mod protocol;
mod request;
mod runtime;
pub mod server;
pub mod service;
pub mod standard;
mod status;
pub mod transport;

pub use error::Error;
pub use interceptor::Interceptor;
pub use metadata::{MetadataKey, MetadataMap, MetadataValue};
pub use request::{
    Extensions, IntoIterRequest, IntoRequest, IntoStreamingRequest, Request, Response,
};
pub use rpc_macros::async_trait;
pub use rpc_proto::Code;
pub use rpc_proto::Keepalive;
pub use runtime::client::{
    Client, ClientBuilder, ResponseFuture, StreamingCall, DEFAULT_CONNECT_TIMEOUT,
};
pub use runtime::server::{
    Execution, IncomingRequest, InterceptedService, ReplySink, Server, ServerBuilder,
};
pub use runtime::streaming::{BlockingIter, Streaming};

pub use runtime::transport_select::TransportKind;
#[doc(hidden)]
pub use runtime::wakeups_issued;
pub use runtime::Stats;
pub use runtime::{default_memory_budget, DEFAULT_STALL_TIMEOUT};
pub use status::Status;
pub use transport::{RingConfig, SharedRings};

/// Includes the code `rpc-codegen` generated for a protobuf package (from `OUT_DIR`).
///
/// ```ignore
/// pub mod calc { rpc_core::include_proto!("calc"); }
/// ```
#[macro_export]
macro_rules! include_proto {
    ($package:tt) => {
        include!(concat!(env!("OUT_DIR"), concat!("/", $package, ".rs")));
    };
}
