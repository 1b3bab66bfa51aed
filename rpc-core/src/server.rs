//! tonic's `tonic::server` path: [`NamedService`].

/// A generated server's gRPC service name (`package.Service`), tonic's `NamedService`: what
/// a health reporter's `set_serving::<FooServer<Impl>>()` (tonic-health's, or
/// `rpc-health`'s) reads. Every generated server implements it, and so does a server behind
/// its own interceptor.
pub trait NamedService {
    /// The service's full name, `package.Service`.
    const NAME: &'static str;
}

impl<S: NamedService, F> NamedService for crate::InterceptedService<S, F> {
    const NAME: &'static str = S::NAME;
}
