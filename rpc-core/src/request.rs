//! [`Request`] and [`Response`]: a message plus the call's metadata, as handlers and callers
//! see them (tonic's shapes).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::protocol::v2::InlineDrop;
use crate::MetadataMap;

/// Values of any type a call's parts carry for the program itself, never sent (tonic's
/// `Extensions`, the `http` crate's type map): a server interceptor puts what it learned
/// (the authenticated user, say) into the request's, and the handler reads it there, where
/// metadata could have come from the client.
pub use http::Extensions;

/// A call part's [`Extensions`], boxed once there are any. Most calls carry none, and then
/// dropping them is one comparison where the part dies: the type map's own drop is out of
/// line and saves its registers before it looks whether it holds anything, at every
/// request and response (BENCHMARKS.md).
#[derive(Default, Clone)]
pub(crate) struct Extras(InlineDrop<Box<Extensions>>);

impl Extras {
    /// No extensions (nothing allocated).
    pub(crate) const fn none() -> Extras {
        Extras(InlineDrop::new(None))
    }

    /// The extensions (an empty map if there are none).
    pub(crate) fn get(&self) -> &Extensions {
        static EMPTY: OnceLock<Extensions> = OnceLock::new();
        match &*self.0 {
            Some(held) => held,
            None => EMPTY.get_or_init(Extensions::new),
        }
    }

    /// The extensions, to change them (boxed at the first call).
    pub(crate) fn get_mut(&mut self) -> &mut Extensions {
        self.0.get_or_insert_with(Box::default)
    }
}

impl std::fmt::Debug for Extras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A request message with its call metadata. Clients build one to set a per-call timeout or
/// metadata (`Request::new(msg).with_timeout(d)`); handlers receive one and can read the
/// deadline, the metadata, the peer and the extensions a server interceptor set.
#[derive(Debug, Clone)]
pub struct Request<T> {
    message: T,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    peer: Option<Arc<str>>,
    extensions: Extras,
}

impl<T: PartialEq> PartialEq for Request<T> {
    /// The message and what travels with it; extensions (values of any type) take no part.
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
            && self.metadata == other.metadata
            && self.timeout == other.timeout
            && self.deadline == other.deadline
            && self.peer == other.peer
    }
}

impl<T> Request<T> {
    /// A request with no timeout and no metadata.
    #[inline]
    pub fn new(message: T) -> Request<T> {
        Request {
            message,
            metadata: MetadataMap::new(),
            timeout: None,
            deadline: None,
            peer: None,
            extensions: Extras::none(),
        }
    }

    /// Sets the call's timeout: the call fails with DEADLINE_EXCEEDED once it elapses.
    pub fn with_timeout(mut self, timeout: Duration) -> Request<T> {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the call's timeout in place.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// The timeout the caller set, if any; on the server, the time left until the call's
    /// deadline (read from the clock when asked).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout.or_else(|| {
            self.deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
        })
    }

    /// Server side: the instant by which the caller stops waiting, if it set a timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Server side: the caller's address.
    pub fn peer(&self) -> Option<&str> {
        self.peer.as_deref()
    }

    /// Server side: the caller's IP address and port (tonic's `remote_addr`), over TCP,
    /// verbs and the gRPC face; `None` in process, where [`Request::peer`] names the caller.
    pub fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        self.peer()?.parse().ok()
    }

    /// The request metadata (headers).
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The request metadata, mutably (a client adds headers here).
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// Consumes the request, returning the message.
    #[inline]
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The same metadata around another message.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            message: f(self.message),
            metadata: self.metadata,
            timeout: self.timeout,
            deadline: self.deadline,
            peer: self.peer,
            extensions: self.extensions,
        }
    }

    /// Splits off the message, keeping the rest around `()`.
    pub fn into_parts(self) -> (Request<()>, T) {
        let mut message = None;
        let rest = self.map(|m| message = Some(m));
        (rest, message.expect("just set"))
    }

    /// Puts a message back into the rest of a request (the inverse of
    /// [`Request::into_parts`]).
    pub fn from_parts(head: Request<()>, message: T) -> Request<T> {
        head.map(|()| message)
    }

    #[inline]
    pub(crate) fn from_incoming(
        message: T,
        metadata: MetadataMap,
        deadline: Option<Instant>,
        peer: Arc<str>,
        extensions: Extras,
    ) -> Self {
        Request {
            message,
            metadata,
            // Derived from the deadline when asked (`Request::timeout`): no clock read per call.
            timeout: None,
            deadline,
            peer: Some(peer),
            extensions,
        }
    }

    /// The request's extensions: on a server, what its interceptor put there.
    pub fn extensions(&self) -> &Extensions {
        self.extensions.get()
    }

    /// The request's extensions, mutably (an interceptor inserts here).
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions.get_mut()
    }

    /// Takes the extensions as they are held (none stay).
    pub(crate) fn take_extras(&mut self) -> Extras {
        std::mem::take(&mut self.extensions)
    }
}

/// Anything a generated client method accepts as its request: the message itself or a
/// [`Request`] wrapping it.
pub trait IntoRequest<T> {
    /// Wraps into a [`Request`].
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    #[inline]
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    #[inline]
    fn into_request(self) -> Request<T> {
        self
    }
}

/// A response message (or stream) with its metadata: the response headers, and for a call
/// that answers with one message, the trailers the server sent with its status.
#[derive(Debug, Clone)]
pub struct Response<T> {
    message: T,
    metadata: MetadataMap,
    trailers: MetadataMap,
    extensions: Extras,
}

impl<T: PartialEq> PartialEq for Response<T> {
    /// The message, headers and trailers; extensions (values of any type) take no part.
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
            && self.metadata == other.metadata
            && self.trailers == other.trailers
    }
}

impl<T> Response<T> {
    /// A response with no metadata.
    #[inline]
    pub fn new(message: T) -> Response<T> {
        Response {
            message,
            metadata: MetadataMap::new(),
            trailers: MetadataMap::new(),
            extensions: Extras::none(),
        }
    }

    /// The response headers.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The response headers, mutably (a handler adds headers here).
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// The trailers sent with the final status (unary and client-streaming calls; a
    /// response stream has them at its end: `Streaming::trailers`).
    pub fn trailers(&self) -> &MetadataMap {
        &self.trailers
    }

    /// The trailers, mutably (a handler adds trailers here).
    pub fn trailers_mut(&mut self) -> &mut MetadataMap {
        &mut self.trailers
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// Consumes the response, returning the message.
    #[inline]
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The same metadata around another message.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Response<U> {
        Response {
            message: f(self.message),
            metadata: self.metadata,
            trailers: self.trailers,
            extensions: self.extensions,
        }
    }

    /// The response's extensions: values of any type for the program itself, never sent.
    pub fn extensions(&self) -> &Extensions {
        self.extensions.get()
    }

    /// The response's extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions.get_mut()
    }

    /// The message, the headers and the trailers.
    #[inline]
    pub fn into_parts(self) -> (MetadataMap, T, MetadataMap) {
        (self.metadata, self.message, self.trailers)
    }

    /// A response from its parts.
    #[inline]
    pub fn from_parts(metadata: MetadataMap, message: T, trailers: MetadataMap) -> Response<T> {
        Response {
            message,
            metadata,
            trailers,
            extensions: Extras::none(),
        }
    }
}

/// What an async client-streaming or bidirectional call accepts as its requests: a
/// `Stream` of messages, or a [`Request`] wrapping one (for metadata and a timeout).
pub trait IntoStreamingRequest {
    /// The request message type.
    type Message;
    /// The stream of messages.
    type Stream: futures_core::Stream<Item = Self::Message> + Send + 'static;
    /// Wraps into a [`Request`].
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<S> IntoStreamingRequest for S
where
    S: futures_core::Stream + Send + 'static,
{
    type Message = S::Item;
    type Stream = S;
    fn into_streaming_request(self) -> Request<S> {
        Request::new(self)
    }
}

impl<S> IntoStreamingRequest for Request<S>
where
    S: futures_core::Stream + Send + 'static,
{
    type Message = S::Item;
    type Stream = S;
    fn into_streaming_request(self) -> Request<S> {
        self
    }
}

/// What a blocking client-streaming call accepts as its requests: anything iterable (a
/// `Vec`, an iterator, a channel's receiver), or a [`Request`] wrapping it.
pub trait IntoIterRequest {
    /// The request message type.
    type Message;
    /// The messages.
    type Iter: IntoIterator<Item = Self::Message>;
    /// Wraps into a [`Request`].
    fn into_iter_request(self) -> Request<Self::Iter>;
}

impl<I: IntoIterator> IntoIterRequest for I {
    type Message = I::Item;
    type Iter = I;
    fn into_iter_request(self) -> Request<I> {
        Request::new(self)
    }
}

impl<I: IntoIterator> IntoIterRequest for Request<I> {
    type Message = I::Item;
    type Iter = I;
    fn into_iter_request(self) -> Request<I> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remote_address_is_the_peers_socket_address_where_it_has_one() {
        let at = |peer: &str| {
            Request::from_incoming((), MetadataMap::new(), None, peer.into(), Extras::none())
                .remote_addr()
        };
        assert_eq!(
            at("10.0.0.7:50051"),
            Some("10.0.0.7:50051".parse().unwrap())
        );
        assert_eq!(at("[::1]:7"), Some("[::1]:7".parse().unwrap()));
        assert_eq!(at("mem:bench"), None);
        assert_eq!(Request::new(()).remote_addr(), None);
    }

    #[test]
    fn extensions_are_kept_cloned_and_moved_with_their_part() {
        let mut request = Request::new(1u8);
        assert!(request.extensions().is_empty());
        request.extensions_mut().insert(Arc::new("alice"));
        let copy = request.clone();
        let (head, message) = request.into_parts();
        let request = Request::from_parts(head, message);
        assert_eq!(
            request.extensions().get::<Arc<&str>>().map(|a| **a),
            Some("alice")
        );
        assert_eq!(
            copy.extensions().get::<Arc<&str>>().map(|a| **a),
            Some("alice")
        );
        let held = Arc::clone(request.extensions().get::<Arc<&str>>().unwrap());
        drop((request, copy));
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the parts' extensions were dropped"
        );
        let mut response = Response::new(());
        response.extensions_mut().insert(7u32);
        assert_eq!(response.extensions().get::<u32>(), Some(&7));
    }
}
