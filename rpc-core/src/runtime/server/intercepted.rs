//! [`InterceptedService`]: one service behind an interceptor of its own, what a generated
//! server's `with_interceptor` makes (tonic's shape). The server-wide interceptor
//! ([`crate::ServerBuilder::interceptor`]) runs before it. A generated client's
//! `with_interceptor` makes one around a [`Client`] (tonic's
//! `FooClient<InterceptedService<Channel, F>>`).

use std::marker::PhantomData;
use std::sync::Arc;

use super::handler::{IncomingRequest, ReplySink, Service};
use crate::interceptor::SharedInterceptor;
use crate::runtime::service::ServiceDescriptor;
use crate::{Client, Interceptor};

/// A service whose calls pass the interceptor `F` before their handler: it may check or
/// change their metadata, put values into their extensions, or refuse them with a status (the
/// handler then never runs). Other services of the server do not see it. Around a [`Client`],
/// the calls a generated client makes through it pass `F` before they go out.
pub struct InterceptedService<S, F> {
    inner: S,
    interceptor: SharedInterceptor,
    _interceptor: PhantomData<fn() -> F>,
}

impl<S: Service, F: Interceptor> InterceptedService<S, F> {
    /// `inner` behind `interceptor`.
    pub fn new(inner: S, interceptor: F) -> Self {
        InterceptedService {
            inner,
            interceptor: SharedInterceptor(Arc::new(interceptor)),
            _interceptor: PhantomData,
        }
    }
}

impl<F: Interceptor> InterceptedService<Client, F> {
    /// The calls made through `inner` pass `interceptor` first, then the client's own
    /// ([`crate::ClientBuilder::interceptor`]); other handles of the connection do not see
    /// it. What a generated client's `with_interceptor` makes.
    pub fn for_client(inner: Client, interceptor: F) -> Self {
        let interceptor = SharedInterceptor(Arc::new(interceptor));
        InterceptedService {
            inner: inner.intercepted_by(interceptor.clone()),
            interceptor,
            _interceptor: PhantomData,
        }
    }
}

impl<S, F> InterceptedService<S, F> {
    /// The service (or client) behind the interceptor.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, F> Clone for InterceptedService<S, F> {
    fn clone(&self) -> Self {
        InterceptedService {
            inner: self.inner.clone(),
            interceptor: self.interceptor.clone(),
            _interceptor: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for InterceptedService<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterceptedService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S: Service, F: Interceptor> Service for InterceptedService<S, F> {
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
