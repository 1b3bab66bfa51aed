//! # rpc-core
//!
//! gRPC-style RPC whose every request and reply is a two-sided RDMA SEND on a reliable
//! connected queue pair, landing in a ring of receive slots the receiver posted in advance;
//! one completion-queue poller thread per endpoint dispatches requests to handlers and replies
//! to waiting calls. Where no RDMA device serves the address, the same API runs over TCP.
//!
//! ## Quick start
//!
//! ```toml
//! # Cargo.toml
//! [dependencies]
//! rpc-core = "0.1"
//! prost = "0.14"
//! [build-dependencies]
//! rpc-codegen = "0.1"
//! ```
//!
//! ```ignore
//! // build.rs
//! fn main() -> std::io::Result<()> {
//!     rpc_codegen::compile_protos(&["proto/echo.proto"], &["proto"])
//! }
//! ```
//!
//! ```ignore
//! pub mod echo { rpc_core::include_proto!("echo"); }
//! use echo::echo_server::{Echo, EchoServer};
//! use echo::{echo_client::EchoClient, EchoReply, EchoRequest};
//! use rpc_core::{Request, Server, Status, TransportKind};
//!
//! struct MyEcho;
//! impl Echo for MyEcho {
//!     fn echo(&self, req: Request<EchoRequest>) -> Result<EchoReply, Status> {
//!         Ok(EchoReply { payload: req.into_inner().payload })
//!     }
//! }
//!
//! let server = Server::builder()
//!     .add_service(EchoServer::new(MyEcho))
//!     .serve("127.0.0.1:50051", TransportKind::Auto)?;
//! let client = EchoClient::connect("127.0.0.1:50051")?;
//! let reply = client.echo(EchoRequest { payload: b"hi".to_vec() })?;
//! ```
//!
//! `docs/PROTOCOL.md` specifies the wire format; `docs/ARCHITECTURE.md` the layers.

// The generated code of the standard services names this crate `rpc_core`, as users'
// generated code does.
extern crate self as rpc_core;

pub mod codegen;
mod error;
mod interceptor;
mod metadata;
pub mod protocol;
mod request;
mod runtime;
pub mod standard;
mod status;
pub mod transport;

pub use error::Error;
pub use interceptor::Interceptor;
pub use metadata::MetadataMap;
pub use request::{IntoIterRequest, IntoRequest, IntoStreamingRequest, Request, Response};
pub use runtime::client::{
    Client, ClientBuilder, ResponseFuture, StreamingCall, DEFAULT_CONNECT_TIMEOUT,
};
pub use runtime::conn::Keepalive;
pub use runtime::server::{Execution, IncomingRequest, ReplySink, Server, ServerBuilder};
pub use runtime::streaming::{BlockingIter, Streaming};
pub use runtime::transport_select::TransportKind;
#[doc(hidden)]
pub use runtime::wakeups_issued;
pub use runtime::Stats;
pub use status::{Code, Status};
pub use transport::RingConfig;

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
