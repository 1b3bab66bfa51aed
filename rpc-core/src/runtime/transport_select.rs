//! Choosing a transport for an address: `mem:NAME` is the in-process transport; otherwise
//! [`TransportKind`] decides between TCP and verbs.

use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::pool::ThreadContext;
use crate::transport::heap::ChannelCq;
use crate::transport::{
    memory, tcp, Acceptor, CompletionQueue, Link, LinkId, RingConfig, SharedRings,
};
use crate::Error;

/// Which transport a client or server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// Verbs if an RDMA device serves the address, else TCP (logged either way).
    #[default]
    Auto,
    /// TCP sockets.
    Tcp,
    /// RDMA verbs (RC queue pairs through rdma_cm); fails if no RDMA device serves the address.
    Verbs,
    /// Standard gRPC over HTTP/2 (clients only): calls any gRPC server, this framework's
    /// gRPC face ([`ServerBuilder::grpc_listen`](crate::ServerBuilder::grpc_listen)) or a
    /// stock one. A server serves gRPC with `grpc_listen` beside its own transport.
    Grpc,
}

impl TransportKind {
    /// The name [`FromStr`] parses: `auto`, `tcp`, `verbs`, `grpc`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Auto => "auto",
            TransportKind::Tcp => "tcp",
            TransportKind::Verbs => "verbs",
            TransportKind::Grpc => "grpc",
        }
    }
}

impl FromStr for TransportKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "auto" => Ok(TransportKind::Auto),
            "tcp" => Ok(TransportKind::Tcp),
            "verbs" | "rdma" => Ok(TransportKind::Verbs),
            "grpc" => Ok(TransportKind::Grpc),
            other => Err(Error::InvalidConfig(format!(
                "unknown transport `{other}` (expected auto, tcp, verbs or grpc)"
            ))),
        }
    }
}

fn resolve(addr: &str) -> Result<SocketAddr, Error> {
    addr.to_socket_addrs()
        .map_err(|e| Error::InvalidAddress(format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| Error::InvalidAddress(addr.to_string()))
}

/// Whether to use verbs for `addr` under `kind`.
fn use_verbs(addr: &SocketAddr, kind: TransportKind) -> Result<bool, Error> {
    match kind {
        TransportKind::Tcp => Ok(false),
        TransportKind::Grpc => Err(Error::InvalidConfig(
            "a server serves gRPC with ServerBuilder::grpc_listen, beside tcp or verbs".to_string(),
        )),
        #[cfg(feature = "verbs")]
        TransportKind::Verbs => match crate::transport::verbs::verbs_device_for(addr)? {
            Some(_) => Ok(true),
            None => Err(Error::TransportUnavailable {
                transport: "verbs",
                reason: format!("no RDMA device serves {addr}"),
            }),
        },
        #[cfg(not(feature = "verbs"))]
        TransportKind::Verbs => Err(Error::TransportUnavailable {
            transport: "verbs",
            reason: "this build has no verbs support (feature `verbs` is off)".to_string(),
        }),
        TransportKind::Auto => {
            #[cfg(feature = "verbs")]
            {
                match crate::transport::verbs::verbs_device_for(addr) {
                    Ok(Some(dev)) => {
                        tracing::info!(%addr, device = %dev, "transport auto: RDMA device found, using verbs");
                        return Ok(true);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(%addr, error = %e, "no usable RDMA device"),
                }
            }
            tracing::info!(%addr, "transport auto: no RDMA device serves this address, using tcp");
            Ok(false)
        }
    }
}

/// How a client makes (and re-makes) its link.
pub(crate) enum Connector {
    Tcp(tcp::TcpConnector),
    Memory(Arc<ChannelCq>, String),
    #[cfg(feature = "verbs")]
    Verbs(Arc<crate::transport::verbs::VerbsEndpoint>, SocketAddr),
}

impl Connector {
    pub(crate) fn connect(
        &self,
        ring: RingConfig,
        id: LinkId,
        timeout: Duration,
    ) -> Result<Arc<dyn Link>, Error> {
        match self {
            Connector::Tcp(c) => c.connect(ring, id, timeout),
            Connector::Memory(cq, name) => memory::connect(name, ring, id, cq, timeout),
            #[cfg(feature = "verbs")]
            Connector::Verbs(ep, addr) => ep.connect(*addr, ring, id, timeout),
        }
    }

    /// Connection attempts started over so far (see [`crate::Stats::connect_retries`]).
    pub(crate) fn connect_retries(&self) -> u64 {
        match self {
            Connector::Tcp(..) | Connector::Memory(..) => 0,
            #[cfg(feature = "verbs")]
            Connector::Verbs(ep, _) => ep.connect_retries(),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Connector::Tcp(..) => "tcp",
            Connector::Memory(..) => "memory",
            #[cfg(feature = "verbs")]
            Connector::Verbs(..) => "verbs",
        }
    }
}

pub(crate) fn client_transport(
    addr: &str,
    kind: TransportKind,
) -> Result<(Arc<dyn CompletionQueue>, Connector), Error> {
    if let Some(name) = addr.strip_prefix("mem:") {
        let cq = ChannelCq::polled();
        return Ok((cq.clone(), Connector::Memory(cq, name.to_string())));
    }
    let sa = resolve(addr)?;
    if use_verbs(&sa, kind)? {
        #[cfg(feature = "verbs")]
        {
            let ep = crate::transport::verbs::VerbsEndpoint::new()?;
            return Ok((ep.cq(), Connector::Verbs(ep, sa)));
        }
    }
    let cq = ChannelCq::new();
    let connector = tcp::TcpConnector::new(sa, cq.clone())?;
    Ok((cq, Connector::Tcp(connector)))
}

/// A server's bound transport.
pub(crate) struct ServerTransport {
    pub(crate) cq: Arc<dyn CompletionQueue>,
    pub(crate) acceptor: Box<dyn Acceptor>,
    pub(crate) name: &'static str,
}

/// `context` wraps the TCP I/O thread, which runs inline handlers; `shared` pools the
/// receive slots of verbs connections.
pub(crate) fn server_transport(
    addr: &str,
    kind: TransportKind,
    ring: RingConfig,
    shared: Option<SharedRings>,
    (context, http2): (
        Option<ThreadContext>,
        Option<crate::transport::Http2Handoff>,
    ),
) -> Result<ServerTransport, Error> {
    if let Some(name) = addr.strip_prefix("mem:") {
        let cq = ChannelCq::polled();
        let acceptor = memory::MemoryAcceptor::bind(name, ring, cq.clone())?;
        return Ok(ServerTransport {
            cq,
            acceptor: Box::new(acceptor),
            name: "memory",
        });
    }
    let sa = resolve(addr)?;
    if use_verbs(&sa, kind)? {
        #[cfg(feature = "verbs")]
        {
            let ep = crate::transport::verbs::VerbsEndpoint::new()?;
            let acceptor = Box::new(ep.listen_shared(sa, ring, shared)?);
            return Ok(ServerTransport {
                cq: ep.cq(),
                acceptor,
                name: "verbs",
            });
        }
    }
    let cq = ChannelCq::new();
    let acceptor = tcp::TcpAcceptor::bind(sa, (ring, shared), cq.clone(), (context, http2))?;
    Ok(ServerTransport {
        cq,
        acceptor: Box::new(acceptor),
        name: "tcp",
    })
}
