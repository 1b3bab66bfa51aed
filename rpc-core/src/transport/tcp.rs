//! The TCP transport: the same slot rings and completions as verbs, over a socket. A reader
//! thread per link reads each frame straight into a posted receive slot and pushes the
//! completion to the endpoint's queue; sends write the slot's bytes to the socket from the
//! posting thread. The HELLO is the first frame each side writes after the TCP handshake.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Sender};

use parking_lot::Mutex;

use super::heap::{ChannelCq, HeapLink, HeapLinkParts, HeapRecvRing};
use super::{Acceptor, Completion, Link, LinkId, RingConfig};
use crate::protocol::v2::{Hello, HEADER_LEN, HELLO_LEN};
use crate::Error;

/// How long a peer may take to send its HELLO, and a send may block on a peer that does not
/// read (flow control bounds what we send, so only a stuck peer hits this).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

struct TcpLink {
    parts: HeapLinkParts,
    writer: Mutex<TcpStream>,
    socket: TcpStream,
    closed: AtomicBool,
}

impl HeapLink for TcpLink {
    fn parts(&self) -> &HeapLinkParts {
        &self.parts
    }

    fn transmit(&self, frame: &[u8]) -> Result<(), Error> {
        Ok(self.writer.lock().write_all(frame)?)
    }

    fn shutdown(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // Unblocks the reader thread, which reports the closure.
            let _ = self.socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Reads frames into posted slots until the socket fails, then reports the closure.
fn reader_loop(link: Arc<TcpLink>, stream: TcpStream, cq: Arc<ChannelCq>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let reason = loop {
        match read_frame(&mut reader, &link.parts.recv_ring) {
            Ok((buf, len)) => cq.push_and_drive(Completion::Recv {
                link: link.parts.id,
                buf: link.parts.recv_ring.completed(buf, len),
            }),
            Err(reason) => break reason,
        }
    };
    link.shutdown();
    cq.push(Completion::Closed {
        link: link.parts.id,
        reason,
    });
}

fn read_frame(reader: &mut impl Read, ring: &HeapRecvRing) -> Result<(Vec<u8>, usize), String> {
    let mut header = [0u8; HEADER_LEN];
    match reader.read_exact(&mut header[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err("peer closed the connection".to_string())
        }
        Err(e) => return Err(format!("read failed: {e}")),
    }
    reader
        .read_exact(&mut header[1..])
        .map_err(|e| format!("truncated frame header: {e}"))?;
    // Only the length is needed to find the frame's end; the protocol core validates the rest.
    let segment_len = u32::from_le_bytes(header[32..36].try_into().expect("4 bytes")) as usize;
    let len = HEADER_LEN + segment_len;
    if len > ring.slot_size() {
        return Err(Error::FrameTooLarge {
            len,
            slot_size: ring.slot_size(),
        }
        .to_string());
    }
    let Some(mut buf) = ring.take_posted() else {
        return Err("protocol violation: peer sent a frame without a credit".to_string());
    };
    buf[..HEADER_LEN].copy_from_slice(&header);
    if let Err(e) = reader.read_exact(&mut buf[HEADER_LEN..len]) {
        return Err(format!("truncated frame payload: {e}"));
    }
    Ok((buf, len))
}

/// Exchanges HELLO frames on a fresh stream and starts the link's reader thread.
fn establish(
    stream: TcpStream,
    ring: RingConfig,
    id: LinkId,
    cq: &Arc<ChannelCq>,
) -> Result<Arc<dyn Link>, Error> {
    ring.validate()?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let peer_addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".to_string());
    (&stream).write_all(&ring.hello().to_frame())?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut frame = [0u8; HEADER_LEN + HELLO_LEN];
    (&stream)
        .read_exact(&mut frame)
        .map_err(|e| Error::ConnectionClosed(format!("no HELLO from {peer_addr}: {e}")))?;
    let peer = Hello::from_frame(&frame)?;
    stream.set_read_timeout(None)?;
    let link = Arc::new(TcpLink {
        parts: HeapLinkParts::new(id, ring, peer, peer_addr),
        writer: Mutex::new(stream.try_clone()?),
        socket: stream.try_clone()?,
        closed: AtomicBool::new(false),
    });
    let (reader_link, reader_cq) = (Arc::clone(&link), Arc::clone(cq));
    std::thread::Builder::new()
        .name(format!("rpc-tcp-reader-{id}"))
        .spawn(move || reader_loop(reader_link, stream, reader_cq))?;
    Ok(link)
}

/// Connects to `addr`, with the HELLO exchange, as link `id` of the endpoint owning `cq`.
pub(crate) fn connect(
    addr: SocketAddr,
    ring: RingConfig,
    id: LinkId,
    cq: &Arc<ChannelCq>,
    timeout: Duration,
) -> Result<Arc<dyn Link>, Error> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    establish(stream, ring, id, cq)
}

/// A listening TCP socket that hands out established links. Accepting and each handshake
/// run on threads of their own, so a peer that connects and stays silent delays nobody. The
/// accept thread blocks in `accept` (no CPU while idle); dropping the acceptor wakes it with
/// a connection of its own.
pub(crate) struct TcpAcceptor {
    local_addr: SocketAddr,
    links: Receiver<Result<Arc<dyn Link>, Error>>,
    stop: Arc<AtomicBool>,
}

impl TcpAcceptor {
    pub(crate) fn bind(
        addr: SocketAddr,
        ring: RingConfig,
        cq: Arc<ChannelCq>,
    ) -> Result<TcpAcceptor, Error> {
        ring.validate()?;
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let (tx, rx) = channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("rpc-tcp-accept".to_string())
            .spawn(move || accept_loop(listener, ring, cq, tx, thread_stop))?;
        Ok(TcpAcceptor {
            local_addr,
            links: rx,
            stop,
        })
    }
}

fn accept_loop(
    listener: TcpListener,
    ring: RingConfig,
    cq: Arc<ChannelCq>,
    links: Sender<Result<Arc<dyn Link>, Error>>,
    stop: Arc<AtomicBool>,
) {
    let mut next_id: LinkId = 1;
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                let (id, cq, sender) = (next_id, Arc::clone(&cq), links.clone());
                next_id += 1;
                let spawned = std::thread::Builder::new()
                    .name(format!("rpc-tcp-handshake-{id}"))
                    .spawn(move || {
                        let _ = sender.send(establish(stream, ring, id, &cq));
                    });
                if let Err(e) = spawned {
                    let _ = links.send(Err(Error::Io(e)));
                }
            }
            Err(e) => {
                // Typically out of file descriptors: back off rather than spin.
                let _ = links.send(Err(Error::Io(e)));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for TcpAcceptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
    }
}

impl Acceptor for TcpAcceptor {
    fn accept(&mut self, timeout: Duration) -> Result<Option<Arc<dyn Link>>, Error> {
        match self.links.recv_timeout(timeout) {
            Ok(link) => link.map(Some),
            Err(_) => Ok(None),
        }
    }

    fn local_addr(&self) -> String {
        self.local_addr.to_string()
    }
}
