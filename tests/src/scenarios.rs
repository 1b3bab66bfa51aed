//! End-to-end scenarios over a real transport, shared by the TCP tests (run on any machine)
//! and the verbs tests (run inside the Soft-RoCE VM). Each takes the address to serve on and
//! the transport, starts its own server, and asserts what users rely on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::{
    Client, Code, MetadataValue, Request, Response, RingConfig, Server, SharedRings, Status,
    TransportKind,
};

use crate::testing::torture_client::{self, blocking::TortureClient};
use crate::testing::torture_server::{Torture, TortureServer};
use crate::testing::{FailRequest, Nothing, Payload, SleepRequest};

/// The test service.
#[derive(Default)]
pub struct TortureService {
    /// Calls handled.
    pub calls: Arc<AtomicUsize>,
}

/// The caller a server interceptor authenticated, put into the request's extensions for the
/// handler (`TortureService::echo` answers it as the `x-caller` response header).
#[derive(Debug, Clone)]
pub struct Caller(pub String);

impl Torture for TortureService {
    async fn echo(&self, request: Request<Payload>) -> Result<Response<Payload>, Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // Who a server interceptor said the caller is, if one did: answered as the
        // `x-caller` response header.
        let caller = request.extensions().get::<Caller>().cloned();
        let mut response = Response::new(request.into_inner());
        if let Some(Caller(name)) = caller {
            let name = name
                .parse()
                .map_err(|e| Status::internal(format!("x-caller: {e}")))?;
            response.metadata_mut().insert("x-caller", name);
        }
        Ok(response)
    }

    async fn sleep(&self, request: Request<SleepRequest>) -> Result<Response<Nothing>, Status> {
        let r = request.get_ref();
        // Awaited, not slept: a sleeping handler holds no worker thread.
        futures_timer::Delay::new(
            Duration::from_millis(u64::from(r.millis)) + Duration::from_micros(u64::from(r.micros)),
        )
        .await;
        Ok(Response::new(Nothing {}))
    }

    async fn panic(&self, _: Request<Nothing>) -> Result<Response<Nothing>, Status> {
        panic!("the Panic method panics, as asked");
    }

    async fn fail(&self, request: Request<FailRequest>) -> Result<Response<Nothing>, Status> {
        let r = request.into_inner();
        Err(Status::new(Code::from_u32(r.code), r.message))
    }

    type WatchStream = futures::stream::Iter<std::vec::IntoIter<Result<Payload, Status>>>;

    async fn watch(
        &self,
        request: Request<Payload>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let copies = vec![Ok(request.into_inner()); 3];
        Ok(Response::new(futures::stream::iter(copies)))
    }

    type RefuseStream = futures::stream::Iter<std::vec::IntoIter<Result<Payload, Status>>>;

    async fn refuse(
        &self,
        request: Request<FailRequest>,
    ) -> Result<Response<Self::RefuseStream>, Status> {
        let r = request.into_inner();
        let refusal = vec![Err(Status::new(Code::from_u32(r.code), r.message))];
        let mut response = Response::new(futures::stream::iter(refusal));
        response
            .metadata_mut()
            .insert("x-refused-by", MetadataValue::from_static("torture"));
        Ok(response)
    }
}

/// Ring used by the scenarios: small slots so segmentation is exercised.
pub const RING: RingConfig = RingConfig {
    slot_count: 32,
    slot_size: 4096,
    max_message_size: 4 << 20,
    ..RingConfig::DEFAULT
};

/// Starts a Torture server on `addr`.
pub fn serve(addr: &str, transport: TransportKind) -> Server {
    Server::builder()
        .ring(RING)
        .workers(4)
        .add_service(TortureServer::new(TortureService::default()))
        .start(addr, transport)
        .expect("server starts")
}

/// Connects a client to `server`.
pub fn connect(server: &Server, transport: TransportKind) -> TortureClient {
    let client = Client::builder()
        .transport(transport)
        .ring(RING)
        .connect(server.local_addr())
        .expect("client connects");
    TortureClient::new(client)
}

/// A payload whose bytes depend on `id`, so a reply can be checked against its request.
pub fn payload(id: u64, len: usize) -> Payload {
    let seed = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Payload {
        id,
        data: (0..len)
            .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ i as u8)
            .collect(),
    }
}

/// `threads` threads each keep `window` calls outstanding until each has made `per_thread`
/// calls; every reply is compared with its request.
pub fn concurrent_calls(client: &TortureClient, threads: usize, window: usize, per_thread: usize) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let mut client = torture_client::TortureClient::from(client.clone());
            s.spawn(move || {
                let mut in_flight = std::collections::VecDeque::new();
                for i in 0..per_thread {
                    let id = (t * per_thread + i) as u64;
                    // Sizes from 0 to beyond one slot, so some calls are segmented.
                    let req = payload(id, (id as usize * 37) % 6000);
                    in_flight.push_back((req.clone(), client.echo(req)));
                    if in_flight.len() == window {
                        let (req, fut) = in_flight.pop_front().unwrap();
                        assert_eq!(fut.wait().expect("echo call").into_inner(), req);
                    }
                }
                for (req, fut) in in_flight {
                    assert_eq!(fut.wait().expect("echo call").into_inner(), req);
                }
            });
        }
    });
}

/// Sizes around the slot size, 1 MiB and the configured maximum round-trip; one byte more
/// than the maximum gives RESOURCE_EXHAUSTED.
pub fn message_sizes(client: &TortureClient) {
    let slot = RING.slot_size as usize;
    // Payload length whose encoded message (tags, lengths and id included) is `target` bytes.
    let data_len_for = |target: usize| {
        let overhead = prost::Message::encoded_len(&payload(7, target)) - target;
        target - overhead
    };
    let max = RING.max_message_size as usize;
    for target in [1 + 4, slot - 1, slot, slot + 1, 1 << 20, max] {
        let req = payload(7, data_len_for(target));
        assert_eq!(prost::Message::encoded_len(&req), target);
        assert_eq!(
            client.echo(req.clone()).expect("echo").into_inner(),
            req,
            "{target} bytes"
        );
    }
    let too_big = payload(7, data_len_for(max) + 1);
    assert_eq!(prost::Message::encoded_len(&too_big), max + 1);
    let err = client.echo(too_big).unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
}

/// Three send slots for all the server's connections (`SharedRings::send_slots`): three
/// clients calling with 32 outstanding and messages of several frames keep the shared pool
/// empty, so connections wait for a slot in turn and are told when one is free. Every call
/// must complete, under a watchdog that fails rather than hangs.
pub fn callers_waiting_for_shared_send_slots(addr: &str, transport: TransportKind) {
    let addr = addr.to_string();
    with_watchdog(
        "waiting for shared send slots",
        Duration::from_secs(300),
        move || {
            let server = Server::builder()
                .ring(RING)
                .shared_rings(Some(SharedRings {
                    send_slots: 3,
                    ..SharedRings::DEFAULT
                }))
                .workers(4)
                .add_service(TortureServer::new(TortureService::default()))
                .start(&addr, transport)
                .expect("server starts");
            let clients: Vec<_> = (0..3).map(|_| connect(&server, transport)).collect();
            std::thread::scope(|s| {
                for client in &clients {
                    s.spawn(|| concurrent_calls(client, 2, 16, 1_000));
                }
            });
            for client in &clients {
                message_sizes(client);
            }
        },
    );
}

/// A call whose handler outlives its timeout fails with DEADLINE_EXCEEDED promptly, and the
/// connection stays usable. (The handler outlasts the deadline by seconds: "promptly" must
/// hold on a machine that stalls a thread for hundreds of ms.)
pub fn deadline(client: &TortureClient) {
    let t0 = Instant::now();
    let err = client
        .sleep(
            Request::new(SleepRequest {
                millis: 3_000,
                micros: 0,
            })
            .with_timeout(Duration::from_millis(100)),
        )
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(
        t0.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        t0.elapsed()
    );
    let req = payload(77, 10);
    assert_eq!(client.echo(req.clone()).unwrap().into_inner(), req);
}

/// Statuses cross the wire; a handler panic gives INTERNAL and the server keeps serving; a
/// server stream delivers its messages and ends OK.
pub fn statuses(client: &TortureClient) {
    let err = client.panic(Nothing {}).unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    let err = client
        .fail(FailRequest {
            code: Code::NotFound as u32,
            message: "no such thing: ünïcode".to_string(),
        })
        .unwrap_err();
    assert_eq!(err, Status::not_found("no such thing: ünïcode"));
    let copies: Vec<Payload> = client
        .watch(payload(1, 1))
        .expect("a server stream")
        .into_inner()
        .into_blocking_iter()
        .collect::<Result<_, _>>()
        .expect("three copies, then OK");
    assert_eq!(copies, vec![payload(1, 1); 3]);
    let req = payload(5, 100);
    assert_eq!(client.echo(req.clone()).unwrap().into_inner(), req);
}

/// Stopping the server while calls are outstanding fails them with UNAVAILABLE, never a hang.
pub fn server_stopped_mid_run(server: Server, client: &TortureClient) {
    let mut futures = torture_client::TortureClient::from(client.clone());
    let slow: Vec<_> = (0..4)
        .map(|_| {
            futures.sleep(SleepRequest {
                millis: 2000,
                micros: 0,
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    server.abort();
    for f in slow {
        let result = f.wait();
        let err = result.expect_err("a call outstanding when the server stopped");
        assert_eq!(err.code(), Code::Unavailable, "{err}");
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    let err = client.echo(payload(1, 1)).unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}

/// Runs `f` on its own thread and fails the whole test process if it has not returned within
/// `limit`: a hang becomes a failure with a message instead of a stuck CI run.
pub fn with_watchdog<T: Send + 'static>(
    name: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(format!("watched-{name}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn the watched thread");
    match rx.recv_timeout(limit) {
        Ok(value) => {
            worker.join().expect("the watched thread");
            value
        }
        // The sender is gone without a value: `f` panicked; re-raise its panic here.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().expect_err("the watched thread panicked"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            // Straight to stderr: libtest captures `eprintln!` of the test thread.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "watchdog: {name} did not finish within {limit:?}: a hang; failing the test process"
            );
            std::process::exit(101);
        }
    }
}

/// Server for [`deadline_races`]: 16 workers, as the user who found the hang had.
pub fn serve_for_deadline_races(addr: &str, transport: TransportKind) -> Server {
    Server::builder()
        .ring(RING)
        .workers(16)
        .add_service(TortureServer::new(TortureService::default()))
        .start(addr, transport)
        .expect("server starts")
}

/// Replies racing their deadlines: `threads` threads each make `per_thread` blocking calls
/// with a 1 ms timeout to a handler that sleeps 900-1100 µs, so replies, deadline expiry and
/// cancellation interleave in every order. Every call must end with OK or DEADLINE_EXCEEDED,
/// none may hang (callers wrap this in [`with_watchdog`]), and the connection must still serve
/// a plain call afterwards. Returns (ok, deadline exceeded).
pub fn deadline_races(client: &TortureClient, threads: usize, per_thread: usize) -> (usize, usize) {
    let ok = AtomicUsize::new(0);
    let late = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (client, ok, late) = (client.clone(), &ok, &late);
            s.spawn(move || {
                for i in 0..per_thread {
                    let micros = 900 + ((t * per_thread + i) * 7919 % 201) as u32;
                    let req = Request::new(SleepRequest { millis: 0, micros })
                        .with_timeout(Duration::from_millis(1));
                    match client.sleep(req) {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) if e.code() == Code::DeadlineExceeded => {
                            late.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("call {i} of thread {t}: unexpected {e}"),
                    };
                }
            });
        }
    });
    let (ok, late) = (ok.into_inner(), late.into_inner());
    assert_eq!(ok + late, threads * per_thread);
    let req = payload(99, 100);
    assert_eq!(
        client
            .echo(req.clone())
            .expect("a plain call after the races")
            .into_inner(),
        req
    );
    (ok, late)
}
