//! Handlers written for tokio (`tokio::time::sleep`, tokio-timed streams), served by a
//! server whose threads run inside a tokio runtime's context through
//! `ServerBuilder::thread_context` or by being started inside the runtime, and called from
//! tokio. This is how a tokio application
//! uses rpc-core: the runtime stays the application's; the server only enters its context.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use rpc_core::{Client, Code, Execution, Request, Response, Server, Status, TransportKind};
use rpc_tests::race::{nap_of, Alive, Census};
use rpc_tests::scenarios::{payload, with_watchdog};
use rpc_tests::testing::race_client::blocking::RaceClient;
use rpc_tests::testing::race_server::{Race, RaceServer};
use rpc_tests::testing::{FloodRequest, Nothing, Payload, SleepRequest};

const T: TransportKind = TransportKind::Tcp;

/// How long handlers may take to be finished or dropped once their calls ended: a bound for
/// a leak (it takes microseconds), generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(20);

/// `testing.Race` on tokio's timers: creating a `tokio::time::Sleep` panics on a thread
/// outside a tokio runtime's context, so these handlers work only where the server entered
/// one.
struct TokioRace {
    census: Arc<Census>,
}

impl Race for TokioRace {
    async fn nap(&self, request: Request<SleepRequest>) -> Result<Response<Nothing>, Status> {
        let alive = Alive::new(&self.census);
        tokio::time::sleep(nap_of(request.get_ref())).await;
        alive.finish();
        Ok(Response::new(Nothing {}))
    }

    type FloodStream = BoxStream<'static, Result<Payload, Status>>;

    async fn flood(
        &self,
        request: Request<FloodRequest>,
    ) -> Result<Response<Self::FloodStream>, Status> {
        let alive = Alive::new(&self.census);
        let FloodRequest {
            size,
            count,
            interval_micros,
        } = request.into_inner();
        let interval = Duration::from_micros(u64::from(interval_micros));
        let stream = futures::stream::unfold((0u64, alive), move |(id, alive)| async move {
            if count != 0 && id == count {
                alive.finish();
                return None;
            }
            if id > 0 {
                tokio::time::sleep(interval).await;
            }
            Some((Ok(payload(id, size as usize)), (id + 1, alive)))
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The application's runtime: two worker threads that also drive its timers.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// A Race server whose every thread (workers, poller) runs inside `runtime`'s context.
fn serve_in(runtime: &tokio::runtime::Runtime, census: &Arc<Census>, nap: Execution) -> Server {
    let handle = runtime.handle().clone();
    Server::builder()
        .workers(2)
        .thread_context(move |run| {
            let _entered = handle.enter();
            run()
        })
        .add_service(RaceServer::new(TokioRace {
            census: Arc::clone(census),
        }))
        .method_execution("/testing.Race/Nap", nap)
        .start("127.0.0.1:0", T)
        .expect("a server starts")
}

fn connect(server: &Server) -> RaceClient {
    let client = Client::builder()
        .transport(T)
        // A call that never ends fails instead of hanging.
        .timeout(Duration::from_secs(20))
        .connect(server.local_addr())
        .expect("connects");
    RaceClient::new(client)
}

/// A nap, then 500 concurrent naps on tokio timers and a stream paced by tokio timers,
/// called from tokio: all complete (502 handler futures, each run to its end).
fn naps_and_a_stream_complete(runtime: &tokio::runtime::Runtime, client: &RaceClient) {
    runtime.block_on(async {
        // One first: if handlers cannot create tokio timers, one failure says so (instead of
        // 500 handler panics in the log).
        let first =
            rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(SleepRequest {
                millis: 1,
                micros: 0,
            });
        if let Err(status) = first.await {
            panic!("a nap on a tokio timer: {status}");
        }
        let naps = (0..500u32).map(|i| {
            rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(SleepRequest {
                millis: 5 + i % 20,
                micros: 0,
            })
        });
        for (i, nap) in futures::future::join_all(naps)
            .await
            .into_iter()
            .enumerate()
        {
            if let Err(status) = nap {
                panic!("nap {i} on a tokio timer: {status}");
            }
        }
        let request = FloodRequest {
            size: 100,
            count: 20,
            interval_micros: 500,
        };
        let mut flood = rpc_tests::testing::race_client::RaceClient::from(client.clone())
            .flood(request)
            .await
            .expect("a stream paced by tokio timers")
            .into_inner();
        let mut ids = Vec::new();
        while let Some(message) = flood.message().await.expect("the stream's messages") {
            assert_eq!(message, payload(message.id, 100));
            ids.push(message.id);
        }
        assert_eq!(ids, (0..20).collect::<Vec<u64>>());
    });
}

/// Handlers on the worker pool (the default): their first poll and every later one run on
/// the server's workers, inside the runtime's context.
#[test]
fn tokio_timers_in_handlers_work_with_thread_context() {
    with_watchdog(
        "tokio handlers on the pool",
        Duration::from_secs(60),
        || {
            let runtime = runtime();
            let census = Census::new();
            let server = serve_in(&runtime, &census, Execution::WorkerPool);
            let client = connect(&server);
            naps_and_a_stream_complete(&runtime, &client);
            census.wait_until_idle(SETTLE);
            assert_eq!((census.finished(), census.dropped()), (502, 0));
            // The server goes before the runtime whose context its threads entered.
            drop(client);
            server.shutdown();
        },
    );
}

/// Naps run inline (`Execution::Inline`): their first poll, which creates the tokio timer,
/// runs on whichever server thread received the request. `thread_context` promises every
/// server thread is inside the runtime's context, so this must work as on the pool.
#[test]
fn tokio_timers_in_inline_handlers_work_with_thread_context() {
    with_watchdog("tokio handlers inline", Duration::from_secs(60), || {
        let runtime = runtime();
        let census = Census::new();
        let server = serve_in(&runtime, &census, Execution::Inline);
        let client = connect(&server);
        naps_and_a_stream_complete(&runtime, &client);
        census.wait_until_idle(SETTLE);
        assert_eq!((census.finished(), census.dropped()), (502, 0));
        drop(client);
        server.shutdown();
    });
}

/// The control: without `thread_context`, a handler creating a tokio timer panics (no
/// runtime context) and the call fails INTERNAL; with it (the tests above) the same
/// handler works. So the context is what the tests above rely on.
#[test]
fn without_thread_context_tokio_timers_fail_internal() {
    with_watchdog(
        "tokio handlers without context",
        Duration::from_secs(60),
        || {
            let runtime = runtime();
            let census = Census::new();
            let server = Server::builder()
                .workers(2)
                .add_service(RaceServer::new(TokioRace {
                    census: Arc::clone(&census),
                }))
                .start("127.0.0.1:0", T)
                .expect("a server starts");
            let client = connect(&server);
            let result = runtime.block_on(
                rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(
                    SleepRequest {
                        millis: 1,
                        micros: 0,
                    },
                ),
            );
            let status = result.expect_err("a tokio timer outside a tokio context");
            assert_eq!(status.code(), Code::Internal, "{status}");
            census.wait_until_idle(SETTLE);
            assert_eq!((census.finished(), census.dropped()), (0, 1));
            drop(client);
            server.shutdown();
        },
    );
}

/// A server started inside a tokio runtime (here: in `block_on`, as a `#[tokio::main]`
/// program starts one) enters that runtime on its threads without `thread_context`, as a
/// tonic server runs its handlers on the surrounding runtime: tokio timers work in
/// handlers on the pool and inline. (The test above is the control: the same server built
/// outside any runtime fails them INTERNAL.)
#[test]
fn a_server_started_inside_a_tokio_runtime_enters_it_by_itself() {
    with_watchdog(
        "tokio handlers, surrounding runtime",
        Duration::from_secs(60),
        || {
            let runtime = runtime();
            let census = Census::new();
            for nap in [Execution::WorkerPool, Execution::Inline] {
                let server = runtime.block_on(async {
                    Server::builder()
                        .workers(2)
                        .add_service(RaceServer::new(TokioRace {
                            census: Arc::clone(&census),
                        }))
                        .method_execution("/testing.Race/Nap", nap)
                        .start("127.0.0.1:0", T)
                        .expect("a server starts")
                });
                let client = connect(&server);
                naps_and_a_stream_complete(&runtime, &client);
                drop(client);
                server.shutdown();
            }
            census.wait_until_idle(SETTLE);
            assert_eq!((census.finished(), census.dropped()), (2 * 502, 0));
        },
    );
}
