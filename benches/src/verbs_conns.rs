//! `rpc-bench verbs-conns`: many verbs connections to one server, the client side of the
//! `verbs_conns_per_server` measurement (`scripts/bench-verbs-conns`, two guests).
//!
//! One process opens `--conns` links on one [`VerbsEndpoint`] with a small ring (4 slots of
//! 4 KiB), `--in-flight` connects at a time (one thread each). Every link gets a protocol core
//! of its own ([`Connection`], the same sans-I/O core the runtime runs), driven by one thread
//! that polls the endpoint's completion queue: it makes one call on each new link (a method
//! the server does not have, answered UNIMPLEMENTED: a request in and an answer out), answers
//! the server's keepalive PINGs (the core queues the answers) and returns credits, so the
//! connections stay up as long as the process runs. The client itself sends no keepalive.
//!
//! A link the server closes is counted (`lost`) and forgotten. When every connect has ended
//! (its call answered, or it failed, or its link was closed first), it writes the result to
//! `--out` (one JSON object) and keeps driving until the file `--hold` exists, so that the server can be
//! measured with all connections open.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::protocol::v2::{flags, Connection, Event, Outgoing, Payload, Role};
use rpc_core::protocol::Kind;
use rpc_core::transport::verbs::VerbsEndpoint;
use rpc_core::transport::{Completion, CompletionQueue, Link, RingConfig, SendBuf};
use rpc_core::Code;

use crate::cli::VerbsConnsArgs;

/// The clients' ring: 4 slots of 4 KiB (32 KiB registered per link).
pub const CLIENT_RING: RingConfig = RingConfig {
    slot_count: 4,
    slot_size: 4096,
    ..RingConfig::DEFAULT
};

/// A method id no server has: the call is answered UNIMPLEMENTED.
const UNKNOWN_METHOD: u32 = 0xdead_beef;

/// How long one connect may take (rdma_cm retries inside it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// What `rpc-bench verbs-conns` prints and writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerbsConnsResult {
    /// Links open, their call answered.
    pub conns: usize,
    /// Connects that failed.
    pub failed: usize,
    /// Links the server closed (a keepalive given up on an overloaded client, say).
    pub lost: usize,
    /// Seconds from the first connect to the last call answered.
    pub seconds: f64,
    /// Bytes this process registered with its device, all links open.
    pub client_registered_bytes: u64,
}

impl VerbsConnsResult {
    /// The one-line JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"conns\":{},\"failed\":{},\"lost\":{},\"seconds\":{:.3},\"client_registered_bytes\":{}}}",
            self.conns, self.failed, self.lost, self.seconds, self.client_registered_bytes
        )
    }
}

/// One link and its protocol core.
pub(crate) struct Peer {
    link: Arc<dyn Link>,
    core: Connection<(), SendBuf>,
    answered: bool,
}

impl Peer {
    fn new(link: Arc<dyn Link>) -> Peer {
        let core = Connection::new(
            Role::Client,
            link.local_hello(),
            link.peer_hello(),
            link.send_slot_size(),
        );
        Peer {
            link,
            core,
            answered: false,
        }
    }

    /// Opens the one call: a MESSAGE with END to the unknown method.
    fn call(&mut self) -> Result<(), String> {
        let call =
            (self.core.open_unary_call(())).map_err(|e| format!("cannot open a call: {e:?}"))?;
        let frame = Outgoing {
            kind: Kind::Message,
            flags: flags::END,
            code: 0,
            payload: Payload::Bytes(b"hi".to_vec()),
        };
        if let Some((buf, len)) = (self.core.send(call, frame, UNKNOWN_METHOD, 0))
            .map_err(|e| format!("cannot send the call: {e:?}"))?
        {
            self.link.post_send(buf, len).map_err(|e| e.to_string())?;
        }
        self.transmit()
    }

    /// One received frame: to the core; its slot goes back (a credit owed).
    fn on_frame(&mut self, frame: &[u8]) -> Result<(), String> {
        match self.core.on_frame(frame) {
            Ok(Event::Ended { code, .. }) => {
                if code != Code::Unimplemented {
                    return Err(format!("the call ended {code:?}, not UNIMPLEMENTED"));
                }
                self.answered = true;
            }
            Ok(_) => {}
            Err(e) => return Err(format!("protocol error: {e}")),
        }
        Ok(())
    }

    /// Credits for re-posted slots, then whatever the core has to send (PING answers,
    /// CREDIT frames).
    fn transmit(&mut self) -> Result<(), String> {
        let released = self.link.take_reposted();
        if released > 0 {
            self.core.released(released);
        }
        while self.core.wants_transmit() {
            let link = &self.link;
            match self.core.poll_transmit(&mut || link.alloc_send()) {
                Some((buf, len)) => link.post_send(buf, len).map_err(|e| e.to_string())?,
                None => break,
            }
        }
        Ok(())
    }
}

/// Opens the links, makes their calls and holds them (see the module documentation).
pub fn run(args: &VerbsConnsArgs) -> Result<VerbsConnsResult, String> {
    let addr: SocketAddr =
        (args.connect.parse()).map_err(|e| format!("--connect {}: {e}", args.connect))?;
    let ep = VerbsEndpoint::new().map_err(|e| e.to_string())?;
    let connector = ep.clone();
    let connect = move |id| {
        (connector.connect(addr, CLIENT_RING, id, CONNECT_TIMEOUT)).map_err(|e| e.to_string())
    };
    let start = Instant::now();
    let (mut driver, failed, links_rx) = open_links(
        "verbs-conns",
        ep.cq(),
        (args.conns, args.in_flight),
        connect,
    )?;
    let outcome = VerbsConnsResult {
        conns: driver.peers.len(),
        failed,
        lost: driver.lost,
        seconds: start.elapsed().as_secs_f64(),
        client_registered_bytes: ep.registered_bytes(),
    };
    if let Some(out) = &args.out {
        std::fs::write(out, outcome.to_json() + "\n").map_err(|e| format!("{out}: {e}"))?;
    }
    eprintln!("rpc-bench verbs-conns: {}", outcome.to_json());
    if let Some(hold) = &args.hold {
        eprintln!("rpc-bench verbs-conns: holding the connections until {hold} exists");
        driver.drive_until(&links_rx, |_| Path::new(hold).exists())?;
    }
    Ok(outcome)
}

/// Where a [`Driver`] takes the links opened for it.
pub(crate) type NewLinks = Receiver<Arc<dyn Link>>;

/// Opens `conns` links with `connect(id)`, `in_flight` connects at a time (one thread each),
/// makes each link's call and drives them all until every connect has ended (its call
/// answered, or it failed, or its link was closed first). Returns the driver, which holds the
/// links and keeps them up while it drives; the number of failed connects; and the channel of
/// new links (drained: pass it to [`Driver::drive_until`]). `tool` names the logs.
pub(crate) fn open_links<C>(
    tool: &'static str,
    cq: Arc<dyn CompletionQueue>,
    (conns, in_flight): (usize, usize),
    connect: C,
) -> Result<(Driver, usize, NewLinks), String>
where
    C: Fn(u64) -> Result<Arc<dyn Link>, String> + Send + Sync + 'static,
{
    let connect = Arc::new(connect);
    let (links_tx, links_rx) = channel::<Arc<dyn Link>>();
    let next_id = Arc::new(AtomicU64::new(1));
    let failed = Arc::new(AtomicU64::new(0));
    let connectors: Vec<_> = (0..in_flight.max(1))
        .map(|_| {
            let (connect, tx, next_id, failed) = (
                connect.clone(),
                links_tx.clone(),
                next_id.clone(),
                failed.clone(),
            );
            std::thread::spawn(move || loop {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                if id > conns as u64 {
                    return;
                }
                match connect(id) {
                    Ok(link) => {
                        let _ = tx.send(link);
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("rpc-bench {tool}: connect {id} failed: {e}");
                    }
                }
            })
        })
        .collect();
    drop(links_tx);
    let mut driver = Driver {
        tool,
        cq,
        peers: HashMap::new(),
        answered: 0,
        lost: 0,
        lost_unanswered: 0,
        started: Instant::now(),
        last_report: Instant::now(),
    };
    let result = driver.drive_until(&links_rx, |d| {
        d.answered + d.lost_unanswered + failed.load(Ordering::Relaxed) as usize >= conns
    });
    for connector in connectors {
        let _ = connector.join();
    }
    result?;
    let failed = failed.load(Ordering::Relaxed) as usize;
    Ok((driver, failed, links_rx))
}

/// Polls the completion queue for every link's core.
pub(crate) struct Driver {
    tool: &'static str,
    cq: Arc<dyn CompletionQueue>,
    pub(crate) peers: HashMap<u64, Peer>,
    answered: usize,
    /// Links closed by the server, and those of them closed before their call was answered.
    pub(crate) lost: usize,
    lost_unanswered: usize,
    started: Instant,
    last_report: Instant,
}

impl Driver {
    /// Drives every link (and takes new ones from `new_links`) until `done`.
    pub(crate) fn drive_until(
        &mut self,
        new_links: &Receiver<Arc<dyn Link>>,
        done: impl Fn(&Driver) -> bool,
    ) -> Result<(), String> {
        let mut out = Vec::new();
        while !done(self) {
            while let Ok(link) = new_links.try_recv() {
                let mut peer = Peer::new(link);
                peer.call()?;
                self.peers.insert(peer.link.id(), peer);
            }
            self.cq.poll(&mut out, 64);
            if out.is_empty() {
                self.cq.wait(Some(Duration::from_millis(10)));
            }
            for completion in out.drain(..) {
                match completion {
                    Completion::Recv { link, buf } => {
                        let Some(peer) = self.peers.get_mut(&link) else {
                            continue;
                        };
                        let was = peer.answered;
                        peer.on_frame(&buf)?;
                        drop(buf);
                        peer.transmit()?;
                        if peer.answered && !was {
                            self.answered += 1;
                        }
                    }
                    Completion::SendDone { link } => {
                        if let Some(peer) = self.peers.get_mut(&link) {
                            peer.transmit()?;
                        }
                    }
                    Completion::Closed { link, reason } => {
                        if let Some(peer) = self.peers.remove(&link) {
                            self.lost += 1;
                            self.lost_unanswered += usize::from(!peer.answered);
                            if self.lost <= 10 {
                                let tool = self.tool;
                                eprintln!("rpc-bench {tool}: link {link} closed: {reason}");
                            }
                        }
                    }
                }
            }
            if self.last_report.elapsed() >= Duration::from_secs(5) {
                self.last_report = Instant::now();
                eprintln!(
                    "rpc-bench {} [{:.0} s]: {} links open, {} calls answered, {} closed",
                    self.tool,
                    self.started.elapsed().as_secs_f64(),
                    self.peers.len(),
                    self.answered,
                    self.lost
                );
            }
        }
        Ok(())
    }
}
