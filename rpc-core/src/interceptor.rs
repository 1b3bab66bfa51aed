//! [`Interceptor`]: code that sees every call's metadata before it goes out (client) or
//! before its handler runs (server), and may change it or end the call with a status: an
//! auth token added or checked, a request id stamped, a call refused.
//!
//! ```
//! use rpc_core::{Client, MetadataValue, Request, Server, Status};
//!
//! // Client side: every call carries a token.
//! let client = Client::builder().interceptor(|mut request: Request<()>| {
//!     let token = MetadataValue::from_static("Bearer s3cret");
//!     request.metadata_mut().insert("authorization", token);
//!     Ok(request)
//! });
//!
//! // Server side: calls without it are refused before any handler runs.
//! let server = Server::builder().interceptor(|request: Request<()>| {
//!     match request.metadata().get("authorization") {
//!         Some(token) if token == "Bearer s3cret" => Ok(request),
//!         _ => Err(Status::unauthenticated("a valid token is required")),
//!     }
//! });
//! # let _ = (client, server);
//! ```

use std::sync::Arc;

use std::time::Instant;

use crate::request::Extras;
use crate::{MetadataMap, Request, Status};

/// Sees a call's request without its message (metadata, timeout, and on a server the
/// deadline and peer) and may refuse the call or change what goes on: the metadata and
/// timeout of an outgoing call (client), the metadata the handler sees (server; the
/// deadline a client set stays). Closures `Fn(Request<()>) -> Result<Request<()>, Status>` are
/// interceptors. It runs on the calling thread (client) or the thread that received the
/// request (server), so it must be quick and must not block.
pub trait Interceptor: Send + Sync + 'static {
    /// The request to go on with, or the status that ends the call.
    fn intercept(&self, request: Request<()>) -> Result<Request<()>, Status>;
}

impl<F> Interceptor for F
where
    F: Fn(Request<()>) -> Result<Request<()>, Status> + Send + Sync + 'static,
{
    fn intercept(&self, request: Request<()>) -> Result<Request<()>, Status> {
        self(request)
    }
}

/// A shared interceptor, as builders keep it.
#[derive(Clone)]
pub(crate) struct SharedInterceptor(pub(crate) Arc<dyn Interceptor>);

impl std::fmt::Debug for SharedInterceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interceptor")
    }
}

impl SharedInterceptor {
    /// Runs the interceptor on `request`'s metadata, keeping its message aside.
    pub(crate) fn apply<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        let (head, message) = request.into_parts();
        let head = self.intercept(head)?;
        Ok(Request::from_parts(head, message))
    }

    /// Server: [`apply_incoming`] with this interceptor.
    pub(crate) fn apply_incoming(
        &self,
        metadata: MetadataMap,
        deadline: Option<Instant>,
        peer: &Arc<str>,
    ) -> Result<(MetadataMap, Extras), Status> {
        apply_incoming(
            |head| self.0.intercept(head),
            (metadata, Extras::none()),
            deadline,
            peer,
        )
    }

    /// Runs the interceptor (user code) on a request's metadata, checking first that no
    /// runtime lock is held.
    pub(crate) fn intercept(&self, head: Request<()>) -> Result<Request<()>, Status> {
        rpc_sync::assert_unlocked("calling an interceptor");
        self.0.intercept(head)
    }
}

/// Server: runs `intercept` (user code) on an arriving call's metadata and extensions (its
/// deadline and peer to read beside them) and gives them back as it left them, or the status
/// that refuses the call. Both the server-wide interceptor and a service's own
/// ([`crate::InterceptedService`]) run through here.
pub(crate) fn apply_incoming(
    intercept: impl FnOnce(Request<()>) -> Result<Request<()>, Status>,
    (metadata, extensions): (MetadataMap, Extras),
    deadline: Option<Instant>,
    peer: &Arc<str>,
) -> Result<(MetadataMap, Extras), Status> {
    rpc_sync::assert_unlocked("calling an interceptor");
    let head = Request::from_incoming((), metadata, deadline, Arc::clone(peer), extensions);
    let mut head = intercept(head)?;
    Ok((std::mem::take(head.metadata_mut()), head.take_extras()))
}
