//! tonic's names for a connection and its builder: [`Channel`] and [`Endpoint`], at
//! `rpc_core::transport`, where tonic has them, so that code written against
//! `tonic::transport::{Channel, Endpoint}` compiles after a port.

use std::time::Duration;

use super::{parse_target, Client, ClientBuilder, ResponseFuture};
use crate::protocol::Keepalive;
use crate::runtime::server::InterceptedService;
use crate::runtime::service::MethodDescriptor;
use crate::runtime::tls_config::ClientTlsConfig;
use crate::Error;
use crate::{Request, Status};

/// The connection a generated client calls through: this framework's [`Client`] under tonic's
/// name. Cheap to clone; clients of several services may share one
/// (`GreeterClient::new(channel.clone())`).
pub type Channel = Client;

/// What a generated async client calls through, its parameter `T`: a [`Channel`], or one
/// behind an interceptor of its own (`FooClient::with_interceptor(channel, f)`, tonic's
/// `FooClient<InterceptedService<Channel, F>>`).
pub trait ClientChannel: Send + Sync + 'static {
    /// The connection the calls go out on.
    fn channel(&self) -> &Client;

    /// The request as this value's own interceptor leaves it (a [`Channel`] has none), before
    /// the connection's ([`crate::ClientBuilder::interceptor`]) sees it.
    ///
    /// # Errors
    ///
    /// The interceptor's status: the call ends with it, and nothing goes out.
    fn intercept<T>(&mut self, request: Request<T>) -> Result<Request<T>, Status>;

    /// Starts a unary call through this value ([`Client::unary_async`] after
    /// [`ClientChannel::intercept`]).
    fn unary<Req, Resp>(
        &mut self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> ResponseFuture<Resp, Req>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default + 'static,
    {
        match self.intercept(request) {
            Ok(request) => self.channel().unary_async(method, request),
            Err(status) => self.channel().failed_call(method, status),
        }
    }
}

impl ClientChannel for Client {
    #[inline]
    fn channel(&self) -> &Client {
        self
    }

    #[inline]
    fn intercept<T>(&mut self, request: Request<T>) -> Result<Request<T>, Status> {
        Ok(request)
    }
}

impl<F> ClientChannel for InterceptedService<Client, F>
where
    F: crate::service::Interceptor + Send + Sync + 'static,
{
    fn channel(&self) -> &Client {
        self.inner()
    }

    fn intercept<T>(&mut self, request: Request<T>) -> Result<Request<T>, Status> {
        let (head, message) = request.into_parts();
        rpc_sync::assert_unlocked("calling an interceptor");
        let head = self.interceptor_mut().call(head)?;
        Ok(Request::from_parts(head, message))
    }
}

/// Where and how to connect, tonic's `Endpoint`: a target (`http://host:port`, or `tcp://`,
/// `verbs://`, `grpc://` to choose the transport) and the connection's settings.
/// [`Endpoint::connect`] makes the [`Channel`].
///
/// ```no_run
/// # async fn run() -> Result<(), rpc_core::Error> {
/// use rpc_core::transport::Endpoint;
/// use std::time::Duration;
///
/// let channel = Endpoint::from_static("http://127.0.0.1:50051")
///     .connect_timeout(Duration::from_secs(5))
///     .timeout(Duration::from_secs(1))
///     .connect()
///     .await?;
/// # drop(channel); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Endpoint {
    target: String,
    builder: ClientBuilder,
}

impl Endpoint {
    /// The endpoint of `target`, with the default settings.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`] for an unknown scheme or a target without address.
    /// `https://` is taken here; [`Endpoint::connect`] needs [`Endpoint::tls_config`] for it.
    pub fn new(target: impl Into<String>) -> Result<Endpoint, Error> {
        Endpoint::with_builder(target, ClientBuilder::default())
    }

    /// [`Endpoint::new`], under tonic's name for it.
    ///
    /// # Errors
    ///
    /// As [`Endpoint::new`].
    pub fn from_shared(target: impl Into<String>) -> Result<Endpoint, Error> {
        Endpoint::new(target)
    }

    /// The endpoint of a target known when the program is written.
    ///
    /// # Panics
    ///
    /// If [`Endpoint::new`] refuses `target`, as tonic's does for an invalid URI.
    pub fn from_static(target: &'static str) -> Endpoint {
        match Endpoint::new(target) {
            Ok(endpoint) => endpoint,
            Err(err) => panic!("Endpoint::from_static: {err}"),
        }
    }

    /// The endpoint of `target` with every setting of `builder` (transport, TLS, rings,
    /// interceptor, memory budget, ...): the settings tonic's `Endpoint` has no method for.
    ///
    /// # Errors
    ///
    /// As [`Endpoint::new`].
    pub fn with_builder(
        target: impl Into<String>,
        builder: ClientBuilder,
    ) -> Result<Endpoint, Error> {
        let target = target.into();
        parse_target(&secure_as_grpc(&target).unwrap_or_else(|| target.clone()))?;
        Ok(Endpoint { target, builder })
    }

    /// gRPC over TLS with these CAs and name (tonic's `tls_config`), for an `https://` target
    /// (or `grpc://`): standard gRPC, served by a gRPC server with TLS or by this framework's
    /// server with `grpc_tls` on its own port.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if `config` has no CA certificate: no system roots are used.
    pub fn tls_config(mut self, config: ClientTlsConfig) -> Result<Endpoint, Error> {
        let (roots, domain) = config.parts();
        if roots.is_empty() {
            return Err(Error::InvalidConfig(
                "ClientTlsConfig without a CA certificate (ca_certificate): no system roots are \
                 used"
                    .into(),
            ));
        }
        self.builder = self.builder.grpc_tls(roots, domain);
        Ok(self)
    }

    /// The target, as given.
    pub fn uri(&self) -> &str {
        &self.target
    }

    /// The timeout of every call that sets none itself ([`ClientBuilder::timeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Endpoint {
        self.builder = self.builder.timeout(timeout);
        self
    }

    /// How long [`Endpoint::connect`] may take ([`ClientBuilder::connect_timeout`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Endpoint {
        self.builder = self.builder.connect_timeout(timeout);
        self
    }

    /// The silence after which the connection sends a keepalive PING (tonic's
    /// `http2_keep_alive_interval`; [`ClientBuilder::keepalive`]).
    pub fn http2_keep_alive_interval(self, interval: Duration) -> Endpoint {
        self.with_keepalive(|keepalive| keepalive.interval = interval)
    }

    /// How long a keepalive PING may go unanswered before the connection is declared dead
    /// (tonic's `keep_alive_timeout`).
    pub fn keep_alive_timeout(self, timeout: Duration) -> Endpoint {
        self.with_keepalive(|keepalive| keepalive.timeout = timeout)
    }

    /// Changes the keepalive settings, from the defaults if keepalive was off.
    fn with_keepalive(mut self, change: impl FnOnce(&mut Keepalive)) -> Endpoint {
        let mut keepalive = self.builder.keepalive.unwrap_or_default();
        change(&mut keepalive);
        self.builder = self.builder.keepalive(Some(keepalive));
        self
    }

    /// Connects, on a thread of its own (the future does not block its executor).
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`].
    pub async fn connect(&self) -> Result<Channel, Error> {
        let target = self.connect_target()?;
        self.builder.clone().connect_async(&target).await
    }

    /// tonic's `connect_lazy`: a [`Channel`] that connects at its first call
    /// ([`ClientBuilder::connect_lazy`]). Nothing is checked until then: a call that cannot
    /// connect fails with UNAVAILABLE and says why, and the next call tries again.
    pub fn connect_lazy(&self) -> Channel {
        // An https:// target without TLS settings stays as it is: each call says it needs them.
        let target = self
            .connect_target()
            .unwrap_or_else(|_| self.target.clone());
        self.builder.clone().connect_lazy(&target)
    }

    /// The target to connect to: an `https://` one as the `grpc://` one it is.
    fn connect_target(&self) -> Result<String, Error> {
        match secure_as_grpc(&self.target) {
            // gRPC over TLS needs the TLS settings (tls_config, or the builder's grpc_tls).
            Some(_) if self.builder.grpc_tls.is_none() => Err(Error::InvalidAddress(format!(
                "{}: https:// needs the TLS settings (Endpoint::tls_config)",
                self.target
            ))),
            Some(grpc) => Ok(grpc),
            None => Ok(self.target.clone()),
        }
    }
}

/// An `https://` target as the `grpc://` one it is (gRPC over TLS); `None` for other schemes.
fn secure_as_grpc(target: &str) -> Option<String> {
    let (scheme, rest) = target.split_once("://")?;
    scheme
        .eq_ignore_ascii_case("https")
        .then(|| format!("grpc://{rest}"))
}

impl Client {
    /// tonic's `Channel::from_static`: the [`Endpoint`] of `target`.
    ///
    /// # Panics
    ///
    /// As [`Endpoint::from_static`].
    pub fn from_static(target: &'static str) -> Endpoint {
        Endpoint::from_static(target)
    }

    /// tonic's `Channel::from_shared`: the [`Endpoint`] of `target`.
    ///
    /// # Errors
    ///
    /// As [`Endpoint::new`].
    pub fn from_shared(target: impl Into<String>) -> Result<Endpoint, Error> {
        Endpoint::new(target)
    }
}

impl TryFrom<String> for Endpoint {
    type Error = Error;

    fn try_from(target: String) -> Result<Endpoint, Error> {
        Endpoint::new(target)
    }
}

impl TryFrom<&'static str> for Endpoint {
    type Error = Error;

    fn try_from(target: &'static str) -> Result<Endpoint, Error> {
        Endpoint::new(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_take_tonic_uris_and_refuse_what_connect_would() {
        assert_eq!(
            Endpoint::new("http://[::1]:50051").unwrap().uri(),
            "http://[::1]:50051"
        );
        assert!(Endpoint::from_shared("verbs://10.0.0.1:7000".to_string()).is_ok());
        assert!(matches!(
            Endpoint::new("ftp://x:1"),
            Err(Error::InvalidAddress(_))
        ));
        assert!(matches!(
            Endpoint::new("http://"),
            Err(Error::InvalidAddress(_))
        ));
    }

    #[test]
    fn keepalive_settings_start_from_the_defaults() {
        let endpoint = Endpoint::from_static("http://127.0.0.1:1")
            .http2_keep_alive_interval(Duration::from_secs(7))
            .keep_alive_timeout(Duration::from_secs(3));
        let keepalive = endpoint.builder.keepalive.unwrap();
        assert_eq!(keepalive.interval, Duration::from_secs(7));
        assert_eq!(keepalive.timeout, Duration::from_secs(3));
    }
}
