//! What the raw-socket and hostile-peer tests share: a hand-written echo service (no code
//! generation in rpc-core's own tests) and the check that the server hung up.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::io::Read;
use std::net::TcpStream;

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
