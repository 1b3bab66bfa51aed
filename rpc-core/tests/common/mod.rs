//! What the raw-socket and hostile-peer tests share: a hand-written echo service (no code
//! generation in rpc-core's own tests) and the check that the server hung up.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use rpc_core::codegen::{
    self, IncomingRequest, MethodDescriptor, MethodKind, ReplySink, Service, ServiceDescriptor,
};
use rpc_core::{Request, Response};

/// The echo service's message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Blob {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// The echo service's one method.
pub static METHODS: [MethodDescriptor; 1] = [MethodDescriptor::new(
    "t.Echo",
    "Echo",
    "/t.Echo/Echo",
    MethodKind::Unary,
)];

static SERVICE: ServiceDescriptor = ServiceDescriptor {
    name: "t.Echo",
    methods: &METHODS,
};

/// Answers each request with itself.
pub struct EchoService;

impl Service for EchoService {
    fn descriptor(&self) -> &'static ServiceDescriptor {
        &SERVICE
    }
    fn call(&self, _: usize, request: IncomingRequest, reply: ReplySink) {
        codegen::unary(request, reply, |r: Request<Blob>| {
            Ok(Response::new(r.into_inner()))
        })
    }
}

/// Whether the server closed `stream` (EOF or reset) before the stream's read timeout,
/// reading and dropping whatever came before.
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// Fails the test (exits the process) if `f` does not return within `limit`.
pub fn with_watchdog<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        // A panicking test drops `tx`: that is its own failure, not a hang.
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("watchdog: the test did not finish within {limit:?}");
            std::process::exit(101);
        }
    });
    let out = f();
    let _ = tx.send(());
    out
}

/// Our side of the TCP handshake on a raw socket: our HELLO out, the peer's read and checked.
pub fn raw_hello(stream: &mut TcpStream) {
    stream
        .write_all(&rpc_core::RingConfig::DEFAULT.hello().to_frame())
        .unwrap();
    let mut theirs = [0u8; rpc_core::protocol::HEADER_LEN + rpc_core::protocol::v2::HELLO_LEN];
    stream.read_exact(&mut theirs).unwrap();
    rpc_core::protocol::Hello::from_frame(&theirs).unwrap();
}
