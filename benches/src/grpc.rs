//! `--system tonic`: the same `echo.Echo` service over gRPC (HTTP/2) with tonic, the
//! reference point of a mainstream RPC stack over TCP.
//!
//! Server: tonic's server on a multi-threaded tokio runtime with one worker thread per CPU
//! (tokio's default), `TCP_NODELAY` on accepted connections, the handler answering with
//! the request's payload.
//!
//! Load: a current-thread tokio runtime (so the load generator uses one thread, like the
//! `ours` client at outstanding > 1) and one [`Channel`], i.e. one HTTP/2 connection, with
//! `TCP_NODELAY` and a per-call timeout. At outstanding 1 the calls are made one after the
//! other; at outstanding N, N tasks each make every N-th call in turn, so N calls are in
//! flight on the connection. A call's latency runs from issuing it until its reply is
//! decoded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};

use crate::payload::Payload;
use crate::report::{LoadParams, LoadResult, Tally};
use crate::tonic_echo::echo_client::EchoClient;
use crate::tonic_echo::echo_server::{Echo, EchoServer};
use crate::tonic_echo::{EchoRepeatRequest, EchoReply, EchoRequest};

/// Per-call timeout of the load client (as for the other systems).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The echo handler: answers with the request's payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct TonicEcho;

#[tonic::async_trait]
impl Echo for TonicEcho {
    async fn echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
        Ok(tonic::Response::new(EchoReply {
            payload: request.into_inner().payload,
        }))
    }

    type EchoRepeatStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<EchoReply, tonic::Status>> + Send + 'static>,
    >;

    async fn echo_repeat(
        &self,
        request: tonic::Request<EchoRepeatRequest>,
    ) -> Result<tonic::Response<Self::EchoRepeatStream>, tonic::Status> {
        let EchoRepeatRequest { payload, count, .. } = request.into_inner();
        let replies = std::iter::repeat_n(Ok(EchoReply { payload }), count as usize);
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(replies))))
    }
}

/// A running tonic echo server; dropping it shuts its runtime down.
#[derive(Debug)]
pub struct TonicServer {
    local_addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl TonicServer {
    /// The bound address (with the actual port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Binds `listen` and serves on a multi-threaded tokio runtime in the background.
pub fn serve(listen: &str) -> Result<TonicServer, String> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|e| format!("{listen} is not an IP address and port: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tonic-server")
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let incoming = {
        let _guard = runtime.enter();
        TcpIncoming::bind(addr)
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?
            .with_nodelay(Some(true))
    };
    let local_addr = incoming
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    runtime.spawn(async move {
        let served = tonic::transport::Server::builder()
            .serve_with_incoming(EchoServer::new(TonicEcho), incoming)
            .await;
        if let Err(err) = served {
            eprintln!("rpc-bench serve (tonic): the server failed: {err}");
        }
    });
    Ok(TonicServer {
        local_addr,
        _runtime: runtime,
    })
}

async fn connect(addr: &str) -> Result<Channel, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("{addr}: {e}"))?
        .tcp_nodelay(true)
        .timeout(CALL_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))
}

/// Runs `params` against the tonic echo server at `addr`.
pub fn load(addr: &str, params: LoadParams) -> LoadResult {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            return LoadResult::failed(
                "tonic",
                "tcp",
                params,
                format!("cannot start a tokio runtime: {err}"),
            )
        }
    };
    runtime.block_on(async {
        let channel = match connect(addr).await {
            Ok(c) => c,
            Err(err) => return LoadResult::failed("tonic", "tcp", params, err),
        };
        let client = EchoClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let payload = Payload::new(params.size);
        // Warm-up failures count too, and come first.
        let (mut tally, _) = run_phase(&client, &payload, 0, params.warmup, params, false).await;
        let (measured, elapsed) =
            run_phase(&client, &payload, params.warmup, params.count, params, true).await;
        tally.merge(measured);
        LoadResult::new("tonic", "tcp", params, tally, elapsed)
    })
}

/// Makes calls `first..first + calls` with `params.outstanding` tasks.
async fn run_phase(
    client: &EchoClient<Channel>,
    payload: &Payload,
    first: u64,
    calls: u64,
    params: LoadParams,
    measured: bool,
) -> (Tally, Duration) {
    let start = Instant::now();
    let tasks = (params.outstanding as u64).min(calls.max(1));
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let mut client = client.clone();
        let payload = payload.clone();
        set.spawn(async move {
            // This task's calls: first + task, first + task + tasks, ...
            let mine = (calls - task).div_ceil(tasks);
            let mut tally = Tally::new(if measured { mine } else { 0 });
            for k in 0..mine {
                let seq = first + task + k * tasks;
                let request = EchoRequest {
                    payload: payload.request(seq),
                };
                let call_start = Instant::now();
                let result = client.echo(request).await;
                let latency = call_start.elapsed();
                match result {
                    Ok(reply) if payload.matches(seq, &reply.get_ref().payload) => {
                        tally.success(latency, measured)
                    }
                    Ok(reply) => tally.failure(|| {
                        format!(
                            "call {seq}: reply of {} bytes differs from the request of {} bytes",
                            reply.get_ref().payload.len(),
                            payload.len()
                        )
                    }),
                    Err(status) => tally.failure(|| {
                        format!("call {seq}: {:?}: {}", status.code(), status.message())
                    }),
                }
                if tally.gave_up() {
                    tally.not_made(mine - k - 1, || "gave up".to_owned());
                    break;
                }
            }
            tally
        });
    }
    let mut total = Tally::new(if measured { calls } else { 0 });
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(tally) => total.merge(tally),
            Err(err) => total.failure(|| format!("a load task failed: {err}")),
        }
    }
    (total, start.elapsed())
}
