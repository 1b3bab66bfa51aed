//! The TCP transport's event loop (one `rpc-tcp-io` thread per endpoint) against peers that
//! used to cost a thread or a stuck writer each: a HELLO dribbled a byte at a time (closed at
//! the 5 s total deadline), a peer that never reads its replies (stalls only itself; the server
//! keeps serving and its memory stays bounded), and many connections (the server's thread
//! count does not grow with them; 2,000 connections against a server in a child process).
//!
//! Every case runs under a watchdog that fails it instead of letting it hang, and the cases
//! run one at a time: live heap bytes and thread counts are the whole process's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
mod common;

use common::{closed_by_server, Blob};
use rpc_core::codegen::{
    self, IncomingRequest, MethodDescriptor, MethodKind, ReplySink, Service, ServiceDescriptor,
};
use rpc_core::protocol::v2::{flags, HELLO_LEN};
use rpc_core::protocol::{Header, Hello, Kind, HEADER_LEN};
use rpc_core::{Client, Request, Response, RingConfig, Server, TransportKind};
use rpc_sync::CountingAllocator;

static METHODS: [MethodDescriptor; 2] = [
    MethodDescriptor::new("ev.Svc", "Echo", "/ev.Svc/Echo", MethodKind::Unary),
    MethodDescriptor::new("ev.Svc", "Big", "/ev.Svc/Big", MethodKind::Unary),
];
static SERVICE: ServiceDescriptor = ServiceDescriptor {
    name: "ev.Svc",
    methods: &METHODS,
};

/// Size of a `Big` reply.
const BIG_REPLY: usize = 1 << 20;

/// `Echo` answers with the request; `Big` with [`BIG_REPLY`] bytes whatever it is asked.
struct TestService;

impl Service for TestService {
    fn descriptor(&self) -> &'static ServiceDescriptor {
        &SERVICE
    }
    fn call(&self, method: usize, request: IncomingRequest, reply: ReplySink) {
        if method == 0 {
            codegen::unary(request, reply, |r: Request<Blob>| {
                Ok(Response::new(r.into_inner()))
            })
        } else {
            codegen::unary(request, reply, |_: Request<Blob>| {
                Ok(Response::new(Blob {
                    data: vec![5; BIG_REPLY],
                }))
            })
        }
    }
}

/// Small rings: many connections cost little.
const SMALL: RingConfig = RingConfig {
    slot_count: 4,
    slot_size: 1024,
    max_message_size: 64 << 10,
    max_calls: 4,
    call_window: 64 << 10,
    max_metadata_size: 1024,
};

/// Handler workers of every server here.
const WORKERS: usize = 2;

fn serve(ring: RingConfig) -> Server {
    Server::builder()
        .ring(ring)
        .workers(WORKERS)
        .add_service(TestService)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap()
}

/// Live heap bytes for case (b).
#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// One case at a time (and every case takes it first, so no test thread comes or goes
/// while a case counts threads).
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `case` on a thread of its own and fails if it has not finished within `limit`.
fn with_watchdog(limit: Duration, case: impl FnOnce() + Send + 'static) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (done, finished) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        case();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => runner.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = runner.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: the case did not finish within {limit:?}")
        }
    }
}

/// A client's echo call of `len` bytes, checked.
fn good_call(client: &Client, len: usize) {
    let blob = Blob { data: vec![7; len] };
    let echoed: Blob = client
        .unary(&METHODS[0], Request::new(blob.clone()))
        .expect("a good client is served")
        .into_inner();
    assert_eq!(echoed, blob);
}

fn good_client(addr: &str) -> Client {
    Client::builder()
        .transport(TransportKind::Tcp)
        .timeout(Duration::from_secs(30))
        .connect(addr)
        .unwrap()
}

/// A HELLO frame announcing `slot_count` slots of `slot_size` bytes.
fn hello_frame(slot_count: u32, slot_size: u32) -> [u8; HEADER_LEN + HELLO_LEN] {
    Hello {
        slot_count,
        slot_size,
        max_message_size: 4 << 20,
        call_window: 16 << 20,
        ..RingConfig::DEFAULT.hello()
    }
    .to_frame()
}

/// A unary request frame (OPEN | END) for `method` carrying `message` whole.
fn request_frame(call_id: u64, method: &MethodDescriptor, message: &Blob) -> Vec<u8> {
    let payload = message.encode_to_vec();
    Header {
        flags: flags::OPEN | flags::END,
        call_id,
        code: codegen::method_id(method.path),
        message_len: payload.len() as u32,
        ..Header::new(Kind::Message)
    }
    .to_frame(&payload)
}

/// A raw peer that does the HELLO exchange properly and makes one echo call.
fn raw_echo_connection(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(&hello_frame(8, 4096)).unwrap();
    let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
    stream.read_exact(&mut theirs).unwrap();
    Hello::from_frame(&theirs).unwrap();
    let blob = Blob {
        data: b"ping".to_vec(),
    };
    stream
        .write_all(&request_frame(1, &METHODS[0], &blob))
        .unwrap();
    // Frames until the call's final one (a MESSAGE with END, or an END).
    loop {
        let mut hb = [0u8; HEADER_LEN];
        stream.read_exact(&mut hb).expect("a response frame");
        let h = Header::decode(&hb).unwrap();
        let mut payload = vec![0u8; h.segment_len as usize];
        stream.read_exact(&mut payload).unwrap();
        if h.kind == Kind::Message && h.has(flags::END) {
            assert_eq!(Blob::decode(&payload[..]).unwrap(), blob);
            return stream;
        }
        assert_ne!(h.kind, Kind::End, "the call failed: {h:?}");
    }
}

/// Threads of this process.
fn own_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The `Threads:` line of `/proc/PID/status`.
fn threads_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .expect("a Threads line")
        .trim()
        .parse()
        .unwrap()
}

/// Raises this process's open-file limit to its hard limit; returns the new soft limit.
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// (a) A peer sending a valid HELLO one byte per second is closed at the 5 s total
/// deadline, long before its 72 bytes could arrive, and a good client is served meanwhile.
#[test]
fn a_byte_per_second_hello_is_closed_at_the_deadline() {
    with_watchdog(Duration::from_secs(60), || {
        let server = serve(SMALL);
        let addr = server.local_addr().to_string();
        let mut slow = TcpStream::connect(&addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let dribbler = {
            let (mut out, sent, stop) = (
                slow.try_clone().unwrap(),
                Arc::clone(&sent),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                for byte in hello_frame(8, 4096) {
                    if stop.load(Ordering::Acquire) || out.write_all(&[byte]).is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::AcqRel);
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };

        // A good client connects while the HELLO trickles in, and is served.
        std::thread::sleep(Duration::from_secs(1));
        let client = good_client(&addr);
        good_call(&client, 100);

        // The server's HELLO, then the close: within 15 s of connecting (deadline 5 s).
        let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
        slow.read_exact(&mut theirs).unwrap();
        assert!(
            closed_by_server(&mut slow),
            "a HELLO dribbled at one byte per second was not closed within 15 s"
        );
        let arrived = sent.load(Ordering::Acquire);
        assert!(
            arrived < HEADER_LEN + HELLO_LEN,
            "closed only after the whole HELLO arrived ({arrived} bytes)"
        );
        stop.store(true, Ordering::Release);
        dribbler.join().unwrap();
        good_call(&client, 100);
        eprintln!("dribbled HELLO closed after {arrived} of 72 bytes");
    });
}

/// (b) A peer that sends valid requests for large replies and never reads stalls only its
/// own link: eight good clients keep completing calls, and the server's live heap grows by
/// less than the documented bound: the replies the peer could ask for (at most the
/// server's `slot_count - 1` calls, each reply encoded once and built once: 2 × 1 MiB) plus
/// 4 MiB for the good clients' calls and rings. The write queue itself adds nothing: it holds
/// the link's preallocated send slots.
#[test]
fn a_peer_that_never_reads_stalls_only_itself() {
    const RING: RingConfig = RingConfig {
        slot_count: 16,
        slot_size: 4096,
        max_message_size: 4 << 20,
        max_calls: 16,
        call_window: 64 << 10,
        max_metadata_size: 4096,
    };
    const CLIENTS: usize = 8;
    const CALLS: usize = 200;
    with_watchdog(Duration::from_secs(240), || {
        let server = serve(RING);
        let addr = server.local_addr().to_string();
        let clients: Vec<Client> = (0..CLIENTS).map(|_| good_client(&addr)).collect();
        for c in &clients {
            good_call(c, 1000);
        }
        let baseline = CountingAllocator::live_bytes();

        // The peer: a proper HELLO, then as many Big requests as its credits allow
        // (slot_count - 1: the last credit is the reserve), and it never reads again.
        let mut hostile = TcpStream::connect(&addr).unwrap();
        let small_rcvbuf: libc::c_int = 64 << 10;
        // SAFETY: a valid socket and a c_int option value of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                hostile.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&small_rcvbuf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        hostile.write_all(&hello_frame(1024, 64 << 10)).unwrap();
        let mut theirs = [0u8; HEADER_LEN + HELLO_LEN];
        hostile.read_exact(&mut theirs).unwrap();
        let server_hello = Hello::from_frame(&theirs).unwrap();
        let requests = server_hello.slot_count as u64 - 1;
        let ask = Blob { data: vec![1; 8] };
        for id in 1..=requests {
            hostile
                .write_all(&request_frame(id, &METHODS[1], &ask))
                .unwrap();
        }

        // Peak live bytes while the good clients work.
        let sampling = Arc::new(AtomicBool::new(true));
        let peak = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (sampling, peak) = (Arc::clone(&sampling), Arc::clone(&peak));
            std::thread::spawn(move || {
                while sampling.load(Ordering::Acquire) {
                    peak.fetch_max(CountingAllocator::live_bytes(), Ordering::AcqRel);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let workers: Vec<_> = clients
            .into_iter()
            .map(|client| {
                std::thread::spawn(move || {
                    for _ in 0..CALLS {
                        good_call(&client, 1000);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a good client completed all its calls");
        }
        // Give the stuck replies time to be built and queued, then measure once more.
        std::thread::sleep(Duration::from_millis(500));
        sampling.store(false, Ordering::Release);
        sampler.join().unwrap();
        peak.fetch_max(CountingAllocator::live_bytes(), Ordering::AcqRel);

        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int to the pointer.
        unsafe { libc::ioctl(hostile.as_raw_fd(), libc::FIONREAD, &mut unread) };
        let replies = requests as usize * BIG_REPLY;
        let growth = peak.load(Ordering::Acquire).saturating_sub(baseline);
        let bound = requests as usize * 2 * BIG_REPLY + (4 << 20);
        eprintln!(
            "never-reading peer: {unread} bytes unread in its socket of {replies} asked for; \
             server heap growth {growth} bytes (bound {bound})"
        );
        assert!(
            (unread as usize) < replies,
            "the replies all fit in the socket buffers: the write queue was not exercised"
        );
        assert!(
            growth < bound,
            "the server's live heap grew by {growth} bytes, more than the bound of {bound}"
        );
        drop(hostile);
    });
}

/// (c) 200 connections to an in-process server add no thread to the process.
#[test]
fn connections_add_no_threads() {
    with_watchdog(Duration::from_secs(120), || {
        let server = serve(SMALL);
        let addr = server.local_addr().to_string();
        // One connection first, so every lazily started thread exists.
        let first = raw_echo_connection(&addr);
        std::thread::sleep(Duration::from_millis(100));
        let before = own_threads();
        let conns: Vec<TcpStream> = (0..200).map(|_| raw_echo_connection(&addr)).collect();
        std::thread::sleep(Duration::from_millis(100));
        let after = own_threads();
        eprintln!("threads: {before} before 200 connections, {after} with them");
        assert!(
            after <= before + 2,
            "the thread count grew from {before} to {after} with 200 connections"
        );
        assert_eq!(server.connections(), 201);
        drop((first, conns));
    });
}

/// The environment variable that makes this test binary a server (for case d).
const CHILD_ENV: &str = "RPC_TCP_EVENT_LOOP_CHILD";
/// Connections of case (d).
const MANY: usize = 2000;

/// Not a test of its own: in a child started by case (d), serves until stdin closes.
#[test]
fn child_server() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    raise_nofile();
    let server = serve(SMALL);
    println!("LISTENING {}", server.local_addr());
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(server);
}

/// (d) 2,000 connections held open at once, each with a HELLO and a unary call, against a
/// server in a child process: its thread count stays at workers + a constant.
#[test]
fn two_thousand_connections_to_a_child_server() {
    with_watchdog(Duration::from_secs(300), || {
        let limit = raise_nofile();
        assert!(
            limit as usize > MANY + 100,
            "RLIMIT_NOFILE hard limit {limit} is too low for {MANY} connections"
        );
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            assert!(n > 0, "the child server exited before listening");
            // The harness may print `test child_server ... ` on the same line first.
            if let Some((_, addr)) = line.trim().split_once("LISTENING ") {
                break addr.to_string();
            }
        };
        let started = Instant::now();
        let conns: Vec<TcpStream> = (0..MANY).map(|_| raw_echo_connection(&addr)).collect();
        let threads = threads_of(child.id());
        eprintln!(
            "server_threads_2000_conns: {threads} (workers {WORKERS}; {MANY} connections \
             set up and called in {:?})",
            started.elapsed()
        );
        drop(child.stdin.take());
        drop(conns);
        let _ = child.wait();
        assert!(
            threads <= WORKERS + 8,
            "the server runs {threads} threads with {MANY} connections (workers {WORKERS})"
        );
    });
}

/// A peer whose last bytes and FIN arrive together (one readiness edge): the server reads
/// to the end of the stream and drops the connection, rather than taking the short read for
/// a drained socket and never hearing of the close (no keepalive to find it later).
#[test]
fn bytes_and_the_close_in_one_segment_close_the_connection() {
    with_watchdog(Duration::from_secs(30), || {
        let server = Server::builder()
            .workers(WORKERS)
            .keepalive(None)
            .add_service(TestService)
            .start("127.0.0.1:0", TransportKind::Tcp)
            .unwrap();
        let addr = server.local_addr().to_string();
        for round in 0..20 {
            let stream = raw_echo_connection(&addr);
            wait_until(&format!("round {round}: connected"), || {
                server.connections() == 1
            });
            // Corked, the part of a frame and the FIN leave as one segment.
            let cork: libc::c_int = 1;
            // SAFETY: a valid socket and option value of the size given.
            let set = unsafe {
                libc::setsockopt(
                    stream.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_CORK,
                    (&cork as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(set, 0, "TCP_CORK");
            (&stream).write_all(&[0u8; 10]).unwrap();
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            wait_until(&format!("round {round}: the close was seen"), || {
                server.connections() == 0
            });
            drop(stream);
        }
    });
}

/// Waits up to 10 s for `done()`, failing with `what` past it.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not within 10 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
