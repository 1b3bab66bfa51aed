//! [`Server`]: several services behind one address. Requests are routed by method id;
//! handlers run inline on the poller or on the worker pool (per service or per method).

mod accept;
mod dispatch;
mod handler;
pub(crate) mod handlers;
mod intercepted;
mod port_face;
mod spare_tasks;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use rpc_sync::Count;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::{ConnTimeouts, Work};
use super::endpoint::{Endpoint, PollerSettings};
use super::grpc::server::{FaceSettings, GrpcFace};
use super::pool::{ThreadContext, WorkerPool};
use super::port::Dispatch;
use super::service::{MethodKind, ServedMethod};
use super::transport_select::server_transport;
use super::{Counters, Stats};
use crate::interceptor::SharedInterceptor;
use crate::protocol::v2::{MemoryBudget, Role};
use crate::protocol::Keepalive;
use crate::transport::{RingConfig, SharedRings};
use crate::{Error, Interceptor, TransportKind};
pub use dispatch::Execution;
use dispatch::Route;
pub(crate) use dispatch::Shared;
use handler::Calls;
pub use handler::{IncomingRequest, ReplySink, Service};
pub use intercepted::InterceptedService;

/// Configures a [`Server`]: its services, where their handlers run, its ring sizes.
pub struct ServerBuilder {
    ring: RingConfig,
    shared_rings: Option<SharedRings>,
    workers: usize,
    max_queued: usize,
    max_connections: Option<usize>,
    memory_budget: Option<usize>,
    stall_timeout: Option<Duration>,
    call_time_limit: Option<Duration>,
    concurrency_limit: Option<u32>,
    idle_spin: Duration,
    keepalive: Option<Keepalive>,
    services: Vec<(Arc<dyn Service>, Execution)>,
    method_execution: HashMap<String, Execution>,
    thread_context: Option<ThreadContext>,
    /// Services added by the builder's user: the first this many of `services` (the
    /// standard ones follow); only they pass the server's interceptor, unless
    /// `intercept_standard_services`.
    own_services: usize,
    intercept_standard_services: bool,
    grpc_listen: Option<String>,
    grpc_runtime: Option<tokio::runtime::Handle>,
    grpc_tls: Option<(Vec<u8>, Vec<u8>)>,
    interceptor: Option<SharedInterceptor>,
    standard_services: bool,
    tcp_beside_verbs: bool,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            ring: RingConfig::default(),
            shared_rings: Some(SharedRings::DEFAULT),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_queued: 4096,
            max_connections: None,
            memory_budget: None,
            stall_timeout: Some(super::DEFAULT_STALL_TIMEOUT),
            call_time_limit: None,
            concurrency_limit: None,
            idle_spin: super::micros_from_env("RPC_IDLE_SPIN_US", 1000),
            keepalive: Some(Keepalive::default()),
            services: Vec::new(),
            method_execution: HashMap::new(),
            thread_context: None,
            own_services: 0,
            intercept_standard_services: false,
            grpc_listen: None,
            grpc_runtime: None,
            grpc_tls: None,
            interceptor: None,
            standard_services: true,
            tcp_beside_verbs: true,
        }
    }
}

impl ServerBuilder {
    /// Receive ring per connection and the largest request accepted.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.ring = ring;
        self
    }

    /// The connections' receive slots come from pools shared by all of them (over verbs,
    /// shared receive queues; over TCP, heap slots allocated as frames arrive), their credits
    /// from those pools (PROTOCOL.md §22.4), and their send slots from one shared pool:
    /// `Some(config)`, by default [`SharedRings::DEFAULT`]. `None` gives every connection rings
    /// of its own (the [`RingConfig`]'s `slot_count` slots each), as in-memory connections
    /// have.
    pub fn shared_rings(mut self, shared: Option<SharedRings>) -> Self {
        self.shared_rings = shared;
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
    /// one connection (docs/PROTOCOL.md §15), whatever its clients do. Standard gRPC
    /// connections (on the server's own port and on [`ServerBuilder::grpc_listen`]'s) count
    /// against the same limit, each face apart.
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
    /// wherever they are polled. A server started inside a tokio runtime enters that one
    /// without being told; for another runtime, or another tokio runtime than the
    /// surrounding one:
    ///
    /// ```ignore
    /// let handle = other_runtime.handle().clone();
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

    /// tonic's `tls_config`: [`ServerBuilder::grpc_tls`] with `config`'s identity.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] without an identity, or with a certificate or key that
    /// does not load.
    pub fn tls_config(self, config: crate::transport::ServerTlsConfig) -> Result<Self, Error> {
        let Some(identity) = config.identity_ref() else {
            return Err(Error::InvalidConfig(
                "ServerTlsConfig without an identity (Identity::from_pem)".into(),
            ));
        };
        let (cert, key) = identity.parts();
        super::grpc::tls::server_config(cert, key)?;
        Ok(self.grpc_tls(cert, key))
    }

    /// Serves standard gRPC over TLS (rustls; ALPN `h2`), on `grpc_listen`'s address and on the
    /// server's own TCP port (a client whose first bytes are a TLS handshake gets it; this
    /// protocol's clients and plaintext HTTP/2 ones are served there as before), with the PEM
    /// certificate chain
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

    /// Runs `interceptor` on every request to the services added here (over every
    /// transport, the gRPC face's too) before its handler: it may check or change the
    /// metadata the handler sees, put values into the request's extensions for it, or refuse
    /// the call with a status (the handler then never runs). The standard services (health,
    /// reflection) are not intercepted, so that a token check does not turn health probes
    /// away, unless [`ServerBuilder::intercept_standard_services`]. For one service only:
    /// its generated server's `with_interceptor`, as tonic's.
    pub fn interceptor(mut self, interceptor: impl Interceptor) -> Self {
        self.interceptor = Some(SharedInterceptor(Arc::new(interceptor)));
        self
    }

    /// Whether the [`ServerBuilder::interceptor`] also sees the standard services' calls
    /// (default: no).
    pub fn intercept_standard_services(mut self, intercept: bool) -> Self {
        self.intercept_standard_services = intercept;
        self
    }

    /// Whether the server also offers the standard services (default: yes): gRPC health
    /// checking (`grpc.health.v1.Health`) and server reflection (`grpc.reflection.v1` and
    /// `v1alpha`), on every transport and the gRPC face. See [`crate::standard`].
    pub fn standard_services(mut self, enable: bool) -> Self {
        self.standard_services = enable;
        self
    }

    /// tonic's `timeout`: every call ends with DEADLINE_EXCEEDED once it has run this long
    /// (from its arrival), or at its own deadline if the client set a sooner one; on every
    /// transport and the gRPC faces. By default a call runs until its client's deadline, if
    /// any. Unlike tonic's, which waits only for the handler's `Response`, the limit covers a
    /// response stream too: a stream meant to outlive it (a subscription, a health Watch)
    /// ends with it.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.call_time_limit = Some(limit);
        self
    }

    /// tonic's `concurrency_limit_per_connection`: at most `limit` calls of one connection
    /// are open at once; its client holds the others back, in order, until calls end (this
    /// framework's protocol: the server's `max_calls`, PROTOCOL.md §6.4, which `limit` can
    /// lower but not raise: the ring's, 128 by default, each reserving memory;
    /// the gRPC faces: HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS, at most 256, which a client
    /// learns from the server's SETTINGS: calls it sends before those arrive may be refused,
    /// as by any HTTP/2 server).
    pub fn concurrency_limit_per_connection(mut self, limit: usize) -> Self {
        self.concurrency_limit = Some(u32::try_from(limit).unwrap_or(u32::MAX).max(1));
        self
    }

    /// tonic's `add_optional_service`: [`ServerBuilder::add_service`] if `service` is
    /// `Some`, the builder as it is if `None`.
    pub fn add_optional_service(self, service: Option<impl Service>) -> Self {
        match service {
            Some(service) => self.add_service(service),
            None => self,
        }
    }

    /// Whether a server that serves over RDMA verbs also serves its clients over TCP on the
    /// same IP and port (default: yes): this framework's protocol for clients without RDMA,
    /// and standard gRPC (HTTP/2, with TLS if [`ServerBuilder::grpc_tls`]) for stock clients,
    /// told apart by their first bytes as on a TCP server. The RDMA connection manager's ports
    /// are not TCP's, so the two do not collide; a TCP port already taken fails the start.
    pub fn tcp_beside_verbs(mut self, enable: bool) -> Self {
        self.tcp_beside_verbs = enable;
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
        for (position, (service, execution)) in self.services.iter().enumerate() {
            let intercepted = position < self.own_services || self.intercept_standard_services;
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
                    && service.blocking_handler(index)
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
                        intercepted,
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

    /// tonic's `serve`: binds `addr` (RDMA verbs if a device serves it, else TCP) and
    /// serves until the future is dropped, which stops the server gracefully (on a thread
    /// of its own: the drop does not wait). Fails only if the server cannot start. Await it
    /// from any executor; [`ServerBuilder::start`] returns a handle instead.
    pub async fn serve(self, addr: std::net::SocketAddr) -> Result<(), Error> {
        self.serve_with_shutdown(addr, std::future::pending()).await
    }

    /// tonic's `serve_with_shutdown`: [`ServerBuilder::serve`] until `signal` completes, then
    /// a graceful shutdown (stop accepting, GOODBYE, calls in flight finish within 5 s); the
    /// future completes when the server has stopped.
    pub async fn serve_with_shutdown(
        self,
        addr: std::net::SocketAddr,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), Error> {
        let mut running = StopOnDrop(Some(self.start(&addr.to_string(), TransportKind::Auto)?));
        signal.await;
        let server = running.0.take().expect("stopped only here or on drop");
        shut_down_on_own_thread(server)?.await;
        Ok(())
    }

    /// Binds `addr` and starts serving: an acceptor thread, the poller, the worker pool (over
    /// verbs, a second acceptor and poller for TCP on the same port:
    /// [`ServerBuilder::tcp_beside_verbs`]).
    /// Returns the running server's handle (its address, counters, shutdown); dropping it
    /// shuts the server down. Built inside a tokio runtime without a
    /// [`ServerBuilder::thread_context`], the server's threads enter that runtime, so
    /// handlers may use its timers and sockets as they would in tonic.
    pub fn start(mut self, addr: &str, transport: TransportKind) -> Result<Server, Error> {
        if let Some(limit) = self.concurrency_limit {
            // A limit, never a raise: each connection reserves memory for its `max_calls`.
            self.ring.max_calls = self.ring.max_calls.min(limit);
        }
        self.ring.validate()?;
        if self.thread_context.is_none() {
            self.thread_context = surrounding_tokio_runtime();
        }
        self.own_services = self.services.len();
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
        // One TLS configuration for both faces (a bad certificate or key fails the start).
        let grpc_tls = match &self.grpc_tls {
            Some((certs, key)) => Some(super::grpc::tls::server_config(certs, key)?),
            None => None,
        };
        // Standard gRPC on this server's own TCP port too: the TCP transport hands HTTP/2
        // connections (and, with TLS, TLS handshakes) over.
        let face_settings = FaceSettings {
            runtime: self.grpc_runtime.clone(),
            max_message_size: self.ring.max_message_size as usize,
            tls: grpc_tls,
            max_connections: self.max_connections,
            call_limit: self.call_time_limit,
            max_streams: self.concurrency_limit,
        };
        let port_face = port_face::PortFace::new(face_settings.clone());
        let handoff: crate::transport::Http2Handoff = {
            let port_face = Arc::clone(&port_face);
            Arc::new(move |stream| port_face.hand_off(stream))
        };
        // Over verbs, TCP on the same IP:port too (our protocol, and gRPC handed over). The
        // RDMA CM picks a port asked for as 0 in a space of its own: if TCP has it already,
        // the pair is tried again on another.
        let any_port = addr.rsplit_once(':').is_some_and(|(_, port)| port == "0");
        let mut tries = 0;
        let (primary, beside) = loop {
            let primary = server_transport(
                addr,
                transport,
                self.ring,
                self.shared_rings,
                (self.thread_context.clone(), Some(handoff.clone())),
            )?;
            if primary.name != "verbs" || !self.tcp_beside_verbs {
                break (primary, None);
            }
            let local_addr = primary.acceptor.local_addr();
            let tcp = server_transport(
                &local_addr,
                TransportKind::Tcp,
                self.ring,
                self.shared_rings,
                (self.thread_context.clone(), Some(handoff.clone())),
            );
            match tcp {
                Ok(tcp) => {
                    tracing::info!(addr = %local_addr, "serving TCP beside verbs on the same port");
                    break (primary, Some(tcp));
                }
                Err(e) if any_port && tries < 3 => {
                    tries += 1;
                    tracing::debug!(addr = %local_addr, error = %e, "TCP has the port the RDMA CM picked; trying another");
                }
                Err(e) => {
                    return Err(Error::InvalidConfig(format!(
                        "serving over verbs on {local_addr}, TCP on the same port failed: {e} \
                         (ServerBuilder::tcp_beside_verbs(false) serves verbs alone)"
                    )))
                }
            }
        };
        let transport_name = primary.name;
        let local_addr = primary.acceptor.local_addr();
        let counters = Arc::new(Counters::default());
        // The routes by index; a method's id and path lead to its index.
        let routes: Vec<Route> = routes.into_values().collect();
        let mut ids = HashMap::with_capacity(routes.len());
        let mut paths = HashMap::with_capacity(routes.len());
        for (index, route) in routes.iter().enumerate() {
            let served = ServedMethod {
                id: route.method.id,
                kind: route.method.kind,
                route: u32::try_from(index).expect("fewer than 2^32 methods"),
            };
            ids.insert(route.method.id, served);
            paths.insert(route.method.path, served);
        }
        let pool = WorkerPool::new(self.workers, self.max_queued, self.thread_context.clone())?;
        let calls = Arc::new(Calls {
            counters: Arc::clone(&counters),
            in_flight: Count::new(0),
            spawner: pool.spawner(),
        });
        let shared = Arc::new(Shared {
            paths,
            ids,
            routes,
            pool,
            interceptor: self.interceptor.clone(),
            calls,
        });
        port_face.set_dispatch(Arc::clone(&shared) as Arc<dyn Dispatch>);
        let grpc = match &self.grpc_listen {
            Some(addr) => Some(GrpcFace::start(
                Arc::clone(&shared) as Arc<dyn Dispatch>,
                Some(addr),
                face_settings,
            )?),
            None => None,
        };
        // One budget for every transport: the bound is server-wide.
        let memory = MemoryBudget::new(
            self.memory_budget
                .unwrap_or_else(super::default_memory_budget),
        );
        // Stopped and joined if the start fails from here on.
        let mut starting = accept::Starting::default();
        for (transport, name) in [(Some(primary), "server"), (beside, "server-tcp")] {
            let Some(transport) = transport else { continue };
            let (endpoint, poller) = Endpoint::start(
                transport.cq,
                Role::Server,
                Some(Arc::clone(&shared) as Arc<dyn Dispatch>),
                Arc::clone(&counters),
                PollerSettings {
                    idle_spin: self.idle_spin,
                    keepalive: self.keepalive,
                    name,
                    context: self.thread_context.clone(),
                    memory: memory.clone(),
                    timeouts: ConnTimeouts {
                        stall: self.stall_timeout,
                        call_limit: self.call_time_limit,
                    },
                    offer_extensions: false,
                },
            )?;
            starting.add(endpoint, poller, transport.acceptor);
        }
        let (endpoints, stop, threads) = starting.spawn_acceptors(self.max_connections)?;
        tracing::info!(addr = %local_addr, transport = transport_name, "serving");
        Ok(Server {
            endpoints,
            shared,
            stop,
            threads,
            local_addr,
            transport_name,
            grpc,
            port_face,
            stopping,
        })
    }
}

/// A running server. Dropping it shuts it down gracefully.
pub struct Server {
    /// Its transport's endpoint, then (over verbs) the one of TCP on the same port.
    endpoints: Arc<[Arc<Endpoint>]>,
    shared: Arc<Shared>,
    stop: accept::AcceptStop,
    /// Each endpoint's acceptor and poller threads; empty once shut down.
    threads: Vec<(JoinHandle<()>, JoinHandle<()>)>,
    local_addr: String,
    transport_name: &'static str,
    grpc: Option<GrpcFace>,
    /// Standard gRPC on the server's own TCP port.
    port_face: Arc<port_face::PortFace>,
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
        self.grpc.as_ref().and_then(GrpcFace::local_addr)
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

    /// Whether a connection of the server watches some call's deadline (its poller then
    /// ticks).
    #[cfg(test)]
    pub(crate) fn watches_deadlines(&self) -> bool {
        self.shared.calls.counters.deadlines_watched()
    }

    /// Bytes the server registered with its RDMA device now (over verbs: its shared receive
    /// queue and its connections' send rings; 0 over other transports).
    pub fn registered_bytes(&self) -> u64 {
        self.endpoints.iter().map(|e| e.registered_bytes()).sum()
    }

    /// Number of live connections of this framework's protocol, over every transport. A
    /// connection leaves the count as it closes; its rings and calls' memory go back to
    /// [`Server::memory`] a moment later, when the last thread working on it lets go.
    pub fn connections(&self) -> usize {
        self.endpoints.iter().map(|e| e.conns().len()).sum()
    }

    /// The memory budget (ServerBuilder::memory_budget) and what is reserved from it now
    /// (one budget for every transport).
    pub fn memory(&self) -> &MemoryBudget {
        self.endpoints[0].memory()
    }

    /// Serves until SIGINT or SIGTERM (Ctrl-C, `kill`), then shuts down gracefully
    /// ([`Server::shutdown`]) and returns: how the `main` of a program without an async
    /// runtime ends (`serve(addr).await` is the async form). The signals are caught from the
    /// call on, which it logs (`serving until SIGINT or SIGTERM`, at info level); before that,
    /// they end the process as they do by default.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the signals cannot be caught; the server is shut down then too.
    pub fn wait(self) -> Result<(), Error> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        tracing::info!(addr = %self.local_addr, "serving until SIGINT or SIGTERM");
        let signal = match signals.forever().next() {
            Some(SIGINT) => "SIGINT",
            Some(SIGTERM) => "SIGTERM",
            _ => "a signal",
        };
        tracing::info!(
            "{signal} received: shutting down (GOODBYE to every client, calls in flight get \
             up to 5 s)"
        );
        // Caught no longer: a second Ctrl-C during the shutdown ends the process.
        signals.handle().close();
        drop(signals);
        self.shutdown();
        Ok(())
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
        if self.threads.is_empty() {
            return;
        }
        let (acceptors, pollers): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.threads).into_iter().unzip();
        self.stop.raise();
        if let Some(stopping) = &self.stopping {
            stopping.announce();
        }
        let give_up = Instant::now() + grace;
        for acceptor in acceptors {
            let _ = acceptor.join();
        }
        // No HTTP/2 client handed over from the port from now on (its listener may close a
        // moment later); the native connections hear GOODBYE before the faces drain, so that
        // every call has the same grace.
        self.port_face.close();
        if !grace.is_zero() {
            for conn in self.endpoints.iter().flat_map(|e| e.conns().to_vec()) {
                conn.submit(Work::Goodbye);
            }
        }
        let left = || give_up.saturating_duration_since(Instant::now());
        if let Some(grpc) = self.grpc.as_mut() {
            grpc.shutdown(left());
        }
        self.port_face.shutdown(left());
        while self.shared.calls.in_flight.get() > 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !grace.is_zero() {
            // Every handler is done: each connection PINGs its client and closes at the
            // answer, which comes after the client received every answer sent before it
            // (closing at once could destroy those still on their way: an RDMA disconnect
            // flushes SENDs not yet completed). Clients that do not answer are closed at
            // the end of the grace.
            for conn in self.endpoints.iter().flat_map(|e| e.conns().to_vec()) {
                conn.submit(Work::Drain);
            }
            while self.connections() > 0 && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for endpoint in self.endpoints.iter() {
            for conn in endpoint.conns().iter() {
                endpoint.close_conn(conn, "server shut down");
            }
            endpoint.stop();
        }
        for poller in pollers {
            let _ = poller.join();
        }
        self.shared.pool.shutdown();
        tracing::info!(addr = %self.local_addr, "server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown_inner(Duration::from_secs(5));
    }
}

/// A server that a dropped [`ServerBuilder::serve`] future leaves behind: shut down on a
/// thread of its own, so that the drop (on an executor's thread, say) does not wait for the
/// calls in flight.
struct StopOnDrop(Option<Server>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            if let Err(e) = shut_down_on_own_thread(server) {
                // The server was dropped unrun with the work: it shut down here after all.
                tracing::warn!(error = %e, "no thread to shut the server down on");
            }
        }
    }
}

/// `server`'s graceful shutdown on a thread of its own; the future completes when it is over.
fn shut_down_on_own_thread(
    server: Server,
) -> Result<impl std::future::Future<Output = Option<()>>, Error> {
    super::on_own_thread("rpc-shutdown", move || server.shutdown())
}

/// The thread context that enters the tokio runtime this thread runs in, if any.
fn surrounding_tokio_runtime() -> Option<ThreadContext> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    Some(Arc::new(move |run: &mut dyn FnMut()| {
        let _entered = handle.enter();
        run()
    }))
}
