//! The one module that generated code imports, like `tonic::codegen`. Its items are public so
//! that generated stubs can use them, but applications normally do not touch them directly.
//!
//! A service is described by a [`ServiceDescriptor`]; each method by a [`MethodDescriptor`]
//! whose [`MethodDescriptor::id`] is [`method_id`] of its gRPC path (`/package.Service/Method`):
//! that 32-bit id is what REQUEST frames carry.

pub use crate::request::{IntoIterRequest, IntoRequest, IntoStreamingRequest, Request, Response};
pub use crate::runtime::client::channel::{Channel, ClientChannel};
pub use crate::runtime::client::{Client, ResponseFuture, StreamingCall};
pub use crate::runtime::server::handlers::{
    bidi_streaming, bidi_streaming_async, client_streaming, client_streaming_async,
    server_streaming, server_streaming_async, unary, unary_async,
};
pub use crate::runtime::server::{IncomingRequest, InterceptedService, ReplySink, Service};
pub use crate::runtime::service::{method_id, MethodDescriptor, MethodKind, ServiceDescriptor};
pub use crate::runtime::streaming::Streaming;
pub use crate::server::NamedService;
pub use crate::service::Interceptor as ServiceInterceptor;
pub use crate::{Code, Status};
pub use crate::{Error, Interceptor, MetadataMap};
pub use futures_core::Stream;
pub use prost;
