//! A hostile peer that speaks docs/PROTOCOL.md by hand, over TCP or over its own verbs link:
//! the memory attack an independent implementation found (every connection opens 128 calls,
//! each sending a 4 MiB message to within one byte of complete, and holds them), and what a
//! test measures while it holds: the server's reserved bytes, the process's heap (when the
//! test binary counts it) and RSS, and whether a good client is still served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::protocol::v2::{extension, flags};
use rpc_core::protocol::{Header, Hello, Kind, HEADER_LEN};
use rpc_core::transport::verbs::VerbsEndpoint;
use rpc_core::transport::{Completion, CompletionQueue, Link};
use rpc_core::{Code, RingConfig, Server, TransportKind};

use crate::scenarios::payload;
use crate::testing::torture_client::blocking::TortureClient;

/// Calls each attacking connection opens: the server's default `max_calls`.
pub const CALLS: u64 = 128;

/// How frames reach the server and come back, one whole frame at a time.
pub trait Wire: Send {
    /// Sends one frame; `Err` with the reason if the connection is closed (by the server, or
    /// by the test's own closer while this side still answers keepalive).
    fn send(&mut self, frame: &[u8]) -> Result<(), String>;
    /// The next frame from the server; `Err` with the reason once the connection is closed.
    fn recv(&mut self) -> Result<Vec<u8>, String>;
    /// Something another thread calls to close the connection (ending a blocked `recv`).
    fn closer(&self) -> Box<dyn FnOnce() + Send>;
}

/// A TCP connection that has exchanged HELLOs.
pub struct TcpWire {
    stream: TcpStream,
}

impl TcpWire {
    /// Connects to `addr` and exchanges HELLOs with `ring`; returns the wire and the
    /// server's HELLO.
    pub fn connect(addr: &str, ring: RingConfig) -> (TcpWire, Hello) {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.write_all(&ring.hello().to_frame()).unwrap();
        let mut theirs = [0u8; HEADER_LEN + 32];
        stream.read_exact(&mut theirs).unwrap();
        (TcpWire { stream }, Hello::from_frame(&theirs).unwrap())
    }
}

impl TcpWire {
    /// A wire over a stream whose HELLOs were already exchanged.
    pub fn from_stream(stream: TcpStream) -> TcpWire {
        TcpWire { stream }
    }
}

impl Wire for TcpWire {
    fn send(&mut self, frame: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(frame)
            .map_err(|e| format!("closed: {e}"))
    }

    fn recv(&mut self) -> Result<Vec<u8>, String> {
        let closed = |e: std::io::Error| format!("closed: {e}");
        let mut frame = vec![0u8; HEADER_LEN];
        self.stream.read_exact(&mut frame).map_err(closed)?;
        let h = Header::decode(&frame).unwrap();
        frame.resize(HEADER_LEN + h.segment_len as usize, 0);
        self.stream
            .read_exact(&mut frame[HEADER_LEN..])
            .map_err(closed)?;
        Ok(frame)
    }

    fn closer(&self) -> Box<dyn FnOnce() + Send> {
        let stream = self.stream.try_clone().unwrap();
        Box::new(move || {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        })
    }
}

/// A verbs link of its own (its own endpoint and completion queue).
pub struct VerbsWire {
    _endpoint: Arc<VerbsEndpoint>,
    cq: Arc<dyn CompletionQueue>,
    link: Arc<dyn Link>,
    received: std::collections::VecDeque<Vec<u8>>,
    closed: Option<String>,
}

impl VerbsWire {
    /// Connects to `addr` with `ring` (HELLOs travel in the connection's private data).
    pub fn connect(addr: SocketAddr, ring: RingConfig, id: u64) -> (VerbsWire, Hello) {
        let endpoint = VerbsEndpoint::new().unwrap();
        let cq = endpoint.cq();
        let link = endpoint
            .connect(addr, ring, id, Duration::from_secs(20))
            .unwrap();
        let hello = link.peer_hello();
        let wire = VerbsWire {
            _endpoint: endpoint,
            cq,
            link,
            received: Default::default(),
            closed: None,
        };
        (wire, hello)
    }

    /// Takes what completed: frames are copied out (their slots re-posted), send slots come
    /// back. Waits up to `wait` when nothing is there.
    fn poll(&mut self, wait: Duration) {
        let mut out = Vec::new();
        if self.cq.poll(&mut out, 64) == 0 {
            self.cq.wait(Some(wait));
            self.cq.poll(&mut out, 64);
        }
        for c in out {
            match c {
                Completion::Recv { buf, .. } => self.received.push_back(buf.to_vec()),
                Completion::SendDone { .. } => {}
                Completion::Closed { reason, .. } => self.closed = Some(reason),
            }
        }
    }
}

impl Wire for VerbsWire {
    fn send(&mut self, frame: &[u8]) -> Result<(), String> {
        loop {
            if let Some(mut slot) = self.link.alloc_send() {
                slot[..frame.len()].copy_from_slice(frame);
                return self
                    .link
                    .post_send(slot, frame.len())
                    .map_err(|e| format!("closed: {e}"));
            }
            if let Some(reason) = &self.closed {
                return Err(format!("the connection closed: {reason}"));
            }
            self.poll(Duration::from_millis(10));
        }
    }

    fn recv(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(frame) = self.received.pop_front() {
                return Ok(frame);
            }
            if let Some(reason) = &self.closed {
                return Err(reason.clone());
            }
            self.poll(Duration::from_millis(50));
        }
    }

    fn closer(&self) -> Box<dyn FnOnce() + Send> {
        let link = Arc::clone(&self.link);
        Box::new(move || link.close())
    }
}

/// The attacker on one connection: it keeps count of the credits it holds and returns the
/// server's credits on every frame it sends (a correct peer as far as credits go).
pub struct Attacker<W: Wire> {
    wire: W,
    credits: u32,
    owed: u32,
    /// Calls the server ended (refused) so far.
    refused: Vec<u64>,
    /// What the attacker is doing (for a failure's message).
    phase: &'static str,
}

impl<W: Wire> Attacker<W> {
    /// The attacker on `wire`, whose server announced `server` in its HELLO.
    pub fn new(wire: W, server: Hello) -> Attacker<W> {
        Attacker {
            wire,
            credits: server.slot_count,
            owed: 0,
            refused: Vec::new(),
            phase: "connected",
        }
    }

    /// Sends a frame with the credits owed to the server. Panics if the connection is closed.
    pub fn send(&mut self, h: Header, payload: &[u8]) {
        if let Err(reason) = self.try_send(h, payload) {
            panic!("{}: {reason}", self.phase);
        }
    }

    /// [`Attacker::send`], `Err` with the reason if the connection is closed.
    fn try_send(&mut self, h: Header, payload: &[u8]) -> Result<(), String> {
        let h = Header {
            credits: std::mem::take(&mut self.owed) as u16,
            ..h
        };
        self.credits -= 1;
        self.wire.send(&h.to_frame(payload))
    }

    /// Reads one frame, noting the credits it returns, the slot it took (returned with our
    /// next frame) and an END (a refusal, RESOURCE_EXHAUSTED). Panics if the server closes.
    pub fn read(&mut self) -> Header {
        self.try_read().unwrap_or_else(|reason| {
            panic!(
                "the server stopped talking while {} (credits {}, owed {}): {reason}",
                self.phase, self.credits, self.owed
            )
        })
    }

    fn try_read(&mut self) -> Result<Header, String> {
        let frame = self.wire.recv()?;
        let h = Header::decode(&frame).unwrap();
        self.credits += u32::from(h.credits);
        self.owed += 1;
        if h.kind == Kind::End {
            assert_eq!(
                h.code,
                Code::ResourceExhausted as u32,
                "a refusal is RESOURCE_EXHAUSTED"
            );
            self.refused.push(h.call_id);
        }
        // Credits owed go back at once (PROTOCOL.md §7.4): half our slots' worth, in a CREDIT
        // frame if nothing else is going out.
        if self.owed >= RingConfig::default().slot_count / 2 && self.credits >= 1 {
            self.send(Header::new(Kind::Credit), &[]);
        }
        Ok(h)
    }

    /// Waits until 2 credits are held (returning ours in a CREDIT frame if that is all we
    /// may send).
    pub fn ensure_credits(&mut self) {
        while self.credits < 2 {
            if self.credits == 1 && self.owed >= 2 {
                self.send(Header::new(Kind::Credit), &[]);
                continue;
            }
            self.read();
        }
    }

    /// Reads what the server sent until a PING of ours is answered with no new refusal:
    /// every frame the server queued before it is here.
    fn settle(&mut self) {
        for round in 1u64.. {
            self.ensure_credits();
            let refused = self.refused.len();
            self.send(
                Header {
                    call_id: round,
                    ..Header::new(Kind::Ping)
                },
                &[],
            );
            loop {
                let h = self.read();
                if h.kind == Kind::Ping && h.has(flags::ACK) && h.call_id == round {
                    break;
                }
            }
            if self.refused.len() == refused {
                return;
            }
        }
    }

    /// The attack: `CALLS` calls of `method`, each opening a message of the server's
    /// `max_message_size`, then every message the server accepted sent to within one byte of
    /// complete. Returns how many the server accepted.
    pub fn attack(&mut self, method: u32, server: Hello) -> usize {
        let segment = server.slot_size - HEADER_LEN as u32;
        let server_max_message = server.max_message_size;
        let chunk = vec![0x5a; segment as usize];
        let message_len = server_max_message;
        assert!(message_len > segment, "the message takes several segments");
        let header = |call: u64, offset: u32, len: u32| Header {
            flags: flags::OPEN | flags::END,
            call_id: call,
            code: method,
            message_len,
            segment_offset: offset,
            segment_len: len,
            ..Header::new(Kind::Message)
        };
        // Shared credits, as this implementation's clients offer them (PROTOCOL.md §22.4): a
        // server of pooled slots then raises the grant while the attacker runs short, instead
        // of keeping it at the base of 3.
        self.phase = "offering shared credits";
        self.ensure_credits();
        self.send(
            Header {
                call_id: extension::offer(extension::SHARED_CREDITS),
                ..Header::new(Kind::Ping)
            },
            &[],
        );
        self.phase = "opening calls";
        for call in 1..=CALLS {
            self.ensure_credits();
            self.send(header(call, 0, segment), &chunk);
        }
        self.phase = "settling the openings";
        self.settle();
        let accepted: Vec<u64> = (1..=CALLS).filter(|c| !self.refused.contains(c)).collect();
        self.phase = "sending the accepted messages";
        for &call in &accepted {
            let mut offset = segment;
            while offset < message_len - 1 {
                let len = segment.min(message_len - 1 - offset);
                self.ensure_credits();
                self.send(header(call, offset, len), &chunk[..len as usize]);
                offset += len;
            }
        }
        self.phase = "settling the messages";
        self.settle();
        self.phase = "holding";
        assert!(
            accepted.iter().all(|c| !self.refused.contains(c)),
            "a message the server accepted is not dropped while it makes progress"
        );
        accepted.len()
    }

    /// Holds the connection (answering keepalive PINGs, so the server keeps it) until it is
    /// closed: by the server, or by the test's closer, which may shut the socket between a
    /// PING read and its answer.
    pub fn hold(&mut self) {
        while let Ok(h) = self.try_read() {
            if h.kind == Kind::Ping && !h.has(flags::ACK) && self.credits >= 2 {
                let ack = Header {
                    flags: flags::ACK,
                    call_id: h.call_id,
                    ..Header::new(Kind::Ping)
                };
                if self.try_send(ack, &[]).is_err() {
                    return;
                }
            }
        }
    }
}

/// The process's resident set: now and at its peak (`VmRSS`, `VmHWM`).
pub fn rss() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> usize {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<usize>()
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Samples a byte count (the test's counting allocator) every millisecond until stopped.
pub struct Peak {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Peak {
    /// Starts sampling `count`.
    pub fn start(count: fn() -> usize) -> Peak {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(count()));
        let thread = {
            let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(count(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        Peak {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stops and returns the peak.
    pub fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.peak.load(Ordering::Relaxed)
    }
}

/// What one run of the attack measured.
#[derive(Debug)]
pub struct Outcome {
    /// Attacking connections.
    pub connections: usize,
    /// Messages the server accepted (reserved) in all.
    pub accepted: usize,
    /// Bytes the server had reserved from its budget while the attack held.
    pub reserved: usize,
    /// The server's budget.
    pub budget: usize,
    /// Bytes one connection may take beyond its rings (its floor).
    pub floor: usize,
    /// Peak of the sampled heap count.
    pub heap_peak: usize,
    /// The process's RSS when the run started: what earlier runs in this process left
    /// resident (the allocator keeps freed memory of threads that are gone).
    pub rss_start: usize,
    /// The process's RSS peak (`VmHWM`) during the run.
    pub rss_peak: usize,
    /// The good client's calls that succeeded, of 100.
    pub good_calls: usize,
    /// How long the attack and the good client took.
    pub took: Duration,
}

/// Runs the attack with `connections` connections (each from `connect`) against `server`,
/// then, while they hold, 100 echo calls of a good client of `transport` on a new
/// connection; then lets the attackers go. `heap` is the test's byte count.
pub fn run<W: Wire + 'static>(
    server: &Server,
    transport: TransportKind,
    connections: usize,
    method: u32,
    heap: fn() -> usize,
    connect: impl Fn(u64) -> (W, Hello),
) -> Outcome {
    let started = Instant::now();
    // The RSS peak of this run alone (Linux resets VmHWM to the current RSS on "5").
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (rss_start, _) = rss();
    let peak = Peak::start(heap);
    let (report, reports) = std::sync::mpsc::channel();
    let mut closers = Vec::new();
    let threads: Vec<_> = (0..connections as u64)
        .map(|i| {
            let (wire, hello) = connect(i + 1);
            closers.push(wire.closer());
            let report = report.clone();
            std::thread::spawn(move || {
                let mut attacker = Attacker::new(wire, hello);
                report.send(attacker.attack(method, hello)).unwrap();
                // Gone before holding: the reports end when every attacker reported or died.
                drop(report);
                attacker.hold();
            })
        })
        .collect();
    drop(report);
    let accepted: Vec<usize> = reports.iter().take(connections).collect();
    assert_eq!(accepted.len(), connections, "an attacker failed");
    let accepted = accepted.into_iter().sum();
    let reserved = server.memory().used();
    assert_eq!(server.connections(), connections, "the attack holds");
    let client = rpc_core::Client::builder()
        .transport(transport)
        .timeout(Duration::from_secs(30))
        .connect(server.local_addr())
        .expect("a good client is admitted during the attack");
    let client = TortureClient::new(client);
    let good_calls = (0..100u64)
        .filter(|&n| {
            let req = payload(n, 1000);
            client
                .echo(req.clone())
                .map(|r| r.into_inner() == req)
                .unwrap_or_else(|s| panic!("a good call failed during the attack: {s}"))
        })
        .count();
    let heap_peak = peak.stop();
    let (_, rss_peak) = rss();
    for close in closers {
        close();
    }
    for thread in threads {
        thread.join().expect("an attacker failed");
    }
    Outcome {
        connections,
        accepted,
        reserved,
        budget: server.memory().limit(),
        floor: server.memory().floor(),
        heap_peak,
        rss_start,
        rss_peak,
        good_calls,
        took: started.elapsed(),
    }
}
