//! The gRPC face: a [`Server`](crate::Server)'s services on an HTTP/2 port (hyper's server),
//! for stock gRPC clients. Each HTTP/2 stream becomes a call handed to the same handlers as
//! calls over verbs or TCP, with a [`GrpcCall`] as their port.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::call::Outbound;
use super::{
    metadata_from_headers, metadata_to_headers, parse_timeout, status_to_headers, Deframer,
    GrpcCall, CONTENT_TYPE,
};
use crate::runtime::call::{Payload, RequestBody, RequestDelivery};
use crate::runtime::port::Dispatch;
use crate::runtime::port::Port;
use crate::runtime::service::MethodKind;
use crate::runtime::stream::Incoming as Inbound;
use crate::{Error, MetadataMap, Status};

/// How the face runs.
#[derive(Clone)]
pub(crate) struct FaceSettings {
    /// The runtime to run on (else the face starts its own, two threads).
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    /// The largest request message accepted and response message sent.
    pub(crate) max_message_size: usize,
    /// TLS, if the face serves it.
    pub(crate) tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Connections the face serves at once, at most (the server's `max_connections`): one
    /// beyond is closed at once.
    pub(crate) max_connections: Option<usize>,
    /// The longest a call may run, whatever its `grpc-timeout` (the server's `timeout`).
    pub(crate) call_limit: Option<Duration>,
    /// Calls of one connection at once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS), if fewer
    /// than `MAX_STREAMS` (the server's `concurrency_limit_per_connection`).
    pub(crate) max_streams: Option<u32>,
}

/// A running face.
pub(crate) struct GrpcFace {
    /// Its own port's address, if it listens on one.
    local_addr: Option<SocketAddr>,
    /// HTTP/2 connections another listener accepted (the server's own TCP port, which tells
    /// them apart by their preface), for the face to serve.
    handoff: tokio::sync::mpsc::UnboundedSender<std::net::TcpStream>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Ends the connections still open after the grace period.
    abort: Option<tokio::sync::oneshot::Sender<()>>,
    stopped: std::sync::mpsc::Receiver<()>,
    /// The face's own runtime, when it was given none.
    runtime: Option<tokio::runtime::Runtime>,
}

impl GrpcFace {
    /// Serves `shared`'s services on `addr` if given (bound here), and on the connections
    /// handed over with [`GrpcFace::hand_off`].
    pub(crate) fn start(
        shared: Arc<dyn Dispatch>,
        addr: Option<&str>,
        settings: FaceSettings,
    ) -> Result<GrpcFace, Error> {
        let listener = match addr {
            Some(addr) => {
                let listener = std::net::TcpListener::bind(addr).map_err(|e| {
                    Error::InvalidAddress(format!("gRPC face: cannot bind {addr}: {e}"))
                })?;
                listener.set_nonblocking(true)?;
                Some(listener)
            }
            None => None,
        };
        let local_addr = listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let (runtime, handle) = match settings.runtime {
            Some(handle) => (None, handle),
            None => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("rpc-grpc")
                    .enable_all()
                    .build()?;
                let handle = runtime.handle().clone();
                (Some(runtime), handle)
            }
        };
        let listener = {
            let _entered = handle.enter();
            listener
                .map(tokio::net::TcpListener::from_std)
                .transpose()?
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let (abort, abort_rx) = tokio::sync::oneshot::channel();
        let (stopped_tx, stopped) = std::sync::mpsc::channel();
        let (handoff, handed) = tokio::sync::mpsc::unbounded_channel();
        let face = Arc::new(Face {
            shared,
            max_message_size: settings.max_message_size,
            max_connections: settings.max_connections,
            call_limit: settings.call_limit,
            max_streams: settings
                .max_streams
                .map_or(MAX_STREAMS, |n| n.clamp(1, MAX_STREAMS)),
        });
        let tls = settings.tls.map(tokio_rustls::TlsAcceptor::from);
        let secure = tls.is_some();
        let incoming = Connections {
            listener,
            handed,
            tls,
        };
        handle.spawn(async move {
            accept_loop(incoming, face, stop_rx, abort_rx).await;
            let _ = stopped_tx.send(());
        });
        match local_addr {
            Some(addr) => tracing::info!(%addr, tls = secure, "serving gRPC (HTTP/2)"),
            None => tracing::info!("serving gRPC (HTTP/2) on the server's own port"),
        }
        Ok(GrpcFace {
            local_addr,
            handoff,
            stop: Some(stop),
            abort: Some(abort),
            stopped,
            runtime,
        })
    }

    /// Its own port's address, if it listens on one.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Serves an HTTP/2 connection another listener accepted (in non-blocking mode, its
    /// preface not read yet). Plaintext: TLS is served on the face's own port only.
    pub(crate) fn hand_off(&self, stream: std::net::TcpStream) {
        // Refused only once the face stopped: the connection then closes.
        let _ = self.handoff.send(stream);
    }

    /// Stops accepting, asks clients to go away (GOAWAY), lets calls finish for up to
    /// `grace`, then drops the rest.
    pub(crate) fn shutdown(&mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            if self.stopped.recv_timeout(grace).is_err() {
                // Calls outlived the grace period: their connections are dropped (on a
                // runtime of the user's too, which goes on running).
                if let Some(abort) = self.abort.take() {
                    let _ = abort.send(());
                }
                let _ = self.stopped.recv_timeout(Duration::from_secs(1));
            }
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for GrpcFace {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
    }
}

/// Calls one HTTP/2 connection may have open at once.
const MAX_STREAMS: u32 = 256;

/// How long a client may take to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every call of the face needs.
struct Face {
    shared: Arc<dyn Dispatch>,
    max_message_size: usize,
    max_connections: Option<usize>,
    call_limit: Option<Duration>,
    max_streams: u32,
}

/// Where a face's connections come from: its own port, and connections handed over.
struct Connections {
    listener: Option<tokio::net::TcpListener>,
    handed: tokio::sync::mpsc::UnboundedReceiver<std::net::TcpStream>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Connections {
    /// The next connection and whether it speaks TLS: one of the face's own port when the
    /// face has TLS, or a handed-over one whose first byte begins a TLS handshake.
    async fn next(&mut self) -> Option<(tokio::net::TcpStream, SocketAddr, bool)> {
        loop {
            let accepted = async {
                match &self.listener {
                    Some(listener) => listener.accept().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                accepted = accepted => match accepted {
                    Ok((stream, peer)) => return Some((stream, peer, self.tls.is_some())),
                    Err(e) => {
                        // Out of descriptors, say: back off instead of spinning.
                        tracing::warn!(error = %e, "gRPC face: accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                handed = self.handed.recv() => {
                    let stream = handed?;
                    let peer = stream.peer_addr();
                    // The transport handed it over having seen its first bytes: a TLS
                    // record's type, 22 (handshake), or the HTTP/2 preface.
                    let mut first = [0u8; 1];
                    let tls = matches!(
                        stream.peek(&mut first),
                        Ok(1) if first[0] == crate::transport::tcp::TLS_HANDSHAKE
                    );
                    match (tokio::net::TcpStream::from_std(stream), peer) {
                        (Ok(stream), Ok(peer)) => return Some((stream, peer, tls)),
                        (Err(e), _) | (_, Err(e)) => {
                            tracing::debug!(error = %e, "gRPC face: a handed-over connection failed");
                        }
                    }
                }
            }
        }
    }
}

async fn accept_loop(
    mut incoming: Connections,
    face: Arc<Face>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    abort: tokio::sync::oneshot::Receiver<()>,
) {
    // The connections' tasks, aborted if they outlive the grace period; finished ones are
    // reaped at each accept, so the set holds only live connections.
    let mut connections = tokio::task::JoinSet::new();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // Pings keep idle connections through middleboxes and find dead peers.
    http2
        // gRPC has no use for it, and it would show up as metadata.
        .auto_date_header(false)
        // What one connection may make the face hold, whatever the client does: at most
        // MAX_STREAMS calls (fewer if the server limits them), each with a 1 MiB HTTP/2
        // receive window (4 MiB for the whole connection) on top of the calls' own windows
        // of unread messages, and headers of at most 64 KiB.
        .max_concurrent_streams(face.max_streams)
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .max_send_buf_size(1 << 20)
        .max_header_list_size(64 << 10)
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(60))
        .keep_alive_timeout(Duration::from_secs(20));
    loop {
        let (stream, peer, speaks_tls) = tokio::select! {
            next = incoming.next() => match next {
                Some(next) => next,
                None => break,
            },
            _ = &mut stop => break,
        };
        while connections.try_join_next().is_some() {}
        if face
            .max_connections
            .is_some_and(|max| connections.len() >= max)
        {
            tracing::warn!(%peer, "gRPC face: connection refused, max_connections reached");
            continue;
        }
        if speaks_tls && incoming.tls.is_none() {
            tracing::debug!(%peer, "gRPC face: a TLS client, and no TLS configured: closed");
            continue;
        }
        let _ = stream.set_nodelay(true);
        let peer: Arc<str> = peer.to_string().into();
        let face = Arc::clone(&face);
        let service = hyper::service::service_fn(move |request| {
            let (face, peer) = (Arc::clone(&face), Arc::clone(&peer));
            async move { Ok::<_, Infallible>(serve_call(face, peer, request).await) }
        });
        match incoming.tls.as_ref().filter(|_| speaks_tls) {
            None => {
                let connection =
                    graceful.watch(http2.serve_connection(TokioIo::new(stream), service));
                connections.spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "gRPC face: connection ended");
                    }
                });
            }
            Some(acceptor) => {
                // The handshake runs in the connection's task, so a slow client holds up
                // only itself; it must finish within the limit.
                let (acceptor, http2, watcher) =
                    (acceptor.clone(), http2.clone(), graceful.watcher());
                connections.spawn(async move {
                    let handshake =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    let stream = match handshake {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "gRPC face: TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("gRPC face: TLS handshake timed out");
                            return;
                        }
                    };
                    let connection =
                        watcher.watch(http2.serve_connection(TokioIo::new(stream), service));
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "gRPC face: connection ended");
                    }
                });
            }
        }
    }
    drop(incoming);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = abort => connections.abort_all(),
    }
}

/// Serves one HTTP/2 request as a call.
async fn serve_call(
    face: Arc<Face>,
    peer: Arc<str>,
    request: http::Request<Incoming>,
) -> http::Response<FaceBody> {
    if request.method() != Method::POST {
        return http_error(StatusCode::METHOD_NOT_ALLOWED);
    }
    let is_grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(CONTENT_TYPE));
    if !is_grpc {
        return http_error(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let path = request.uri().path();
    let Some(method) = face.shared.lookup(path) else {
        return trailers_only(Status::unimplemented(format!(
            "{path}: no such method on this server"
        )));
    };
    if let Some(encoding) = request.headers().get("grpc-encoding") {
        if encoding != "identity" {
            let mut response = trailers_only(Status::unimplemented(format!(
                "grpc-encoding {encoding:?} is not supported: send messages uncompressed (identity)"
            )));
            response
                .headers_mut()
                .insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
            return response;
        }
    }
    let asked = match request.headers().get("grpc-timeout") {
        None => None,
        Some(value) => match value.to_str().ok().and_then(parse_timeout) {
            Some(timeout) => Some(timeout),
            None => {
                return trailers_only(Status::internal(format!(
                    "malformed grpc-timeout {value:?}"
                )))
            }
        },
    };
    // The server's own limit caps what the client asked for (ServerBuilder::timeout).
    let deadline = crate::protocol::capped_call_time(asked, face.call_limit)
        .and_then(|t| Instant::now().checked_add(t));
    let metadata = metadata_from_headers(request.headers());
    let call = GrpcCall::new(face.max_message_size);
    let body = request.into_body();
    let request_body = match method.kind {
        MethodKind::Unary | MethodKind::ServerStreaming => {
            match read_one(body, face.max_message_size, deadline).await {
                Ok(message) => RequestBody::Message(Payload::owned(message.to_vec())),
                Err(status) => return trailers_only(status),
            }
        }
        MethodKind::ClientStreaming | MethodKind::BidiStreaming => {
            let reader = tokio::spawn(read_stream(Arc::clone(&call), body, face.max_message_size));
            call.set_driver(reader.abort_handle());
            RequestBody::Stream
        }
    };
    // From here on, a dropped future (the client reset the stream) cancels the handler.
    let mut guard = CallGuard(Some(Arc::clone(&call)));
    face.shared.serve(
        Arc::clone(&call) as Port,
        peer,
        RequestDelivery {
            call: 0,
            method,
            deadline,
            deadline_fresh: false,
            metadata,
            body: request_body,
            stream: Some(Arc::clone(call.shared())),
        },
    );
    let mut expiry = deadline.map(|d| Box::pin(tokio::time::sleep_until(d.into())));
    // The response headers wait for the first message, as stock servers' do: a call that
    // ends without one is answered Trailers-Only (its headers' metadata beside the status),
    // which clients report as the call's failure rather than as their stream's.
    let mut headers = None;
    let peeked = loop {
        match poll_fn(|cx| poll_next(&call, &mut expiry, cx)).await {
            // Later ones are dropped (`GrpcCall::headers` lets one through).
            Next::Out(Outbound::Headers(sent)) => {
                headers.get_or_insert(sent);
            }
            Next::Out(Outbound::Message(message)) => break message,
            Next::Out(Outbound::End(status)) => {
                guard.finish();
                let mut response = trailers_only(status);
                if let Some(headers) = headers {
                    metadata_to_headers(&headers, response.headers_mut());
                }
                return response;
            }
            Next::Closed => {
                guard.finish();
                return trailers_only(Status::internal("the call ended without a status"));
            }
            Next::Expired => {
                guard.expire();
                return trailers_only(deadline_exceeded());
            }
        }
    };
    let mut response = http::Response::new(FaceBody {
        call: guard.0.take(),
        expiry,
        peeked: Some(peeked),
    });
    grpc_headers(response.headers_mut());
    if let Some(headers) = headers {
        metadata_to_headers(&headers, response.headers_mut());
    }
    response
}

fn deadline_exceeded() -> Status {
    Status::deadline_exceeded("the call's deadline (grpc-timeout) passed")
}

fn grpc_headers(headers: &mut HeaderMap) {
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE),
    );
}

/// A response of headers only, carrying `status` (gRPC's "Trailers-Only").
fn trailers_only(status: Status) -> http::Response<FaceBody> {
    let mut response = http::Response::new(FaceBody::empty());
    grpc_headers(response.headers_mut());
    status_to_headers(&status, response.headers_mut());
    response
}

fn http_error(code: StatusCode) -> http::Response<FaceBody> {
    let mut response = http::Response::new(FaceBody::empty());
    *response.status_mut() = code;
    response
}

/// Reads the one message of a unary-request call (by its deadline).
async fn read_one(
    mut body: Incoming,
    max_message_size: usize,
    deadline: Option<Instant>,
) -> Result<Bytes, Status> {
    let read = async {
        let mut deframer = Deframer::new(max_message_size);
        let mut message = None;
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Status::cancelled(format!("the request stream failed: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            deframer.push(data);
            while let Some(m) = deframer.next_message()? {
                if message.replace(m).is_some() {
                    return Err(Status::internal(
                        "more than one request message for a method that takes one",
                    ));
                }
            }
        }
        if deframer.has_partial() {
            return Err(Status::internal(
                "the request stream ended inside a message",
            ));
        }
        message.ok_or_else(|| Status::internal("the request stream ended without a message"))
    };
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), read)
            .await
            .unwrap_or_else(|_| Err(deadline_exceeded())),
        None => read.await,
    }
}

/// Reads the request messages of a streaming-request call into its stream state, pausing
/// while the handler has a window's worth unread.
async fn read_stream(call: Arc<GrpcCall>, mut body: Incoming, max_message_size: usize) {
    let mut deframer = Deframer::new(max_message_size);
    let end = 'read: loop {
        poll_fn(|cx| call.poll_room(cx)).await;
        match body.frame().await {
            None if deframer.has_partial() => {
                break Err(Status::internal(
                    "the request stream ended inside a message",
                ))
            }
            None => break Ok(()),
            Some(Err(e)) => {
                break Err(Status::cancelled(format!(
                    "the client's request stream failed: {e}"
                )))
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                deframer.push(data);
                loop {
                    match deframer.next_message() {
                        // A handler that dropped its request stream ignores the rest.
                        Ok(Some(message)) => _ = call.deliver(message),
                        Ok(None) => break,
                        Err(status) => break 'read Err(status),
                    }
                }
            }
        }
    };
    match end {
        Ok(()) => {
            call.shared()
                .inbox
                .close(Some(Inbound::End(Ok(MetadataMap::new()))));
        }
        Err(status) => {
            call.shared().cancel(status.clone());
            call.end(status);
        }
    }
}

/// Cancels a call's handler if the response is dropped before its body takes over.
struct CallGuard(Option<Arc<GrpcCall>>);

impl CallGuard {
    /// The call ended by itself.
    fn finish(&mut self) {
        if let Some(call) = self.0.take() {
            call.shared().finish();
            call.abort_driver();
        }
    }

    /// The deadline passed first: the handler is cancelled.
    fn expire(&mut self) {
        if let Some(call) = self.0.take() {
            call.shared().cancel(deadline_exceeded());
            call.abort_driver();
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            call.shared()
                .cancel(Status::cancelled("the client cancelled the call"));
            call.abort_driver();
        }
    }
}

/// What the handler hands over next, or that the call's deadline came first.
enum Next {
    Out(Outbound),
    /// The handler's side ended without a status.
    Closed,
    Expired,
}

/// The handler's next item, or [`Next::Expired`] once the call's deadline passed: when its
/// timer fires, or when a message or status comes after it (it does not go out, however late
/// the timer fires, as on this framework's own protocol).
fn poll_next(
    call: &GrpcCall,
    expiry: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    cx: &mut Context<'_>,
) -> Poll<Next> {
    if let Poll::Ready(item) = call.out.poll_recv(cx) {
        let past = || {
            expiry
                .as_ref()
                .is_some_and(|e| e.deadline() <= tokio::time::Instant::now())
        };
        return Poll::Ready(match item {
            Some(Outbound::Message(_) | Outbound::End(_)) if past() => Next::Expired,
            Some(item) => Next::Out(item),
            None => Next::Closed,
        });
    }
    match expiry.as_mut().map(|e| e.as_mut().poll(cx)) {
        Some(Poll::Ready(())) => Poll::Ready(Next::Expired),
        _ => Poll::Pending,
    }
}

/// The response body: the call's messages, then its status as trailers. Dropped before its
/// end (the client reset the stream or went away), it cancels the call.
pub(crate) struct FaceBody {
    call: Option<Arc<GrpcCall>>,
    expiry: Option<Pin<Box<tokio::time::Sleep>>>,
    peeked: Option<Bytes>,
}

impl FaceBody {
    fn empty() -> FaceBody {
        FaceBody {
            call: None,
            expiry: None,
            peeked: None,
        }
    }

    /// The trailers that end the call with `status`.
    fn finish(&mut self, status: &Status) -> HeaderMap {
        let mut trailers = HeaderMap::new();
        status_to_headers(status, &mut trailers);
        CallGuard(self.call.take()).finish();
        trailers
    }
}

/// The sender may hand over its next message.
fn taken(call: &GrpcCall) {
    if call.shared().send_ready.raise() {
        crate::runtime::woke_a_thread();
    }
}

impl http_body::Body for FaceBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(message) = this.peeked.take() {
            if let Some(call) = &this.call {
                taken(call);
            }
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        let Some(call) = this.call.clone() else {
            return Poll::Ready(None);
        };
        loop {
            let status = match poll_next(&call, &mut this.expiry, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Next::Out(Outbound::Message(message))) => {
                    taken(&call);
                    return Poll::Ready(Some(Ok(Frame::data(message))));
                }
                Poll::Ready(Next::Out(Outbound::Headers(_))) => continue,
                Poll::Ready(Next::Out(Outbound::End(status))) => status,
                Poll::Ready(Next::Closed) => Status::internal("the call ended without a status"),
                Poll::Ready(Next::Expired) => {
                    call.shared().cancel(deadline_exceeded());
                    deadline_exceeded()
                }
            };
            return Poll::Ready(Some(Ok(Frame::trailers(this.finish(&status)))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.call.is_none() && self.peeked.is_none()
    }
}

impl Drop for FaceBody {
    fn drop(&mut self) {
        drop(CallGuard(self.call.take()));
    }
}
