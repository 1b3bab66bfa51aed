//! [`Server`]: several services behind one address. Requests are routed by method id;
//! handlers run inline on the poller or on the worker pool (per service or per method).

use foldhash::{HashMap, HashMapExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpc_sync::{assert_unlocked, Count, Flag};

use super::conn::{Conn, Dispatch, Keepalive, Payload, RequestBody, RequestDelivery, Work};
use super::endpoint::{Endpoint, PollerSettings};
use super::grpc::server::{FaceSettings, GrpcFace};
use super::pool::{Job, Spawner, ThreadContext, WorkerPool};
use super::port::Port;
use super::stream::{Cancel, StreamShared};
use super::streaming::{Reader, StreamSender, Streaming};
use super::transport_select::server_transport;
use super::{Counters, Stats};
use crate::codegen::{MethodDescriptor, MethodKind, Service};
use crate::interceptor::SharedInterceptor;
use crate::protocol::v2::{MemoryBudget, Role};
use crate::transport::{Acceptor, RingConfig};
use crate::{Error, Interceptor, MetadataMap, Request, Response, Status, TransportKind};

/// Where a method's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// On the poller thread: lowest latency, for handlers that return in microseconds and
    /// never block. An async handler's task woken by what this server's poller received
    /// (the credits or window its response stream waited for, its next request message)
    /// resumes on that poller too; woken from anywhere else (a timer, another call), it
    /// resumes on the worker pool. A blocking handler of a streaming method (generated with
    /// `sync_handlers`) runs on the worker pool even so: it waits for its peer's window or
    /// next request, which only the poller it would occupy could receive.
    Inline,
    /// On the worker pool (default): a slow handler does not stall the poller.
    WorkerPool,
}

struct Route {
    service: Arc<dyn Service>,
    index: usize,
    method: &'static MethodDescriptor,
    execution: Execution,
}

/// Configures a [`Server`]: its services, where their handlers run, its ring sizes.
pub struct ServerBuilder {
    ring: RingConfig,
    workers: usize,
    max_queued: usize,
    max_connections: Option<usize>,
    memory_budget: Option<usize>,
    stall_timeout: Option<Duration>,
    idle_spin: Duration,
    keepalive: Option<Keepalive>,
    services: Vec<(Arc<dyn Service>, Execution)>,
    method_execution: HashMap<String, Execution>,
    thread_context: Option<ThreadContext>,
    grpc_listen: Option<String>,
    grpc_runtime: Option<tokio::runtime::Handle>,
    grpc_tls: Option<(Vec<u8>, Vec<u8>)>,
    interceptor: Option<SharedInterceptor>,
    standard_services: bool,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            ring: RingConfig::default(),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_queued: 4096,
            max_connections: None,
            memory_budget: None,
            stall_timeout: Some(super::DEFAULT_STALL_TIMEOUT),
            idle_spin: super::micros_from_env("RPC_IDLE_SPIN_US", 1000),
            keepalive: Some(Keepalive::default()),
            services: Vec::new(),
            method_execution: HashMap::new(),
            thread_context: None,
            grpc_listen: None,
            grpc_runtime: None,
            grpc_tls: None,
            interceptor: None,
            standard_services: true,
        }
    }
}

impl ServerBuilder {
    /// Receive ring per connection and the largest request accepted.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.ring = ring;
        self
    }

    /// Number of handler worker threads (default: the number of CPUs).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Most requests waiting for a worker (default 4,096); a request beyond it is answered
    /// UNAVAILABLE at once. Bounds the memory a flood of slow requests can take.
    pub fn max_queued(mut self, max_queued: usize) -> Self {
        self.max_queued = max_queued.max(1);
        self
    }

    /// Most connections served at once (default: no limit). A connection beyond it is closed
    /// as soon as its handshake is done (its calls fail UNAVAILABLE at the client), and a
    /// warning logged. With it, a server's memory is bounded by this many times the bound of
    /// one connection (docs/PROTOCOL.md §15), whatever its clients do.
    pub fn max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = Some(max_connections.max(1));
        self
    }

    /// The most memory the server holds on behalf of all its clients together, in bytes
    /// (default: [`crate::default_memory_budget`], a quarter of physical memory and at most
    /// 1 GiB). It counts every connection's rings and a floor of its own when the connection
    /// is admitted, and what clients make the server hold beyond that: messages in
    /// reassembly, messages and metadata not consumed yet, queued replies. A connection may
    /// borrow at most an eighth of the budget beyond its floor, and all of them together half
    /// of it, so new connections are admitted and served whatever the others hold; a message
    /// or call that does not fit is answered RESOURCE_EXHAUSTED, a connection that does not
    /// fit is closed after its handshake (docs/PROTOCOL.md §15).
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// How long a message in reassembly may make no progress before it is dropped and its
    /// call answered RESOURCE_EXHAUSTED (default 10 s; `None`: never).
    pub fn stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// How long the poller busy-polls after the last completion before it sleeps (default
    /// 1 ms, or `RPC_IDLE_SPIN_US`: under load it never sleeps, while idle it costs no CPU).
    pub fn idle_spin(mut self, idle_spin: Duration) -> Self {
        self.idle_spin = idle_spin;
        self
    }

    /// How the server detects a client that died silently (default: PING after 1 s of
    /// silence, give up after 4 s more; `None` turns it off).
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
        self.keepalive = keepalive;
        self
    }

    /// Wraps each of the server's threads (workers, poller, and over TCP the I/O thread,
    /// where `Execution::Inline` handlers run; not the gRPC face's, which run inside its
    /// tokio runtime): `context` gets the thread's loop and must run it, typically inside an
    /// async runtime's context, so that handlers can use that runtime's timers and sockets
    /// wherever they are polled. With tokio:
    ///
    /// ```ignore
    /// let handle = tokio::runtime::Handle::current();
    /// Server::builder().thread_context(move |run| {
    ///     let _entered = handle.enter();
    ///     run()
    /// })
    /// ```
    pub fn thread_context(
        mut self,
        context: impl Fn(&mut dyn FnMut()) + Send + Sync + 'static,
    ) -> Self {
        self.thread_context = Some(Arc::new(context));
        self
    }

    /// Also serves the services as standard gRPC (HTTP/2; plaintext unless
    /// [`ServerBuilder::grpc_tls`]) on `addr`, for stock gRPC clients and tools: the same
    /// handlers, metadata, statuses, deadlines (`grpc-timeout`) and cancellation.
    /// [`Server::grpc_local_addr`] gives the bound address.
    pub fn grpc_listen(mut self, addr: &str) -> Self {
        self.grpc_listen = Some(addr.to_string());
        self
    }

    /// Serves the gRPC face over TLS (rustls; ALPN `h2`) with the PEM certificate chain
    /// (leaf first) and its PEM private key; without it the face is plaintext.
    pub fn grpc_tls(mut self, cert_chain_pem: &[u8], private_key_pem: &[u8]) -> Self {
        self.grpc_tls = Some((cert_chain_pem.to_vec(), private_key_pem.to_vec()));
        self
    }

    /// The tokio runtime the gRPC face runs its HTTP/2 connections on (default: a runtime
    /// of its own, two threads named `rpc-grpc`). Handlers still run where
    /// [`Execution`] says.
    pub fn grpc_runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.grpc_runtime = Some(handle);
        self
    }

    /// Runs `interceptor` on every request (over every transport, the gRPC face's too)
    /// before its handler: it may check or change the metadata the handler sees, or refuse
    /// the call with a status (the handler then never runs).
    pub fn interceptor(mut self, interceptor: impl Interceptor) -> Self {
        self.interceptor = Some(SharedInterceptor(Arc::new(interceptor)));
        self
    }

    /// Whether the server also offers the standard services (default: yes): gRPC health
    /// checking (`grpc.health.v1.Health`) and server reflection (`grpc.reflection.v1` and
    /// `v1alpha`), on every transport and the gRPC face. See [`crate::standard`].
    pub fn standard_services(mut self, enable: bool) -> Self {
        self.standard_services = enable;
        self
    }

    /// Adds a service whose handlers run on the worker pool.
    pub fn add_service(self, service: impl Service) -> Self {
        self.add_service_with(service, Execution::WorkerPool)
    }

    /// Adds a service whose handlers run as `execution` says.
    pub fn add_service_with(mut self, service: impl Service, execution: Execution) -> Self {
        self.services.push((Arc::new(service), execution));
        self
    }

    /// Overrides where one method's handler runs; `path` is `/package.Service/Method`.
    pub fn method_execution(mut self, path: &str, execution: Execution) -> Self {
        self.method_execution.insert(path.to_string(), execution);
        self
    }

    fn routes(&self) -> Result<HashMap<u32, Route>, Error> {
        let mut routes: HashMap<u32, Route> = HashMap::new();
        for (service, execution) in &self.services {
            let desc = service.descriptor();
            for (index, method) in desc.methods.iter().enumerate() {
                if let Some(existing) = routes.get(&method.id) {
                    return Err(Error::InvalidConfig(
                        if existing.method.path == method.path {
                            format!("{} is served twice", method.path)
                        } else {
                            format!(
                                "method ids of {} and {} collide; rename one",
                                existing.method.path, method.path
                            )
                        },
                    ));
                }
                let mut execution = self
                    .method_execution
                    .get(method.path)
                    .copied()
                    .unwrap_or(*execution);
                if execution == Execution::Inline
                    && method.kind != MethodKind::Unary
                    && service.blocking_handlers()
                {
                    // Waiting for the client's window or requests on the poller would stall
                    // it for good: the poller is what receives them.
                    tracing::debug!(
                        method = method.path,
                        "a blocking streaming handler runs on the worker pool, not inline"
                    );
                    execution = Execution::WorkerPool;
                }
                routes.insert(
                    method.id,
                    Route {
                        service: Arc::clone(service),
                        index,
                        method,
                        execution,
                    },
                );
            }
        }
        for path in self.method_execution.keys() {
            if !routes.values().any(|r| r.method.path == path) {
                return Err(Error::InvalidConfig(format!(
                    "method_execution names {path}, which no added service has"
                )));
            }
        }
        Ok(routes)
    }

    /// Binds `addr` and starts serving: an acceptor thread, the poller, the worker pool.
    pub fn serve(mut self, addr: &str, transport: TransportKind) -> Result<Server, Error> {
        self.ring.validate()?;
        let mut stopping = None;
        if self.standard_services {
            let own: Vec<Arc<dyn Service>> =
                self.services.iter().map(|(s, _)| Arc::clone(s)).collect();
            let (standard, announce) = crate::standard::services(&own);
            stopping = Some(announce);
            for service in standard {
                // A service of the user's own under a standard name wins.
                let name = service.descriptor().name;
                if !own.iter().any(|s| s.descriptor().name == name) {
                    self.services.push((service, Execution::WorkerPool));
                }
            }
        }
        let routes = self.routes()?;
        let super::transport_select::ServerTransport {
            cq,
            acceptor,
            name: transport_name,
        } = server_transport(addr, transport, self.ring, self.thread_context.clone())?;
        let counters = Arc::new(Counters::default());
        let paths = routes
            .values()
            .map(|r| (r.method.path, (r.method.id, r.method.kind)))
            .collect();
        let pool = WorkerPool::new(self.workers, self.max_queued, self.thread_context.clone())?;
        let calls = Arc::new(Calls {
            counters: Arc::clone(&counters),
            in_flight: Count::new(0),
            spawner: pool.spawner(),
        });
        let shared = Arc::new(Shared {
            paths,
            routes,
            pool,
            interceptor: self.interceptor.clone(),
            calls,
        });
        let grpc = match &self.grpc_listen {
            Some(addr) => Some(GrpcFace::start(
                Arc::clone(&shared),
                addr,
                FaceSettings {
                    runtime: self.grpc_runtime.clone(),
                    max_message_size: self.ring.max_message_size as usize,
                    tls: match &self.grpc_tls {
                        Some((certs, key)) => Some(super::grpc::tls::server_config(certs, key)?),
                        None => None,
                    },
                },
            )?),
            None => None,
        };
        let (endpoint, poller) = Endpoint::start(
            cq,
            Role::Server,
            Some(Arc::clone(&shared) as Arc<dyn Dispatch>),
            counters,
            PollerSettings {
                idle_spin: self.idle_spin,
                keepalive: self.keepalive,
                name: "server",
                context: self.thread_context.clone(),
                memory: MemoryBudget::new(
                    self.memory_budget
                        .unwrap_or_else(super::default_memory_budget),
                ),
                stall_timeout: self.stall_timeout,
            },
        )?;
        let local_addr = acceptor.local_addr();
        let stop = Arc::new(Flag::new(false));
        let acceptor_thread = {
            let (endpoint, stop) = (Arc::clone(&endpoint), Arc::clone(&stop));
            let max_connections = self.max_connections;
            std::thread::Builder::new()
                .name("rpc-acceptor".to_string())
                .spawn(move || accept_loop(acceptor, endpoint, stop, max_connections))?
        };
        tracing::info!(addr = %local_addr, transport = transport_name, "serving");
        Ok(Server {
            endpoint,
            shared,
            stop,
            threads: Some((acceptor_thread, poller)),
            local_addr,
            transport_name,
            grpc,
            stopping,
        })
    }
}

fn accept_loop(
    mut acceptor: Box<dyn Acceptor>,
    endpoint: Arc<Endpoint>,
    stop: Arc<Flag>,
    max_connections: Option<usize>,
) {
    while !stop.is_raised() {
        match acceptor.accept(Duration::from_millis(50)) {
            Ok(Some(link)) => {
                if max_connections.is_some_and(|max| endpoint.conns().len() >= max) {
                    tracing::warn!(peer = %link.peer_name(), "connection limit reached; closing the new connection");
                    endpoint.refuse_link(&link);
                    continue;
                }
                let Some(memory) = endpoint.admit(&link) else {
                    let budget = endpoint.memory();
                    tracing::warn!(
                        peer = %link.peer_name(),
                        used = budget.used(),
                        limit = budget.limit(),
                        "memory budget spent; closing the new connection"
                    );
                    endpoint.refuse_link(&link);
                    continue;
                };
                tracing::debug!(peer = %link.peer_name(), "accepted");
                endpoint.add_link(link, memory);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "a connection attempt failed"),
        }
    }
}

/// What the poller, the gRPC face and the handlers share.
pub(crate) struct Shared {
    routes: HashMap<u32, Route>,
    /// Method ids and kinds by path, for the gRPC face.
    paths: HashMap<&'static str, (u32, MethodKind)>,
    interceptor: Option<SharedInterceptor>,
    pool: WorkerPool,
    calls: Arc<Calls>,
}

/// What a server's calls share with it: one `Arc` in each call's [`ReplySink`].
pub(crate) struct Calls {
    counters: Arc<Counters>,
    /// Calls handed to a handler and not answered yet (their sinks not dropped).
    in_flight: Count,
    /// Where woken handler tasks go.
    spawner: Spawner,
}

impl Dispatch for Shared {
    fn kind(&self, method: u32) -> Option<MethodKind> {
        self.routes.get(&method).map(|r| r.method.kind)
    }

    fn request(&self, conn: &Arc<Conn>, delivery: RequestDelivery) {
        self.serve(
            Port::Conn(Arc::clone(conn)),
            Arc::clone(&conn.peer),
            delivery,
        );
    }
}

impl Shared {
    /// The id and kind of the method at `path` (`/package.Service/Method`).
    pub(crate) fn lookup(&self, path: &str) -> Option<(u32, MethodKind)> {
        self.paths.get(path).copied()
    }

    /// Runs (or queues) the handler of a request that arrived on `port` from `peer`.
    pub(crate) fn serve(&self, port: Port, peer: Arc<str>, delivery: RequestDelivery) {
        let counters = &self.calls.counters;
        counters.call();
        let RequestDelivery {
            call,
            method,
            deadline,
            metadata,
            body,
            stream,
        } = delivery;
        let refuse = |status: Status| {
            counters.error();
            port.end(call, status);
        };
        let Some(route) = self.routes.get(&method) else {
            drop(body);
            refuse(Status::unimplemented(format!(
                "no service on this server has a method with id {method:#010x}"
            )));
            return;
        };
        if deadline.is_some_and(|d| d <= Instant::now()) {
            drop(body);
            refuse(Status::deadline_exceeded(
                "deadline passed before the handler ran",
            ));
            return;
        }
        let metadata = match &self.interceptor {
            None => metadata,
            Some(interceptor) => {
                let head = Request::from_incoming((), metadata, deadline, Arc::clone(&peer));
                match interceptor.apply(head) {
                    Ok(mut head) => std::mem::take(head.metadata_mut()),
                    Err(status) => {
                        drop(body);
                        refuse(status);
                        return;
                    }
                }
            }
        };
        self.calls.in_flight.add(1);
        let body = match body {
            RequestBody::Message(payload) => Requests::Message(payload),
            RequestBody::Stream => Requests::Stream(
                Arc::clone(
                    stream
                        .as_ref()
                        .expect("a stream body comes with its stream"),
                ),
                port.clone(),
            ),
        };
        let request = IncomingRequest {
            body,
            method: route.method,
            deadline,
            metadata,
            peer,
        };
        let reply = ReplySink {
            port,
            id: call,
            method: route.method,
            calls: Arc::clone(&self.calls),
            stream,
            done: false,
            inline: route.execution == Execution::Inline,
        };
        match route.execution {
            Execution::Inline => run_handler(&*route.service, route.index, request, reply),
            Execution::WorkerPool => {
                let job = Job {
                    service: Arc::clone(&route.service),
                    index: route.index,
                    request,
                    reply,
                };
                if let Some(job) = self.pool.execute(job) {
                    // The queue is full: answer at once rather than queue without bound.
                    drop(job.request);
                    job.reply.fail(Status::unavailable(
                        "the server is overloaded: its handler queue is full",
                    ));
                }
            }
        }
    }
}

pub(crate) fn run_handler(
    service: &dyn Service,
    index: usize,
    request: IncomingRequest,
    reply: ReplySink,
) {
    let path = request.method.path;
    let _span = tracing::trace_span!("handle", method = path, id = reply.id, peer = %request.peer)
        .entered();
    assert_unlocked("calling a handler");
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| service.call(index, request, reply))) {
        log_panic(path, &*panic);
    }
}

fn log_panic(path: &str, panic: &(dyn std::any::Any + Send)) {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(method = path, panic = %what, "handler panicked; answered INTERNAL");
}

/// A request as a service's `call` receives it: its message (undecoded, still in its
/// receive slot) or its message stream, and the call's metadata.
pub struct IncomingRequest {
    body: Requests,
    method: &'static MethodDescriptor,
    deadline: Option<Instant>,
    metadata: MetadataMap,
    peer: Arc<str>,
}

/// The messages of an [`IncomingRequest`].
enum Requests {
    /// The one message of a unary-request method.
    Message(Payload),
    /// The request stream of a client-streaming or bidirectional method, and where its
    /// reader returns window.
    Stream(Arc<StreamShared>, Port),
}

impl IncomingRequest {
    /// The method being called.
    pub fn method(&self) -> &'static MethodDescriptor {
        self.method
    }

    /// The request metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// Decodes the one request message in place and releases the receive slot. An
    /// undecodable message gives INVALID_ARGUMENT; a method whose requests are a stream
    /// gives INTERNAL (use [`IncomingRequest::into_streaming`]).
    pub fn decode<M: prost::Message + Default>(self) -> Result<Request<M>, Status> {
        let Requests::Message(payload) = &self.body else {
            return Err(Status::internal(format!(
                "{}: the requests of this method are a stream",
                self.method.path
            )));
        };
        let message = M::decode(&**payload).map_err(|e| {
            Status::invalid_argument(format!(
                "{}: could not decode the request: {e}",
                self.method.path
            ))
        })?;
        drop(self.body);
        Ok(Request::from_incoming(
            message,
            self.metadata,
            self.deadline,
            self.peer,
        ))
    }

    /// The request stream of a client-streaming or bidirectional method (for a method with
    /// one request, a stream of that one message).
    pub fn into_streaming<M: prost::Message + Default>(self) -> Request<Streaming<M>> {
        let streaming = match self.body {
            Requests::Stream(shared, port) => {
                Streaming::new(shared, Some(port), Reader::Server, self.method.path)
            }
            Requests::Message(payload) => {
                // One message, already complete: a stream of its own (no window to return).
                let shared = StreamShared::new(0, u32::MAX, false);
                shared
                    .inbox
                    .push(super::stream::Incoming::Message(payload.into_received()));
                shared
                    .inbox
                    .close(Some(super::stream::Incoming::End(Ok(MetadataMap::new()))));
                Streaming::new(shared, None, Reader::Server, self.method.path)
            }
        };
        Request::from_incoming(streaming, self.metadata, self.deadline, self.peer)
    }
}

/// Sends a call's answer: one message (or a stream of them), or a status. A sink dropped
/// without an answer (a handler that panicked) answers INTERNAL.
pub struct ReplySink {
    port: Port,
    id: u64,
    method: &'static MethodDescriptor,
    calls: Arc<Calls>,
    stream: Option<Arc<StreamShared>>,
    done: bool,
    /// The method runs inline ([`Execution::Inline`]): its task, woken while a poller of
    /// this server polls, runs there too.
    inline: bool,
}

impl ReplySink {
    /// Answers a unary-response call with `response`: its headers, message and trailers
    /// (RESOURCE_EXHAUSTED instead if the caller would not accept the message's size).
    pub fn send<M: prost::Message>(mut self, response: Response<M>) {
        self.done = true;
        let limit = self.port.max_message_size();
        let len = response.get_ref().encoded_len();
        if len > limit {
            self.fail_inner(Status::resource_exhausted(format!(
                "{}: response of {len} bytes exceeds the client's limit of {limit} bytes",
                self.method.path
            )));
            return;
        }
        self.port.reply(self.id, response);
    }

    /// Answers with a status (its metadata as trailers).
    pub fn fail(mut self, status: Status) {
        self.done = true;
        self.fail_inner(status);
    }

    fn fail_inner(&self, status: Status) {
        self.calls.counters.error();
        self.port.end(self.id, status);
    }

    /// Whether the client cancelled the call (or its connection was lost): a handler may
    /// stop early. Known for streaming methods and for every call of the gRPC face; a unary
    /// call over verbs or TCP learns of its cancellation differently: an async handler's
    /// future is dropped.
    pub fn is_cancelled(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_cancelled())
    }

    /// Streaming responses: the response headers (sent before the first message).
    pub(crate) fn send_headers(&self, headers: &MetadataMap) {
        self.port.headers(self.id, headers);
    }

    /// Streaming responses: the sender of the messages.
    pub(crate) fn sender(&self) -> Option<StreamSender> {
        self.stream.as_ref().map(|shared| StreamSender {
            shared: Arc::clone(shared),
            port: self.port.clone(),
            path: self.method.path,
        })
    }

    /// Streaming responses: ends the call with OK and `trailers`.
    pub(crate) fn finish(mut self, trailers: MetadataMap) {
        self.done = true;
        self.port.end(
            self.id,
            Status::new(crate::Code::Ok, "").with_metadata(trailers),
        );
    }

    /// The call is over without an answer of ours (the client cancelled it).
    pub(crate) fn abandon(mut self) {
        self.done = true;
    }

    /// Where the call's handler task goes when woken.
    pub(crate) fn spawner(&self) -> Spawner {
        self.calls.spawner.with_inline(self.inline)
    }

    /// Cancels `task` when the call is cancelled (from now on).
    pub(crate) fn canceller(&self) -> TaskCanceller {
        TaskCanceller {
            port: self.port.clone(),
            id: self.id,
            stream: self.stream.clone(),
        }
    }
}

/// Ties a handler's task to its call, so that cancelling the call cancels the task.
pub(crate) struct TaskCanceller {
    port: Port,
    id: u64,
    stream: Option<Arc<StreamShared>>,
}

impl TaskCanceller {
    pub(crate) fn attach(self, task: Arc<dyn Cancel>) {
        match self.stream {
            Some(stream) => stream.attach(task),
            None => self.port.attach(self.id, task),
        }
    }
}

impl Drop for ReplySink {
    fn drop(&mut self) {
        if !self.done {
            self.fail_inner(Status::internal(format!(
                "{}: the handler panicked or returned no answer",
                self.method.path
            )));
        }
        if let Some(stream) = &self.stream {
            // The handler is done with the call: the call lets go of its task.
            stream.detach();
        }
        self.calls.in_flight.sub(1);
    }
}

/// A running server. Dropping it shuts it down gracefully.
pub struct Server {
    endpoint: Arc<Endpoint>,
    shared: Arc<Shared>,
    stop: Arc<Flag>,
    threads: Option<(JoinHandle<()>, JoinHandle<()>)>,
    local_addr: String,
    transport_name: &'static str,
    grpc: Option<GrpcFace>,
    /// Tells the standard services of a shutdown.
    stopping: Option<crate::standard::Stopping>,
}

impl Server {
    /// A builder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> &str {
        &self.local_addr
    }

    /// The transport in use (`tcp`, `verbs`, `memory`).
    pub fn transport_name(&self) -> &'static str {
        self.transport_name
    }

    /// The address of the gRPC face ([`ServerBuilder::grpc_listen`]), if it has one.
    pub fn grpc_local_addr(&self) -> Option<std::net::SocketAddr> {
        self.grpc.as_ref().map(GrpcFace::local_addr)
    }

    /// Where a client of `transport` connects: the gRPC face's address for
    /// [`TransportKind::Grpc`] (`None` without a face), [`Server::local_addr`] otherwise.
    pub fn addr_for(&self, transport: TransportKind) -> Option<String> {
        match transport {
            TransportKind::Grpc => self.grpc_local_addr().map(|a| a.to_string()),
            _ => Some(self.local_addr.clone()),
        }
    }

    /// The server's counters.
    pub fn stats(&self) -> Stats {
        self.shared.calls.counters.snapshot()
    }

    /// Number of live connections.
    pub fn connections(&self) -> usize {
        self.endpoint.conns().len()
    }

    /// The memory budget (ServerBuilder::memory_budget) and what is reserved from it now.
    pub fn memory(&self) -> &MemoryBudget {
        self.endpoint.memory()
    }

    /// Stops accepting, tells clients GOODBYE, lets handlers in flight finish (up to 5 s),
    /// then closes every connection and joins the server's threads.
    pub fn shutdown(mut self) {
        self.shutdown_inner(Duration::from_secs(5));
    }

    /// Stops at once: every connection is closed without waiting for handlers, so clients'
    /// outstanding calls fail with UNAVAILABLE (as if the server process had died). Handlers
    /// still running finish in the background; their answers are dropped.
    pub fn abort(mut self) {
        self.shutdown_inner(Duration::ZERO);
    }

    fn shutdown_inner(&mut self, grace: Duration) {
        let Some((acceptor, poller)) = self.threads.take() else {
            return;
        };
        self.stop.raise();
        if let Some(stopping) = &self.stopping {
            stopping.announce();
        }
        let give_up = Instant::now() + grace;
        if let Some(grpc) = self.grpc.as_mut() {
            grpc.shutdown(grace);
        }
        let _ = acceptor.join();
        if !grace.is_zero() {
            for conn in self.endpoint.conns().iter() {
                conn.submit(Work::Goodbye);
            }
        }
        while self.shared.calls.in_flight.get() > 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        for conn in self.endpoint.conns().iter() {
            self.endpoint.close_conn(conn, "server shut down");
        }
        self.endpoint.stop();
        let _ = poller.join();
        self.shared.pool.shutdown();
        tracing::info!(addr = %self.local_addr, "server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown_inner(Duration::from_secs(5));
    }
}
