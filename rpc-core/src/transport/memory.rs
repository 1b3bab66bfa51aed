//! In-process transport: a link's `post_send` copies the frame into a receive slot the peer
//! posted (as a NIC would) and pushes the completion onto the peer's queue. Used by tests and
//! by the instruction-count benchmark, where client and server share one process. Listeners
//! are registered by name (`mem:NAME` addresses).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Sender};
use rpc_sync::{Flag, Mutex};

use super::heap::{ChannelCq, HeapLink, HeapLinkParts};
use super::{Acceptor, Completion, Link, LinkId, RingConfig, SendBuf};
use crate::protocol::v2::Hello;
use crate::Error;

/// One side of an in-memory link.
struct MemoryLink {
    parts: HeapLinkParts,
    cq: Arc<ChannelCq>,
    peer: OnceLock<Weak<MemoryLink>>,
    closed: Flag,
}

impl MemoryLink {
    fn report_closed(&self, reason: &str) {
        if self.closed.raise() {
            self.cq.push_closed(self.parts.id, reason.to_string());
        }
    }

    fn peer(&self) -> Option<Arc<MemoryLink>> {
        self.peer.get().and_then(Weak::upgrade)
    }
}

impl HeapLink for MemoryLink {
    fn parts(&self) -> &HeapLinkParts {
        &self.parts
    }

    fn transmit(&self, buf: SendBuf, len: usize) -> Result<(), Error> {
        // The slot returns to its pool when `buf` drops at the end of this call.
        let frame = &buf[..len];
        let peer = match self.peer() {
            Some(p) if !self.closed.is_raised() => p,
            _ => {
                return Err(Error::ConnectionClosed(
                    "in-memory peer is gone".to_string(),
                ))
            }
        };
        let ring = &peer.parts.recv_ring;
        match ring.take_posted() {
            Some(mut slot) if frame.len() <= slot.len() => {
                slot[..frame.len()].copy_from_slice(frame);
                let buf = ring.completed(slot, frame.len());
                peer.cq.push(Completion::Recv {
                    link: peer.parts.id,
                    buf,
                });
                Ok(())
            }
            // The protocol core never lets this happen; a receiver-not-ready is fatal as it
            // is with verbs and rnr_retry = 0.
            _ => Err(Error::ProtocolViolation(
                "send without a posted receive slot at the peer".to_string(),
            )),
        }
    }

    fn shutdown(&self) {
        self.report_closed("connection closed locally");
        if let Some(p) = self.peer() {
            p.report_closed("peer closed the connection");
        }
    }
}

type Offer = (RingConfig, Arc<ChannelCq>, LinkId, Sender<Arc<MemoryLink>>);

fn registry() -> &'static Mutex<HashMap<String, Sender<Offer>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Sender<Offer>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn make_link(
    id: LinkId,
    cq: Arc<ChannelCq>,
    ring: RingConfig,
    peer: Hello,
    name: &str,
) -> Arc<MemoryLink> {
    Arc::new(MemoryLink {
        parts: HeapLinkParts::new(id, ring, peer, name.to_string()),
        cq,
        peer: OnceLock::new(),
        closed: Flag::new(false),
    })
}

/// A registered in-memory listener.
pub(crate) struct MemoryAcceptor {
    name: String,
    offers: Receiver<Offer>,
    ring: RingConfig,
    cq: Arc<ChannelCq>,
    next_id: LinkId,
}

impl MemoryAcceptor {
    /// Registers `name`; fails if it is taken.
    pub(crate) fn bind(name: &str, ring: RingConfig, cq: Arc<ChannelCq>) -> Result<Self, Error> {
        ring.validate()?;
        let mut reg = registry().lock();
        if reg.contains_key(name) {
            return Err(Error::InvalidAddress(format!(
                "mem:{name} is already bound"
            )));
        }
        let (tx, rx) = channel::unbounded();
        reg.insert(name.to_string(), tx);
        Ok(MemoryAcceptor {
            name: name.to_string(),
            offers: rx,
            ring,
            cq,
            next_id: 1,
        })
    }
}

impl Drop for MemoryAcceptor {
    fn drop(&mut self) {
        registry().lock().remove(&self.name);
    }
}

impl Acceptor for MemoryAcceptor {
    fn accept(&mut self, timeout: Duration) -> Result<Option<Arc<dyn Link>>, Error> {
        let Ok((client_ring, client_cq, client_id, reply)) = self.offers.recv_timeout(timeout)
        else {
            return Ok(None);
        };
        let id = self.next_id;
        self.next_id += 1;
        let server = make_link(
            id,
            Arc::clone(&self.cq),
            self.ring,
            client_ring.hello(),
            "mem-client",
        );
        let client = make_link(
            client_id,
            client_cq,
            client_ring,
            self.ring.hello(),
            &self.name,
        );
        let _ = server.peer.set(Arc::downgrade(&client));
        let _ = client.peer.set(Arc::downgrade(&server));
        if reply.send(client).is_err() {
            return Ok(None);
        }
        Ok(Some(server))
    }

    fn local_addr(&self) -> String {
        format!("mem:{}", self.name)
    }
}

/// Connects to the listener registered as `name`.
pub(crate) fn connect(
    name: &str,
    ring: RingConfig,
    id: LinkId,
    cq: &Arc<ChannelCq>,
    timeout: Duration,
) -> Result<Arc<dyn Link>, Error> {
    ring.validate()?;
    let offers = registry()
        .lock()
        .get(name)
        .cloned()
        .ok_or_else(|| Error::ConnectionClosed(format!("nothing listens on mem:{name}")))?;
    let (tx, rx) = channel::bounded(1);
    offers
        .send((ring, Arc::clone(cq), id, tx))
        .map_err(|_| Error::ConnectionClosed(format!("mem:{name} stopped listening")))?;
    let link = rx
        .recv_timeout(timeout)
        .map_err(|_| Error::ConnectionClosed(format!("mem:{name} did not accept")))?;
    Ok(link)
}
