//! Where an async handler's task resumes. A method served inline (`Execution::Inline`) runs
//! its handler on the thread that received the request; its task, woken later by what the
//! same server thread received (a response stream's credits or window, the next request of a
//! request stream), resumes there as well instead of being handed to the worker pool (before
//! it did, this test failed: the stream went on on `rpc-worker-*` after its first stall).

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rpc_core::{Client, Execution, Request, Response, Server, Status, TransportKind};
use rpc_tests::echo::echo_client::blocking::EchoClient;
use rpc_tests::echo::echo_server::{Echo, EchoServer};
use rpc_tests::echo::{EchoRepeatRequest, EchoReply, EchoRequest};
use rpc_tests::scenarios::with_watchdog;

/// Threads that polled a response stream, by name.
type Threads = Arc<Mutex<BTreeSet<String>>>;

/// Echo whose `EchoRepeat` stream notes each thread that polls it.
struct NotingEcho {
    threads: Threads,
}

/// `count` copies of a payload, always ready: only flow control holds the stream up.
struct Noting {
    left: u32,
    payload: Vec<u8>,
    threads: Threads,
}

impl Stream for Noting {
    type Item = Result<EchoReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let name = std::thread::current()
            .name()
            .unwrap_or("(unnamed)")
            .to_owned();
        self.threads.lock().unwrap().insert(name);
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        Poll::Ready(Some(Ok(EchoReply {
            payload: self.payload.clone(),
        })))
    }
}

impl Echo for NotingEcho {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        Ok(Response::new(EchoReply {
            payload: request.into_inner().payload,
        }))
    }

    type EchoRepeatStream = Noting;

    async fn echo_repeat(
        &self,
        request: Request<EchoRepeatRequest>,
    ) -> Result<Response<Noting>, Status> {
        let EchoRepeatRequest { payload, count, .. } = request.into_inner();
        Ok(Response::new(Noting {
            left: count,
            payload,
            threads: Arc::clone(&self.threads),
        }))
    }
}

const MESSAGES: u32 = 2_000;
/// 2,000 messages of 4 KiB are far more than the connection's credits and the call's
/// window let go at once: the stream waits for the client many times over.
const PAYLOAD: usize = 4096;

/// Streams `MESSAGES` messages from a server whose Echo runs as `execution`, checks that all
/// arrive intact, and returns the names of the threads that polled the stream.
fn stream_threads(execution: Execution, transport: TransportKind) -> BTreeSet<String> {
    let threads = Threads::default();
    let server = Server::builder()
        .workers(2)
        .add_service_with(
            EchoServer::new(NotingEcho {
                threads: Arc::clone(&threads),
            }),
            execution,
        )
        .start("127.0.0.1:0", transport)
        .expect("a server starts");
    let client = EchoClient::new(
        Client::builder()
            .transport(transport)
            .connect(server.local_addr())
            .expect("connects"),
    );
    let payload: Vec<u8> = (0..PAYLOAD).map(|i| i as u8).collect();
    let replies = client
        .echo_repeat(EchoRepeatRequest {
            payload: payload.clone(),
            count: MESSAGES,
            interval_ms: 0,
        })
        .expect("the stream starts")
        .into_inner();
    let mut received = 0;
    for reply in replies.into_blocking_iter() {
        assert_eq!(reply.expect("a message").payload, payload);
        received += 1;
    }
    assert_eq!(received, MESSAGES);
    drop(client);
    server.shutdown();
    let names = threads.lock().unwrap().clone();
    names
}

fn on_a_worker(names: &BTreeSet<String>) -> bool {
    names.iter().any(|n| n.starts_with("rpc-worker"))
}

#[test]
fn an_inline_stream_held_up_by_flow_control_resumes_off_the_worker_pool() {
    with_watchdog("an inline stream", Duration::from_secs(60), || {
        let names = stream_threads(Execution::Inline, TransportKind::Tcp);
        assert!(!names.is_empty());
        assert!(
            !on_a_worker(&names),
            "an inline method's task resumed on the worker pool: {names:?}"
        );
    });
}

/// Pending once, waking its task at once: the task goes on in a second run.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Echo that answers with what a second server echoes: a handler that makes a blocking
/// call of its own while it runs on the server's receiving thread, in its task's second run.
struct RelayEcho {
    downstream: EchoClient,
}

impl Echo for RelayEcho {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        // Resumed, the task runs where sends are held (a first run holds nothing).
        YieldOnce(false).await;
        let reply = self.downstream.echo(request.into_inner())?;
        Ok(Response::new(reply.into_inner()))
    }

    type EchoRepeatStream = Noting;

    async fn echo_repeat(
        &self,
        _request: Request<EchoRepeatRequest>,
    ) -> Result<Response<Noting>, Status> {
        Err(Status::unimplemented("not relayed"))
    }
}

/// An inline handler's task, resumed on the server's receiving thread, makes a blocking call
/// to a second server: the call's request goes out and its reply comes back while the task
/// runs there (where the server's own frames are held until the run ends), 200 times over.
#[test]
fn an_inline_handlers_resumed_task_can_call_another_server() {
    with_watchdog("a relaying handler", Duration::from_secs(60), || {
        let threads = Threads::default();
        let downstream = Server::builder()
            .add_service(EchoServer::new(NotingEcho { threads }))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("the downstream server starts");
        let relay = Server::builder()
            .add_service_with(
                EchoServer::new(RelayEcho {
                    downstream: EchoClient::new(
                        Client::builder()
                            .transport(TransportKind::Tcp)
                            .connect(downstream.local_addr())
                            .expect("connects downstream"),
                    ),
                }),
                Execution::Inline,
            )
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("the relay starts");
        let client = EchoClient::new(
            Client::builder()
                .transport(TransportKind::Tcp)
                .connect(relay.local_addr())
                .expect("connects"),
        );
        for i in 0..200u32 {
            let payload = i.to_le_bytes().to_vec();
            let reply = client
                .echo(EchoRequest {
                    payload: payload.clone(),
                })
                .expect("a relayed echo");
            assert_eq!(reply.into_inner().payload, payload);
        }
    });
}
