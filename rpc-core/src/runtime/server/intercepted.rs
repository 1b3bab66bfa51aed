//! [`InterceptedService`]: one service behind an interceptor of its own, what a generated
//! server's `with_interceptor` makes (tonic's shape). The server-wide interceptor
//! ([`crate::ServerBuilder::interceptor`]) runs before it.

use std::sync::Arc;

use super::handler::{IncomingRequest, ReplySink, Service};
use crate::interceptor::SharedInterceptor;
use crate::runtime::service::ServiceDescriptor;
use crate::Interceptor;

/// A service whose calls pass `interceptor` before their handler: it may check or change
/// their metadata, put values into their extensions, or refuse them with a status (the
/// handler then never runs). Other services of the server do not see it.
pub struct InterceptedService<S> {
    inner: S,
    interceptor: SharedInterceptor,
}

impl<S: Service> InterceptedService<S> {
    /// `inner` behind `interceptor`.
    pub fn new(inner: S, interceptor: impl Interceptor) -> Self {
        InterceptedService {
            inner,
            interceptor: SharedInterceptor(Arc::new(interceptor)),
        }
    }

    /// The service behind the interceptor.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Service> Service for InterceptedService<S> {
    fn descriptor(&self) -> &'static ServiceDescriptor {
        self.inner.descriptor()
    }

    fn call(&self, method_index: usize, mut request: IncomingRequest, reply: ReplySink) {
        let metadata = std::mem::take(&mut request.metadata);
        let extensions = std::mem::take(&mut request.extensions);
        match self
            .interceptor
            .apply_incoming(metadata, extensions, request.deadline, &request.peer)
        {
            Ok((metadata, extensions)) => {
                request.metadata = metadata;
                request.extensions = extensions;
                self.inner.call(method_index, request, reply);
            }
            Err(status) => {
                drop(request);
                reply.fail(status);
            }
        }
    }

    fn file_descriptor_set(&self) -> &'static [u8] {
        self.inner.file_descriptor_set()
    }

    fn blocking_handler(&self, method_index: usize) -> bool {
        self.inner.blocking_handler(method_index)
    }
}
