//! The server-wide memory budget (docs/PROTOCOL.md §15) against the attack an independent
//! implementation of the protocol found: every connection opens 128 calls, each sending a
//! 4 MiB message to within one byte of complete, and holds them. Against a server with
//! `ServerBuilder` defaults (ring, limits, budget): over TCP with 1, 2, 4, 8 and 64 attacking
//! connections, over verbs (in the Soft-RoCE VM) with 1, 4 and 8. The process's heap
//! (counting allocator) and what each run adds to its RSS stay within the budget plus
//! [`OVERHEAD`], the server's reserved bytes within the budget, and a good client on a new
//! connection completes 100 calls while the attack holds. A message that stalls in reassembly is dropped after the
//! default 10 s with RESOURCE_EXHAUSTED and its bytes released.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rpc_core::codegen::method_id;
use rpc_core::protocol::v2::flags;
use rpc_core::protocol::{Header, Kind};
use rpc_core::transport::verbs::verbs_device_for;
use rpc_core::{Code, RingConfig, Server, TransportKind};
use rpc_sync::CountingAllocator;
use rpc_tests::attack::{self, Attacker, Outcome, TcpWire, VerbsWire};
use rpc_tests::scenarios::TortureService;
use rpc_tests::testing::torture_server::TortureServer;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// One case at a time: the heap count and the RSS are the whole process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// What the process holds beyond the budget, at most (docs/PROTOCOL.md §15 documents it):
/// the test harness, the attackers' own rings and buffers, the good client's connection,
/// the server's threads and tables, and what the allocator keeps of freed memory.
const OVERHEAD: usize = 128 << 20;

const ECHO: u32 = method_id("/testing.Torture/Echo");

/// A server with every default but the stall timeout: nothing the attack holds may be
/// released before it is measured (the stall timeout has its own test).
fn serve(addr: &str, transport: TransportKind) -> Server {
    Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .stall_timeout(None)
        .start(addr, transport)
        .expect("server starts")
}

fn check(outcome: &Outcome) {
    eprintln!("{outcome:?}");
    let Outcome {
        connections,
        accepted,
        reserved,
        budget,
        floor,
        heap_peak,
        rss_start,
        rss_peak,
        good_calls,
        ..
    } = *outcome;
    assert_eq!(
        good_calls, 100,
        "the good client is served during the attack"
    );
    assert!(accepted >= 1, "messages within the budget are accepted");
    assert!(
        reserved <= budget,
        "{reserved} bytes reserved, budget {budget}"
    );
    // Half the budget is all the connections may borrow beyond their floors.
    let message = RingConfig::default().max_message_size as usize;
    assert!(
        accepted * message <= budget / 2 + connections * floor,
        "{accepted} messages of {message} bytes accepted with a budget of {budget}"
    );
    assert!(
        heap_peak <= budget + OVERHEAD,
        "heap peak {heap_peak} above the budget {budget} + {OVERHEAD}"
    );
    // What this run made resident: the cases run one after another in this process, each
    // with a server of its own, and glibc keeps what the threads of an earlier one freed in
    // their arenas (resident, but no longer the heap's: `heap_peak` does not count it).
    let rss_growth = rss_peak.saturating_sub(rss_start);
    assert!(
        rss_growth <= budget + OVERHEAD,
        "RSS grew by {rss_growth} (from {rss_start} to {rss_peak}), above the budget {budget} + {OVERHEAD}"
    );
}

#[test]
fn the_budget_holds_against_unfinished_4_mib_messages_over_tcp() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for connections in [1, 2, 4, 8, 64] {
        let server = serve("127.0.0.1:0", TransportKind::Tcp);
        assert_eq!(server.memory().limit(), rpc_core::default_memory_budget());
        let addr = server.local_addr().to_string();
        let outcome = attack::run(
            &server,
            TransportKind::Tcp,
            connections,
            ECHO,
            CountingAllocator::live_bytes,
            |_| TcpWire::connect(&addr, RingConfig::default()),
        );
        check(&outcome);
        server.shutdown();
    }
}

#[test]
fn verbs_the_budget_holds_against_unfinished_4_mib_messages() {
    let ip = std::env::var("RPC_TEST_VERBS_ADDR").unwrap_or_else(|_| "192.0.2.1".into());
    let probe: SocketAddr = format!("{ip}:0").parse().unwrap();
    if !matches!(verbs_device_for(&probe), Ok(Some(_))) {
        assert!(
            std::env::var("RPC_TEST_VERBS").as_deref() != Ok("1"),
            "RPC_TEST_VERBS=1 but no RDMA device serves {ip}"
        );
        eprintln!("skipped: no RDMA device serves {ip} (run inside scripts/softroce-vm)");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The server's warnings (a refused connection, a violation) say why an attacker failed.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    for connections in [1, 4, 8] {
        let server = serve(&format!("{ip}:0"), TransportKind::Verbs);
        let addr: SocketAddr = server.local_addr().parse().unwrap();
        let outcome = attack::run(
            &server,
            TransportKind::Verbs,
            connections,
            ECHO,
            CountingAllocator::live_bytes,
            |id| VerbsWire::connect(addr, RingConfig::default(), id),
        );
        check(&outcome);
        server.shutdown();
    }
}

#[test]
fn a_message_stalled_in_reassembly_is_dropped_after_the_default_timeout() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap();
    let (wire, hello) = TcpWire::connect(server.local_addr(), RingConfig::default());
    let mut peer = Attacker::new(wire, hello);
    // Admitted: its rings and floor are reserved.
    while server.connections() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = server.memory().used();
    peer.send(
        Header {
            flags: flags::OPEN | flags::END,
            call_id: 1,
            code: ECHO,
            message_len: 1 << 20,
            segment_len: 4096,
            ..Header::new(Kind::Message)
        },
        &[1; 4096],
    );
    let started = Instant::now();
    // Keepalive goes on (PINGs answered); the message makes no progress.
    let refused = loop {
        let h = peer.read();
        if h.kind == Kind::End {
            break h;
        }
        if h.kind == Kind::Ping && !h.has(flags::ACK) {
            peer.ensure_credits();
            peer.send(
                Header {
                    flags: flags::ACK,
                    call_id: h.call_id,
                    ..Header::new(Kind::Ping)
                },
                &[],
            );
        }
    };
    let waited = started.elapsed();
    assert_eq!(refused.call_id, 1);
    assert_eq!(refused.code, Code::ResourceExhausted as u32);
    assert!(
        waited >= Duration::from_secs(9),
        "dropped after {waited:?}, before the 10 s timeout"
    );
    assert_eq!(
        server.memory().used(),
        before,
        "the stalled message's bytes are released"
    );
    server.shutdown();
}

/// The client side: a reply that stops arriving in the middle is dropped after the client's
/// stall timeout, its call fails RESOURCE_EXHAUSTED, and the server is sent CANCEL (8). The
/// server here is a raw peer that sends the first segment of a 1 MiB reply and no more.
#[test]
fn a_reply_stalled_in_reassembly_fails_its_call_at_the_client() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .write_all(&RingConfig::default().hello().to_frame())
            .unwrap();
        let mut hello = [0u8; rpc_core::protocol::HEADER_LEN + 32];
        stream.read_exact(&mut hello).unwrap();
        let wire = TcpWire::from_stream(stream.try_clone().unwrap());
        let mut peer = Attacker::new(wire, rpc_core::protocol::Hello::from_frame(&hello).unwrap());
        let request = loop {
            let h = peer.read();
            if h.kind == Kind::Message {
                break h;
            }
        };
        peer.send(
            Header {
                flags: flags::END,
                call_id: request.call_id,
                message_len: 1 << 20,
                segment_len: 4096,
                ..Header::new(Kind::Message)
            },
            &[0; 4096],
        );
        loop {
            let h = peer.read();
            if h.kind == Kind::Cancel {
                return h;
            }
        }
    });
    let client = rpc_core::Client::builder()
        .transport(TransportKind::Tcp)
        .stall_timeout(Some(Duration::from_secs(1)))
        .keepalive(None)
        .connect(&addr)
        .unwrap();
    let client = rpc_tests::testing::torture_client::blocking::TortureClient::new(client);
    let started = Instant::now();
    let status = client
        .echo(rpc_tests::scenarios::payload(1, 10))
        .expect_err("the reply never completes");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let cancel = server.join().unwrap();
    assert_eq!(cancel.code, Code::ResourceExhausted as u32);
}
