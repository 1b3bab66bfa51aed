//! [`Request`]: a message plus call metadata (timeout, peer), as handlers and callers see it.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request message with its call metadata. Clients build one to set a per-call timeout
/// (`Request::new(msg).with_timeout(d)`); handlers receive one and can read the deadline and
/// the peer.
#[derive(Debug, Clone, PartialEq)]
pub struct Request<T> {
    message: T,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    peer: Option<Arc<str>>,
}

impl<T> Request<T> {
    /// A request with no timeout.
    pub fn new(message: T) -> Request<T> {
        Request {
            message,
            timeout: None,
            deadline: None,
            peer: None,
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

    /// The timeout the caller set, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Server side: the instant by which the caller stops waiting, if it set a timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Server side: the caller's address.
    pub fn peer(&self) -> Option<&str> {
        self.peer.as_deref()
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
    pub fn into_inner(self) -> T {
        self.message
    }

    pub(crate) fn from_incoming(message: T, deadline: Option<Instant>, peer: Arc<str>) -> Self {
        Request {
            message,
            timeout: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            deadline,
            peer: Some(peer),
        }
    }
}

/// Anything a generated client method accepts as its request: the message itself or a
/// [`Request`] wrapping it.
pub trait IntoRequest<T> {
    /// Wraps into a [`Request`].
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}
