//! [`Client`]: one connection carrying many concurrent calls from many threads, with
//! blocking calls and a runtime-agnostic async form ([`ResponseFuture`], completed by
//! whichever thread handles the reply's completion: the poller, a driving caller or the TCP
//! I/O thread; usable from tokio or from plain threads).

pub(crate) mod channel;
mod streams;
mod unary;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpc_sync::{Mutex, RwLock, SingleFlight};
use tokio::sync::watch;

use super::call::CallCell;
use super::conn::{Conn, ConnTimeouts};
use super::endpoint::{Endpoint, PollerSettings};
use super::grpc::client::{ClientTls, GrpcChannel};
use super::transport_select::{client_transport, Connector};
use super::{Counters, Stats};
use crate::free_list::FreeList;
use crate::interceptor::SharedInterceptor;
use crate::protocol::v2::{MemoryBudget, Role};
use crate::protocol::Keepalive;
use crate::transport::RingConfig;
use crate::{Error, Interceptor, Request, Status, TransportKind};

pub use streams::StreamingCall;
pub use unary::ResponseFuture;

// ----- the client --------------------------------------------------------------------

/// How much longer than the connect timeout a caller waits for another caller's connect:
/// the TCP handshake's own deadline ([`crate::transport::tcp::HELLO_DEADLINE`], which starts
/// once the socket connected) and a second for the connection's admission.
const RECONNECT_SLACK: Duration =
    Duration::from_secs(crate::transport::tcp::HELLO_DEADLINE.as_secs() + 1);

/// How long connecting may take unless [`ClientBuilder::connect_timeout`] says otherwise: 20 s.
///
/// Long enough to ride out a few seconds of packet loss during connection set-up. Over verbs a
/// lost connect request is retransmitted by the kernel CM only after its response timeout
/// (about 6 s on Soft-RoCE: rdma_cm's CM response timeout of about 4 s plus twice the packet
/// life time), and ARP gives up after 3 s; the verbs transport therefore starts an attempt
/// over after 2 s, 4 s, 8 s, ... (`VerbsEndpoint::connect`), and 20 s leaves room for three
/// such retries, and for kernel retransmissions within the longer attempts. The former 5 s
/// failed after a single lost connect request. Over TCP, 20 s covers the SYN retransmissions
/// at 1, 3, 7 and 15 s. A server that refuses (nothing listening, a rejected HELLO) fails
/// the connect at once; only an unreachable one takes the whole timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The default of [`ClientBuilder::spin`], in microseconds.
const DEFAULT_SPIN_US: u64 = 200;

/// Configures and connects a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    transport: TransportKind,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    ring: RingConfig,
    spin: Duration,
    idle_spin: Duration,
    keepalive: Option<Keepalive>,
    memory_budget: Option<usize>,
    stall_timeout: Option<Duration>,
    extensions: bool,
    interceptor: Option<SharedInterceptor>,
    grpc_tls: Option<GrpcTls>,
}

/// TLS settings of [`TransportKind::Grpc`]: PEM roots and the expected server name.
#[derive(Clone)]
struct GrpcTls {
    roots_pem: Vec<u8>,
    server_name: Option<String>,
}

impl std::fmt::Debug for GrpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            transport: TransportKind::Auto,
            timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            ring: RingConfig::default(),
            spin: super::micros_from_env("RPC_SPIN_US", DEFAULT_SPIN_US),
            idle_spin: super::micros_from_env("RPC_IDLE_SPIN_US", 1000),
            keepalive: Some(Keepalive::default()),
            memory_budget: None,
            stall_timeout: Some(super::DEFAULT_STALL_TIMEOUT),
            extensions: true,
            interceptor: None,
            grpc_tls: None,
        }
    }
}

impl ClientBuilder {
    /// With [`TransportKind::Grpc`]: connects over TLS (rustls; ALPN `h2`), trusting the
    /// PEM certificates `roots_pem` and expecting the server's certificate to name
    /// `server_name` (default: the host part of the address).
    pub fn grpc_tls(mut self, roots_pem: &[u8], server_name: Option<&str>) -> Self {
        self.grpc_tls = Some(GrpcTls {
            roots_pem: roots_pem.to_vec(),
            server_name: server_name.map(str::to_string),
        });
        self
    }

    /// Runs `interceptor` on every call before it goes out: it may add or change metadata
    /// or the timeout, or fail the call with a status (nothing is sent then).
    pub fn interceptor(mut self, interceptor: impl Interceptor) -> Self {
        self.interceptor = Some(SharedInterceptor(Arc::new(interceptor)));
        self
    }

    /// Whether the connection offers the protocol extensions (PROTOCOL.md §22: whole requests,
    /// shared credits; default true). `false` speaks plain version 2, as a peer that knows no
    /// extension does: for interoperability tests.
    pub fn extensions(mut self, offer: bool) -> Self {
        self.extensions = offer;
        self
    }

    /// How the client detects a server that died silently (default: PING after 1 s of
    /// silence, give up after 4 s more; `None` turns it off). Calls on a dead connection fail
    /// UNAVAILABLE.
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
        self.keepalive = keepalive;
        self
    }

    /// The most memory the client holds on behalf of its server, in bytes (default:
    /// [`crate::default_memory_budget`]): its connection's rings and floor, and the replies
    /// and stream messages not consumed yet or in reassembly, counted as a server counts
    /// (see [`crate::ServerBuilder::memory_budget`]). A reply that does not fit fails its
    /// call with RESOURCE_EXHAUSTED (and the call is cancelled at the server).
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// How long a reply in reassembly may make no progress before it is dropped and its call
    /// failed with RESOURCE_EXHAUSTED (default 10 s; `None`: never).
    pub fn stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Which transport to use (default: [`TransportKind::Auto`]).
    pub fn transport(mut self, transport: TransportKind) -> Self {
        self.transport = transport;
        self
    }

    /// A default timeout for calls that set none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How long connecting (and each reconnect) may take, retries included (default
    /// [`DEFAULT_CONNECT_TIMEOUT`], 20 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Receive ring and message limit announced to the server.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.ring = ring;
        self
    }

    /// How long a blocking call polls for its reply on its own thread before it parks and
    /// leaves polling to the poller thread (default 200 µs, or `RPC_SPIN_US`; 0: park at
    /// once). Only a call that is the client's only one outstanding polls (with others
    /// outstanding the poller thread is busy anyway; over verbs a window of futures keeps
    /// the poller standing back instead, see docs/ARCHITECTURE.md "Who polls"), and the poller thread parks meanwhile,
    /// so a reply within the budget costs no thread wake-up at all. Measured in one Soft-RoCE
    /// boot (`scripts/bench-spin`; BENCHMARKS.md keeps the figures): 200 µs had the lowest
    /// p50 at 1 outstanding and the highest rate at 8; 50 µs was worse than parking at once
    /// (the caller gives up just before the reply and both threads must be woken). After a
    /// reply that came just after the budget (within twice it: a round trip about as long),
    /// the client lengthens it, up to 1 ms and no more than [`ClientBuilder::idle_spin`],
    /// and brings it back as replies come within; a reply later than that puts this budget
    /// back (docs/ARCHITECTURE.md "Who polls").
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// How long the poller busy-polls after the last completion before it sleeps
    /// (default 1 ms, or `RPC_IDLE_SPIN_US`; an idle endpoint sleeps and costs no CPU). Over
    /// verbs it does not spin while at most one unary call and no stream is outstanding:
    /// that call's caller polls for it.
    pub fn idle_spin(mut self, idle_spin: Duration) -> Self {
        self.idle_spin = idle_spin;
        self
    }

    /// Connects to `addr`: `ip:port`, or `mem:NAME` for the in-process transport, with the
    /// builder's transport (with [`TransportKind::Grpc`], `host:port` of any gRPC server);
    /// tonic's `http://host:port` the same; `tcp://`, `verbs://` or `grpc://` before the
    /// address chooses the transport, whatever the builder's. With [`TransportKind::Auto`],
    /// a server that answers in another protocol (an HTTP/2 server's SETTINGS where our
    /// HELLO should be: a tonic server, say) is called over standard gRPC instead.
    pub fn connect(mut self, addr: &str) -> Result<Client, Error> {
        let counters = Arc::new(Counters::default());
        let wire = self.open_wire(addr, &counters)?;
        Ok(Client {
            inner: Arc::new(ClientInner {
                wire: OnceLock::from(wire),
                config: self,
                counters,
                lazy_target: None,
                first_connect: SingleFlight::new(),
                connecting_for_futures: Mutex::new(None),
            }),
        })
    }

    /// tonic's `connect_lazy`: a client that connects at its first call, as
    /// [`ClientBuilder::connect`] would, and not before; nothing is checked until then. A
    /// call that finds no connection (the server is not up yet, the target is wrong) fails
    /// with UNAVAILABLE, and the next call tries again. Once connected, the client reconnects
    /// as any does. An async call's connecting is done on a thread of its own, so the future
    /// does not block its executor. First calls made together share one connect (the others
    /// wait for the one the first of them makes), as do calls that find the connection lost
    /// later; a call's timeout runs from when it is sent, after the connect.
    pub fn connect_lazy(self, addr: &str) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                wire: OnceLock::new(),
                config: self,
                counters: Arc::new(Counters::default()),
                lazy_target: Some(addr.to_string()),
                first_connect: SingleFlight::new(),
                connecting_for_futures: Mutex::new(None),
            }),
        }
    }

    /// The wire to `addr` (see [`ClientBuilder::connect`]); the transport it settles on is
    /// left in the builder.
    fn open_wire(&mut self, addr: &str, counters: &Arc<Counters>) -> Result<Wire, Error> {
        let (forced, addr) = parse_target(addr)?;
        if let Some(transport) = forced {
            self.transport = transport;
        }
        self.ring.validate()?;
        if self.transport == TransportKind::Grpc {
            let tls = match &self.grpc_tls {
                None => None,
                Some(tls) => {
                    let name = match &tls.server_name {
                        Some(name) => name.clone(),
                        None => host_of(addr).to_string(),
                    };
                    let server_name = rustls_pki_types::ServerName::try_from(name.clone())
                        .map_err(|e| {
                            Error::InvalidConfig(format!("TLS: bad server name {name:?}: {e}"))
                        })?;
                    Some(ClientTls {
                        config: super::grpc::tls::client_config(&tls.roots_pem)?,
                        server_name,
                    })
                }
            };
            let channel = GrpcChannel::connect(
                addr,
                self.connect_timeout,
                self.ring.max_message_size as usize,
                tls,
            )?;
            tracing::debug!(%addr, transport = "grpc", "connected");
            return Ok(Wire::Grpc(channel));
        }
        let (cq, connector) = client_transport(addr, self.transport)?;
        let (endpoint, poller) = Endpoint::start(
            cq,
            Role::Client,
            None,
            Arc::clone(counters),
            PollerSettings {
                idle_spin: self.idle_spin,
                keepalive: self.keepalive,
                name: "client",
                context: None,
                memory: MemoryBudget::new(
                    self.memory_budget
                        .unwrap_or_else(super::default_memory_budget),
                ),
                timeouts: ConnTimeouts {
                    stall: self.stall_timeout,
                    call_limit: None,
                },
                offer_extensions: self.extensions,
            },
        )?;
        let native = Native {
            endpoint,
            cells: Arc::new(filled_cell_pool()),
            poller: Mutex::new(Some(poller)),
            connector,
            conn: RwLock::new(None),
            reconnect: Box::default(),
            next_link: AtomicU64::new(1),
            ring: self.ring,
            connect_timeout: self.connect_timeout,
        };
        let conn = match native.connect_link() {
            Ok(conn) => conn,
            // An HTTP/2 server (a tonic one, say) answered our HELLO with its SETTINGS:
            // with no transport asked for, it is called over standard gRPC instead.
            Err(Error::BadMagic(magic)) if self.transport == TransportKind::Auto => {
                native.stop();
                tracing::info!(%addr, ?magic, "the server speaks another protocol; trying standard gRPC");
                self.transport = TransportKind::Grpc;
                return self.open_wire(addr, counters);
            }
            Err(e) => {
                native.stop();
                return Err(e);
            }
        };
        *native.conn.write() = Some(conn);
        tracing::debug!(%addr, transport = native.connector.name(), "connected");
        Ok(Wire::Native(native))
    }
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Call cells of finished calls, ready for the next ones: no allocation per call. Oldest
/// first: the most recently finished cells may still be held by their completer for a moment.
pub(super) type CellPool = FreeList<Arc<CallCell>>;

/// How many finished call cells a client keeps for reuse.
const CELL_POOL: usize = 256;
/// Cells a client starts with: a caller making one call after another then always finds one
/// that the completers of its earlier calls let go of (the latest may still be held for a
/// moment), instead of allocating now and then when it did not.
const CELLS_UP_FRONT: usize = 4;

fn filled_cell_pool() -> CellPool {
    let cells = CellPool::new(CELL_POOL);
    for _ in 0..CELLS_UP_FRONT {
        cells.give(CallCell::new());
    }
    cells
}

struct ClientInner {
    /// Set when the client is made, or by a lazy client's first call.
    wire: OnceLock<Wire>,
    config: ClientBuilder,
    counters: Arc<Counters>,
    /// A lazy client's target ([`ClientBuilder::connect_lazy`]).
    lazy_target: Option<String>,
    /// A lazy client's first connect, which the first calls wait for together.
    first_connect: SingleFlight<Result<(), Status>>,
    /// The connect made for futures on a thread of its own, while under way: where its
    /// result lands for every future waiting.
    connecting_for_futures: Mutex<Option<watch::Receiver<Landed>>>,
}

/// Where a connect made for futures lands: nothing yet, then its outcome.
type Landed = Option<Result<(), Status>>;

/// What a client's calls travel on.
enum Wire {
    /// This framework's protocol over verbs, TCP or memory.
    Native(Native),
    /// Standard gRPC over HTTP/2.
    Grpc(Arc<GrpcChannel>),
}

/// A client of this framework's protocol: its endpoint (poller) and connection.
struct Native {
    endpoint: Arc<Endpoint>,
    cells: Arc<CellPool>,
    poller: Mutex<Option<JoinHandle<()>>>,
    connector: Connector,
    conn: RwLock<Option<Arc<Conn>>>,
    /// The reconnect under way, which callers that find the connection gone wait for (boxed:
    /// the call path does not touch it, and it would double the size of `Wire`).
    reconnect: Box<SingleFlight<Result<Arc<Conn>, Status>>>,
    next_link: AtomicU64,
    ring: RingConfig,
    connect_timeout: Duration,
}

impl Native {
    fn connect_link(&self) -> Result<Arc<Conn>, Error> {
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let link = self
            .connector
            .connect(self.ring, id, self.connect_timeout)?;
        let Some(memory) = self.endpoint.admit(&link) else {
            self.endpoint.refuse_link(&link);
            let budget = self.endpoint.memory();
            return Err(Error::MemoryBudget(format!(
                "the connection's rings do not fit ({} of {} bytes reserved)",
                budget.used(),
                budget.limit()
            )));
        };
        Ok(self.endpoint.add_link(link, memory))
    }

    /// The connection if it takes new calls; `None` when [`Native::conn`] would reconnect
    /// (I/O, which an async caller leaves to a thread of its own).
    fn live_conn(&self) -> Option<Arc<Conn>> {
        self.conn
            .read()
            .as_ref()
            .filter(|c| c.takes_new_calls())
            .map(Arc::clone)
    }

    /// The live connection, reconnecting if the previous one was lost or its server said
    /// GOODBYE. One reconnect at a time: callers that find the connection gone while another
    /// thread reconnects wait for that connection instead of making one each (each would
    /// take one of the server's connections, all but one to be closed at once: a storm of
    /// them when a server restarts under many callers). A connection left after a GOODBYE
    /// stays registered until its server closes it: the calls it processes finish there.
    fn conn(&self) -> Result<Arc<Conn>, Status> {
        if let Some(c) = self.live_conn() {
            return Ok(c);
        }
        // The reconnect's connect is bounded by the connect timeout, and so is the wait.
        let wait = self.connect_timeout.saturating_add(RECONNECT_SLACK);
        self.reconnect
            .run(Some(wait), || self.reconnect_now())
            .unwrap_or_else(|| {
                Err(Status::unavailable(
                    "not connected: the reconnect under way did not finish in time",
                ))
            })
    }

    /// Connects again (outside every lock: connecting is I/O), unless the reconnect before
    /// this one, which the caller just missed, left a live connection.
    fn reconnect_now(&self) -> Result<Arc<Conn>, Status> {
        if let Some(c) = self.live_conn() {
            return Ok(c);
        }
        let fresh = self
            .connect_link()
            .map_err(|e| Status::unavailable(format!("not connected: {e}")))?;
        tracing::info!(peer = %fresh.peer, "reconnected");
        *self.conn.write() = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    fn stop(&self) {
        self.conn.write().take();
        // The connection in use, and any left after a GOODBYE that still finishes calls:
        // their calls and streams end now (nobody polls for their close afterwards).
        for conn in self.endpoint.conns().iter() {
            self.endpoint.close_conn(conn, "client dropped");
        }
        self.endpoint.stop();
        let poller = self.poller.lock().take();
        if let Some(h) = poller {
            let _ = h.join();
        }
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connection to a server, shared by all clones (cheap to clone, `Send + Sync`). Generated
/// clients wrap it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.transport_name())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder with default settings.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Connects to `addr` with default settings ([`TransportKind::Auto`]).
    pub fn connect(addr: &str) -> Result<Client, Error> {
        ClientBuilder::default().connect(addr)
    }

    /// The transport in use (`tcp`, `verbs`, `memory`, `grpc`; `unconnected` for a lazy
    /// client before its first call connected it).
    pub fn transport_name(&self) -> &'static str {
        match self.inner.wire.get() {
            Some(Wire::Native(native)) => native.connector.name(),
            Some(Wire::Grpc(_)) => "grpc",
            None => "unconnected",
        }
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        match self.inner.wire.get() {
            Some(Wire::Native(native)) => Stats {
                connect_retries: native.connector.connect_retries(),
                ..self.inner.counters.snapshot()
            },
            Some(Wire::Grpc(_)) | None => self.inner.counters.snapshot(),
        }
    }

    /// The wire calls travel on; a lazy client's first call connects it here (blocking).
    #[inline]
    fn wire(&self) -> Result<&Wire, Status> {
        match self.inner.wire.get() {
            Some(wire) => Ok(wire),
            None => self.connect_lazily(),
        }
    }

    /// [`Client::wire`] for an async caller: a lazy client connects, and one whose
    /// connection was lost or said GOODBYE reconnects, on a thread of its own (connecting
    /// is I/O, which would hold up the caller's executor). One such thread at a time: the
    /// futures that need a connection meanwhile wait for the connect it makes.
    async fn wire_async(&self) -> Result<&Wire, Status> {
        match self.inner.wire.get() {
            Some(wire @ Wire::Grpc(_)) => return Ok(wire),
            Some(wire @ Wire::Native(native)) if native.live_conn().is_some() => return Ok(wire),
            _ => {}
        }
        let mut landed = self.connect_off_thread();
        let result = landed.wait_for(Option::is_some).await.map(|r| r.clone());
        match result {
            Ok(Some(result)) => result?,
            _ => {
                return Err(Status::unavailable(
                    "not connected: the connecting thread ended without a result",
                ))
            }
        }
        Ok(self.inner.wire.get().expect("connected just now"))
    }

    /// Where the result of the connect made for futures lands: the one under way, or one
    /// started now on a thread of its own. A thread per future would be thousands of them
    /// when a busy async client loses its connection.
    fn connect_off_thread(&self) -> watch::Receiver<Landed> {
        let land = {
            let mut under_way = self.inner.connecting_for_futures.lock();
            // (A connect whose thread ended without landing, having panicked, is over.)
            if let Some(landed) = under_way.as_ref().filter(|l| l.has_changed().is_ok()) {
                return landed.clone();
            }
            let (land, landed) = watch::channel(None);
            *under_way = Some(landed);
            land
        };
        let landed = land.subscribe();
        let (client, mine) = (self.clone(), landed.clone());
        // Spawned outside the lock; until the thread lands, other futures wait for it.
        let spawned = std::thread::Builder::new()
            .name("rpc-connect".to_string())
            .spawn(move || {
                let result = match client.wire() {
                    Ok(Wire::Native(native)) => native.conn().map(drop),
                    Ok(Wire::Grpc(_)) => Ok(()),
                    Err(status) => Err(status),
                };
                client.end_connect(&mine);
                land.send_replace(Some(result));
            });
        if let Err(e) = spawned {
            // The sender went with the closure: the futures waiting see the channel close.
            self.end_connect(&landed);
            tracing::warn!(error = %e, "could not start a thread to connect");
        }
        landed
    }

    /// The connect made for futures whose result lands through `landed` is no longer the
    /// one under way: the next future that needs a connection starts another. (Only that
    /// one: a connect started since, after a spawn that failed, stays.)
    fn end_connect(&self, landed: &watch::Receiver<Landed>) {
        let mut under_way = self.inner.connecting_for_futures.lock();
        if under_way.as_ref().is_some_and(|l| l.same_channel(landed)) {
            *under_way = None;
        }
    }

    /// A lazy client's connecting, one at a time: the first calls made together wait for the
    /// connect the first of them makes (outside every lock: connecting is I/O).
    #[cold]
    fn connect_lazily(&self) -> Result<&Wire, Status> {
        let Some(target) = &self.inner.lazy_target else {
            unreachable!("only a lazy client is made without a wire")
        };
        let connect = || {
            if self.inner.wire.get().is_some() {
                // Connected by the connect before this one, which this caller just missed.
                return Ok(());
            }
            let mut builder = self.inner.config.clone();
            let wire = builder
                .open_wire(target, &self.inner.counters)
                .map_err(|e| Status::unavailable(format!("not connected to {target}: {e}")))?;
            // Set only here, one connect at a time: never set already.
            let _ = self.inner.wire.set(wire);
            Ok(())
        };
        // Connecting may try the native protocol, then gRPC: two connect timeouts.
        let wait = (self.inner.config.connect_timeout)
            .saturating_mul(2)
            .saturating_add(RECONNECT_SLACK);
        self.inner
            .first_connect
            .run(Some(wait), connect)
            .unwrap_or_else(|| {
                Err(Status::unavailable(format!(
                    "not connected to {target}: the connect under way did not finish in time"
                )))
            })?;
        Ok(self.inner.wire.get().expect("connected"))
    }

    /// The request as the interceptor (if any) leaves it. Inlined: without an interceptor
    /// the request is not moved.
    #[inline(always)]
    fn intercept<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        match &self.inner.config.interceptor {
            None => Ok(request),
            Some(interceptor) => interceptor.apply(request),
        }
    }

    /// The call's timeout (the request's, else the client's default) and deadline.
    fn timing<T>(&self, request: &Request<T>) -> (u32, Option<Instant>) {
        let timeout = request.timeout().or(self.inner.config.timeout);
        let deadline = timeout.map(|t| Instant::now() + t);
        let timeout_us = timeout.map_or(0, |t| t.as_micros().clamp(1, u32::MAX as u128) as u32);
        (timeout_us, deadline)
    }
}

impl ClientBuilder {
    /// [`ClientBuilder::connect`] without blocking the caller: the connection is made on a
    /// thread of its own, and the future completes when it is up (or failed). Await it from
    /// any executor.
    pub async fn connect_async(self, addr: &str) -> Result<Client, Error> {
        let addr = addr.to_string();
        let connecting = super::on_own_thread("rpc-connect", move || self.connect(&addr))?;
        connecting.await.unwrap_or_else(|| {
            Err(Error::ConnectionClosed(
                "the connecting thread ended without a result".into(),
            ))
        })
    }
}

impl Client {
    /// [`Client::connect`] without blocking the caller (see
    /// [`ClientBuilder::connect_async`]): what generated async clients' `connect` calls.
    pub async fn connect_async(addr: &str) -> Result<Client, Error> {
        ClientBuilder::default().connect_async(addr).await
    }
}

/// The transport `target`'s scheme chooses, if it has one, and the address after it:
/// tonic's `http://host:port` chooses none (the builder's), `tcp://`, `verbs://` and
/// `grpc://` their transport; a target without `://` is an address as it is.
fn parse_target(target: &str) -> Result<(Option<TransportKind>, &str), Error> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Ok((None, target));
    };
    // A URI's path (tonic's `Endpoint` takes `http://host:port/`) plays no part.
    let addr = rest.split('/').next().unwrap_or_default();
    let forced = match scheme.to_ascii_lowercase().as_str() {
        "http" => None,
        "tcp" => Some(TransportKind::Tcp),
        "verbs" => Some(TransportKind::Verbs),
        "grpc" => Some(TransportKind::Grpc),
        "https" => {
            return Err(Error::InvalidAddress(format!(
                "{target}: for gRPC over TLS, give the CA: an Endpoint with \
                 tls_config(ClientTlsConfig::new().ca_certificate(..)), or \
                 Client::builder().grpc_tls(..) to grpc://{addr}"
            )))
        }
        other => {
            return Err(Error::InvalidAddress(format!(
                "{target}: unknown scheme {other}:// (http, tcp, verbs or grpc)"
            )))
        }
    };
    if addr.is_empty() {
        return Err(Error::InvalidAddress(format!("{target}: no address")));
    }
    Ok((forced, addr))
}

#[cfg(test)]
mod target_tests {
    use super::{parse_target, TransportKind};

    #[test]
    fn tonic_uris_and_transport_schemes_name_the_address() {
        let parsed = |t| parse_target(t).unwrap();
        assert_eq!(parsed("10.0.0.1:50051"), (None, "10.0.0.1:50051"));
        assert_eq!(parsed("mem:echo"), (None, "mem:echo"));
        assert_eq!(parsed("http://[::1]:50051"), (None, "[::1]:50051"));
        assert_eq!(parsed("http://host:1/"), (None, "host:1"));
        assert_eq!(parsed("HTTP://host:1"), (None, "host:1"));
        assert_eq!(parsed("tcp://h:1"), (Some(TransportKind::Tcp), "h:1"));
        assert_eq!(parsed("verbs://h:1"), (Some(TransportKind::Verbs), "h:1"));
        assert_eq!(parsed("grpc://h:1"), (Some(TransportKind::Grpc), "h:1"));
    }

    #[test]
    fn other_schemes_and_empty_addresses_are_refused() {
        for target in ["https://h:1", "ftp://h:1", "http://", "tcp:///x"] {
            assert!(parse_target(target).is_err(), "{target}");
        }
    }
}
