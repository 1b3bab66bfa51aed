//! [`Streaming`]: a stream of received messages (a server's request stream, a client's
//! response stream), readable as a `futures_core::Stream`, with `message().await`, or
//! blocking; and the sender half of a stream, which hands the connection's owner
//! one message at a time, each once the previous one left the send queue (so what a stream
//! queues is bounded by one message, whatever the peer's window).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::endpoint::Endpoint;
use super::port::Port;
use super::stream::{Incoming, StreamShared};
use crate::{MetadataMap, Status};

/// Which side reads a [`Streaming`]: decides the status of an undecodable message and what
/// dropping the stream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// Dropping the stream before its end cancels the call.
    Client,
    /// Dropping the stream ignores the rest of the requests (the call goes on).
    Server,
}

/// A pending request stream a client pulls while its response is polled.
pub(crate) type Pump = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A stream of messages of type `T` received on a call. Ends with `None` (a response stream:
/// the call ended OK, its trailers in [`Streaming::trailers`]) or an error status.
///
/// Read it with `message().await`, as a `futures_core::Stream`, or blocking with
/// [`Streaming::blocking_message`] or [`Streaming::into_blocking_iter`]. Dropping a client's response
/// stream before its end cancels the call; dropping a server's request stream just ignores
/// the rest of the requests.
pub struct Streaming<T> {
    shared: Arc<StreamShared>,
    /// Where cancels and returned window go; `None` for a stream of messages that were all
    /// received already (nothing to cancel, no window to return).
    port: Option<Port>,
    reader: Reader,
    /// The method, for error messages.
    path: &'static str,
    peeked: Option<Incoming>,
    trailers: Option<MetadataMap>,
    done: bool,
    /// Client, bidi: the request stream, pulled while this one is polled.
    pump: Option<Pump>,
    /// Client: the endpoint that counts this call as outstanding until the stream is
    /// dropped.
    endpoint: Option<(Arc<Endpoint>, bool)>,
    /// Client: how long a blocking read polls the endpoint's completions itself before it
    /// parks ([`crate::ClientBuilder::spin`]).
    spin: Duration,
    _message: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("method", &self.path)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<T> Streaming<T> {
    pub(crate) fn new(
        shared: Arc<StreamShared>,
        port: Option<Port>,
        reader: Reader,
        path: &'static str,
    ) -> Self {
        Streaming {
            shared,
            port,
            reader,
            path,
            peeked: None,
            trailers: None,
            done: false,
            pump: None,
            endpoint: None,
            spin: Duration::ZERO,
            _message: PhantomData,
        }
    }

    /// The reader consumed a message of `len` bytes: its window goes back to the peer.
    fn consumed(&self, len: usize) {
        if let Some(port) = &self.port {
            if let Some(bytes) = self.shared.consumed(len) {
                port.consumed(&self.shared, bytes);
            }
        }
    }

    /// The client endpoint the stream's call was counted in, with a `deadline` or not
    /// ([`Endpoint::call_started`]).
    pub(crate) fn set_endpoint(&mut self, endpoint: Arc<Endpoint>, spin: Duration, deadline: bool) {
        self.endpoint = Some((endpoint, deadline));
        self.spin = spin;
    }

    pub(crate) fn set_pump(&mut self, pump: Pump) {
        self.pump = Some(pump);
    }

    /// The trailers, once the stream ended (a server's request stream has none).
    pub fn trailers(&self) -> Option<&MetadataMap> {
        self.trailers.as_ref()
    }

    /// Pulls the request stream a little (client, bidi).
    fn poll_pump(&mut self, cx: &mut Context<'_>) {
        if let Some(pump) = self.pump.as_mut() {
            if pump.as_mut().poll(cx).is_ready() {
                self.pump = None;
            }
        }
    }

    /// The next raw item, polled.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Incoming>> {
        if let Some(item) = self.peeked.take() {
            return Poll::Ready(Some(item));
        }
        if self.done {
            return Poll::Ready(None);
        }
        self.poll_pump(cx);
        self.shared.inbox.poll_recv(cx)
    }

    /// The next raw item, blocking.
    fn wait_item(&mut self) -> Option<Incoming> {
        if let Some(item) = self.peeked.take() {
            return Some(item);
        }
        if self.done {
            return None;
        }
        if self.pump.is_some() {
            // Requests still to pull (an async bidi call read blocking): poll both, parked
            // in between, as an executor would.
            return block_on(std::future::poll_fn(|cx| self.poll_item(cx)));
        }
        if let Some((endpoint, _)) = &self.endpoint {
            let inbox = &self.shared.inbox;
            if inbox.is_empty() {
                endpoint.drive_stream(self.spin, || !inbox.is_empty());
            }
        }
        self.shared.inbox.recv(None).flatten()
    }

    /// Client: gives the call up now. The server is told (CANCEL; over gRPC, RST_STREAM),
    /// its handler is cancelled, and this stream ends with CANCELLED, which the next read
    /// returns (dropping the stream cancels too, but leaves nothing to read the status
    /// from). No effect on a stream that already ended, nor on a server's request stream.
    pub fn cancel(&mut self) {
        if self.reader == Reader::Client && !self.done && !self.shared.is_finished() {
            self.pump = None;
            if let Some(port) = &self.port {
                port.cancel(
                    &self.shared,
                    Status::cancelled(format!("{}: cancelled by the client", self.path)),
                );
            }
        }
    }

    /// Client: waits for the response headers (or the first message, or the end) and
    /// returns them; a status that ended the call before that is the error.
    pub(crate) fn poll_headers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<MetadataMap, Status>> {
        match self.poll_item(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(item) => Poll::Ready(self.headers_from(item)),
        }
    }

    /// Client: [`Streaming::poll_headers`], blocking.
    pub(crate) fn wait_headers(&mut self) -> Result<MetadataMap, Status> {
        let item = self.wait_item();
        self.headers_from(item)
    }

    fn headers_from(&mut self, item: Option<Incoming>) -> Result<MetadataMap, Status> {
        match item {
            Some(Incoming::Headers(md)) => Ok(md),
            Some(Incoming::End(Err(status))) => {
                self.done = true;
                Err(status)
            }
            Some(other) => {
                self.peeked = Some(other);
                Ok(MetadataMap::new())
            }
            None => Ok(MetadataMap::new()),
        }
    }
}

impl<T: prost::Message + Default> Streaming<T> {
    /// The next message: `Ok(None)` at the end of the stream.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    /// The stream as a blocking iterator (for synchronous handlers and callers).
    pub fn into_blocking_iter(self) -> BlockingIter<T> {
        BlockingIter(self)
    }

    /// The next message, blocking the calling thread: `Ok(None)` at the end of the stream.
    pub fn blocking_message(&mut self) -> Result<Option<T>, Status> {
        loop {
            let item = self.wait_item();
            if let Some(result) = self.take(item) {
                return result;
            }
        }
    }

    /// Polls for the next message.
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<T>, Status>> {
        loop {
            let item = match self.poll_item(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(item) => item,
            };
            if let Some(result) = self.take(item) {
                return Poll::Ready(result);
            }
        }
    }

    /// What an item amounts to for the reader (`None`: nothing, read on).
    fn take(&mut self, item: Option<Incoming>) -> Option<Result<Option<T>, Status>> {
        match item {
            None => {
                self.done = true;
                Some(Ok(None))
            }
            Some(Incoming::Headers(_)) => None,
            Some(Incoming::Message(bytes)) => {
                self.consumed(bytes.len());
                Some(super::call::decode::<T>(&bytes).map(Some).map_err(|e| {
                    let what = format!("{}: could not decode a message: {e}", self.path);
                    match self.reader {
                        Reader::Server => Status::invalid_argument(what),
                        Reader::Client => Status::internal(what),
                    }
                }))
            }
            Some(Incoming::End(Ok(trailers))) => {
                self.done = true;
                self.trailers = Some(trailers);
                Some(Ok(None))
            }
            Some(Incoming::End(Err(status))) => {
                self.done = true;
                self.trailers = Some(status.metadata().clone());
                Some(Err(status))
            }
        }
    }

    /// Client: the one response of a client-streaming call, with its headers and trailers.
    pub(crate) fn poll_unary(
        &mut self,
        headers: &mut Option<MetadataMap>,
        message: &mut Option<T>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<crate::Response<T>, Status>> {
        loop {
            if headers.is_none() {
                match self.poll_headers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(status)) => return Poll::Ready(Err(status)),
                    Poll::Ready(Ok(md)) => *headers = Some(md),
                }
            }
            match self.poll_message(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(status)) => return Poll::Ready(Err(status)),
                Poll::Ready(Ok(Some(m))) => {
                    if message.replace(m).is_some() {
                        return Poll::Ready(Err(Status::internal(format!(
                            "{}: more than one response to a client-streaming call",
                            self.path
                        ))));
                    }
                }
                Poll::Ready(Ok(None)) => {
                    return Poll::Ready(match message.take() {
                        Some(m) => Ok(crate::Response::from_parts(
                            headers.take().unwrap_or_default(),
                            m,
                            self.trailers.take().unwrap_or_default(),
                        )),
                        None => Err(Status::internal(format!(
                            "{}: the server ended the call without a response",
                            self.path
                        ))),
                    })
                }
            }
        }
    }
}

impl<T: prost::Message + Default> Streaming<T> {
    /// Client: blocks for the one response of a call whose responses are one message (its
    /// headers, the message, its trailers).
    pub(crate) fn wait_unary(&mut self) -> Result<crate::Response<T>, Status> {
        let headers = self.wait_headers()?;
        let mut message = None;
        while let Some(m) = self.blocking_message()? {
            if message.replace(m).is_some() {
                return Err(Status::internal(format!(
                    "{}: more than one response to a call that has one",
                    self.path
                )));
            }
        }
        let trailers = self.trailers.take().unwrap_or_default();
        match message {
            Some(m) => Ok(crate::Response::from_parts(headers, m, trailers)),
            None => Err(Status::internal(format!(
                "{}: the server ended the call without a response",
                self.path
            ))),
        }
    }
}

impl<T: prost::Message + Default> futures_core::Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_message(cx).map(|r| r.transpose())
    }
}

/// A [`Streaming`] read as a blocking iterator (from [`Streaming::into_blocking_iter`]):
/// each `next` parks the thread until a message, the end or an error.
#[derive(Debug)]
pub struct BlockingIter<T>(Streaming<T>);

impl<T> BlockingIter<T> {
    /// The stream back.
    pub fn into_inner(self) -> Streaming<T> {
        self.0
    }
}

impl<T: prost::Message + Default> Iterator for BlockingIter<T> {
    type Item = Result<T, Status>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.blocking_message().transpose()
    }
}

impl<T> Unpin for Streaming<T> {}

/// Wakes a thread parked in [`block_on`].
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` on this thread, parking it while the future waits.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        rpc_sync::park();
    }
}

impl<T> Drop for Streaming<T> {
    fn drop(&mut self) {
        if let Some((endpoint, deadline)) = self.endpoint.take() {
            endpoint.call_finished(true, deadline);
        }
        if self.done {
            return;
        }
        match (self.reader, &self.port) {
            (Reader::Client, Some(port)) => port.cancel(
                &self.shared,
                Status::cancelled("the response stream was dropped"),
            ),
            (Reader::Client, None) => {}
            (Reader::Server, _) => {
                // The rest of the requests are dropped as they come; give back the window
                // of those already here.
                while let Ok(Some(item)) = self.shared.inbox.try_recv() {
                    if let Incoming::Message(m) = item {
                        self.consumed(m.len());
                    }
                }
                self.shared.inbox.abandon();
            }
        }
    }
}

/// The sending half of a stream (a server's responses, a client's requests).
pub(crate) struct StreamSender {
    pub(crate) shared: Arc<StreamShared>,
    pub(crate) port: Port,
    pub(crate) path: &'static str,
}

impl StreamSender {
    /// Ready when the previous message left the send queue; an error once the call is
    /// over for this side.
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.shared.is_finished() {
            return Poll::Ready(Err(self.over()));
        }
        match self.shared.send_ready.poll_take(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) if self.shared.is_finished() => Poll::Ready(Err(self.over())),
            Poll::Ready(()) => Poll::Ready(Ok(())),
        }
    }

    /// [`StreamSender::poll_ready`], blocking.
    pub(crate) fn wait_ready(&self) -> Result<(), Status> {
        if !self.shared.is_finished() {
            self.shared.wait_ready(None);
        }
        if self.shared.is_finished() {
            return Err(self.over());
        }
        Ok(())
    }

    fn over(&self) -> Status {
        if self.shared.is_cancelled() {
            Status::cancelled(format!("{}: the call was cancelled", self.path))
        } else {
            Status::cancelled(format!("{}: the call is over", self.path))
        }
    }

    /// Hands `message` over (after a ready); an error if the peer would refuse its size.
    pub(crate) fn send<M: prost::Message>(&self, message: &M) -> Result<(), Status> {
        let limit = self.port.max_message_size();
        let len = message.encoded_len();
        if len > limit {
            // The sender may go on (nothing was handed over).
            self.shared.send_ready.raise();
            return Err(Status::resource_exhausted(format!(
                "{}: message of {len} bytes exceeds the peer's limit of {limit} bytes",
                self.path
            )));
        }
        self.port.send(&self.shared, message);
        Ok(())
    }

    /// Client: gives the call up with `status` (its response stream ends with it).
    pub(crate) fn cancel(&self, status: Status) {
        self.port.cancel(&self.shared, status);
    }

    /// Client: ends the requests (after a ready).
    pub(crate) fn half_close(&self) {
        self.port.half_close(&self.shared);
    }

    /// Waits for ready, then sends (async).
    pub(crate) async fn send_async<M: prost::Message>(&self, message: &M) -> Result<(), Status> {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await?;
        self.send(message)
    }

    /// Waits for ready, then sends (blocking).
    pub(crate) fn send_blocking<M: prost::Message>(&self, message: &M) -> Result<(), Status> {
        self.wait_ready()?;
        self.send(message)
    }
}
