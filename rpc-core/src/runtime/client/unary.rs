//! A unary call in flight ([`Started`]) and its async form ([`ResponseFuture`]).

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::streams::request_headers;
use super::{CellPool, Client, Native, Wire};
use crate::protocol::v2::InlineDrop;
use crate::protocol::v2::{Kind, Outgoing, Payload as Body};
use crate::runtime::call::{CallCell, Reply};
use crate::runtime::conn::{Caller, Conn, OpenCall, Work, UNARY};
use crate::runtime::endpoint::Endpoint;
use crate::runtime::service::MethodDescriptor;
use crate::runtime::streaming::Streaming;
use crate::transport::SendBuf;
use crate::{MetadataMap, Request, Response, Status};

/// A call in flight.
pub(super) struct Started {
    pub(super) endpoint: Arc<Endpoint>,
    pub(super) conn: Arc<Conn>,
    pub(super) cell: Arc<CallCell>,
    pub(super) cells: Arc<CellPool>,
    pub(super) deadline: Option<Instant>,
    /// A future of this call was polled and is pending: counted among the endpoint's
    /// waiters until the call is over for its caller.
    pub(super) counted_waiting: bool,
    /// A future of this call drove the completion queue in its first poll.
    pub(super) driven: bool,
    /// A future of this call, pending, may leave its reply in the receive slot
    /// ([`Conn::hold_reply_slot`]).
    pub(super) holds_reply_slot: bool,
    /// The core watches the call's deadline (a future's): counted as such by the endpoint.
    pub(super) ticked_deadline: bool,
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.counted_waiting {
            self.endpoint.end_waiting();
        }
        if self.holds_reply_slot {
            // A reply left in its slot goes now (a later one is copied out), not when the
            // pooled cell is next reset.
            self.cell.thread_waiting.set(false);
            drop(self.cell.outcome.try_take());
            self.conn.release_reply_slot();
        }
        self.endpoint.call_finished(false, self.ticked_deadline);
        // A finished call's cell goes back to the pool at once, even while the thread that
        // completed it may still be letting go of its reference: `take_cell` reuses a cell
        // only once nobody else holds it. An unfinished call's cell (a deadline passed, a
        // future was dropped) may still be completed, so it is not pooled.
        if self.cell.outcome.is_complete() {
            let cell = Arc::clone(&self.cell);
            // The thread's own spare first: its next call takes it back without a lock.
            // `try_with`: during the thread's exit, the pool takes it.
            let spare = SPARE_CELL
                .try_with(|spare| spare.replace(Some(Arc::clone(&cell))))
                .unwrap_or(Some(cell));
            if let Some(older) = spare {
                self.cells.give(older);
            }
        }
    }
}

thread_local! {
    /// The cell of this thread's last finished call: a thread making one call after another
    /// reuses it without going through the client's pool (and its lock). The one it displaces
    /// goes to the pool.
    static SPARE_CELL: Cell<Option<Arc<CallCell>>> = const { Cell::new(None) };
}

/// Most times a blocking unary call is made when its server did not process it (see
/// [`CallCell::was_unprocessed`]): once, and again after a second GOODBYE or close.
const MAX_ATTEMPTS: u32 = 3;

/// A call's `timeout_us` and deadline ([`Client::timing`]).
type Timing = (u32, Option<Instant>);

/// The timing of a call made again, whose first attempt had `deadline`: what is left of it
/// (`None`: it passed).
fn retry_timing(deadline: Option<Instant>) -> Option<Timing> {
    let Some(deadline) = deadline else {
        return Some((0, None));
    };
    let left = deadline.checked_duration_since(Instant::now())?;
    let left_us = left.as_micros().clamp(1, u32::MAX as u128) as u32;
    Some((left_us, Some(deadline)))
}

/// The timing of a call made again (`again`, from [`retry_timing`]) as it goes out, after
/// the connect that may have used up its deadline: DEADLINE_EXCEEDED if it did. A first
/// attempt (`None`) takes the request's timing.
fn timing_now(again: Option<Timing>, method: &MethodDescriptor) -> Result<Option<Timing>, Status> {
    match again.map(|(_, deadline)| retry_timing(deadline)) {
        Some(None) => Err(deadline_passed(method)),
        timing => Ok(timing.flatten()),
    }
}

/// The status of a blocking call or a future whose deadline passed on the client's side.
#[cold]
fn deadline_passed(method: &MethodDescriptor) -> Status {
    Status::deadline_exceeded(format!("{}: no response within the deadline", method.path))
}

/// A call cell for a new call: a pooled one that nobody holds any more, else a new one.
pub(super) fn take_cell(cells: &CellPool) -> Arc<CallCell> {
    // The thread's spare first, then two of the pool's. The most recently finished cells may
    // still be held by their completer for a moment; they go back to the end of the queue,
    // and the older ones ahead of them are free.
    let spare = SPARE_CELL.try_with(Cell::take).ok().flatten();
    for mut cell in spare
        .into_iter()
        .chain(std::iter::from_fn(|| cells.take()).take(2))
    {
        if let Some(unshared) = Arc::get_mut(&mut cell) {
            unshared.reset();
            return cell;
        }
        cells.give(cell);
    }
    CallCell::new()
}

impl Started {
    /// Blocks for the outcome; at the deadline, withdraws the call. For up to `spin` the
    /// calling thread polls the completion queue itself, so the reply needs no wake-up of
    /// another thread; then it parks and leaves polling to the poller thread.
    #[inline(never)] // a stage of `make bench`'s instruction counts (BENCHMARKS.md)
    pub(super) fn wait(&self, spin: Duration, method: &MethodDescriptor) -> Result<Reply, Status> {
        self.drive(spin, false);
        // Parked, this caller relies on somebody else polling (see `Endpoint::waiting`).
        let _waiting = (!self.cell.outcome.is_complete()).then(|| self.endpoint.waiting());
        if let Some(r) = self.cell.wait(self.deadline) {
            return r;
        }
        // The deadline passed: withdraw the call. Whoever owns the connection decides which
        // came first, this or the reply; either way the outcome lands in the cell.
        self.conn.submit(Work::Cancel {
            caller: Caller::Unary(Arc::clone(&self.cell)),
            status: deadline_passed(method),
        });
        self.cell
            .wait(None)
            .expect("an outcome always arrives without a deadline")
    }
}

impl Started {
    /// Drives the completion queue for this call's outcome ([`Endpoint::drive`]; `briefly`,
    /// a future's first poll: [`Endpoint::drive_briefly`]). The reply that lands meanwhile is
    /// decoded as soon as the caller goes on: it may stay in its slot.
    pub(super) fn drive(&self, spin: Duration, briefly: bool) {
        let outcome = &self.cell.outcome;
        let ready = || outcome.is_complete();
        self.cell.thread_waiting.set(true);
        if briefly {
            self.endpoint.drive_briefly(spin, self.deadline, ready);
        } else {
            self.endpoint.drive(spin, self.deadline, ready);
        }
        self.cell.thread_waiting.set(false);
    }
}

pub(super) enum FutureState<Resp, Req> {
    /// A lazy client's first call, or one that reconnects: connecting, then starting the
    /// call; the request comes back with the call started, to be kept for a retry.
    Connecting(Connecting<Resp, Req>),
    Pending(Started),
    /// A call over gRPC. Boxed: the future moves by value (into an executor, say), and the
    /// native call, the common one, should not carry the stream's size.
    Stream(Box<GrpcUnary<Resp>>),
    Failed(Option<Status>),
    Done,
}

/// Connecting, then starting a call: its state, and the request kept for a retry.
type Connecting<Resp, Req> =
    Pin<Box<dyn Future<Output = (FutureState<Resp, Req>, Option<Kept<Req>>)> + Send>>;

/// What a future keeps of its request to make the call again: the message and its metadata
/// (the timeout comes from the call's deadline, the interceptor ran already). Not the whole
/// `Request`: the future moves by value, and the smaller the cheaper.
type Kept<Req> = (Req, MetadataMap);

/// The largest request (encoded) a future keeps while its call is in flight, to make the call
/// again should its server give it back unprocessed (PROTOCOL.md §14): larger ones are not
/// made again (gRPC's transparent retry bounds its buffer the same way).
const KEEP_FOR_RETRY: usize = 64 * 1024;

/// A unary call over gRPC: its response stream, and what of the response came.
pub(super) struct GrpcUnary<Resp> {
    responses: Streaming<Resp>,
    headers: Option<MetadataMap>,
    message: Option<Resp>,
}

/// The response of a call started with [`Client::unary_async`] with a request of type `Req`:
/// `.await` it from any executor, or [`ResponseFuture::wait`] for it. Dropping it before the
/// response cancels the call (the server is sent a CANCEL, and its handler is dropped if it
/// awaits). While the call is in flight it keeps its request (up to 64 KiB encoded): a call
/// its server gives back unprocessed (a GOODBYE's, PROTOCOL.md §14) is made again on the next
/// connection, within its deadline, as a blocking call is.
pub struct ResponseFuture<Resp, Req = ()> {
    pub(super) client: Client,
    pub(super) method: &'static MethodDescriptor,
    pub(super) state: FutureState<Resp, Req>,
    /// The request, while a call that may be made again is in flight.
    pub(super) kept: Option<Kept<Req>>,
    /// Attempts made so far (see [`MAX_ATTEMPTS`]).
    pub(super) attempts: u8,
    pub(super) _response: PhantomData<fn() -> Resp>,
}

impl<Resp, Req> ResponseFuture<Resp, Req>
where
    Resp: prost::Message + Default + 'static,
    Req: prost::Message + 'static,
{
    /// Blocks until the response arrives (or the call fails).
    pub fn wait(mut self) -> Result<Response<Resp>, Status> {
        loop {
            match std::mem::replace(&mut self.state, FutureState::Done) {
                FutureState::Pending(mut started) => {
                    // It waits (or drives) below; a poll before counted it as a waiter.
                    if std::mem::take(&mut started.counted_waiting) {
                        started.endpoint.end_waiting();
                    }
                    let result = started.wait(self.client.inner.config.spin, self.method);
                    if result.is_err() && self.makes_again(started) {
                        continue;
                    }
                    self.kept = None;
                    return self.client.finish(result);
                }
                FutureState::Stream(mut call) => {
                    let result = call.responses.wait_unary();
                    return self.client.counted(result);
                }
                FutureState::Connecting(connecting) => {
                    (self.state, self.kept) = crate::runtime::streaming::block_on(connecting);
                }
                FutureState::Failed(status) => {
                    return self.client.finish(Err(status.expect("polled once")))
                }
                FutureState::Done => {
                    return Err(Status::failed_precondition("response already taken"))
                }
            }
        }
    }

    /// After `started` failed: if its server did not process it (it never went out, or a
    /// GOODBYE gave it back), the request is at hand and attempts and deadline are left, the
    /// call is made again (its state replaced) and `true` returned.
    fn makes_again(&mut self, started: Started) -> bool {
        let left = retry_timing(started.deadline);
        let again = started.cell.was_unprocessed() && u32::from(self.attempts) < MAX_ATTEMPTS;
        let (Some((message, metadata)), true, Some(timing)) = (self.kept.take(), again, left)
        else {
            self.state = FutureState::Pending(started);
            return false;
        };
        drop(started);
        tracing::debug!(
            method = self.method.path,
            "the server did not process the call; again"
        );
        let mut request = Request::new(message);
        *request.metadata_mut() = metadata;
        self.attempts += 1;
        // Within the first attempt's deadline.
        self.begin(request, Some(timing));
        true
    }

    /// Starts the call of `request` now, or once connected (connecting is I/O: a call that
    /// needs it connects off the executor's thread); `again`: the timing of a call made again
    /// (else the request's). The request is kept if the call may be made again. In place: the
    /// future is large to move.
    fn begin(&mut self, request: Request<Req>, again: Option<Timing>) {
        let (client, method) = (&self.client, self.method);
        match client.inner.wire.get() {
            Some(Wire::Native(native)) => match native.live_conn() {
                Some(conn) => {
                    let started =
                        client.start(native, conn, method, &request, false, again.as_ref());
                    self.state = FutureState::Pending(started);
                    self.kept = kept(request);
                }
                None => self.state = client.connect_then_start(method, request, again),
            },
            Some(wire) => self.state = client.start_future(wire, method, &request, None),
            None => self.state = client.connect_then_start(method, request, again),
        }
    }
}

impl Started {
    /// The outcome for a future's poll. The first poll drives the queue for up to `spin`
    /// before it looks, so that a reply coming soon needs no wake-up of the executor.
    fn poll_outcome(
        &mut self,
        cx: &mut Context<'_>,
        spin: Duration,
    ) -> Poll<Result<Reply, Status>> {
        if !self.driven {
            self.driven = true;
            if !spin.is_zero() {
                self.drive(spin, true);
            }
        }
        let outcome = self.cell.outcome.poll_take(cx);
        if outcome.is_pending() && !self.holds_reply_slot && self.conn.hold_reply_slot() {
            // Its task waits to be woken, then decodes the reply at once: the reply may
            // stay in its slot, within the connection's bound.
            self.holds_reply_slot = true;
            self.cell.thread_waiting.set(true);
        }
        outcome
    }
}

// The future never relies on its fields staying in place (nothing is pin-projected).
impl<Resp, Req> Unpin for ResponseFuture<Resp, Req> {}

impl<Resp, Req> Future for ResponseFuture<Resp, Req>
where
    Resp: prost::Message + Default + 'static,
    Req: prost::Message + 'static,
{
    type Output = Result<Response<Resp>, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match &mut this.state {
            FutureState::Connecting(connecting) => match connecting.as_mut().poll(cx) {
                Poll::Ready(started) => {
                    (this.state, this.kept) = started;
                    return Pin::new(this).poll(cx);
                }
                Poll::Pending => return Poll::Pending,
            },
            FutureState::Pending(started) => {
                match started.poll_outcome(cx, this.client.inner.config.spin) {
                    Poll::Ready(Err(status)) => {
                        let FutureState::Pending(started) =
                            std::mem::replace(&mut this.state, FutureState::Done)
                        else {
                            unreachable!("matched just now")
                        };
                        if this.makes_again(started) {
                            return Pin::new(this).poll(cx);
                        }
                        Err(status)
                    }
                    Poll::Ready(r) => r,
                    Poll::Pending => {
                        // Its waker relies on somebody else polling (see `Endpoint::waiting`).
                        if !started.counted_waiting {
                            started.counted_waiting = true;
                            started.endpoint.begin_waiting();
                        }
                        return Poll::Pending;
                    }
                }
            }
            FutureState::Stream(call) => {
                let GrpcUnary {
                    responses,
                    headers,
                    message,
                } = &mut **call;
                let result = match responses.poll_unary(headers, message, cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => return Poll::Pending,
                };
                this.state = FutureState::Done;
                return Poll::Ready(this.client.counted(result));
            }
            FutureState::Failed(status) => Err(status.take().expect("polled after completion")),
            FutureState::Done => panic!("ResponseFuture polled after completion"),
        };
        this.state = FutureState::Done;
        this.kept = None;
        Poll::Ready(this.client.finish(outcome))
    }
}

impl<Resp, Req> Drop for ResponseFuture<Resp, Req> {
    fn drop(&mut self) {
        if let FutureState::Pending(started) = &self.state {
            if !started.cell.outcome.is_complete() {
                started.conn.submit(Work::Cancel {
                    caller: Caller::Unary(Arc::clone(&started.cell)),
                    status: Status::cancelled("the response future was dropped"),
                });
            }
        }
    }
}

/// A unary request and its metadata: in one frame when the server takes whole requests
/// (PROTOCOL.md §22.2), else a HEADERS frame ahead of the message. Out of line: a call
/// without metadata does not pay for it.
#[inline(never)]
fn with_metadata<Req: prost::Message>(
    conn: &Conn,
    request: &Request<Req>,
) -> (Option<Body<SendBuf>>, Outgoing<SendBuf>) {
    let metadata = request.metadata();
    match conn.encode_whole_request(metadata.as_block(), request.get_ref()) {
        Some(frame) => (None, frame),
        None => (
            request_headers(conn, metadata, false),
            conn.encode(Kind::Message, UNARY, request.get_ref()),
        ),
    }
}

impl Client {
    /// Starts a unary call on `conn`; `blocking`: a thread waits for it (not a future);
    /// `again`: the timing of a call made again (else the request's).
    #[inline(never)] // a stage of `make bench`'s instruction counts (BENCHMARKS.md)
    fn start<Req: prost::Message>(
        &self,
        native: &Native,
        conn: Arc<Conn>,
        method: &'static MethodDescriptor,
        request: &Request<Req>,
        blocking: bool,
        again: Option<&Timing>,
    ) -> Started {
        // Only when traced: a disabled span still costs its entering and exit per call.
        let _span = InlineDrop::new(
            tracing::enabled!(tracing::Level::TRACE)
                .then(|| tracing::trace_span!("call", method = method.path).entered()),
        );
        self.inner.counters.call();
        let (timeout_us, deadline) = match again {
            None => self.timing(request),
            Some(&timing) => timing,
        };
        let cell = take_cell(&native.cells);
        // A blocking caller decodes the reply as soon as it lands: it may stay in its slot.
        cell.thread_waiting.set(blocking);
        let (headers, frame) = match request.metadata().is_empty() {
            true => (None, conn.encode(Kind::Message, UNARY, request.get_ref())),
            false => with_metadata(&conn, request),
        };
        // The poller thread's ticks end a future's call at its deadline (below).
        let ticked_deadline = deadline.is_some() && !blocking;
        native.endpoint.call_started(false, ticked_deadline);
        conn.submit_open(OpenCall {
            caller: Caller::Unary(Arc::clone(&cell)),
            method: method.id,
            timeout_us,
            // A blocking caller minds its own deadline (`Started::wait` withdraws the call
            // when it passes): the core watches only those of futures, which no thread
            // waits on.
            deadline: deadline.filter(|_| !blocking),
            headers,
            message: Some(frame),
        });
        Started {
            endpoint: Arc::clone(&native.endpoint),
            conn,
            cell,
            cells: Arc::clone(&native.cells),
            deadline,
            counted_waiting: false,
            driven: false,
            holds_reply_slot: false,
            ticked_deadline,
        }
    }

    #[inline(never)] // a stage of `make bench`'s instruction counts (BENCHMARKS.md)
    fn finish<Resp: prost::Message + Default>(
        &self,
        result: Result<Reply, Status>,
    ) -> Result<Response<Resp>, Status> {
        let result = result.and_then(|reply| {
            let message = super::super::call::decode::<Resp>(&reply.payload)
                .map_err(|e| Status::internal(format!("could not decode the response: {e}")))?;
            Ok(Response::from_parts(reply.headers, message, reply.trailers))
        });
        self.counted(result)
    }

    /// Makes a unary call and blocks until its response, its deadline or the connection's
    /// loss.
    #[inline(never)] // a stage of `make bench`'s instruction counts (BENCHMARKS.md)
    pub fn unary<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let request = match self.intercept(request) {
            Ok(request) => request,
            Err(status) => return self.counted(Err(status)),
        };
        let native = match self.wire() {
            Ok(Wire::Native(native)) => native,
            Err(status) => return self.counted(Err(status)),
            Ok(Wire::Grpc(_)) => {
                let result = self
                    .open_stream_as::<Req, Resp>(method, &request, Some(request.get_ref()))
                    .and_then(|(_, mut responses)| responses.wait_unary());
                return self.counted(result);
            }
        };
        let (mut again, mut attempts) = (None, 1);
        loop {
            let conn = match native.conn() {
                Ok(conn) => conn,
                Err(status) => return self.finish(Err(status)),
            };
            // Within the first attempt's deadline, which a reconnect may have used up.
            again = match timing_now(again, method) {
                Ok(timing) => timing,
                Err(status) => return self.finish(Err(status)),
            };
            let started = self.start(native, conn, method, &request, true, again.as_ref());
            let result = started.wait(self.inner.config.spin, method);
            // A call its server did not process (it never went out, or a GOODBYE gave it
            // back) is made again on the next connection, within its deadline.
            if result.is_err() && started.cell.was_unprocessed() && attempts < MAX_ATTEMPTS {
                if let Some(left) = retry_timing(started.deadline) {
                    tracing::debug!(
                        method = method.path,
                        "the server did not process the call; again"
                    );
                    (again, attempts) = (Some(left), attempts + 1);
                    continue;
                }
            }
            return self.finish(result);
        }
    }

    /// Starts a unary call and returns a future of its response. The future is completed by
    /// the thread that handles the reply (never by its own poll), so it works under any
    /// executor; [`ResponseFuture::wait`] blocks.
    pub fn unary_async<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> ResponseFuture<Resp, Req>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default + 'static,
    {
        let request = match self.intercept(request) {
            Ok(request) => request,
            Err(status) => return self.failed_call(method, status),
        };
        let mut future = self.future(method, FutureState::Done);
        future.begin(request, None);
        future
    }

    /// The future of a call of `method` in `state`, at its first attempt.
    fn future<Resp, Req>(
        &self,
        method: &'static MethodDescriptor,
        state: FutureState<Resp, Req>,
    ) -> ResponseFuture<Resp, Req> {
        ResponseFuture {
            client: self.clone(),
            method,
            state,
            kept: None,
            attempts: 1,
            _response: PhantomData,
        }
    }

    /// The future of a call that ended before it went out, with `status`.
    #[cold]
    pub(super) fn failed_call<Resp, Req>(
        &self,
        method: &'static MethodDescriptor,
        status: Status,
    ) -> ResponseFuture<Resp, Req> {
        self.future(method, FutureState::Failed(Some(status)))
    }

    /// The state of a future whose call starts now on `wire` (`again`: the timing of a call
    /// made again, else the request's).
    fn start_future<Req, Resp>(
        &self,
        wire: &Wire,
        method: &'static MethodDescriptor,
        request: &Request<Req>,
        again: Option<&Timing>,
    ) -> FutureState<Resp, Req>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        match wire {
            // After `wire_async`: the connection it made, unless that one is gone already
            // (connecting again here would be I/O on the executor's thread).
            Wire::Native(native) => match native.live_conn() {
                Some(conn) => {
                    FutureState::Pending(self.start(native, conn, method, request, false, again))
                }
                None => FutureState::Failed(Some(Status::unavailable(
                    "not connected: the new connection was lost at once",
                ))),
            },
            Wire::Grpc(_) => {
                match self.open_stream_as::<Req, Resp>(method, request, Some(request.get_ref())) {
                    Ok((_, responses)) => FutureState::Stream(Box::new(GrpcUnary {
                        responses,
                        headers: None,
                        message: None,
                    })),
                    Err(status) => FutureState::Failed(Some(status)),
                }
            }
        }
    }

    /// A lazy client's first call, or a call whose connection was lost or said GOODBYE: the
    /// future connects (off its executor's thread), then starts the call.
    #[cold]
    fn connect_then_start<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
        again: Option<Timing>,
    ) -> FutureState<Resp, Req>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default + 'static,
    {
        let client = self.clone();
        FutureState::Connecting(Box::pin(async move {
            match client.wire_async().await {
                Ok(wire) => {
                    // A call made again goes out only within the first attempt's deadline,
                    // which the connect may have used up.
                    let timing = match timing_now(again, method) {
                        Ok(timing) => timing,
                        Err(status) => return (FutureState::Failed(Some(status)), None),
                    };
                    let state = client.start_future(wire, method, &request, timing.as_ref());
                    let kept = match state {
                        FutureState::Pending(_) => kept(request),
                        _ => None,
                    };
                    (state, kept)
                }
                Err(status) => (FutureState::Failed(Some(status)), None),
            }
        }))
    }
}

/// What a future keeps of `request` while its call of our protocol is in flight, to make it
/// again: all it needs, if the message is small enough ([`KEEP_FOR_RETRY`]).
fn kept<Req: prost::Message>(mut request: Request<Req>) -> Option<Kept<Req>> {
    if request.get_ref().encoded_len() > KEEP_FOR_RETRY {
        return None;
    }
    let metadata = std::mem::take(request.metadata_mut());
    Some((request.into_inner(), metadata))
}
