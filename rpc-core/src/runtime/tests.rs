//! End-to-end runtime tests with a hand-written service (no codegen), over the in-memory and
//! TCP transports.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::codegen::{
    self, IncomingRequest, MethodDescriptor, MethodKind, ReplySink, Service, ServiceDescriptor,
};
use crate::{
    Client, Code, Execution, Request, Response, RingConfig, Server, Status, TransportKind,
};

#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(bytes = "vec", tag = "1")]
    data: Vec<u8>,
    #[prost(uint64, tag = "2")]
    sleep_ms: u64,
}

static METHODS: [MethodDescriptor; 3] = [
    MethodDescriptor::new("t.Test", "Echo", "/t.Test/Echo", MethodKind::Unary),
    MethodDescriptor::new("t.Test", "Panic", "/t.Test/Panic", MethodKind::Unary),
    MethodDescriptor::new(
        "t.Test",
        "Stream",
        "/t.Test/Stream",
        MethodKind::ServerStreaming,
    ),
];
static SERVICE: ServiceDescriptor = ServiceDescriptor {
    name: "t.Test",
    methods: &METHODS,
};
static UNKNOWN: MethodDescriptor =
    MethodDescriptor::new("t.Test", "Nope", "/t.Test/Nope", MethodKind::Unary);

struct TestService {
    calls: Arc<AtomicUsize>,
}

impl Service for TestService {
    fn descriptor(&self) -> &'static ServiceDescriptor {
        &SERVICE
    }
    fn call(&self, index: usize, request: IncomingRequest, reply: ReplySink) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match index {
            0 => codegen::unary(request, reply, |r: Request<Msg>| {
                let m = r.into_inner();
                std::thread::sleep(Duration::from_millis(m.sleep_ms));
                Ok(Response::new(m))
            }),
            1 => codegen::unary(
                request,
                reply,
                |_: Request<Msg>| -> Result<Response<Msg>, Status> { panic!("boom") },
            ),
            _ => codegen::server_streaming(request, reply, |r: Request<Msg>| {
                let m = r.into_inner();
                Ok(Response::new(vec![Ok(m.clone()), Ok(m)]))
            }),
        }
    }
}

fn serve(addr: &str, ring: RingConfig) -> Server {
    Server::builder()
        .ring(ring)
        .workers(2)
        .add_service(TestService {
            calls: Arc::new(AtomicUsize::new(0)),
        })
        .method_execution("/t.Test/Panic", Execution::Inline)
        .start(addr, TransportKind::Tcp)
        .expect("serve")
}

fn msg(len: usize, seed: u8) -> Msg {
    Msg {
        data: (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect(),
        sleep_ms: 0,
    }
}

fn exercise(addr: &str, ring: RingConfig, spin: Duration) {
    let server = serve(addr, ring);
    let client = Client::builder()
        .transport(TransportKind::Tcp)
        .ring(ring)
        .spin(spin)
        .connect(server.local_addr())
        .expect("connect");
    let slot_payload = ring.slot_size as usize - crate::protocol::HEADER_LEN;
    for len in [
        0,
        1,
        slot_payload - 10,
        slot_payload,
        slot_payload + 1,
        100_000,
    ] {
        let m = msg(len, 3);
        let r: Msg = client
            .unary(&METHODS[0], Request::new(m.clone()))
            .unwrap()
            .into_inner();
        assert_eq!(r, m, "echo of {len} bytes");
    }
    // Concurrency: 4 threads x 50 calls, every reply checked.
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let client = client.clone();
            s.spawn(move || {
                for i in 0..50usize {
                    let m = msg(i * 13 % 700, t);
                    let r: Msg = client
                        .unary(&METHODS[0], Request::new(m.clone()))
                        .unwrap()
                        .into_inner();
                    assert_eq!(r, m);
                }
            });
        }
    });
    // Async form, many outstanding.
    let futures: Vec<_> = (0..40)
        .map(|i| {
            let m = msg(i, 9);
            (
                m.clone(),
                client.unary_async::<Msg, Msg>(&METHODS[0], Request::new(m)),
            )
        })
        .collect();
    for (m, f) in futures {
        assert_eq!(f.wait().unwrap().into_inner(), m);
    }
    // Statuses.
    let err = client
        .unary::<Msg, Msg>(&METHODS[1], Request::new(msg(1, 0)))
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    let err = client
        .unary::<Msg, Msg>(&UNKNOWN, Request::new(msg(1, 0)))
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err}");
    // A unary call of a server-streaming method that sends two messages fails INTERNAL;
    // the streaming call gets both.
    let err = client
        .unary::<Msg, Msg>(&METHODS[2], Request::new(msg(1, 0)))
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    let copies: Vec<Msg> = client
        .server_streaming::<Msg, Msg>(&METHODS[2], Request::new(msg(700, 4)))
        .unwrap()
        .into_inner()
        .into_blocking_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(copies, vec![msg(700, 4); 2]);
    // Deadline.
    // The handler outlasts the deadline by far: the caller's return shows it did not wait
    // for the handler, even on a machine that stalls threads for hundreds of ms.
    let slow = Msg {
        sleep_ms: 1_000,
        ..msg(1, 0)
    };
    let t0 = Instant::now();
    let err = client
        .unary::<Msg, Msg>(
            &METHODS[0],
            Request::new(slow.clone()).with_timeout(Duration::from_millis(50)),
        )
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(
        t0.elapsed() < Duration::from_millis(800),
        "{:?}",
        t0.elapsed()
    );
    let err = client
        .unary_async::<Msg, Msg>(
            &METHODS[0],
            Request::new(slow).with_timeout(Duration::from_millis(50)),
        )
        .wait()
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    // The connection still works after all that.
    let m = msg(5, 1);
    assert_eq!(
        client
            .unary::<Msg, Msg>(&METHODS[0], Request::new(m.clone()))
            .unwrap()
            .into_inner(),
        m
    );
    // Server stopped: calls fail UNAVAILABLE rather than hang.
    server.shutdown();
    let err = client
        .unary::<Msg, Msg>(&METHODS[0], Request::new(msg(1, 0)))
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}

#[test]
fn tcp_end_to_end() {
    exercise(
        "127.0.0.1:0",
        RingConfig {
            slot_count: 8,
            slot_size: 1024,
            max_message_size: 1 << 20,
            ..RingConfig::DEFAULT
        },
        Duration::ZERO,
    );
}

/// Callers poll the completion queue themselves (one at a time, the others parked).
#[test]
fn memory_end_to_end_with_callers_driving_completions() {
    exercise(
        "mem:runtime-test",
        RingConfig {
            slot_count: 4,
            slot_size: 512,
            max_message_size: 1 << 20,
            ..RingConfig::DEFAULT
        },
        Duration::from_micros(200),
    );
}

#[test]
fn oversized_messages_are_refused_with_resource_exhausted() {
    let ring = RingConfig {
        slot_count: 8,
        slot_size: 1024,
        max_message_size: 10_000,
        ..RingConfig::DEFAULT
    };
    let server = serve("mem:oversized", ring);
    let client = Client::builder()
        .ring(ring)
        .connect(server.local_addr())
        .unwrap();
    let ok = msg(9_000, 1);
    assert_eq!(
        client
            .unary::<Msg, Msg>(&METHODS[0], Request::new(ok.clone()))
            .unwrap()
            .into_inner(),
        ok
    );
    let err = client
        .unary::<Msg, Msg>(&METHODS[0], Request::new(msg(10_001, 1)))
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
}

/// An inline handler runs on the server's poller thread, so no deadline tick can run while
/// it works: a handler that answers past the call's limit is still answered
/// DEADLINE_EXCEEDED, by the check made when its reply goes out (`expire_if_past`), not by a
/// tick (without that check, its reply went out as success).
#[test]
fn an_inline_handler_answering_past_the_deadline_is_deadline_exceeded() {
    let server = Server::builder()
        .timeout(Duration::from_millis(20))
        .add_service(TestService {
            calls: Arc::new(AtomicUsize::new(0)),
        })
        .method_execution("/t.Test/Echo", Execution::Inline)
        .start("mem:inline-past-deadline", TransportKind::Tcp)
        .expect("serve");
    let client = Client::builder().connect(server.local_addr()).unwrap();
    // No deadline of the client's: only the server's limit can end the call.
    let slow = Msg {
        sleep_ms: 300,
        ..msg(1, 0)
    };
    let err = client
        .unary::<Msg, Msg>(&METHODS[0], Request::new(slow))
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(err.message().contains("at the server"), "{err}");
}

/// A connection that closed is let go at once: its memory goes back to the server's budget,
/// and the server stops watching its calls' deadlines. Before, the poller kept the last
/// connection it had a completion from until another connection's came (with one client,
/// for good), and nothing told the endpoint that the closed one's deadlines were gone: an
/// idle server that had served calls with deadlines kept ticking every 10 ms.
#[test]
fn a_closed_connection_gives_back_its_memory_and_its_deadlines() {
    // In memory ("mem:") and over TCP.
    for addr in ["mem:closed-conn-let-go", "127.0.0.1:0"] {
        let server = serve(addr, RingConfig::default());
        let client = Client::builder()
            .timeout(Duration::from_secs(60))
            .connect(server.local_addr())
            .unwrap();
        for seed in 0..3 {
            let reply = client
                .unary::<Msg, Msg>(&METHODS[0], Request::new(msg(100, seed)))
                .unwrap();
            assert_eq!(reply.into_inner(), msg(100, seed));
        }
        assert!(
            server.memory().used() > 0,
            "{addr}: the connection holds memory"
        );
        drop(client);
        let until = Instant::now() + Duration::from_secs(20);
        while server.connections() > 0 || server.memory().used() > 0 || server.watches_deadlines() {
            assert!(
                Instant::now() < until,
                "{addr}: 20 s after the client left: {} connections, {} bytes of the budget \
                 in use, deadlines watched: {}",
                server.connections(),
                server.memory().used(),
                server.watches_deadlines()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server.shutdown();
    }
}
