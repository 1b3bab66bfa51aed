//! [`Client`]: one connection carrying many concurrent calls from many threads, with
//! blocking calls and a runtime-agnostic async form ([`ResponseFuture`], completed by the
//! poller thread, usable from tokio or from plain threads).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpc_sync::{assert_unlocked, Mutex, Oneshot, RwLock};

use super::conn::{Caller, Conn, OpenCall, Reply, Work, UNARY};
use super::endpoint::{Endpoint, PollerSettings};
use super::grpc::client::{ClientTls, GrpcChannel};
use super::port::Port;
use super::stream::StreamShared;
use super::streaming::{Reader, StreamSender, Streaming};
use super::transport_select::{client_transport, Connector};
use super::{Counters, Stats};
use crate::codegen::MethodDescriptor;
use crate::interceptor::SharedInterceptor;
use crate::protocol::v2::{Kind, MemoryBudget, Role};
use crate::protocol::Keepalive;
use crate::transport::RingConfig;
use crate::{Error, Interceptor, MetadataMap, Request, Response, Status, TransportKind};

// ----- the per-call rendezvous between whoever completes a call and its caller ------------

/// Where a call's outcome is left for its caller.
pub(crate) struct CallCell {
    outcome: Oneshot<Result<Reply, Status>>,
    /// The call id, once the connection's owner opened the call.
    id: AtomicU64,
    /// A thread is waiting and will decode the reply at once: it may stay in its slot.
    thread_waiting: AtomicBool,
}

impl CallCell {
    fn new() -> Arc<CallCell> {
        Arc::new(CallCell {
            outcome: Oneshot::new(),
            id: AtomicU64::new(0),
            thread_waiting: AtomicBool::new(false),
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id.load(Ordering::Acquire)
    }

    pub(crate) fn set_id(&self, id: u64) {
        self.id.store(id, Ordering::Release);
    }

    /// Leaves the outcome and wakes the caller.
    ///
    /// A reply stays in its receive slot (zero-copy) only while a thread waits to decode it.
    /// Otherwise (a future not being awaited yet) it is copied out and the slot released:
    /// replies nobody consumes yet must not hold the receive ring, or the peer would run out
    /// of credits for the replies that callers are waiting for.
    pub(crate) fn complete(&self, result: Result<Reply, Status>) {
        let result = match result {
            Ok(reply) if !self.thread_waiting.load(Ordering::Acquire) => Ok(Reply {
                payload: reply.payload.detach(),
                ..reply
            }),
            other => other,
        };
        assert_unlocked("completing a call");
        if self.outcome.complete(result) == rpc_sync::Completed::Woke {
            super::woke_a_thread();
        }
    }

    /// Makes a used cell new again (it must not be shared any more).
    fn reset(&mut self) {
        self.outcome.reset();
        *self.id.get_mut() = 0;
        *self.thread_waiting.get_mut() = false;
    }

    /// Parks the calling thread until the outcome is there or `deadline` passes (`None`).
    fn wait(&self, deadline: Option<Instant>) -> Option<Result<Reply, Status>> {
        assert_unlocked("waiting for a reply");
        self.thread_waiting.store(true, Ordering::Release);
        let result = self.outcome.wait(deadline);
        self.thread_waiting.store(false, Ordering::Release);
        result
    }
}

// ----- the client --------------------------------------------------------------------

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
    /// outstanding the poller thread is busy anyway), and the poller thread parks meanwhile,
    /// so a reply within the budget costs no thread wake-up at all. Measured in one Soft-RoCE
    /// boot (`scripts/bench-spin`, docs/ARCHITECTURE.md "Who polls"): 200 µs had the lowest
    /// p50 at 1 outstanding and the highest rate at 8; 50 µs was worse than parking at once
    /// (the caller gives up just before the reply and both threads must be woken).
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// How long the poller busy-polls after the last completion before it sleeps
    /// (default 1 ms, or `RPC_IDLE_SPIN_US`; an idle endpoint sleeps and costs no CPU).
    pub fn idle_spin(mut self, idle_spin: Duration) -> Self {
        self.idle_spin = idle_spin;
        self
    }

    /// Connects to `addr` (`ip:port`, or `mem:NAME` for the in-process transport; with
    /// [`TransportKind::Grpc`], `host:port` of any gRPC server).
    pub fn connect(self, addr: &str) -> Result<Client, Error> {
        self.ring.validate()?;
        let counters = Arc::new(Counters::default());
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
            return Ok(Client {
                inner: Arc::new(ClientInner {
                    wire: Wire::Grpc(channel),
                    config: self,
                    counters,
                }),
            });
        }
        let (cq, connector) = client_transport(addr, self.transport)?;
        let (endpoint, poller) = Endpoint::start(
            cq,
            Role::Client,
            None,
            Arc::clone(&counters),
            PollerSettings {
                idle_spin: self.idle_spin,
                keepalive: self.keepalive,
                name: "client",
                context: None,
                memory: MemoryBudget::new(
                    self.memory_budget
                        .unwrap_or_else(super::default_memory_budget),
                ),
                stall_timeout: self.stall_timeout,
            },
        )?;
        let native = Native {
            endpoint,
            cells: Arc::new(filled_cell_pool()),
            poller: Mutex::new(Some(poller)),
            connector,
            conn: RwLock::new(None),
            next_link: AtomicU64::new(1),
            ring: self.ring,
            connect_timeout: self.connect_timeout,
        };
        let conn = native.connect_link().inspect_err(|_| native.stop())?;
        *native.conn.write() = Some(conn);
        tracing::debug!(%addr, transport = native.connector.name(), "connected");
        Ok(Client {
            inner: Arc::new(ClientInner {
                wire: Wire::Native(native),
                config: self,
                counters,
            }),
        })
    }
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Call cells of finished calls, ready for the next ones: no allocation per call.
type CellPool = crossbeam::queue::ArrayQueue<Arc<CallCell>>;

/// How many finished call cells a client keeps for reuse.
const CELL_POOL: usize = 256;
/// Cells a client starts with: a caller making one call after another then always finds one
/// that the completers of its earlier calls let go of (the latest may still be held for a
/// moment), instead of allocating now and then when it did not.
const CELLS_UP_FRONT: usize = 4;

fn filled_cell_pool() -> CellPool {
    let cells = CellPool::new(CELL_POOL);
    for _ in 0..CELLS_UP_FRONT {
        let _ = cells.push(CallCell::new());
    }
    cells
}

struct ClientInner {
    wire: Wire,
    config: ClientBuilder,
    counters: Arc<Counters>,
}

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

    /// The live connection, reconnecting once if the previous one was lost (outside the
    /// lock: connecting is I/O).
    fn conn(&self) -> Result<Arc<Conn>, Status> {
        if let Some(c) = self.conn.read().as_ref() {
            if !c.is_closed() {
                return Ok(Arc::clone(c));
            }
        }
        let fresh = self
            .connect_link()
            .map_err(|e| Status::unavailable(format!("not connected: {e}")))?;
        let mut slot = self.conn.write();
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                // Another caller reconnected first: use its connection.
                let existing = Arc::clone(c);
                drop(slot);
                self.endpoint
                    .close_conn(&fresh, "a concurrent reconnect won");
                return Ok(existing);
            }
        }
        tracing::info!(peer = %fresh.peer, "reconnected");
        *slot = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    fn stop(&self) {
        let conn = self.conn.write().take();
        if let Some(c) = conn {
            self.endpoint.close_conn(&c, "client dropped");
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

    /// The transport in use (`tcp`, `verbs`, `memory`, `grpc`).
    pub fn transport_name(&self) -> &'static str {
        match &self.inner.wire {
            Wire::Native(native) => native.connector.name(),
            Wire::Grpc(_) => "grpc",
        }
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        match &self.inner.wire {
            Wire::Native(native) => Stats {
                connect_retries: native.connector.connect_retries(),
                ..self.inner.counters.snapshot()
            },
            Wire::Grpc(_) => self.inner.counters.snapshot(),
        }
    }

    /// The request as the interceptor (if any) leaves it.
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

    /// Starts a unary call; returns the call's cell and id, or the status it failed with.
    fn start<Req: prost::Message>(
        &self,
        native: &Native,
        method: &'static MethodDescriptor,
        request: &Request<Req>,
        blocking: bool,
    ) -> Result<Started, Status> {
        let _span = tracing::trace_span!("call", method = method.path).entered();
        self.inner.counters.call();
        let conn = native.conn()?;
        let (timeout_us, deadline) = self.timing(request);
        let cell = take_cell(&native.cells);
        // A blocking caller decodes the reply as soon as it lands: it may stay in its slot.
        cell.thread_waiting.store(blocking, Ordering::Release);
        let headers = headers_block(request.metadata(), false);
        let frame = conn.encode(Kind::Message, UNARY, request.get_ref());
        native.endpoint.call_started(false);
        conn.submit(Work::Open(OpenCall {
            caller: Caller::Unary(Arc::clone(&cell)),
            method: method.id,
            timeout_us,
            deadline,
            headers,
            message: Some(frame),
        }));
        Ok(Started {
            endpoint: Arc::clone(&native.endpoint),
            conn,
            cell,
            cells: Arc::clone(&native.cells),
            deadline,
            counted_waiting: false,
        })
    }

    fn finish<Resp: prost::Message + Default>(
        &self,
        result: Result<Reply, Status>,
    ) -> Result<Response<Resp>, Status> {
        let result = result.and_then(|reply| {
            let message = Resp::decode(&*reply.payload)
                .map_err(|e| Status::internal(format!("could not decode the response: {e}")))?;
            Ok(Response::from_parts(reply.headers, message, reply.trailers))
        });
        self.counted(result)
    }

    /// Makes a unary call and blocks until its response, its deadline or the connection's
    /// loss.
    pub fn unary<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let request = match self.intercept(request) {
            Ok(request) => request,
            Err(status) => return self.counted(Err(status)),
        };
        let native = match &self.inner.wire {
            Wire::Native(native) => native,
            Wire::Grpc(_) => {
                let result = self
                    .open_stream_as::<Req, Resp>(method, &request, Some(request.get_ref()))
                    .and_then(|(_, mut responses)| responses.wait_unary());
                return self.counted(result);
            }
        };
        match self.start(native, method, &request, true) {
            Ok(started) => {
                let result = started.wait(self.inner.config.spin, method);
                self.finish(result)
            }
            Err(status) => self.finish(Err(status)),
        }
    }

    /// Starts a unary call and returns a future of its response. The future completes from
    /// the poller thread, so it works under any executor; [`ResponseFuture::wait`] blocks.
    pub fn unary_async<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> ResponseFuture<Resp>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let request = match self.intercept(request) {
            Ok(request) => request,
            Err(status) => {
                return ResponseFuture {
                    client: self.clone(),
                    method,
                    state: FutureState::Failed(Some(status)),
                    _response: PhantomData,
                };
            }
        };
        let state = match &self.inner.wire {
            Wire::Native(native) => match self.start(native, method, &request, false) {
                Ok(started) => FutureState::Pending(started),
                Err(status) => FutureState::Failed(Some(status)),
            },
            Wire::Grpc(_) => {
                match self.open_stream_as::<Req, Resp>(method, &request, Some(request.get_ref())) {
                    Ok((_, responses)) => FutureState::Stream {
                        responses,
                        headers: None,
                        message: None,
                    },
                    Err(status) => FutureState::Failed(Some(status)),
                }
            }
        };
        ResponseFuture {
            client: self.clone(),
            method,
            state,
            _response: PhantomData,
        }
    }
}

/// A call in flight.
struct Started {
    endpoint: Arc<Endpoint>,
    conn: Arc<Conn>,
    cell: Arc<CallCell>,
    cells: Arc<CellPool>,
    deadline: Option<Instant>,
    /// A future of this call was polled and is pending: counted among the endpoint's
    /// waiters until the call is over for its caller.
    counted_waiting: bool,
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.counted_waiting {
            self.endpoint.end_waiting();
        }
        self.endpoint.call_finished(false);
        // A finished call's cell goes back to the pool at once, even while the thread that
        // completed it may still be letting go of its reference: `take_cell` reuses a cell
        // only once nobody else holds it. An unfinished call's cell (a deadline passed, a
        // future was dropped) may still be completed, so it is not pooled.
        if self.cell.outcome.is_complete() {
            let _ = self.cells.push(Arc::clone(&self.cell));
        }
    }
}

/// A call cell for a new call: a pooled one that nobody holds any more, else a new one.
fn take_cell(cells: &CellPool) -> Arc<CallCell> {
    // The most recently finished cells may still be held by their completer for a moment;
    // they go back to the end of the queue, and the older ones ahead of them are free.
    for _ in 0..2 {
        let Some(mut cell) = cells.pop() else { break };
        if let Some(unshared) = Arc::get_mut(&mut cell) {
            unshared.reset();
            return cell;
        }
        let _ = cells.push(cell);
    }
    CallCell::new()
}

impl Started {
    /// Blocks for the outcome; at the deadline, withdraws the call. For up to `spin` the
    /// calling thread polls the completion queue itself, so the reply needs no wake-up of
    /// another thread; then it parks and leaves polling to the poller thread.
    fn wait(&self, spin: Duration, method: &MethodDescriptor) -> Result<Reply, Status> {
        self.drive(spin);
        // Parked, this caller relies on somebody else polling (see `Endpoint::waiting`).
        let _waiting = (!self.cell.outcome.is_complete()).then(|| self.endpoint.waiting());
        if let Some(r) = self.cell.wait(self.deadline) {
            return r;
        }
        // The deadline passed: withdraw the call. Whoever owns the connection decides which
        // came first, this or the reply; either way the outcome lands in the cell.
        self.conn.submit(Work::Cancel {
            caller: Caller::Unary(Arc::clone(&self.cell)),
            status: Status::deadline_exceeded(format!(
                "{}: no response within the deadline",
                method.path
            )),
        });
        self.cell
            .wait(None)
            .expect("an outcome always arrives without a deadline")
    }
}

impl Started {
    fn drive(&self, spin: Duration) {
        let outcome = &self.cell.outcome;
        self.cell.thread_waiting.store(true, Ordering::Release);
        self.endpoint
            .drive(spin, self.deadline, || outcome.is_complete());
        self.cell.thread_waiting.store(false, Ordering::Release);
    }
}

enum FutureState<Resp> {
    Pending(Started),
    /// A call over gRPC: its response stream, and what of the response came.
    Stream {
        responses: Streaming<Resp>,
        headers: Option<MetadataMap>,
        message: Option<Resp>,
    },
    Failed(Option<Status>),
    Done,
}

/// The response of a call started with [`Client::unary_async`]: `.await` it from any
/// executor, or [`ResponseFuture::wait`] for it. Dropping it before the response cancels the
/// call (the server is sent a CANCEL, and its handler is dropped if it awaits).
pub struct ResponseFuture<Resp> {
    client: Client,
    method: &'static MethodDescriptor,
    state: FutureState<Resp>,
    _response: PhantomData<fn() -> Resp>,
}

impl<Resp: prost::Message + Default> ResponseFuture<Resp> {
    /// Blocks until the response arrives (or the call fails).
    pub fn wait(mut self) -> Result<Response<Resp>, Status> {
        match std::mem::replace(&mut self.state, FutureState::Done) {
            FutureState::Pending(mut started) => {
                // It waits (or drives) below; a poll before counted it as a waiter.
                if std::mem::take(&mut started.counted_waiting) {
                    started.endpoint.end_waiting();
                }
                let result = started.wait(self.client.inner.config.spin, self.method);
                self.client.finish(result)
            }
            FutureState::Stream { mut responses, .. } => {
                let result = responses.wait_unary();
                self.client.counted(result)
            }
            FutureState::Failed(status) => self.client.finish(Err(status.expect("polled once"))),
            FutureState::Done => Err(Status::failed_precondition("response already taken")),
        }
    }
}

// The future never relies on its fields staying in place (nothing is pin-projected).
impl<Resp> Unpin for ResponseFuture<Resp> {}

impl<Resp: prost::Message + Default> Future for ResponseFuture<Resp> {
    type Output = Result<Response<Resp>, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match &mut this.state {
            FutureState::Pending(started) => match started.cell.outcome.poll_take(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    // Its waker relies on somebody else polling (see `Endpoint::waiting`).
                    if !started.counted_waiting {
                        started.counted_waiting = true;
                        started.endpoint.begin_waiting();
                    }
                    return Poll::Pending;
                }
            },
            FutureState::Stream {
                responses,
                headers,
                message,
            } => {
                let result = match responses.poll_unary(headers, message, cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => return Poll::Pending,
                };
                this.state = FutureState::Done;
                return Poll::Ready(this.client.counted(result));
            }
            FutureState::Failed(status) => Err(status.take().expect("polled after completion")),
            FutureState::Done => panic!("ResponseFuture polled after completion"),
        };
        this.state = FutureState::Done;
        Poll::Ready(this.client.finish(outcome))
    }
}

impl<Resp> Drop for ResponseFuture<Resp> {
    fn drop(&mut self) {
        if let FutureState::Pending(started) = &self.state {
            if !started.cell.outcome.is_complete() {
                started.conn.submit(Work::Cancel {
                    caller: Caller::Unary(Arc::clone(&started.cell)),
                    status: Status::cancelled("the response future was dropped"),
                });
            }
        }
    }
}

// ----- streaming calls ---------------------------------------------------------------

/// The metadata block of a HEADERS frame carrying `metadata`; `None` (no HEADERS frame) when
/// there is none and `always` is false (a call that opens with its message needs none). No
/// metadata, no encoding and no allocation.
fn headers_block(metadata: &MetadataMap, always: bool) -> Option<Vec<u8>> {
    if metadata.is_empty() {
        always.then(Vec::new)
    } else {
        Some(metadata.encode())
    }
}

impl Client {
    /// Opens a streaming call: its request headers now, and `message` (with END) for a
    /// server-streaming call.
    fn open_stream<T, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn super::conn::Encode>,
    ) -> Result<(StreamSender, Streaming<Resp>), Status> {
        match &self.inner.config.interceptor {
            None => self.open_stream_as(method, request, message),
            Some(interceptor) => {
                let mut head = Request::new(());
                *head.metadata_mut() = request.metadata().clone();
                if let Some(timeout) = request.timeout() {
                    head.set_timeout(timeout);
                }
                let head = interceptor.0.intercept(head)?;
                self.open_stream_as(method, &head, message)
            }
        }
    }

    /// [`Client::open_stream`] with `request`'s metadata and timeout as they are.
    fn open_stream_as<T, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn super::conn::Encode>,
    ) -> Result<(StreamSender, Streaming<Resp>), Status> {
        let _span = tracing::trace_span!("stream", method = method.path).entered();
        self.inner.counters.call();
        let native = match &self.inner.wire {
            Wire::Native(native) => native,
            Wire::Grpc(channel) => return Ok(self.open_grpc(channel, method, request, message)),
        };
        let conn = native.conn()?;
        let (timeout_us, deadline) = self.timing(request);
        let shared = StreamShared::new(0, conn.local_hello.call_window, false);
        let message = message.map(|m| conn.encode(Kind::Message, UNARY, m));
        let headers = headers_block(request.metadata(), message.is_none());
        native.endpoint.call_started(true);
        conn.submit(Work::Open(OpenCall {
            caller: Caller::Stream(Arc::clone(&shared)),
            method: method.id,
            timeout_us,
            deadline,
            headers,
            message,
        }));
        let port = Port::Conn(conn);
        let sender = StreamSender {
            shared: Arc::clone(&shared),
            port: port.clone(),
            path: method.path,
        };
        let mut responses = Streaming::new(shared, Some(port), Reader::Client, method.path);
        responses.set_endpoint(Arc::clone(&native.endpoint), self.inner.config.spin);
        Ok((sender, responses))
    }

    /// [`Client::open_stream`] over gRPC.
    fn open_grpc<T, Resp>(
        &self,
        channel: &Arc<GrpcChannel>,
        method: &'static MethodDescriptor,
        request: &Request<T>,
        message: Option<&dyn super::conn::Encode>,
    ) -> (StreamSender, Streaming<Resp>) {
        let timeout = request.timeout().or(self.inner.config.timeout);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let message = message.map(|m| {
            let len = m.encoded_len();
            let mut framed = vec![0u8; 5 + len];
            framed[1..5].copy_from_slice(&(len as u32).to_be_bytes());
            m.encode_into(&mut framed[5..]);
            bytes::Bytes::from(framed)
        });
        let call = channel.open(method.path, request.metadata(), timeout, deadline, message);
        let shared = Arc::clone(call.shared());
        let port = Port::Grpc(call);
        let sender = StreamSender {
            shared: Arc::clone(&shared),
            port: port.clone(),
            path: method.path,
        };
        (
            sender,
            Streaming::new(shared, Some(port), Reader::Client, method.path),
        )
    }

    /// Opens a call whose requests are the stream `requests` (its metadata in the request).
    fn open_with<Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<(StreamSender, Streaming<Resp>, S), Status> {
        let (request, messages) = requests.into_parts();
        let (sender, responses) = self.open_stream(method, &request, None)?;
        Ok((sender, responses, messages))
    }

    fn counted<T>(&self, result: Result<T, Status>) -> Result<T, Status> {
        if result.is_err() {
            self.inner.counters.error();
        }
        result
    }

    /// Calls a server-streaming method and blocks until the response headers arrive (or
    /// the first message, or the call's end); the messages then come from the stream.
    pub fn server_streaming<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let result = self
            .open_stream(method, &request, Some(request.get_ref()))
            .and_then(|(_, mut responses)| {
                let headers = responses.wait_headers()?;
                Ok(Response::from_parts(headers, responses, MetadataMap::new()))
            });
        self.counted(result)
    }

    /// [`Client::server_streaming`] without blocking: the future resolves when the response
    /// headers arrive.
    pub async fn server_streaming_async<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let opened = self.open_stream(method, &request, Some(request.get_ref()));
        drop(request);
        let result = match opened {
            Ok((_, mut responses)) => {
                match std::future::poll_fn(|cx| responses.poll_headers(cx)).await {
                    Ok(headers) => Ok(Response::from_parts(headers, responses, MetadataMap::new())),
                    Err(status) => Err(status),
                }
            }
            Err(status) => Err(status),
        };
        self.counted(result)
    }

    /// Opens a call whose requests are a stream (client-streaming or bidirectional) and
    /// returns its handle: send requests, close them, read responses, blocking or async.
    /// `request` carries the call's metadata and timeout.
    pub fn streaming<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<()>,
    ) -> Result<StreamingCall<Req, Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let opened = self.open_stream(method, &request, None);
        let (sender, responses) = self.counted(opened)?;
        Ok(StreamingCall {
            sender,
            responses,
            closed: false,
            _request: PhantomData,
        })
    }

    /// Calls a client-streaming method with the messages of `requests`, blocking until the
    /// response.
    pub fn client_streaming<Req, Resp, I>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<I>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
        I: IntoIterator<Item = Req>,
    {
        let (request, messages) = requests.into_parts();
        let mut call = self.streaming::<Req, Resp>(method, request)?;
        for message in messages {
            if call.send(&message).is_err() {
                // The call is over: its status comes with the response.
                break;
            }
        }
        let result = call.finish();
        self.counted(result)
    }

    /// Calls a client-streaming method with the messages of the stream `requests`; the
    /// future pulls the stream while it is polled and resolves with the response.
    pub async fn client_streaming_async<Req, Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default,
        S: futures_core::Stream<Item = Req> + Send + 'static,
    {
        let (sender, mut responses, messages) = match self.open_with(method, requests) {
            Ok(opened) => opened,
            Err(status) => return self.counted(Err(status)),
        };
        let mut pump = std::pin::pin!(pump_requests(sender, messages));
        let mut pumped = false;
        let (mut headers, mut message) = (None, None);
        let result = std::future::poll_fn(|cx| {
            if !pumped && pump.as_mut().poll(cx).is_ready() {
                pumped = true;
            }
            responses.poll_unary(&mut headers, &mut message, cx)
        })
        .await;
        self.counted(result)
    }

    /// Calls a bidirectional method with the stream `requests`; resolves when the response
    /// headers arrive. The request stream is pulled while this future or the response
    /// stream is polled (no executor of its own): keep reading responses to keep requests
    /// flowing.
    pub async fn bidi_streaming_async<Req, Resp, S>(
        &self,
        method: &'static MethodDescriptor,
        requests: Request<S>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message + 'static,
        Resp: prost::Message + Default,
        S: futures_core::Stream<Item = Req> + Send + 'static,
    {
        let (sender, mut responses, messages) = match self.open_with(method, requests) {
            Ok(opened) => opened,
            Err(status) => return self.counted(Err(status)),
        };
        responses.set_pump(Box::pin(pump_requests(sender, messages)));
        let result = match std::future::poll_fn(|cx| responses.poll_headers(cx)).await {
            Ok(headers) => Ok(Response::from_parts(headers, responses, MetadataMap::new())),
            Err(status) => Err(status),
        };
        self.counted(result)
    }
}

/// Sends the messages of `messages`, each once the previous one left the send queue, then
/// half-closes. Stops when the call is over; a message the server would refuse cancels the
/// call.
async fn pump_requests<Req, S>(sender: StreamSender, messages: S)
where
    Req: prost::Message,
    S: futures_core::Stream<Item = Req>,
{
    let mut messages = std::pin::pin!(messages);
    loop {
        if std::future::poll_fn(|cx| sender.poll_ready(cx))
            .await
            .is_err()
        {
            return;
        }
        match std::future::poll_fn(|cx| messages.as_mut().poll_next(cx)).await {
            Some(message) => {
                if let Err(status) = sender.send(&message) {
                    sender.cancel(status);
                    return;
                }
            }
            None => {
                sender.half_close();
                return;
            }
        }
    }
}

/// A call whose requests are a stream, from [`Client::streaming`]: send requests with
/// [`StreamingCall::send`] (blocking) or [`StreamingCall::send_async`], end them with
/// [`StreamingCall::close_send`], read responses from [`StreamingCall::responses`]. Each
/// send waits until the previous message left the send queue (the server's flow-control
/// window), so a slow server slows its sender down instead of filling memory. Dropping the
/// handle before the call ended cancels it.
pub struct StreamingCall<Req, Resp> {
    sender: StreamSender,
    responses: Streaming<Resp>,
    closed: bool,
    _request: PhantomData<fn(Req)>,
}

impl<Req, Resp> std::fmt::Debug for StreamingCall<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingCall")
            .field("method", &self.sender.path)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<Req: prost::Message, Resp: prost::Message + Default> StreamingCall<Req, Resp> {
    /// Sends a request, blocking while the previous one waits for the server's window. An
    /// error means the call is over (its status comes from the responses).
    pub fn send(&mut self, message: &Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("the requests were closed"));
        }
        self.sender.send_blocking(message)
    }

    /// [`StreamingCall::send`] without blocking.
    pub async fn send_async(&mut self, message: &Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("the requests were closed"));
        }
        self.sender.send_async(message).await
    }

    /// Gives the call up: the server is told and its handler cancelled, and the responses
    /// end with CANCELLED (what [`StreamingCall::recv`] returns next). Dropping the handle
    /// cancels too, without a status to read.
    pub fn cancel(&mut self) {
        self.closed = true;
        self.responses.cancel();
    }

    /// Ends the requests (the server sees the end of its request stream); blocks while the
    /// last request waits for the server's window.
    pub fn close_send(&mut self) {
        if !std::mem::replace(&mut self.closed, true) && self.sender.wait_ready().is_ok() {
            self.sender.half_close();
        }
    }

    /// [`StreamingCall::close_send`] without blocking.
    pub async fn close_send_async(&mut self) {
        if !std::mem::replace(&mut self.closed, true)
            && std::future::poll_fn(|cx| self.sender.poll_ready(cx))
                .await
                .is_ok()
        {
            self.sender.half_close();
        }
    }

    /// The response stream.
    pub fn responses(&mut self) -> &mut Streaming<Resp> {
        &mut self.responses
    }

    /// The next response, blocking (`Ok(None)` at the end).
    pub fn recv(&mut self) -> Result<Option<Resp>, Status> {
        self.responses.blocking_message()
    }

    /// The next response (`Ok(None)` at the end).
    pub async fn message(&mut self) -> Result<Option<Resp>, Status> {
        self.responses.message().await
    }

    /// Client-streaming: closes the requests and blocks for the one response.
    pub fn finish(mut self) -> Result<Response<Resp>, Status> {
        self.close_send();
        self.responses.wait_unary()
    }

    /// Client-streaming: [`StreamingCall::finish`] without blocking.
    pub async fn finish_async(mut self) -> Result<Response<Resp>, Status> {
        self.close_send_async().await;
        let (mut headers, mut message) = (None, None);
        std::future::poll_fn(|cx| self.responses.poll_unary(&mut headers, &mut message, cx)).await
    }
}
