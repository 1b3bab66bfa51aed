//! The gRPC client transport ([`TransportKind::Grpc`](crate::TransportKind::Grpc)): calls
//! over one HTTP/2 connection (hyper's client) to any gRPC server. Each call is a
//! [`GrpcCall`]; a task on the transport's runtime sends the request and feeds the response
//! into the call's stream state, which the usual [`Streaming`](crate::Streaming) reads.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rpc_sync::Mutex;

use super::call::Outbound;
use super::{
    code_of_http_status, format_timeout, metadata_from_headers, metadata_to_headers,
    status_from_headers, Deframer, GrpcCall, CONTENT_TYPE,
};
use crate::runtime::stream::Incoming;
use crate::{Code, Error, MetadataMap, Status};

/// The runtime every gRPC client transport runs on: one thread, started on first use.
fn runtime() -> Result<&'static tokio::runtime::Runtime, Error> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("rpc-grpc-client")
        .enable_all()
        .build()?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// Runs `future` on `handle` and blocks for its output (from any thread, a runtime's
/// included: it is spawned, not `block_on`ed).
fn run_blocking<F>(handle: &tokio::runtime::Handle, future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().expect("the gRPC client runtime stopped")
}

/// TLS for a client: the trusted roots and the name the server's certificate must carry.
#[derive(Clone)]
pub(crate) struct ClientTls {
    pub(crate) config: Arc<tokio_rustls::rustls::ClientConfig>,
    pub(crate) server_name: rustls_pki_types::ServerName<'static>,
}

/// A gRPC client transport: one HTTP/2 connection to `addr`, redialled when lost.
pub(crate) struct GrpcChannel {
    handle: tokio::runtime::Handle,
    addr: String,
    tls: Option<ClientTls>,
    connect_timeout: Duration,
    max_message_size: usize,
    sender: Mutex<Option<SendRequest<ClientBody>>>,
}

impl GrpcChannel {
    /// Connects to `addr` (`host:port`).
    pub(crate) fn connect(
        addr: &str,
        connect_timeout: Duration,
        max_message_size: usize,
        tls: Option<ClientTls>,
    ) -> Result<Arc<GrpcChannel>, Error> {
        let handle = runtime()?.handle().clone();
        let channel = Arc::new(GrpcChannel {
            handle,
            addr: addr.to_string(),
            tls,
            connect_timeout,
            max_message_size,
            sender: Mutex::new(None),
        });
        let dialing = Arc::clone(&channel);
        run_blocking(&channel.handle, async move { dialing.sender().await }).map_err(|status| {
            Error::TransportUnavailable {
                transport: "grpc",
                reason: status.message().to_string(),
            }
        })?;
        Ok(channel)
    }

    /// The live connection, dialled anew if the last one was lost (no lock is held while
    /// dialling: two callers may both dial, and the later connection is kept).
    async fn sender(&self) -> Result<SendRequest<ClientBody>, Status> {
        if let Some(sender) = self.sender.lock().as_ref() {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
        }
        let fresh = self.dial().await.map_err(|e| {
            Status::unavailable(format!("cannot connect to {} over gRPC: {e}", self.addr))
        })?;
        *self.sender.lock() = Some(fresh.clone());
        Ok(fresh)
    }

    async fn dial(
        &self,
    ) -> Result<SendRequest<ClientBody>, Box<dyn std::error::Error + Send + Sync>> {
        let stream = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect(&self.addr),
        )
        .await
        .map_err(|_| format!("no connection within {:?}", self.connect_timeout))??;
        stream.set_nodelay(true)?;
        let mut http2 = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        let addr = self.addr.clone();
        let Some(tls) = &self.tls else {
            let (sender, connection) = http2.handshake(TokioIo::new(stream)).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%addr, error = %e, "gRPC connection ended");
                }
            });
            return Ok(sender);
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
        let stream = tokio::time::timeout(
            self.connect_timeout,
            connector.connect(tls.server_name.clone(), stream),
        )
        .await
        .map_err(|_| format!("no TLS handshake within {:?}", self.connect_timeout))??;
        let (sender, connection) = http2.handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%addr, error = %e, "gRPC connection ended");
            }
        });
        Ok(sender)
    }

    /// Starts a call of `path`: its metadata and deadline now; `message` (then the end of the
    /// requests) for a unary-request call, else the requests come from the call's sender.
    pub(crate) fn open(
        self: &Arc<Self>,
        path: &str,
        metadata: &MetadataMap,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        message: Option<Bytes>,
    ) -> Arc<GrpcCall> {
        let call = GrpcCall::new(self.max_message_size);
        if let Some(message) = message {
            call.out.push(Outbound::Message(message));
            call.half_close();
        }
        let mut request = http::Request::new(ClientBody {
            call: Arc::clone(&call),
        });
        *request.method_mut() = Method::POST;
        *request.uri_mut() = match http::Uri::builder()
            .scheme(if self.tls.is_some() { "https" } else { "http" })
            .authority(self.addr.as_str())
            .path_and_query(path)
            .build()
        {
            Ok(uri) => uri,
            Err(e) => {
                call.shared().end(Err(Status::internal(format!(
                    "bad call address {path}: {e}"
                ))));
                return call;
            }
        };
        let headers = request.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE),
        );
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(concat!("rpc-core/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(timeout) = timeout {
            if let Ok(value) = HeaderValue::from_str(&format_timeout(timeout)) {
                headers.insert("grpc-timeout", value);
            }
        }
        metadata_to_headers(metadata, headers);
        let driver = self.handle.spawn(drive(
            Arc::clone(self),
            Arc::clone(&call),
            request,
            deadline,
        ));
        call.set_driver(driver.abort_handle());
        call
    }
}

/// Sends the request and feeds the response into the call, until its status (or the
/// deadline).
async fn drive(
    channel: Arc<GrpcChannel>,
    call: Arc<GrpcCall>,
    request: http::Request<ClientBody>,
    deadline: Option<Instant>,
) {
    let exchange = exchange(&channel, &call, request);
    let end = match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), exchange)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("the call's deadline passed"))),
        None => exchange.await,
    };
    call.shared().end(end);
}

async fn exchange(
    channel: &GrpcChannel,
    call: &GrpcCall,
    request: http::Request<ClientBody>,
) -> Result<MetadataMap, Status> {
    let mut sender = channel.sender().await?;
    poll_fn(|cx| sender.poll_ready(cx))
        .await
        .map_err(|e| Status::unavailable(format!("the gRPC connection failed: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Status::unavailable(format!("the gRPC request failed: {e}")))?;
    let (parts, mut body) = response.into_parts();
    if parts.status != http::StatusCode::OK {
        return Err(Status::new(
            code_of_http_status(parts.status),
            format!("the server answered HTTP {}", parts.status),
        ));
    }
    if let Some(status) = status_from_headers(&parts.headers) {
        // Trailers-only: the call ended before any response.
        return ended(status);
    }
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with(CONTENT_TYPE) {
        return Err(Status::unknown(format!(
            "not a gRPC response (content-type {content_type:?})"
        )));
    }
    call.shared()
        .push(Incoming::Headers(metadata_from_headers(&parts.headers)));
    let mut deframer = Deframer::new(channel.max_message_size);
    loop {
        poll_fn(|cx| call.poll_room(cx)).await;
        let frame = match body.frame().await {
            None if deframer.has_partial() => {
                return Err(Status::internal("the response ended inside a message"))
            }
            None => {
                return Err(Status::internal(
                    "the server ended the response without a status (no trailers)",
                ))
            }
            Some(Err(e)) => return Err(stream_error(&e)),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                deframer.push(data);
                while let Some(message) = deframer.next_message()? {
                    if !call.deliver(message) {
                        return Err(Status::cancelled("the response stream was dropped"));
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    if deframer.has_partial() {
                        return Err(Status::internal("the response ended inside a message"));
                    }
                    return match status_from_headers(&trailers) {
                        Some(status) => ended(status),
                        None => Err(Status::internal("the trailers carry no grpc-status")),
                    };
                }
            }
        }
    }
}

/// The status of a reset stream or a failed connection.
fn stream_error(e: &hyper::Error) -> Status {
    let reason = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<h2::Error>())
        .and_then(h2::Error::reason);
    match reason {
        Some(h2::Reason::CANCEL) => {
            Status::cancelled(format!("the server cancelled the stream: {e}"))
        }
        Some(h2::Reason::REFUSED_STREAM) => {
            Status::unavailable(format!("the server refused the stream: {e}"))
        }
        _ => Status::unavailable(format!("the response stream failed: {e}")),
    }
}

/// A status as the end of a call: OK's metadata are the trailers.
fn ended(status: Status) -> Result<MetadataMap, Status> {
    if status.code() == Code::Ok {
        Ok(status.metadata().clone())
    } else {
        Err(status)
    }
}

/// The request body: the call's messages until its sender ends them.
pub(crate) struct ClientBody {
    call: Arc<GrpcCall>,
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    /// A CANCEL, which hyper turns into the stream's RST_STREAM.
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if self.call.is_given_up() {
                return Poll::Ready(Some(Err(h2::Error::from(h2::Reason::CANCEL))));
            }
            return match self.call.out.poll_recv(cx) {
                Poll::Ready(Some(Outbound::Message(message))) => {
                    if self.call.shared().send_ready.raise() {
                        crate::runtime::woke_a_thread();
                    }
                    Poll::Ready(Some(Ok(Frame::data(message))))
                }
                Poll::Ready(Some(_)) => continue,
                Poll::Ready(None) if self.call.is_given_up() => {
                    Poll::Ready(Some(Err(h2::Error::from(h2::Reason::CANCEL))))
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}
