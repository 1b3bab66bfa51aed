//! Running a handler of each method kind, blocking or async: the functions generated
//! services call from [`Service::call`](super::Service::call) (through `rpc_core::codegen`).

use std::future::Future;

use futures_core::Stream;

use super::handler::{IncomingRequest, ReplySink};
use crate::runtime::streaming::{StreamSender, Streaming};
use crate::{MetadataMap, Request, Response, Status};

// ----- synchronous handlers ------------------------------------------------------------

/// Decodes a unary request, runs `handler`, and sends its result. An undecodable request is
/// answered with INVALID_ARGUMENT without running the handler.
pub fn unary<Req, Resp, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    F: FnOnce(Request<Req>) -> Result<Response<Resp>, Status>,
{
    match request.decode::<Req>() {
        Ok(req) => answer(reply, handler(req)),
        Err(status) => reply.fail(status),
    }
}

/// A server-streaming call with a blocking handler: its responses come from an iterator,
/// each sent once the client's window lets it go (the worker thread waits meanwhile).
pub fn server_streaming<Req, Resp, S, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
    F: FnOnce(Request<Req>) -> Result<Response<S>, Status>,
{
    match request.decode::<Req>() {
        Ok(req) => match handler(req) {
            Ok(response) => send_all(reply, response),
            Err(status) => reply.fail(status),
        },
        Err(status) => reply.fail(status),
    }
}

/// A client-streaming call with a blocking handler (it reads its requests as a blocking
/// iterator).
pub fn client_streaming<Req, Resp, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    F: FnOnce(Request<Streaming<Req>>) -> Result<Response<Resp>, Status>,
{
    answer(reply, handler(request.into_streaming()))
}

/// A bidirectional call with a blocking handler: requests as a blocking iterator, responses
/// from the iterator it returns (which may read requests as it goes).
pub fn bidi_streaming<Req, Resp, S, F>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default,
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
    F: FnOnce(Request<Streaming<Req>>) -> Result<Response<S>, Status>,
{
    match handler(request.into_streaming()) {
        Ok(response) => send_all(reply, response),
        Err(status) => reply.fail(status),
    }
}

fn answer<Resp: prost::Message>(reply: ReplySink, result: Result<Response<Resp>, Status>) {
    match result {
        Ok(response) => reply.send(response),
        Err(status) => reply.fail(status),
    }
}

/// Sends a response stream from an iterator, then the trailers.
fn send_all<Resp, S>(reply: ReplySink, response: Response<S>)
where
    Resp: prost::Message,
    S: IntoIterator<Item = Result<Resp, Status>>,
{
    let (headers, items, trailers) = response.into_parts();
    let sender = match response_sender(&reply, &headers) {
        Ok(sender) => sender,
        Err(status) => return reply.fail(status),
    };
    for item in items {
        let sent = item.and_then(|m| sender.send_blocking(&m));
        if let Err(status) = sent {
            stream_failed(reply, &sender, status);
            return;
        }
    }
    reply.finish(trailers);
}

/// Sends a response stream's headers and returns the sender of its messages.
fn response_sender(reply: &ReplySink, headers: &MetadataMap) -> Result<StreamSender, Status> {
    let sender = reply
        .sender()
        .ok_or_else(|| Status::internal("a streaming response on a unary method"))?;
    reply.send_headers(headers);
    Ok(sender)
}

/// A response stream stops with `status`: sent, unless the call is already over (the
/// client cancelled it), when there is nobody to tell.
fn stream_failed(reply: ReplySink, sender: &StreamSender, status: Status) {
    if sender.shared.is_finished() {
        reply.abandon();
    } else {
        reply.fail(status);
    }
}

// ----- async handlers ------------------------------------------------------------------

/// Runs `future` as a task: its first poll here and now (where `Service::call` runs: a
/// worker, or the receiving thread for `Execution::Inline`), later ones on the worker pool
/// when woken (for `Execution::Inline`, on the server's poller when that is what woke it);
/// cancelling the call drops it. A task that finishes on its first poll is kept for the
/// handler's next call on this thread (`spare_tasks`): no allocation per call.
fn spawn<Fut>(reply: ReplySink, future: impl FnOnce(ReplySink) -> Fut)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let canceller = reply.canceller();
    let spawner = reply.spawner();
    let task = super::spare_tasks::task_for(move || future(reply), spawner);
    rpc_sync::Runnable::run(std::sync::Arc::clone(&task));
    if task.is_done() {
        super::spare_tasks::keep(task);
    } else {
        canceller.attach(task);
    }
}

/// A unary call with an async handler. The handler's future runs as a task (one allocation,
/// or none when the thread's spare task of its type is renewed), made inside it:
/// polled first where `Service::call` runs (a worker, or the receiving thread for
/// `Execution::Inline`), then on the worker pool each time it is woken. Dropped unfinished if the client cancels the call.
pub fn unary_async<Req, Resp, F, Fut>(request: IncomingRequest, reply: ReplySink, handler: F)
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    F: FnOnce(Request<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    let req = match request.decode::<Req>() {
        Ok(req) => req,
        Err(status) => return reply.fail(status),
    };
    // The handler's future is made inside the task, in place: only the request and the
    // handler (an `Arc` of the service) move into it, not the larger future.
    spawn(reply, move |reply| async move {
        answer(reply, handler(req).await)
    });
}

/// A server-streaming call with an async handler returning a `Stream` of responses.
pub fn server_streaming_async<Req, Resp, S, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let req = match request.decode::<Req>() {
        Ok(req) => req,
        Err(status) => return reply.fail(status),
    };
    // As for `unary_async`: the handler's future is made inside the task.
    spawn(reply, move |reply| async move {
        match handler(req).await {
            Ok(response) => stream_all(reply, response).await,
            Err(status) => reply.fail(status),
        }
    });
}

/// A client-streaming call with an async handler reading a `Streaming` of requests.
pub fn client_streaming_async<Req, Resp, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    let requests = request.into_streaming();
    spawn(reply, move |reply| async move {
        answer(reply, handler(requests).await)
    });
}

/// A bidirectional call with an async handler: a `Streaming` of requests in, a `Stream` of
/// responses out.
pub fn bidi_streaming_async<Req, Resp, S, F, Fut>(
    request: IncomingRequest,
    reply: ReplySink,
    handler: F,
) where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let requests = request.into_streaming();
    spawn(reply, move |reply| async move {
        match handler(requests).await {
            Ok(response) => stream_all(reply, response).await,
            Err(status) => reply.fail(status),
        }
    });
}

/// Sends a response stream, each message once the client's window lets it go, then the
/// trailers.
async fn stream_all<Resp, S>(reply: ReplySink, response: Response<S>)
where
    Resp: prost::Message,
    S: Stream<Item = Result<Resp, Status>>,
{
    let (headers, items, trailers) = response.into_parts();
    let sender = match response_sender(&reply, &headers) {
        Ok(sender) => sender,
        Err(status) => return reply.fail(status),
    };
    let mut items = std::pin::pin!(items);
    loop {
        if let Err(status) = std::future::poll_fn(|cx| sender.poll_ready(cx)).await {
            return stream_failed(reply, &sender, status);
        }
        match std::future::poll_fn(|cx| items.as_mut().poll_next(cx)).await {
            Some(Ok(message)) => {
                if let Err(status) = sender.send(&message) {
                    return stream_failed(reply, &sender, status);
                }
            }
            Some(Err(status)) => return stream_failed(reply, &sender, status),
            None => return reply.finish(trailers),
        }
    }
}
