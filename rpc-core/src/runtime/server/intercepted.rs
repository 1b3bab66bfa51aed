//! [`InterceptedService`]: a service or a client behind an interceptor of its own
//! ([`crate::service::Interceptor`], tonic's trait), what a generated server's or client's
//! `with_interceptor` makes (tonic's shapes). On a server the server-wide interceptor
//! ([`crate::ServerBuilder::interceptor`]) runs before it; on a client the connection's
//! ([`crate::ClientBuilder::interceptor`]) runs after it.

use super::handler::{IncomingRequest, ReplySink, Service};
use crate::interceptor::apply_incoming;
use crate::runtime::service::ServiceDescriptor;
use crate::service::Interceptor;

/// `inner` behind the interceptor `F`. Around a service: its calls pass `F` before their
/// handler, which may check or change their metadata, put values into their extensions, or
/// refuse them with a status (the handler then never runs); other services of the server do
/// not see it. Around a [`crate::Client`] (tonic's `FooClient<InterceptedService<Channel, F>>`):
/// the calls made through it pass `F` before they go out; other clients of the connection do
/// not see it.
#[derive(Clone)]
pub struct InterceptedService<S, F> {
    inner: S,
    interceptor: F,
}

impl<S, F> InterceptedService<S, F> {
    /// `inner` behind `interceptor`.
    pub fn new(inner: S, interceptor: F) -> Self {
        InterceptedService { inner, interceptor }
    }

    /// The service (or client) behind the interceptor.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The interceptor, to run on a client's outgoing request.
    pub(crate) fn interceptor_mut(&mut self) -> &mut F {
        &mut self.interceptor
    }
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for InterceptedService<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterceptedService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, F> Service for InterceptedService<S, F>
where
    S: Service,
    F: Interceptor + Clone + Send + Sync + 'static,
{
    fn descriptor(&self) -> &'static ServiceDescriptor {
        self.inner.descriptor()
    }

    fn call(&self, method_index: usize, mut request: IncomingRequest, reply: ReplySink) {
        let metadata = std::mem::take(&mut request.metadata);
        let extensions = std::mem::take(&mut request.extensions);
        // Each call its own clone, as tonic's service is cloned for a request: no lock
        // between the threads that receive calls.
        let mut interceptor = self.interceptor.clone();
        match apply_incoming(
            |head| interceptor.call(head),
            (metadata, extensions),
            request.deadline,
            &request.peer,
        ) {
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
