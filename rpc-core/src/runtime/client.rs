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

use super::conn::{Conn, Keepalive, Payload, Work, UNARY};
use super::endpoint::Endpoint;
use super::transport_select::{client_transport, Connector};
use super::{Counters, Stats};
use crate::codegen::MethodDescriptor;
use crate::protocol::v2::{Kind, Role};
use crate::transport::RingConfig;
use crate::{Error, Request, Status, TransportKind};

// ----- the per-call rendezvous between whoever completes a call and its caller ------------

/// Where a call's outcome is left for its caller.
pub(crate) struct CallCell {
    outcome: Oneshot<Result<Payload, Status>>,
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
    pub(crate) fn complete(&self, result: Result<Payload, Status>) {
        let result = match result {
            Ok(payload) if !self.thread_waiting.load(Ordering::Acquire) => Ok(payload.detach()),
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
    fn wait(&self, deadline: Option<Instant>) -> Option<Result<Payload, Status>> {
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
        }
    }
}

impl ClientBuilder {
    /// How the client detects a server that died silently (default: PING after 1 s of
    /// silence, give up after 4 s more; `None` turns it off). Calls on a dead connection fail
    /// UNAVAILABLE.
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
        self.keepalive = keepalive;
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

    /// Connects to `addr` (`ip:port`, or `mem:NAME` for the in-process transport).
    pub fn connect(self, addr: &str) -> Result<Client, Error> {
        self.ring.validate()?;
        let (cq, connector) = client_transport(addr, self.transport)?;
        let counters = Arc::new(Counters::default());
        let (endpoint, poller) = Endpoint::start(
            cq,
            Role::Client,
            None,
            Arc::clone(&counters),
            self.idle_spin,
            self.keepalive,
            "client",
        )?;
        let inner = ClientInner {
            endpoint,
            cells: Arc::new(CellPool::new(CELL_POOL)),
            poller: Mutex::new(Some(poller)),
            connector,
            conn: RwLock::new(None),
            next_link: AtomicU64::new(1),
            config: self,
            counters,
        };
        let conn = inner.connect_link().inspect_err(|_| inner.stop())?;
        *inner.conn.write() = Some(conn);
        tracing::debug!(%addr, transport = inner.connector.name(), "connected");
        Ok(Client {
            inner: Arc::new(inner),
        })
    }
}

/// Call cells of finished calls, ready for the next ones: no allocation per call.
type CellPool = crossbeam::queue::ArrayQueue<Arc<CallCell>>;

/// How many finished call cells a client keeps for reuse.
const CELL_POOL: usize = 256;

struct ClientInner {
    endpoint: Arc<Endpoint>,
    cells: Arc<CellPool>,
    poller: Mutex<Option<JoinHandle<()>>>,
    connector: Connector,
    conn: RwLock<Option<Arc<Conn>>>,
    next_link: AtomicU64,
    config: ClientBuilder,
    counters: Arc<Counters>,
}

impl ClientInner {
    fn connect_link(&self) -> Result<Arc<Conn>, Error> {
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let link = self
            .connector
            .connect(self.config.ring, id, self.config.connect_timeout)?;
        Ok(self.endpoint.add_link(link))
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

impl Drop for ClientInner {
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

    /// The transport in use (`tcp`, `verbs`, `memory`).
    pub fn transport_name(&self) -> &'static str {
        self.inner.connector.name()
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            connect_retries: self.inner.connector.connect_retries(),
            ..self.inner.counters.snapshot()
        }
    }

    /// Starts a unary call; returns the call's cell and id, or the status it failed with.
    fn start<Req: prost::Message>(
        &self,
        method: &'static MethodDescriptor,
        request: &Request<Req>,
        blocking: bool,
    ) -> Result<Started, Status> {
        let _span = tracing::trace_span!("call", method = method.path).entered();
        self.inner.counters.call();
        let conn = self.inner.conn()?;
        let timeout = request.timeout().or(self.inner.config.timeout);
        let deadline = timeout.map(|t| Instant::now() + t);
        let cell = take_cell(&self.inner.cells);
        // A blocking caller decodes the reply as soon as it lands: it may stay in its slot.
        cell.thread_waiting.store(blocking, Ordering::Release);
        let frame = conn.encode(Kind::Message, UNARY, request.get_ref());
        self.inner.endpoint.call_started();
        conn.submit(Work::Open {
            cell: Arc::clone(&cell),
            method: method.id,
            timeout_us: timeout.map_or(0, |t| t.as_micros().clamp(1, u32::MAX as u128) as u32),
            deadline,
            frame,
        });
        Ok(Started {
            endpoint: Arc::clone(&self.inner.endpoint),
            conn,
            cell,
            cells: Arc::clone(&self.inner.cells),
            deadline,
        })
    }

    fn finish<Resp: prost::Message + Default>(
        &self,
        result: Result<Payload, Status>,
    ) -> Result<Resp, Status> {
        let result = result.and_then(|payload| {
            Resp::decode(&*payload)
                .map_err(|e| Status::internal(format!("could not decode the response: {e}")))
        });
        if result.is_err() {
            self.inner.counters.error();
        }
        result
    }

    /// Makes a unary call and blocks until its response, its deadline or the connection's
    /// loss.
    pub fn unary<Req, Resp>(
        &self,
        method: &'static MethodDescriptor,
        request: Request<Req>,
    ) -> Result<Resp, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        match self.start(method, &request, true) {
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
        let state = match self.start(method, &request, false) {
            Ok(started) => FutureState::Pending(started),
            Err(status) => FutureState::Failed(Some(status)),
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
}

impl Drop for Started {
    fn drop(&mut self) {
        self.endpoint.call_finished();
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
    fn wait(&self, spin: Duration, method: &MethodDescriptor) -> Result<Payload, Status> {
        self.drive(spin);
        if let Some(r) = self.cell.wait(self.deadline) {
            return r;
        }
        // The deadline passed: withdraw the call. Whoever owns the connection decides which
        // came first, this or the reply; either way the outcome lands in the cell.
        self.conn.submit(Work::Cancel {
            cell: Arc::clone(&self.cell),
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
        // Only a caller whose call is the client's only one drives: with others outstanding
        // the poller thread is busy anyway, and a driver that stops while others wait must
        // wake it again (a wake-up per call instead of none).
        if spin.is_zero() || self.endpoint.calls_outstanding() > 1 {
            return;
        }
        // One driver at a time: other callers park, and the poller wakes them.
        if !self.endpoint.start_driving() {
            return;
        }
        let until = Instant::now() + spin;
        let until = self.deadline.map_or(until, |d| d.min(until));
        self.cell.thread_waiting.store(true, Ordering::Release);
        while !self.cell.outcome.is_complete() {
            if self.endpoint.poll_once().is_some_and(|n| n > 0) {
                continue;
            }
            if Instant::now() >= until {
                break;
            }
            std::hint::spin_loop();
        }
        self.cell.thread_waiting.store(false, Ordering::Release);
        self.endpoint.stop_driving(self.cell.outcome.is_complete());
    }
}

enum FutureState {
    Pending(Started),
    Failed(Option<Status>),
    Done,
}

/// The response of a call started with [`Client::unary_async`]: `.await` it from any
/// executor, or [`ResponseFuture::wait`] for it. Dropping it cancels the call locally.
pub struct ResponseFuture<Resp> {
    client: Client,
    method: &'static MethodDescriptor,
    state: FutureState,
    _response: PhantomData<fn() -> Resp>,
}

impl<Resp: prost::Message + Default> ResponseFuture<Resp> {
    /// Blocks until the response arrives (or the call fails).
    pub fn wait(mut self) -> Result<Resp, Status> {
        match std::mem::replace(&mut self.state, FutureState::Done) {
            FutureState::Pending(started) => {
                let result = started.wait(self.client.inner.config.spin, self.method);
                self.client.finish(result)
            }
            FutureState::Failed(status) => self.client.finish(Err(status.expect("polled once"))),
            FutureState::Done => Err(Status::failed_precondition("response already taken")),
        }
    }
}

impl<Resp: prost::Message + Default> Future for ResponseFuture<Resp> {
    type Output = Result<Resp, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match &mut this.state {
            FutureState::Pending(started) => match started.cell.outcome.poll_take(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => return Poll::Pending,
            },
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
                    cell: Arc::clone(&started.cell),
                    status: Status::cancelled("the response future was dropped"),
                });
            }
        }
    }
}
