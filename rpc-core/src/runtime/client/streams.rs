//! Streaming calls of a [`Client`]: opening them, and the call handle ([`StreamingCall`]).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use super::{Client, Wire};
use crate::protocol::v2::{Kind, Payload as Body};
use crate::runtime::call::Encode;
use crate::runtime::conn::{Caller, Conn, OpenCall, UNARY};
use crate::runtime::grpc::client::GrpcChannel;
use crate::runtime::port::Port;
use crate::runtime::service::MethodDescriptor;
use crate::runtime::stream::StreamShared;
use crate::runtime::streaming::{Reader, StreamSender, Streaming};
use crate::transport::SendBuf;
use crate::{MetadataMap, Request, Response, Status};

// ----- streaming calls ---------------------------------------------------------------

/// The payload of the HEADERS frame carrying `metadata` on `conn`, its block in a send slot
/// ([`Conn::headers_payload`]); `None` (no HEADERS frame) when there is none and `always` is
/// false (a call that opens with its message needs none). No metadata, no frame.
#[inline]
pub(super) fn request_headers(
    conn: &Conn,
    metadata: &MetadataMap,
    always: bool,
) -> Option<Body<SendBuf>> {
    (always || !metadata.is_empty()).then(|| conn.headers_payload(metadata.as_block()))
}

impl Client {
    /// Opens a streaming call: its request headers now, and `message` (with END) for a
    /// server-streaming call.
    pub(super) fn open_stream<T, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn Encode>,
    ) -> Result<(StreamSender, Streaming<Resp>), Status> {
        match &self.inner.config.interceptor {
            None => self.open_stream_as(method, request, message),
            Some(interceptor) => {
                let mut head = Request::new(());
                *head.metadata_mut() = request.metadata().clone();
                if let Some(timeout) = request.timeout() {
                    head.set_timeout(timeout);
                }
                let head = interceptor.intercept(head)?;
                self.open_stream_as(method, &head, message)
            }
        }
    }

    /// [`Client::open_stream`] with `request`'s metadata and timeout as they are.
    pub(super) fn open_stream_as<T, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn Encode>,
    ) -> Result<(StreamSender, Streaming<Resp>), Status> {
        let _span = tracing::trace_span!("stream", method = method.path).entered();
        self.inner.counters.call();
        let native = match self.wire()? {
            Wire::Native(native) => native,
            Wire::Grpc(channel) => return Ok(self.open_grpc(channel, method, request, message)),
        };
        let conn = native.conn()?;
        let (timeout_us, deadline) = self.timing(request);
        let shared = StreamShared::new(0, conn.local_hello.call_window, false);
        let message = message.map(|m| conn.encode(Kind::Message, UNARY, m));
        let headers = request_headers(&conn, request.metadata(), message.is_none());
        native.endpoint.call_started(true, deadline.is_some());
        conn.submit_open(OpenCall {
            caller: Caller::Stream(Arc::clone(&shared)),
            method: method.id,
            timeout_us,
            deadline,
            headers,
            message,
        });
        let port = conn as Port;
        let sender = StreamSender {
            shared: Arc::clone(&shared),
            port: port.clone(),
            path: method.path,
        };
        let mut responses = Streaming::new(shared, Some(port), Reader::Client, method.path);
        responses.set_endpoint(
            Arc::clone(&native.endpoint),
            self.inner.config.spin,
            deadline.is_some(),
        );
        Ok((sender, responses))
    }

    /// [`Client::open_stream`] over gRPC.
    pub(super) fn open_grpc<T, Resp>(
        &self,
        channel: &Arc<GrpcChannel>,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn Encode>,
    ) -> (StreamSender, Streaming<Resp>) {
        let timeout = request.timeout().or(self.inner.config.timeout);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let message = message.map(|m| {
            let len = m.encoded_len();
            let mut framed = vec![0u8; 5 + len];
            framed[1..5].copy_from_slice(&(len as u32).to_be_bytes());
            m.encode_into(&mut framed[5..]);
            bytes::Bytes::from(framed)
        });
        let call = channel.open(method.path, request.metadata(), timeout, deadline, message);
        let shared = Arc::clone(call.shared());
        let port = call as Port;
        let sender = StreamSender {
            shared: Arc::clone(&shared),
            port: port.clone(),
            path: method.path,
        };
        (
            sender,
            Streaming::new(shared, Some(port), Reader::Client, method.path),
        )
    }

    /// Opens a call whose requests are the stream `requests` (its metadata in the request).
    pub(super) fn open_with<Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<(StreamSender, Streaming<Resp>, S), Status> {
        let (request, messages) = requests.into_parts();
        let (sender, responses) = self.open_stream(method, &request, None)?;
        Ok((sender, responses, messages))
    }

    pub(super) fn counted<T>(&self, result: Result<T, Status>) -> Result<T, Status> {
        if result.is_err() {
            self.inner.counters.error();
        }
        result
    }

    /// Calls a server-streaming method and blocks until the response headers arrive (or
    /// the first message, or the call's end); the messages then come from the stream.
    pub fn server_streaming<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let result = self
            .open_stream(method, &request, Some(request.get_ref()))
            .and_then(|(_, mut responses)| {
                let headers = responses.wait_headers()?;
                Ok(Response::from_parts(headers, responses, MetadataMap::new()))
            });
        self.counted(result)
    }

    /// [`Client::server_streaming`] without blocking: the future resolves when the response
    /// headers arrive.
    pub async fn server_streaming_async<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        // A lazy client connects here, off the executor's thread (open_stream would block).
        if let Err(status) = self.wire_async().await {
            return self.counted(Err(status));
        }
        let opened = self.open_stream(method, &request, Some(request.get_ref()));
        drop(request);
        let result = match opened {
            Ok((_, mut responses)) => {
                match std::future::poll_fn(|cx| responses.poll_headers(cx)).await {
                    Ok(headers) => Ok(Response::from_parts(headers, responses, MetadataMap::new())),
                    Err(status) => Err(status),
                }
            }
            Err(status) => Err(status),
        };
        self.counted(result)
    }

    /// Opens a call whose requests are a stream (client-streaming or bidirectional) and
    /// returns its handle: send requests, close them, read responses, blocking or async.
    /// `request` carries the call's metadata and timeout.
    pub fn streaming<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<()>,
    ) -> Result<StreamingCall<Req, Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let opened = self.open_stream(method, &request, None);
        let (sender, responses) = self.counted(opened)?;
        Ok(StreamingCall {
            sender,
            responses,
            closed: false,
            _request: PhantomData,
        })
    }

    /// Calls a client-streaming method with the messages of `requests`, blocking until the
    /// response.
    pub fn client_streaming<Req, Resp, I>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<I>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
        I: IntoIterator<Item = Req>,
    {
        let (request, messages) = requests.into_parts();
        let mut call = self.streaming::<Req, Resp>(method, request)?;
        for message in messages {
            if call.send(&message).is_err() {
                // The call is over: its status comes with the response.
                break;
            }
        }
        let result = call.finish();
        self.counted(result)
    }

    /// Calls a client-streaming method with the messages of the stream `requests`; the
    /// future pulls the stream while it is polled and resolves with the response.
    pub async fn client_streaming_async<Req, Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default,
        S: futures_core::Stream<Item = Req> + Send + 'static,
    {
        // A lazy client connects here, off the executor's thread (open_stream would block).
        if let Err(status) = self.wire_async().await {
            return self.counted(Err(status));
        }
        let (sender, mut responses, messages) = match self.open_with(method, requests) {
            Ok(opened) => opened,
            Err(status) => return self.counted(Err(status)),
        };
        let mut pump = std::pin::pin!(pump_requests(sender, messages));
        let mut pumped = false;
        let (mut headers, mut message) = (None, None);
        let result = std::future::poll_fn(|cx| {
            if !pumped && pump.as_mut().poll(cx).is_ready() {
                pumped = true;
            }
            responses.poll_unary(&mut headers, &mut message, cx)
        })
        .await;
        self.counted(result)
    }

    /// Calls a bidirectional method with the stream `requests`; resolves when the response
    /// headers arrive. The request stream is pulled while this future or the response
    /// stream is polled (no executor of its own): keep reading responses to keep requests
    /// flowing.
    pub async fn bidi_streaming_async<Req, Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default,
        S: futures_core::Stream<Item = Req> + Send + 'static,
    {
        // A lazy client connects here, off the executor's thread (open_stream would block).
        if let Err(status) = self.wire_async().await {
            return self.counted(Err(status));
        }
        let (sender, mut responses, messages) = match self.open_with(method, requests) {
            Ok(opened) => opened,
            Err(status) => return self.counted(Err(status)),
        };
        responses.set_pump(Box::pin(pump_requests(sender, messages)));
        let result = match std::future::poll_fn(|cx| responses.poll_headers(cx)).await {
            Ok(headers) => Ok(Response::from_parts(headers, responses, MetadataMap::new())),
            Err(status) => Err(status),
        };
        self.counted(result)
    }
}

/// Sends the messages of `messages`, each once the previous one left the send queue, then
/// half-closes. Stops when the call is over; a message the server would refuse cancels the
/// call.
async fn pump_requests<Req, S>(sender: StreamSender, messages: S)
where
    Req: prost::Message,
    S: futures_core::Stream<Item = Req>,
{
    let mut messages = std::pin::pin!(messages);
    loop {
        if std::future::poll_fn(|cx| sender.poll_ready(cx))
            .await
            .is_err()
        {
            return;
        }
        match std::future::poll_fn(|cx| messages.as_mut().poll_next(cx)).await {
            Some(message) => {
                if let Err(status) = sender.send(&message) {
                    sender.cancel(status);
                    return;
                }
            }
            None => {
                sender.half_close();
                return;
            }
        }
    }
}

/// A call whose requests are a stream, from [`Client::streaming`]: send requests with
/// [`StreamingCall::send`] (blocking) or [`StreamingCall::send_async`], end them with
/// [`StreamingCall::close_send`], read responses from [`StreamingCall::responses`]. Each
/// send waits until the previous message left the send queue (the server's flow-control
/// window), so a slow server slows its sender down instead of filling memory. Dropping the
/// handle before the call ended cancels it.
pub struct StreamingCall<Req, Resp> {
    sender: StreamSender,
    responses: Streaming<Resp>,
    closed: bool,
    _request: PhantomData<fn(Req)>,
}

impl<Req, Resp> std::fmt::Debug for StreamingCall<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingCall")
            .field("method", &self.sender.path)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<Req: prost::Message, Resp: prost::Message + Default> StreamingCall<Req, Resp> {
    /// Sends a request, blocking while the previous one waits for the server's window. An
    /// error means the call is over (its status comes from the responses).
    pub fn send(&mut self, message: &Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("the requests were closed"));
        }
        self.sender.send_blocking(message)
    }

    /// [`StreamingCall::send`] without blocking.
    pub async fn send_async(&mut self, message: &Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("the requests were closed"));
        }
        self.sender.send_async(message).await
    }

    /// Gives the call up: the server is told and its handler cancelled, and the responses
    /// end with CANCELLED (what [`StreamingCall::recv`] returns next). Dropping the handle
    /// cancels too, without a status to read.
    pub fn cancel(&mut self) {
        self.closed = true;
        self.responses.cancel();
    }

    /// Ends the requests (the server sees the end of its request stream); blocks while the
    /// last request waits for the server's window.
    pub fn close_send(&mut self) {
        if !std::mem::replace(&mut self.closed, true) && self.sender.wait_ready().is_ok() {
            self.sender.half_close();
        }
    }

    /// [`StreamingCall::close_send`] without blocking.
    pub async fn close_send_async(&mut self) {
        if !std::mem::replace(&mut self.closed, true)
            && std::future::poll_fn(|cx| self.sender.poll_ready(cx))
                .await
                .is_ok()
        {
            self.sender.half_close();
        }
    }

    /// The response stream.
    pub fn responses(&mut self) -> &mut Streaming<Resp> {
        &mut self.responses
    }

    /// The next response, blocking (`Ok(None)` at the end).
    pub fn recv(&mut self) -> Result<Option<Resp>, Status> {
        self.responses.blocking_message()
    }

    /// The next response (`Ok(None)` at the end).
    pub async fn message(&mut self) -> Result<Option<Resp>, Status> {
        self.responses.message().await
    }

    /// Client-streaming: closes the requests and blocks for the one response.
    pub fn finish(mut self) -> Result<Response<Resp>, Status> {
        self.close_send();
        self.responses.wait_unary()
    }

    /// Client-streaming: [`StreamingCall::finish`] without blocking.
    pub async fn finish_async(mut self) -> Result<Response<Resp>, Status> {
        self.close_send_async().await;
        let (mut headers, mut message) = (None, None);
        std::future::poll_fn(|cx| self.responses.poll_unary(&mut headers, &mut message, cx)).await
    }
}
