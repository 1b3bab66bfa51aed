//! `--system tcp`: the smallest honest request/response protocol over one TCP connection,
//! written for this benchmark as the floor that an RPC stack over TCP is compared with.
//!
//! A frame is a `u32` little-endian length followed by that many payload bytes; the server
//! answers every frame with an identical frame. Both sides use blocking sockets with
//! `TCP_NODELAY`, write each frame with one `write_all` of a reused buffer (no per-call
//! allocation, no serialization), and the server runs one thread per connection.
//!
//! Load: at outstanding 1, a blocking write of the request, then a blocking read of the
//! reply. At outstanding N, a writer thread and a reader thread share the socket: the writer
//! sends a request whenever fewer than N are unanswered (the reader hands back one credit per
//! reply), the reader takes the replies in order. A call's latency runs from just before its
//! request is written to the moment its reply has been read.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::payload::Payload;
use crate::report::{LoadParams, LoadResult, Tally};

/// Largest frame either side accepts (a corrupted length must not allocate gigabytes).
pub const MAX_FRAME: usize = 256 << 20;

/// How long a client read may block before the run fails (the server stopped answering).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A running raw TCP echo server.
#[derive(Debug)]
pub struct TcpEchoServer {
    local_addr: SocketAddr,
}

impl TcpEchoServer {
    /// The bound address (with the actual port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Binds `listen` and serves on a background accept thread, one thread per connection,
/// until the process exits.
pub fn serve(listen: &str) -> io::Result<TcpEchoServer> {
    let listener = TcpListener::bind(listen)?;
    let local_addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("tcp-accept".to_owned())
        .spawn(move || accept_loop(listener))?;
    Ok(TcpEchoServer { local_addr })
}

fn accept_loop(listener: TcpListener) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(err) => {
                eprintln!("rpc-bench serve (tcp): accept failed: {err}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("tcp-conn".to_owned())
            .spawn(move || {
                if let Err(err) = serve_connection(stream) {
                    eprintln!("rpc-bench serve (tcp): connection failed: {err}");
                }
            });
        if let Err(err) = spawned {
            eprintln!("rpc-bench serve (tcp): cannot start a connection thread: {err}");
        }
    }
}

/// Echoes frames until the peer closes the connection (a clean end) or breaks the framing.
fn serve_connection(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut frame: Vec<u8> = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame of {n} bytes exceeds {MAX_FRAME}"),
            ));
        }
        frame.resize(4 + n, 0);
        frame[..4].copy_from_slice(&len);
        stream.read_exact(&mut frame[4..])?;
        stream.write_all(&frame)?;
    }
}

/// Connects with `TCP_NODELAY` and a [`READ_TIMEOUT`].
fn connect(addr: &str) -> io::Result<TcpStream> {
    let sa = addr.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: no address"))
    })?;
    let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(5))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    Ok(stream)
}

/// Runs `params` against the raw TCP echo server at `addr`.
pub fn load(addr: &str, params: LoadParams) -> LoadResult {
    let stream = match connect(addr) {
        Ok(s) => s,
        Err(err) => {
            return LoadResult::failed(
                "tcp",
                "tcp",
                params,
                format!("cannot connect to {addr}: {err}"),
            )
        }
    };
    let payload = Payload::new(params.size);
    // Warm-up failures count too, and come first.
    let mut tally = Tally::new(params.count);
    let phase = |first: u64, calls: u64, measured: bool, tally: &mut Tally| {
        let start = Instant::now();
        if params.outstanding <= 1 {
            ping_pong(&stream, &payload, first, calls, measured, tally);
        } else {
            pipelined(
                &stream,
                &payload,
                first,
                calls,
                params.outstanding,
                measured,
                tally,
            );
        }
        start.elapsed()
    };
    phase(0, params.warmup, false, &mut tally);
    let elapsed = if tally.errors() > 0 {
        // The connection is broken (every failure here is fatal to it).
        tally.not_made(params.count, || "the warm-up failed".to_owned());
        Duration::ZERO
    } else {
        phase(params.warmup, params.count, true, &mut tally)
    };
    let _ = stream.shutdown(Shutdown::Both);
    LoadResult::new("tcp", "tcp", params, tally, elapsed)
}

/// A reused send buffer: the length prefix and the payload pattern.
fn request_frame(payload: &Payload) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload.base());
    frame
}

/// Reads one reply frame into `buf` (resized to its length).
fn read_frame(mut stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("reply frame of {n} bytes exceeds {MAX_FRAME}"),
        ));
    }
    buf.resize(n, 0);
    stream.read_exact(buf)
}

fn ping_pong(
    mut stream: &TcpStream,
    payload: &Payload,
    first: u64,
    calls: u64,
    measured: bool,
    tally: &mut Tally,
) {
    let mut frame = request_frame(payload);
    let mut reply = Vec::with_capacity(payload.len());
    let end = first + calls;
    for seq in first..end {
        payload.stamp_into(seq, &mut frame[4..]);
        let start = Instant::now();
        let io = stream
            .write_all(&frame)
            .and_then(|()| read_frame(stream, &mut reply));
        let latency = start.elapsed();
        match io {
            Ok(()) if payload.matches(seq, &reply) => tally.success(latency, measured),
            Ok(()) => tally.failure(|| mismatch(seq, reply.len(), payload.len())),
            Err(err) => {
                tally.failure(|| format!("call {seq}: {err}"));
                tally.not_made(end - seq - 1, || "connection failed".to_owned());
                return;
            }
        }
    }
}

fn mismatch(seq: u64, got: usize, sent: usize) -> String {
    format!("call {seq}: reply of {got} bytes differs from the request of {sent} bytes")
}

fn pipelined(
    stream: &TcpStream,
    payload: &Payload,
    first: u64,
    calls: u64,
    outstanding: usize,
    measured: bool,
    tally: &mut Tally,
) {
    let reader_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(err) => {
            tally.not_made(calls, || format!("cannot clone the socket: {err}"));
            return;
        }
    };
    // Credits: the writer takes one per request, the reader returns one per reply.
    let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(outstanding);
    for _ in 0..outstanding {
        credit_tx.send(()).expect("room for the initial credits");
    }
    // Send times, in request order; the reader matches them with replies (FIFO).
    let (sent_tx, sent_rx) = mpsc::channel::<(u64, Instant)>();
    let end = first + calls;

    let write_error = std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut tally_r = Tally::new(if measured { calls } else { 0 });
            let mut reply = Vec::with_capacity(payload.len());
            let mut done = 0u64;
            while done < calls {
                let Ok((seq, start)) = sent_rx.recv() else {
                    break; // the writer stopped early
                };
                match read_frame(&reader_stream, &mut reply) {
                    Ok(()) if payload.matches(seq, &reply) => {
                        tally_r.success(start.elapsed(), measured)
                    }
                    Ok(()) => tally_r.failure(|| mismatch(seq, reply.len(), payload.len())),
                    Err(err) => {
                        tally_r.failure(|| format!("call {seq}: {err}"));
                        done += 1;
                        break;
                    }
                }
                done += 1;
                let _ = credit_tx.send(());
            }
            // Closing the reading side wakes a writer blocked on a credit or a full socket.
            if done < calls {
                let _ = reader_stream.shutdown(Shutdown::Both);
            }
            tally_r.not_made(calls - done, || "connection failed".to_owned());
            tally_r
        });

        let mut writer = stream;
        let mut frame = request_frame(payload);
        let mut write_error = None;
        for seq in first..end {
            if credit_rx.recv().is_err() {
                break; // the reader stopped
            }
            payload.stamp_into(seq, &mut frame[4..]);
            if sent_tx.send((seq, Instant::now())).is_err() {
                break;
            }
            if let Err(err) = writer.write_all(&frame) {
                write_error = Some(format!("call {seq}: {err}"));
                // The reader waits for this reply: make its read fail at once.
                let _ = writer.shutdown(Shutdown::Both);
                break;
            }
        }
        drop(sent_tx);
        let reader_tally = reader.join().expect("the reader thread panicked");
        (write_error, reader_tally)
    });
    let (write_error, reader_tally) = write_error;
    // The reader counted the failed calls; a write error is their cause.
    if let Some(err) = write_error {
        tally.note(err);
    }
    tally.merge(reader_tally);
}
