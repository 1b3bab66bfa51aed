//! `--system ours`: rpc-core with the stubs rpc-codegen generated for `proto/echo.proto`.
//!
//! The server runs the echo handler inline on its completion poller
//! ([`rpc_core::Execution::Inline`]), as `echo-server` does; its worker pool is not used
//! (one idle worker). Client and server use the default ring (64 slots of 8 KiB, messages up
//! to 4 MiB; larger payloads are segmented) and the default wait mode: pollers busy-poll
//! for 1 ms after their last completion, then sleep; a blocking caller parks until its
//! poller wakes it (`RPC_SPIN_US` / `RPC_IDLE_SPIN_US` change that without rebuilding).
//!
//! [`AsyncEchoService`] is the same service with rpc-codegen's default, async handlers
//! ([`serve_async_with`], `rpc-bench serve --system ours --async`): its unary handler is an
//! `async fn` (run as a task, first polled inline) and its `EchoRepeat` returns a
//! [`Repeat`] stream, sent as fast as the call's flow control lets it go.
//!
//! Load: at outstanding 1 every call is a blocking [`EchoClient::echo`]. At outstanding N
//! one thread keeps a window of N [`echo_client::EchoClient::echo`] futures: it
//! [`wait`](rpc_core::ResponseFuture::wait)s for the oldest, checks it, and issues the next
//! call. A call's latency runs from issuing it to its `wait` returning, so a reply that
//! arrives while an older one is still awaited is charged the difference (head-of-line, as
//! for the raw TCP pipeline).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rpc_core::{
    Client, Error, Execution, Request, Response, ResponseFuture, Server, Status, TransportKind,
};

use crate::echo::echo_client::{self, blocking::EchoClient};
use crate::echo::echo_server::{Echo, EchoServer};
use crate::echo::{EchoRepeatRequest, EchoReply, EchoRequest};
use crate::payload::Payload;
use crate::report::{LoadParams, LoadResult, Tally};

/// Per-call timeout of the load clients: a server that stopped answering fails the call
/// with DEADLINE_EXCEEDED instead of hanging the run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The echo handler: answers with the request's payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoService;

impl Echo for EchoService {
    // Not inlined into the generated code, so that `make bench` counts the handler stage.
    #[inline(never)]
    fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        Ok(Response::new(EchoReply {
            payload: request.into_inner().payload,
        }))
    }

    type EchoRepeatStream = std::iter::RepeatN<Result<EchoReply, Status>>;

    fn echo_repeat(
        &self,
        request: Request<EchoRepeatRequest>,
    ) -> Result<Response<Self::EchoRepeatStream>, Status> {
        let EchoRepeatRequest {
            payload,
            count,
            interval_ms,
        } = request.into_inner();
        check_repeat(interval_ms)?;
        let reply = Ok(EchoReply { payload });
        Ok(Response::new(std::iter::repeat_n(reply, count as usize)))
    }
}

/// The echo service with async handlers (rpc-codegen's default): the unary handler is an
/// `async fn` that finishes on its first poll, and `EchoRepeat` streams [`Repeat`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncEchoService;

impl crate::echo_async::echo_server::Echo for AsyncEchoService {
    async fn echo(
        &self,
        request: Request<crate::echo_async::EchoRequest>,
    ) -> Result<Response<crate::echo_async::EchoReply>, Status> {
        Ok(Response::new(crate::echo_async::EchoReply {
            payload: request.into_inner().payload,
        }))
    }

    type EchoRepeatStream = Repeat;

    async fn echo_repeat(
        &self,
        request: Request<crate::echo_async::EchoRepeatRequest>,
    ) -> Result<Response<Repeat>, Status> {
        let crate::echo_async::EchoRepeatRequest {
            payload,
            count,
            interval_ms,
        } = request.into_inner();
        check_repeat(interval_ms)?;
        Ok(Response::new(Repeat {
            payload,
            left: count,
        }))
    }
}

/// What both benchmark servers refuse of an `EchoRepeat` request: pauses between replies
/// (they stream as fast as flow control allows). Unlike the echo demo they take more than
/// the contract's 100,000 replies: `make bench` measures a stream of 200,000.
fn check_repeat(interval_ms: u32) -> Result<(), Status> {
    if interval_ms != 0 {
        return Err(Status::invalid_argument(
            "this benchmark server streams as fast as it can: interval_ms must be 0",
        ));
    }
    Ok(())
}

/// `left` copies of `payload`, each ready as soon as it is polled for: the stream never
/// holds the sender back, so the call's flow control alone sets the pace.
#[derive(Debug, Clone)]
pub struct Repeat {
    payload: Vec<u8>,
    left: u32,
}

impl rpc_core::codegen::Stream for Repeat {
    type Item = Result<crate::echo_async::EchoReply, Status>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        this.left -= 1;
        Poll::Ready(Some(Ok(crate::echo_async::EchoReply {
            payload: this.payload.clone(),
        })))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// Starts the echo server on `listen` (`ip:port`, port 0 for a free one, or `mem:NAME`).
pub fn serve(listen: &str, transport: TransportKind) -> Result<Server, Error> {
    serve_with(Server::builder(), listen, transport)
}

/// [`serve`] with a builder carrying other settings (ring, idle spin).
pub fn serve_with(
    builder: rpc_core::ServerBuilder,
    listen: &str,
    transport: TransportKind,
) -> Result<Server, Error> {
    builder
        .workers(1)
        .add_service_with(EchoServer::new(EchoService), Execution::Inline)
        .start(listen, transport)
}

/// [`serve_with`] with the async handlers of [`AsyncEchoService`] (also inline: a future
/// that does not finish on its first poll, such as a stream waiting for its window, goes on
/// on the worker pool when woken).
pub fn serve_async_with(
    builder: rpc_core::ServerBuilder,
    listen: &str,
    transport: TransportKind,
) -> Result<Server, Error> {
    builder
        .workers(1)
        .add_service_with(
            crate::echo_async::echo_server::EchoServer::new(AsyncEchoService),
            Execution::Inline,
        )
        .start(listen, transport)
}

/// A client as the load generator uses it: default settings plus [`CALL_TIMEOUT`].
pub fn connect(addr: &str, transport: TransportKind) -> Result<Client, Error> {
    Client::builder()
        .transport(transport)
        .timeout(CALL_TIMEOUT)
        .connect(addr)
}

/// The client of a load run, or the run's result if it cannot connect.
fn load_client(
    addr: &str,
    transport: TransportKind,
    params: LoadParams,
    system: &'static str,
) -> Result<Client, Box<LoadResult>> {
    let requested = transport_label(transport);
    connect(addr, transport).map_err(|err| {
        Box::new(LoadResult::failed(
            system,
            requested,
            params,
            format!("cannot connect to {addr} over {requested}: {err}"),
        ))
    })
}

/// Runs `params` against the echo server at `addr`.
pub fn load(addr: &str, transport: TransportKind, params: LoadParams) -> LoadResult {
    let client = match load_client(addr, transport, params, "ours") {
        Ok(client) => client,
        Err(failed) => return *failed,
    };
    let echo = EchoClient::new(client.clone());
    let payload = Payload::new(params.size);

    // Warm-up failures count too, and come first.
    let mut tally = Tally::new(params.count);
    run_phase(
        &echo,
        &payload,
        0,
        params.warmup,
        params.outstanding,
        false,
        &mut tally,
    );
    let elapsed = run_phase(
        &echo,
        &payload,
        params.warmup,
        params.count,
        params.outstanding,
        true,
        &mut tally,
    );
    LoadResult::new("ours", client.transport_name(), params, tally, elapsed)
}

/// Runs `params` (at 1 outstanding) with the async client: each call awaited in turn in a
/// tokio multi-thread runtime's `block_on`, as an async application's `main` makes them.
pub fn load_async(addr: &str, transport: TransportKind, params: LoadParams) -> LoadResult {
    let client = match load_client(addr, transport, params, "ours-async") {
        Ok(client) => client,
        Err(failed) => return *failed,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return LoadResult::failed(
                "ours-async",
                client.transport_name(),
                params,
                format!("cannot start a tokio runtime: {err}"),
            )
        }
    };
    let mut echo = echo_client::EchoClient::new(client.clone());
    let payload = Payload::new(params.size);
    let mut tally = Tally::new(params.count);
    let elapsed = runtime.block_on(async {
        awaited_calls(&mut echo, &payload, 0, params.warmup, false, &mut tally).await;
        let start = Instant::now();
        awaited_calls(
            &mut echo,
            &payload,
            params.warmup,
            params.count,
            true,
            &mut tally,
        )
        .await;
        start.elapsed()
    });
    LoadResult::new(
        "ours-async",
        client.transport_name(),
        params,
        tally,
        elapsed,
    )
}

/// Makes calls `first..first + calls` with the async client, one after another.
async fn awaited_calls(
    echo: &mut echo_client::EchoClient,
    payload: &Payload,
    first: u64,
    calls: u64,
    measured: bool,
    tally: &mut Tally,
) {
    let end = first + calls;
    for seq in first..end {
        let request = EchoRequest {
            payload: payload.request(seq),
        };
        let start = Instant::now();
        let result = echo.echo(request).await.map(Response::into_inner);
        let latency = start.elapsed();
        check(payload, seq, result, latency, measured, tally);
        if tally.gave_up() {
            tally.not_made(end - seq - 1, || "gave up".to_owned());
            return;
        }
    }
}

fn transport_label(kind: TransportKind) -> &'static str {
    kind.as_str()
}

/// Makes calls `first..first + calls`; returns how long that took.
fn run_phase(
    echo: &EchoClient,
    payload: &Payload,
    first: u64,
    calls: u64,
    outstanding: usize,
    measured: bool,
    tally: &mut Tally,
) -> Duration {
    let start = Instant::now();
    if outstanding <= 1 {
        blocking_calls(echo, payload, first, calls, measured, tally);
    } else {
        windowed_calls(echo, payload, first, calls, outstanding, measured, tally);
    }
    start.elapsed()
}

fn check(
    payload: &Payload,
    seq: u64,
    result: Result<EchoReply, Status>,
    latency: Duration,
    measured: bool,
    tally: &mut Tally,
) {
    match result {
        Ok(reply) if payload.matches(seq, &reply.payload) => tally.success(latency, measured),
        Ok(reply) => tally.failure(|| {
            format!(
                "call {seq}: reply of {} bytes differs from the request of {} bytes",
                reply.payload.len(),
                payload.len()
            )
        }),
        Err(status) => tally.failure(|| format!("call {seq}: {status}")),
    }
}

fn blocking_calls(
    echo: &EchoClient,
    payload: &Payload,
    first: u64,
    calls: u64,
    measured: bool,
    tally: &mut Tally,
) {
    let end = first + calls;
    for seq in first..end {
        let request = EchoRequest {
            payload: payload.request(seq),
        };
        let start = Instant::now();
        let result = echo.echo(request).map(Response::into_inner);
        let latency = start.elapsed();
        check(payload, seq, result, latency, measured, tally);
        if tally.gave_up() {
            tally.not_made(end - seq - 1, || "gave up".to_owned());
            return;
        }
    }
}

fn windowed_calls(
    echo: &EchoClient,
    payload: &Payload,
    first: u64,
    calls: u64,
    outstanding: usize,
    measured: bool,
    tally: &mut Tally,
) {
    let end = first + calls;
    let mut window: VecDeque<(u64, Instant, ResponseFuture<EchoReply, EchoRequest>)> =
        VecDeque::with_capacity(outstanding);
    let mut next = first;
    let mut futures = echo_client::EchoClient::from(echo.clone());
    let mut issue = |seq: u64| {
        let request = EchoRequest {
            payload: payload.request(seq),
        };
        let start = Instant::now();
        (seq, start, futures.echo(request))
    };
    while next < end && window.len() < outstanding {
        window.push_back(issue(next));
        next += 1;
    }
    while let Some((seq, start, future)) = window.pop_front() {
        let result = future.wait().map(Response::into_inner);
        let latency = start.elapsed();
        check(payload, seq, result, latency, measured, tally);
        if tally.gave_up() {
            let left = end - next + window.len() as u64;
            window.clear(); // dropping the futures cancels their calls
            tally.not_made(left, || "gave up".to_owned());
            return;
        }
        if next < end {
            window.push_back(issue(next));
            next += 1;
        }
    }
}
