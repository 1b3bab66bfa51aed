//! tonic's `tonic::service` paths: its [`Interceptor`] trait, with tonic's method
//! (`call(&mut self, ..)`), and [`InterceptedService`], what a generated server's or client's
//! `with_interceptor` makes. An interceptor written for tonic, a closure or a type, ports
//! unchanged.
//!
//! The builders' interceptors ([`crate::ClientBuilder::interceptor`],
//! [`crate::ServerBuilder::interceptor`]) take [`crate::Interceptor`] instead: one value run by
//! many threads at once (`&self`).

use crate::{Request, Status};

pub use crate::runtime::server::InterceptedService;

/// tonic's interceptor: sees a call's request without its message (its metadata, timeout,
/// extensions, and on a server its deadline and peer) and may change it or refuse the call
/// with a status. Closures `FnMut(Request<()>) -> Result<Request<()>, Status>` are
/// interceptors.
///
/// On a server, each call runs on its own clone of the interceptor (as in tonic, where the
/// service is cloned for a request), so a change it makes to itself is not seen by other
/// calls. On a client, the calls of one client value run it in turn.
pub trait Interceptor {
    /// The request to go on with, or the status that ends the call.
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status>;
}

impl<F> Interceptor for F
where
    F: FnMut(Request<()>) -> Result<Request<()>, Status>,
{
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self(request)
    }
}

/// tonic's `tonic::service::interceptor`.
pub mod interceptor {
    pub use super::{InterceptedService, Interceptor};
}
