//! The TCP transport: the same slot rings and completions as verbs, over sockets driven by one
//! event loop per endpoint.
//!
//! **One I/O thread per endpoint** (`rpc-tcp-io`, a [`mio::Poll`]) watches the listener (a
//! server's) and every socket of the endpoint, so a server holds any number of connections
//! with a fixed number of threads. On that thread happen: accepting, the HELLO exchange, and all
//! reads. A frame is read straight into a posted receive slot (through one 64 KiB read buffer
//! shared by all the loop's sockets, or directly into the slot for the rest of a large
//! payload) and its completion is pushed to the endpoint's queue; after each read the I/O
//! thread drives the endpoint itself when no other thread is polling
//! (`ChannelCq::drive`), so a reply is sent without waking the poller. A frame larger than
//! the slot size, or a frame for which no slot is posted (a credit overrun), closes the link.
//!
//! **HELLO deadline.** Each side writes its HELLO right after connect / accept. The peer's
//! whole 72-byte HELLO frame must have arrived within [`HELLO_DEADLINE`] (5 s) of the accept
//! (server) or of the hand-over to the loop after connect (client), in total: the loop keeps
//! the deadlines in arrival order and sleeps in `poll` at most until the nearest one, so a peer
//! that dribbles its HELLO a byte at a time is closed at 5 s. With no handshake pending, the
//! loop sleeps in `poll` without a timeout (an idle server costs no CPU). An invalid HELLO is
//! refused as `docs/PROTOCOL.md` §4.4 says: nothing more is sent and the socket is closed; a
//! HELLO whose first bytes are not `RP` and version 2 (a version 1 peer's, an HTTP request) is
//! refused as soon as those bytes arrive.
//!
//! **Writes** never block and never happen under a lock. A posted frame (a send slot) goes
//! into the link's write queue; whoever holds the turn of the link's writer
//! ([`rpc_sync::Flusher`]: one writer at a time, nobody waits for it) writes queued frames with non-blocking `writev` calls, without holding
//! any lock. The posting thread tries at once (with an empty queue the frame goes out from the
//! poster, the latency path); what the socket does not take stays queued, and the I/O thread
//! finishes it when the socket becomes writable again (the poster stalls the flusher and hands
//! over with a [`mio::Waker`]). A peer that stops reading stalls only its own link: no thread waits on its
//! socket. The write queue is bounded: a queued frame holds one of the link's send slots, so
//! at most the local `slot_count` frames of at most `peer slot_size` bytes are ever queued (and
//! no more than the peer's credits, which a peer of shared credits may raise past its HELLO's
//! `slot_count`, §22.4); the queue is allocated at that size when the link
//! is set up and a post beyond it closes the link with an error instead of growing. Frames
//! written after a stall free their slots and a `SendDone` completion tells the runtime.
//!
//! Dropping the acceptor (server) or the connector (client) stops the I/O thread once the
//! links it serves are closed.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};
use crossbeam::queue::{ArrayQueue, SegQueue};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use rpc_sync::{assert_unlocked, Count, Flag, FlushTurn, Flusher};

use super::heap::{ChannelCq, HeapLink, HeapLinkParts, HeapRecvRing, HeapShared};
use super::{
    AcceptStopper, Acceptor, Completion, CompletionQueue, Http2Handoff, Link, LinkId, RingConfig,
    SendBuf, SharedRings, ThreadContext,
};
use crate::protocol::v2::{Hello, HEADER_LEN, HELLO_LEN};
use crate::Error;

/// How long a peer has, in total, to deliver its whole HELLO frame after accept / connect.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// Bytes of a HELLO frame on TCP (`docs/PROTOCOL.md` §4.2).
const HELLO_FRAME_LEN: usize = HEADER_LEN + HELLO_LEN;
/// What an HTTP/2 client sends first (RFC 9113 §3.4): a server's port hands a client that
/// sent it whole over to standard gRPC (`docs/PROTOCOL.md` §4.5).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The first byte of a TLS connection: the content type of a handshake record.
pub(crate) const TLS_HANDSHAKE: u8 = 22;
/// The loop's read buffer, shared by all its sockets.
const READ_BUFFER: usize = 64 << 10;
/// Bytes read from one socket per readiness before the loop serves the others (it comes back
/// to a socket that had more at the next turn).
const READ_BUDGET: usize = 256 << 10;
/// The rest of a payload at least this long is read into its slot directly.
const DIRECT_READ: usize = 4096;
/// Connections accepted per readiness of the listener before the others are served.
const ACCEPT_BUDGET: usize = 256;
/// Frames gathered into one `writev`.
const MAX_IOVECS: usize = 32;
/// Back-off before accepting again after `accept` failed (e.g. out of file descriptors).
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// What the I/O thread's owners and links share with it.
struct IoShared {
    waker: Waker,
    commands: SegQueue<Command>,
    /// Acceptors and connectors holding the loop; at 0 it stops once its links are closed.
    owners: Count,
    cq: Arc<ChannelCq>,
    thread: std::sync::OnceLock<ThreadId>,
}

impl IoShared {
    fn command(&self, command: Command) {
        self.commands.push(command);
        if let Err(e) = self.waker.wake() {
            tracing::error!(error = %e, "cannot wake the TCP I/O thread");
        }
    }
}

enum Command {
    /// A client socket, connected: do the HELLO exchange and answer on `reply`.
    Connect {
        stream: TcpStream,
        id: LinkId,
        ring: RingConfig,
        reply: Sender<Result<Arc<dyn Link>, Error>>,
    },
    /// A poster found the socket full: write the link's queue when it is writable.
    Flush(Arc<TcpConn>),
    /// The last owner is gone.
    Stop,
}

/// Keeps an endpoint's I/O thread running; the thread stops (once its links are closed) when
/// the last handle is dropped.
struct IoHandle {
    shared: Arc<IoShared>,
}

impl IoHandle {
    /// Starts the I/O thread, with `listener` for a server.
    /// Starts the I/O thread; `context` wraps its loop (a server's
    /// `ServerBuilder::thread_context`: inline handlers run on this thread).
    fn start(
        cq: Arc<ChannelCq>,
        listener: Option<Listening>,
        context: Option<ThreadContext>,
    ) -> Result<IoHandle, Error> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let shared = Arc::new(IoShared {
            waker,
            commands: SegQueue::new(),
            owners: Count::new(1),
            cq,
            thread: std::sync::OnceLock::new(),
        });
        let mut io = IoLoop {
            poll,
            shared: Arc::clone(&shared),
            listener,
            conns: HashMap::new(),
            next_token: FIRST_CONN,
            hello_deadlines: VecDeque::new(),
            again: Vec::new(),
            buf: vec![0u8; READ_BUFFER].into_boxed_slice(),
            stopping: false,
            accept_retry: None,
        };
        if let Some(l) = io.listener.as_mut() {
            io.poll
                .registry()
                .register(&mut l.listener, LISTENER, Interest::READABLE)?;
        }
        let handle = std::thread::Builder::new()
            .name("rpc-tcp-io".to_string())
            .spawn(move || {
                let mut io = Some(io);
                let mut run = || {
                    if let Some(io) = io.take() {
                        io.run();
                    }
                };
                match context {
                    Some(context) => context(&mut run),
                    None => run(),
                }
            })?;
        let _ = shared.thread.set(handle.thread().id());
        Ok(IoHandle { shared })
    }
}

impl Drop for IoHandle {
    fn drop(&mut self) {
        if self.shared.owners.sub(1) == 1 {
            self.shared.command(Command::Stop);
        }
    }
}

/// One link's socket and write queue, shared by the link handle (posting threads) and the I/O
/// thread (reads, and writes after a stall).
struct TcpConn {
    parts: HeapLinkParts,
    stream: TcpStream,
    /// Frames posted and not yet taken by a writer.
    queue: ArrayQueue<(SendBuf, usize)>,
    /// Frames posted and not completely written (the queue and the writer's): at most
    /// `bound`.
    unsent: Count,
    /// The local `slot_count`: each unsent frame holds one of the link's send slots.
    bound: usize,
    /// Whoever holds its turn writes; nobody waits for it. Stalled when a write met a full
    /// socket: posters then leave their frames to the I/O thread, which writes when the
    /// socket becomes writable (asked once per stall with a [`Command::Flush`]).
    writer: Flusher<WriteState>,
    closed: Flag,
    io: Arc<IoShared>,
}

/// The writer's frames: taken from the queue in order, the first one written up to `offset`.
struct WriteState {
    frames: VecDeque<(SendBuf, usize)>,
    offset: usize,
}

/// How a round of writing ended.
enum Wrote {
    /// Everything queued is written.
    Drained,
    /// The socket is full.
    Blocked,
    /// The socket failed.
    Failed(io::Error),
}

impl TcpConn {
    fn post(self: &Arc<Self>, buf: SendBuf, len: usize) -> Result<(), Error> {
        self.enqueue(buf, len)?;
        self.flush_posted()
    }

    /// Writes what `enqueue` queued, unless the writer's holder or the I/O thread (the
    /// writer stalled) will.
    fn flush_posted(self: &Arc<Self>) -> Result<(), Error> {
        self.flush(self.writer.try_flush(), false)
            .map(drop)
            .map_err(Error::Io)
    }

    /// Puts a frame in the write queue (checked against the link's bounds) without writing.
    fn enqueue(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        if self.closed.is_raised() {
            return Err(Error::ConnectionClosed("the link is closed".to_string()));
        }
        let peer_slot = self.parts.peer.slot_size as usize;
        if len > peer_slot {
            return Err(Error::FrameTooLarge {
                len,
                slot_size: peer_slot,
            });
        }
        if !self.unsent.try_add_below(self.bound) {
            return Err(Error::ConnectionClosed(format!(
                "write queue bound exceeded: more than {} unsent frames (a frame posted \
                 without a send slot or a peer credit)",
                self.bound
            )));
        }
        if self.queue.push((buf, len)).is_err() {
            self.unsent.sub(1);
            return Err(Error::ConnectionClosed(format!(
                "write queue full ({} frames)",
                self.bound
            )));
        }
        Ok(())
    }

    /// Writes queued frames with the writer's `turn` (`None`: another thread writes them),
    /// for as long as frames are queued meanwhile. A poster that meets a full socket stalls
    /// the writer and hands the rest to the I/O thread; the I/O thread itself waits for
    /// writability. Returns how many frames were completed.
    fn flush(
        self: &Arc<Self>,
        mut turn: Option<FlushTurn<'_, WriteState>>,
        on_io_thread: bool,
    ) -> io::Result<usize> {
        let mut completed = 0;
        while let Some(mut writer) = turn {
            let (wrote, n) = writer.with(|w| self.write_queued(w));
            completed += n;
            match wrote {
                // Frames queued while it wrote keep the turn for another round.
                Wrote::Drained => turn = writer.finish(),
                Wrote::Blocked => {
                    if writer.stall(!on_io_thread) {
                        self.io.command(Command::Flush(Arc::clone(self)));
                    }
                    return Ok(completed);
                }
                Wrote::Failed(e) => return Err(e),
            }
        }
        Ok(completed)
    }

    /// Writes the writer's frames and then the queue's until done or the socket is full.
    fn write_queued(&self, w: &mut WriteState) -> (Wrote, usize) {
        let mut completed = 0;
        loop {
            // Never reallocates: frames + queue hold at most `bound` frames.
            while w.frames.len() < w.frames.capacity() {
                match self.queue.pop() {
                    Some(f) => w.frames.push_back(f),
                    None => break,
                }
            }
            if w.frames.is_empty() {
                return (Wrote::Drained, completed);
            }
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let mut count = 0;
            for (i, (buf, len)) in w.frames.iter().take(MAX_IOVECS).enumerate() {
                let from = if i == 0 { w.offset } else { 0 };
                slices[i] = IoSlice::new(&buf[from..*len]);
                count += 1;
            }
            assert_unlocked("writing to a TCP socket");
            match (&self.stream).write_vectored(&slices[..count]) {
                Ok(0) => {
                    return (
                        Wrote::Failed(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
                        completed,
                    )
                }
                Ok(mut n) => {
                    while n > 0 {
                        let left = w.frames[0].1 - w.offset;
                        if n < left {
                            w.offset += n;
                            break;
                        }
                        n -= left;
                        w.offset = 0;
                        // Uncounted before its slot goes back to the send pool: a frame
                        // posted in the freed slot at once must find room under `bound`.
                        let written = w.frames.pop_front();
                        self.unsent.sub(1);
                        drop(written);
                        completed += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return (Wrote::Blocked, completed)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Wrote::Failed(e), completed),
            }
        }
    }

    /// Closes the socket (idempotent); the I/O thread then reports the closure.
    fn shutdown(&self) {
        if self.closed.raise() {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The [`Link`] handed to the runtime; dropping it closes the link.
struct TcpLink {
    conn: Arc<TcpConn>,
}

impl HeapLink for TcpLink {
    fn parts(&self) -> &HeapLinkParts {
        &self.conn.parts
    }

    fn transmit(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        self.conn.post(buf, len)
    }

    fn transmit_batched(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        self.conn.enqueue(buf, len)
    }

    fn flush(&self) -> Result<(), Error> {
        self.conn.flush_posted()
    }

    fn shutdown(&self) {
        self.conn.shutdown();
    }
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        self.conn.shutdown();
    }
}

/// Where an established link goes.
enum Destination {
    /// A server's: the acceptor's channel.
    Acceptor,
    /// A client's connect call.
    Client(Sender<Result<Arc<dyn Link>, Error>>),
}

/// A socket whose peer's HELLO is still arriving.
struct Handshake {
    stream: TcpStream,
    id: LinkId,
    setup: LinkSetup,
    frame: [u8; HELLO_FRAME_LEN],
    got: usize,
    peer_name: String,
    destination: Destination,
    /// Whether our HELLO went out: a client's at once; a server's once the client's first
    /// byte showed it speaks this protocol (an HTTP/2 client is handed over instead).
    hello_sent: bool,
}

impl Handshake {
    /// The peer's first bytes (the second 0 if it has not come), if they are not this
    /// protocol's magic: it speaks another protocol (an HTTP/2 server's SETTINGS frame, say),
    /// which a client told so may try standard gRPC instead. The magic check `read_hello`
    /// made, on the magic's bytes alone (not the version after them).
    fn foreign_magic(&self) -> Option<[u8; 2]> {
        let magic_seen = &self.frame[..self.got.min(2)];
        Hello::check_frame_start(magic_seen)
            .is_err()
            .then_some([self.frame[0], self.frame[1]])
    }
}

/// An established link's read side: the frame being read.
struct Reading {
    conn: Arc<TcpConn>,
    header: [u8; HEADER_LEN],
    header_got: usize,
    /// The slot the current frame goes into, its length and the bytes read so far.
    slot: Option<(Box<[u8]>, usize, usize)>,
}

enum Entry {
    Hello(Box<Handshake>),
    Open(Reading),
}

/// What a link is built with: its ring configuration, and for a server of shared slots those
/// slots and the link's grant of them.
struct LinkSetup {
    ring: RingConfig,
    shared: Option<(Arc<HeapShared>, rpc_proto::Grant)>,
}

impl LinkSetup {
    fn hello(&self) -> Hello {
        match &self.shared {
            Some((shared, _)) => shared.hello(self.ring),
            None => self.ring.hello(),
        }
    }

    fn parts(self, id: LinkId, peer: Hello, peer_name: String) -> HeapLinkParts {
        match self.shared {
            Some((shared, grant)) => {
                HeapLinkParts::shared(id, (self.ring, &shared, grant), peer, peer_name)
            }
            None => HeapLinkParts::new(id, self.ring, peer, peer_name),
        }
    }
}

/// A server's listener and where its links go.
struct Listening {
    listener: TcpListener,
    ring: RingConfig,
    /// The slots all its connections share, if it shares them.
    shared: Option<Arc<HeapShared>>,
    links: Sender<Result<Arc<dyn Link>, Error>>,
    next_id: LinkId,
    /// Where HTTP/2 clients go (standard gRPC on this port), if anywhere.
    http2: Option<Http2Handoff>,
}

/// What a readiness event says about reading a socket.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Readable {
    No,
    /// Bytes may wait: read until a short read, `WouldBlock` or the end.
    Yes,
    /// The peer closed (or the socket failed), maybe behind bytes still queued: read until
    /// the end or the error, a short read included.
    ToTheEnd,
}

/// How reading a socket ended for this turn.
enum ReadEnd {
    /// The socket has nothing more for now.
    Drained,
    /// The read budget is spent; more may be waiting.
    Budget,
    /// The link is over.
    Closed(String),
}

/// The I/O thread's state.
struct IoLoop {
    poll: Poll,
    shared: Arc<IoShared>,
    listener: Option<Listening>,
    conns: HashMap<Token, Entry>,
    next_token: usize,
    /// HELLO deadlines in arrival order (all are arrival + [`HELLO_DEADLINE`]).
    hello_deadlines: VecDeque<(Instant, Token)>,
    /// Sockets (and the listener) to serve again at the next turn, as their edge said: their
    /// budget ran out.
    again: Vec<(Token, Readable)>,
    buf: Box<[u8]>,
    stopping: bool,
    accept_retry: Option<Instant>,
}

impl IoLoop {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            self.take_commands();
            if self.stopping && self.conns.is_empty() {
                break;
            }
            let timeout = self.timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "TCP I/O loop: poll failed; stopping");
                    break;
                }
            }
            let again = std::mem::take(&mut self.again);
            // Their edge is spent: one that said the peer closed still says so.
            for (token, readable) in again {
                self.ready(token, readable, false);
            }
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                // The peer's close (or an error) may come in the same edge as its last
                // bytes: then a short read has not met the end, and no later edge will.
                let readable = match (
                    event.is_read_closed() || event.is_error(),
                    event.is_readable(),
                ) {
                    (true, _) => Readable::ToTheEnd,
                    (false, true) => Readable::Yes,
                    (false, false) => Readable::No,
                };
                self.ready(token, readable, event.is_writable());
            }
            self.expire_hellos(Instant::now());
            if let Some(at) = self.accept_retry {
                if Instant::now() >= at {
                    self.accept_retry = None;
                    self.ready(LISTENER, Readable::Yes, false);
                }
            }
        }
        // Dropping the handshakes and the listener closes their sockets.
        tracing::debug!("TCP I/O loop stopped");
    }

    /// How long `poll` may sleep: until the nearest HELLO deadline or accept retry, not at
    /// all if a socket has more to read, else without limit.
    fn timeout(&self) -> Option<Duration> {
        if !self.again.is_empty() {
            return Some(Duration::ZERO);
        }
        let now = Instant::now();
        let nearest = self
            .hello_deadlines
            .front()
            .map(|(at, _)| *at)
            .into_iter()
            .chain(self.accept_retry)
            .min()?;
        Some(nearest.saturating_duration_since(now))
    }

    fn take_commands(&mut self) {
        while let Some(command) = self.shared.commands.pop() {
            match command {
                Command::Connect {
                    stream,
                    id,
                    ring,
                    reply,
                } => {
                    let peer_name = stream
                        .peer_addr()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|_| "?".to_string());
                    if self.stopping {
                        let _ = reply.send(Err(Error::ConnectionClosed(
                            "the TCP I/O thread is stopping".to_string(),
                        )));
                        continue;
                    }
                    let setup = LinkSetup { ring, shared: None };
                    self.start_handshake(stream, id, setup, peer_name, Destination::Client(reply));
                }
                Command::Flush(conn) => self.flush(&conn, true),
                Command::Stop => {
                    self.stopping = true;
                    if let Some(mut l) = self.listener.take() {
                        let _ = self.poll.registry().deregister(&mut l.listener);
                    }
                    let hellos: Vec<Token> = self
                        .conns
                        .iter()
                        .filter(|(_, e)| matches!(e, Entry::Hello(_)))
                        .map(|(t, _)| *t)
                        .collect();
                    for token in hellos {
                        self.remove(token, "the endpoint is shutting down".to_string());
                    }
                }
            }
        }
    }

    /// Serves a ready socket (or the listener).
    fn ready(&mut self, token: Token, readable: Readable, writable: bool) {
        if token == LISTENER {
            self.accept();
            return;
        }
        if writable {
            if let Some(Entry::Open(r)) = self.conns.get(&token) {
                let conn = Arc::clone(&r.conn);
                self.flush(&conn, false);
            }
        }
        if readable == Readable::No {
            return;
        }
        let to_the_end = readable == Readable::ToTheEnd;
        if let Some(end) = self.answer_or_hand_over(token) {
            if let ReadEnd::Closed(reason) = end {
                self.remove(token, reason);
            }
            return;
        }
        let end = match self.conns.get_mut(&token) {
            None => return,
            Some(Entry::Hello(h)) => match read_hello(h) {
                Ok(false) => ReadEnd::Drained,
                Ok(true) => {
                    let Some(Entry::Hello(h)) = self.conns.remove(&token) else {
                        unreachable!("a handshake")
                    };
                    match self.establish(*h) {
                        Ok(reading) => {
                            self.conns.insert(token, Entry::Open(reading));
                            self.read_open(token, to_the_end)
                        }
                        Err(reason) => {
                            tracing::debug!(%reason, "TCP handshake failed");
                            return;
                        }
                    }
                }
                Err(reason) => ReadEnd::Closed(reason),
            },
            Some(Entry::Open(_)) => self.read_open(token, to_the_end),
        };
        match end {
            ReadEnd::Drained => {}
            ReadEnd::Budget => self.again.push((token, readable)),
            ReadEnd::Closed(reason) => self.remove(token, reason),
        }
    }

    /// Writes a link's queue on the I/O thread after a stall (`requested`: a poster asked
    /// with a [`Command::Flush`]); frames completed free send slots, which the runtime learns
    /// from a `SendDone`.
    fn flush(&mut self, conn: &Arc<TcpConn>, requested: bool) {
        match conn.flush(conn.writer.resume(requested), true) {
            Ok(0) => {}
            Ok(_) => {
                self.shared.cq.enqueue(Completion::SendDone {
                    link: conn.parts.id,
                });
                self.shared.cq.drive();
            }
            Err(e) => {
                tracing::debug!(peer = %conn.parts.peer_name, error = %e, "TCP write failed");
                // The read side then reports the closure.
                conn.shutdown();
            }
        }
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPT_BUDGET {
            let Some(l) = self.listener.as_mut() else {
                return;
            };
            match l.listener.accept() {
                Ok((stream, addr)) => {
                    let (id, ring) = (l.next_id, l.ring);
                    l.next_id += 1;
                    let shared = match &l.shared {
                        None => None,
                        Some(shared) => match shared.admit() {
                            Some(grant) => Some((Arc::clone(shared), grant)),
                            None => {
                                // Dropping the socket closes it: the client's connect fails.
                                tracing::warn!(peer = %addr, "TCP connection refused: every shared receive credit is granted");
                                continue;
                            }
                        },
                    };
                    let setup = LinkSetup { ring, shared };
                    self.start_handshake(
                        stream,
                        id,
                        setup,
                        addr.to_string(),
                        Destination::Acceptor,
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Typically out of file descriptors: the connection waits in the backlog;
                    // try again shortly rather than spin.
                    let _ = l.links.send(Err(Error::Io(e)));
                    self.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
                    return;
                }
            }
        }
        self.again.push((LISTENER, Readable::Yes));
    }

    /// Sends our HELLO on a fresh socket (a server: once the client's first byte came) and
    /// waits (on the loop) for the peer's.
    fn start_handshake(
        &mut self,
        mut stream: TcpStream,
        id: LinkId,
        setup: LinkSetup,
        peer_name: String,
        destination: Destination,
    ) {
        let fail = |destination: Destination, e: Error| {
            if let Destination::Client(reply) = destination {
                let _ = reply.send(Err(e));
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            return fail(destination, e.into());
        }
        // A client writes its HELLO at once; a server waits for the client's first byte
        // (docs/PROTOCOL.md §4.5), which tells this protocol from HTTP/2.
        let hello_sent = matches!(destination, Destination::Client(_));
        if hello_sent {
            if let Err(e) = send_hello(&stream, &setup, &peer_name) {
                return fail(destination, e);
            }
        }
        let token = Token(self.next_token);
        self.next_token += 1;
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            return fail(destination, e.into());
        }
        self.conns.insert(
            token,
            Entry::Hello(Box::new(Handshake {
                stream,
                id,
                setup,
                frame: [0; HELLO_FRAME_LEN],
                got: 0,
                peer_name,
                destination,
                hello_sent,
            })),
        );
        self.hello_deadlines
            .push_back((Instant::now() + HELLO_DEADLINE, token));
        // Bytes may have arrived before the registration's first event: edge-triggered
        // readiness reports them anyway, as the registration finds the socket readable.
    }

    /// A server's handshake whose HELLO is not sent yet, on the client's first bytes: an
    /// HTTP/2 client (its whole 24-byte preface) is handed over to standard gRPC, if the
    /// listener serves it (`Some`: nothing more to read here); anyone else gets our HELLO and
    /// the handshake goes on (`None`). Too few bytes yet: `Some(Drained)`.
    fn answer_or_hand_over(&mut self, token: Token) -> Option<ReadEnd> {
        let Some(Entry::Hello(h)) = self.conns.get_mut(&token) else {
            return None;
        };
        if h.hello_sent {
            return None;
        }
        let mut start = [0u8; HTTP2_PREFACE.len()];
        let n = loop {
            match h.stream.peek(&mut start) {
                Ok(0) => {
                    return Some(ReadEnd::Closed(format!(
                        "{} closed the connection during the handshake",
                        h.peer_name
                    )))
                }
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(ReadEnd::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Some(ReadEnd::Closed(format!(
                        "read failed during the handshake: {e}"
                    )))
                }
            }
        };
        let handoff = self.listener.as_ref().and_then(|l| l.http2.clone());
        match handoff {
            // The HTTP/2 preface so far: wait for the rest of it (within the HELLO deadline,
            // as a HELLO would have to come), then hand the client over. Nothing is read.
            Some(_) if n < start.len() && start[..n] == HTTP2_PREFACE[..n] => {
                Some(ReadEnd::Drained)
            }
            // A TLS handshake (a record of type 22): gRPC over TLS, what the standard gRPC
            // side serves when the server has TLS (and closes otherwise); this protocol has no
            // TLS of its own.
            Some(handoff) if start == *HTTP2_PREFACE || start[0] == TLS_HANDSHAKE => {
                let Some(Entry::Hello(mut h)) = self.conns.remove(&token) else {
                    unreachable!("a handshake")
                };
                let _ = self.poll.registry().deregister(&mut h.stream);
                tracing::debug!(
                    peer = %h.peer_name,
                    "an HTTP/2 or TLS client: served as standard gRPC"
                );
                handoff(h.stream.into());
                Some(ReadEnd::Drained)
            }
            // Anything else gets our HELLO; `read_hello` judges what it sent.
            _ => match send_hello(&h.stream, &h.setup, &h.peer_name) {
                Ok(()) => {
                    h.hello_sent = true;
                    None
                }
                Err(e) => Some(ReadEnd::Closed(e.to_string())),
            },
        }
    }

    /// Closes the handshakes whose deadline passed.
    fn expire_hellos(&mut self, now: Instant) {
        while let Some(&(at, token)) = self.hello_deadlines.front() {
            if at > now {
                return;
            }
            self.hello_deadlines.pop_front();
            if let Some(Entry::Hello(h)) = self.conns.get(&token) {
                let reason = format!(
                    "no complete HELLO from {} within {HELLO_DEADLINE:?} ({} of {HELLO_FRAME_LEN} \
                     bytes arrived)",
                    h.peer_name, h.got
                );
                self.remove(token, reason);
            }
        }
    }

    /// The peer's HELLO is complete: the link is set up and handed over.
    fn establish(&mut self, h: Handshake) -> Result<Reading, String> {
        let Handshake {
            mut stream,
            id,
            setup,
            frame,
            peer_name,
            destination,
            ..
        } = h;
        let peer = match Hello::from_frame(&frame) {
            Ok(peer) => peer,
            Err(e) => {
                let e = Error::ConnectionClosed(format!("invalid HELLO from {peer_name}: {e}"));
                let reason = e.to_string();
                self.deliver(destination, Err(e));
                // Dropping the stream closes it, with nothing more sent (§4.4).
                let _ = self.poll.registry().deregister(&mut stream);
                drop(stream);
                return Err(reason);
            }
        };
        let bound = setup.ring.slot_count as usize;
        let conn = Arc::new(TcpConn {
            parts: setup.parts(id, peer, peer_name),
            stream,
            queue: ArrayQueue::new(bound),
            unsent: Count::new(0),
            bound,
            writer: Flusher::new(WriteState {
                frames: VecDeque::with_capacity(bound),
                offset: 0,
            }),
            closed: Flag::new(false),
            io: Arc::clone(&self.shared),
        });
        let link: Arc<dyn Link> = Arc::new(TcpLink {
            conn: Arc::clone(&conn),
        });
        // A refused hand-over drops the link, which closes it.
        self.deliver(destination, Ok(link));
        Ok(Reading {
            conn,
            header: [0; HEADER_LEN],
            header_got: 0,
            slot: None,
        })
    }

    /// Hands an established link, or why the handshake failed, to whoever waits for it.
    fn deliver(&self, destination: Destination, outcome: Result<Arc<dyn Link>, Error>) {
        match destination {
            Destination::Acceptor => {
                if let Some(l) = &self.listener {
                    let _ = l.links.send(outcome);
                }
            }
            Destination::Client(reply) => {
                let _ = reply.send(outcome);
            }
        }
    }

    /// Reads an established link's frames until the socket is drained or the budget spent,
    /// then lets the endpoint handle them.
    fn read_open(&mut self, token: Token, to_the_end: bool) -> ReadEnd {
        let Some(Entry::Open(r)) = self.conns.get_mut(&token) else {
            return ReadEnd::Drained;
        };
        let cq = &self.shared.cq;
        let mut budget = READ_BUDGET;
        let end = loop {
            if budget == 0 {
                break ReadEnd::Budget;
            }
            let ring = &r.conn.parts.recv_ring;
            let asked;
            let result = match r.slot.as_mut() {
                // The rest of a large payload: straight into its slot.
                Some((slot, len, got)) if *len - *got >= DIRECT_READ => {
                    asked = *len - *got;
                    let read = (&r.conn.stream).read(&mut slot[*got..*len]);
                    if let Ok(n) = read {
                        *got += n;
                    }
                    if *got == *len {
                        let (slot, len, _) = r.slot.take().expect("a slot");
                        cq.enqueue(Completion::Recv {
                            link: r.conn.parts.id,
                            buf: ring.completed(slot, len),
                        });
                    }
                    read
                }
                _ => {
                    asked = self.buf.len();
                    let read = (&r.conn.stream).read(&mut self.buf);
                    match read {
                        Ok(n) if n > 0 => match feed(r, &self.buf[..n], cq) {
                            Ok(()) => Ok(n),
                            Err(reason) => break ReadEnd::Closed(reason),
                        },
                        other => other,
                    }
                }
            };
            match result {
                Ok(0) => {
                    break ReadEnd::Closed(if r.conn.closed.is_raised() {
                        "connection closed locally".to_string()
                    } else if r.slot.is_some() || r.header_got > 0 {
                        "peer closed the connection in the middle of a frame".to_string()
                    } else {
                        "peer closed the connection".to_string()
                    })
                }
                // A short read emptied the socket's receive queue: what arrives later is a new
                // edge, so no read is spent to meet WouldBlock. Unless the edge said the peer
                // closed: then the close is read too (a read of 0, or the error).
                Ok(n) if n < asked && !to_the_end => break ReadEnd::Drained,
                Ok(n) => budget = budget.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break ReadEnd::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break ReadEnd::Closed(format!("read failed: {e}")),
            }
        };
        cq.drive();
        end
    }

    /// Forgets a socket and, for an established link, reports its closure.
    fn remove(&mut self, token: Token, reason: String) {
        let Some(entry) = self.conns.remove(&token) else {
            return;
        };
        match entry {
            Entry::Hello(mut h) => {
                let _ = self.poll.registry().deregister(&mut h.stream);
                tracing::debug!(peer = %h.peer_name, %reason, "TCP handshake failed");
                let error = match h.foreign_magic() {
                    Some(magic) => Error::BadMagic(magic),
                    None => Error::ConnectionClosed(reason),
                };
                self.deliver(h.destination, Err(error));
            }
            Entry::Open(r) => {
                // The socket stays registered until its last handle closes it; its token is
                // never reused, so late events for it are ignored.
                r.conn.shutdown();
                self.shared.cq.push(Completion::Closed {
                    link: r.conn.parts.id,
                    reason,
                });
            }
        }
    }
}

/// Writes our HELLO frame on a socket that has sent nothing yet: its send buffer takes the
/// 72 bytes whole.
fn send_hello(stream: &TcpStream, setup: &LinkSetup, peer_name: &str) -> Result<(), Error> {
    match (&*stream).write(&setup.hello().to_frame()) {
        Ok(n) if n == HELLO_FRAME_LEN => Ok(()),
        Ok(_) => Err(Error::ConnectionClosed(format!(
            "could not send the HELLO to {peer_name}"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Reads what has arrived of a HELLO frame (never past it); `Ok(true)` once it is whole.
/// Its first three bytes are judged as soon as they arrive (`docs/PROTOCOL.md` §4.4): a peer
/// of another version, or of another protocol, is refused at once, not at the deadline.
fn read_hello(h: &mut Handshake) -> Result<bool, String> {
    while h.got < HELLO_FRAME_LEN {
        match (&h.stream).read(&mut h.frame[h.got..]) {
            Ok(0) => {
                return Err(format!(
                    "{} closed the connection during the handshake",
                    h.peer_name
                ))
            }
            Ok(n) => {
                h.got += n;
                if let Err(e) = Hello::check_frame_start(&h.frame[..h.got]) {
                    return Err(format!("invalid HELLO from {}: {e}", h.peer_name));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed during the handshake: {e}")),
        }
    }
    Ok(true)
}

/// Moves bytes read from the socket into the frames they belong to, queueing a completion for
/// each frame that is whole.
fn feed(r: &mut Reading, mut data: &[u8], cq: &ChannelCq) -> Result<(), String> {
    let ring: &Arc<HeapRecvRing> = &r.conn.parts.recv_ring;
    while !data.is_empty() {
        if let Some((slot, len, got)) = r.slot.as_mut() {
            let n = (*len - *got).min(data.len());
            slot[*got..*got + n].copy_from_slice(&data[..n]);
            *got += n;
            data = &data[n..];
            if *got == *len {
                let (slot, len, _) = r.slot.take().expect("a slot");
                cq.enqueue(Completion::Recv {
                    link: r.conn.parts.id,
                    buf: ring.completed(slot, len),
                });
            }
            continue;
        }
        let n = (HEADER_LEN - r.header_got).min(data.len());
        r.header[r.header_got..r.header_got + n].copy_from_slice(&data[..n]);
        r.header_got += n;
        data = &data[n..];
        if r.header_got < HEADER_LEN {
            break;
        }
        r.header_got = 0;
        // Only the length is needed to find the frame's end; the protocol core checks the
        // rest.
        let segment_len = u32::from_le_bytes(r.header[32..36].try_into().expect("4 bytes"));
        let len = HEADER_LEN.saturating_add(segment_len as usize);
        if len > ring.slot_size() {
            return Err(Error::FrameTooLarge {
                len,
                slot_size: ring.slot_size(),
            }
            .to_string());
        }
        let Some(mut slot) = ring.take_posted() else {
            return Err("protocol violation: peer sent a frame without a credit".to_string());
        };
        slot[..HEADER_LEN].copy_from_slice(&r.header);
        r.slot = Some((slot, len, HEADER_LEN));
        if len == HEADER_LEN {
            let (slot, len, _) = r.slot.take().expect("a slot");
            cq.enqueue(Completion::Recv {
                link: r.conn.parts.id,
                buf: ring.completed(slot, len),
            });
        }
    }
    Ok(())
}

/// How a client endpoint makes its TCP links: connect, then the HELLO exchange on the
/// endpoint's I/O thread, which serves the link from then on.
pub(crate) struct TcpConnector {
    addr: SocketAddr,
    endpoint: TcpEndpoint,
}

impl TcpConnector {
    /// Starts the endpoint's I/O thread; its links' completions go to `cq`.
    pub(crate) fn new(addr: SocketAddr, cq: Arc<ChannelCq>) -> Result<TcpConnector, Error> {
        Ok(TcpConnector {
            addr,
            endpoint: TcpEndpoint::with_cq(cq)?,
        })
    }

    /// Connects (within `timeout`), then waits for the HELLO exchange (within
    /// [`HELLO_DEADLINE`]) as link `id`.
    pub(crate) fn connect(
        &self,
        ring: RingConfig,
        id: LinkId,
        timeout: Duration,
    ) -> Result<Arc<dyn Link>, Error> {
        self.endpoint.connect(self.addr, ring, id, timeout)
    }
}

/// Raw TCP links to any number of servers, for programs that drive the protocol core
/// themselves (`rpc-bench tcp-idle` holds thousands of connections this way): one I/O thread,
/// one completion queue to poll, as `transport::verbs::VerbsEndpoint` gives over
/// verbs. A [`crate::Client`] is what applications use.
pub struct TcpEndpoint {
    cq: Arc<ChannelCq>,
    io: IoHandle,
}

impl TcpEndpoint {
    /// Starts the endpoint's I/O thread.
    pub fn new() -> Result<TcpEndpoint, Error> {
        Self::with_cq(ChannelCq::new())
    }

    fn with_cq(cq: Arc<ChannelCq>) -> Result<TcpEndpoint, Error> {
        Ok(TcpEndpoint {
            io: IoHandle::start(cq.clone(), None, None)?,
            cq,
        })
    }

    /// The completion queue of every link of this endpoint.
    pub fn cq(&self) -> Arc<dyn CompletionQueue> {
        self.cq.clone()
    }

    /// Connects to `addr` (within `timeout`), then waits for the HELLO exchange (within
    /// [`HELLO_DEADLINE`]); the link has id `id` and rings of `ring`.
    pub fn connect(
        &self,
        addr: SocketAddr,
        ring: RingConfig,
        id: LinkId,
        timeout: Duration,
    ) -> Result<Arc<dyn Link>, Error> {
        ring.validate()?;
        if self.io.shared.thread.get() == Some(&std::thread::current().id()) {
            return Err(Error::InvalidConfig(
                "cannot connect from the endpoint's own TCP I/O thread (it does the handshake)"
                    .to_string(),
            ));
        }
        let stream = StdTcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nonblocking(true)?;
        let (reply, answer) = channel::bounded(1);
        self.io.shared.command(Command::Connect {
            stream: TcpStream::from_std(stream),
            id,
            ring,
            reply,
        });
        assert_unlocked("waiting for a TCP handshake");
        answer.recv().unwrap_or_else(|_| {
            Err(Error::ConnectionClosed(
                "the TCP I/O thread stopped during the handshake".to_string(),
            ))
        })
    }
}

/// A listening TCP socket whose links are accepted and handshaken on the endpoint's I/O
/// thread; [`Acceptor::accept`] takes the established ones. Dropping it closes the listener
/// and lets the I/O thread stop once the links are closed.
pub(crate) struct TcpAcceptor {
    local_addr: SocketAddr,
    links: Receiver<Result<Arc<dyn Link>, Error>>,
    /// Wakes a waiting `accept` (the I/O thread holds the other sender).
    wake: Sender<Result<Arc<dyn Link>, Error>>,
    stopped: Arc<Flag>,
    _io: IoHandle,
}

impl TcpAcceptor {
    pub(crate) fn bind(
        addr: SocketAddr,
        (ring, shared): (RingConfig, Option<SharedRings>),
        cq: Arc<ChannelCq>,
        (context, http2): (Option<ThreadContext>, Option<Http2Handoff>),
    ) -> Result<TcpAcceptor, Error> {
        ring.validate()?;
        let shared = match shared {
            Some(config) => Some(HeapShared::new(config, ring.slot_size, &cq)?),
            None => None,
        };
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let (tx, rx) = channel::unbounded();
        let io = IoHandle::start(
            cq,
            Some(Listening {
                listener,
                ring,
                shared,
                links: tx.clone(),
                next_id: 1,
                http2,
            }),
            context,
        )?;
        Ok(TcpAcceptor {
            local_addr,
            links: rx,
            wake: tx,
            stopped: Arc::new(Flag::new(false)),
            _io: io,
        })
    }
}

impl Acceptor for TcpAcceptor {
    fn accept(&mut self, timeout: Duration) -> Result<Option<Arc<dyn Link>>, Error> {
        if self.stopped.is_raised() {
            return Ok(None);
        }
        match self.links.recv_timeout(timeout) {
            // Stopped (the stopper's wake-up, or a link that came with it: the server is
            // going, and the link closes as it drops).
            Ok(_) if self.stopped.is_raised() => Ok(None),
            Ok(link) => link.map(Some),
            Err(_) => Ok(None),
        }
    }

    fn stopper(&self) -> Option<AcceptStopper> {
        let (stopped, wake) = (Arc::clone(&self.stopped), self.wake.clone());
        Some(Box::new(move || {
            stopped.raise();
            let _ = wake.send(Err(Error::ConnectionClosed("the acceptor stopped".into())));
        }))
    }

    fn local_addr(&self) -> String {
        self.local_addr.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Acceptor, ChannelCq, RingConfig, TcpAcceptor};

    /// An accept loop waits for connections without waking; shutting the server down wakes
    /// it through the acceptor's stopper.
    #[test]
    fn the_stopper_wakes_a_waiting_accept_and_every_later_one() {
        let addr = "127.0.0.1:0".parse().expect("an address");
        let mut acceptor = TcpAcceptor::bind(
            addr,
            (RingConfig::default(), None),
            ChannelCq::new(),
            (None, None),
        )
        .expect("bound");
        let stop = acceptor.stopper().expect("a TCP acceptor can be stopped");
        let (done, waited) = crossbeam::channel::bounded(1);
        let waiter = std::thread::spawn(move || {
            let first = acceptor.accept(Duration::from_secs(3600));
            let later = acceptor.accept(Duration::from_secs(3600));
            let _ = done.send((first.map(|l| l.is_none()), later.map(|l| l.is_none())));
        });
        std::thread::sleep(Duration::from_millis(20));
        stop();
        // A watchdog, not a speed check: without the stopper this waits an hour.
        let (first, later) = waited
            .recv_timeout(Duration::from_secs(30))
            .expect("the stopper woke the waiting accept");
        assert!(first.expect("no error"), "a stopped accept returns no link");
        assert!(later.expect("no error"), "and so does every later one");
        waiter.join().expect("the waiter ends");
    }
}
