//! Endpoints: connecting (client), listening and accepting (server), and the device lookup
//! the runtime uses to choose a transport.
//!
//! **Client.** `connect` uses a private event channel: resolve address, resolve route, create
//! the link (QP, rings, every receive posted), `rdma_connect` with the HELLO as private data,
//! and wait for ESTABLISHED, whose private data is the server's HELLO. The id then moves to the
//! endpoint's link channel (see the events module). An attempt that loss made fail or stall
//! is abandoned and made again on a fresh channel and id until the connect timeout passes
//! ([`VerbsEndpoint::connect`]).
//!
//! **Server.** `listen` binds and listens on its own channel. `accept` reads it: a
//! CONNECT_REQUEST carries the client's HELLO; the link is built, `rdma_accept` answers with the
//! server's HELLO, and the link is returned at ESTABLISHED (handshakes that do not finish within
//! [`HANDSHAKE_TIMEOUT`] are dropped).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rdma_sys::rdma_cm_event_type;
use rpc_sync::{Flag, Mutex};

use super::cm::{CmEvent, CmId, ConnParam, EventChannel};
use super::completions::{CqShared, DeviceRes, VerbsCq};
use super::device::DeviceList;
use super::events::CmDispatcher;
use super::handle::VerbsLink;
use super::link::{LinkInner, LinkParts, Links, RecvRing, SendRing};
use super::mr::Region;
use super::qp::{Qp, RETRY_COUNT, RNR_RETRY};
use super::shared_pools::{Admission, SharedPools};
use super::sys::{self, poll_readable, remaining, timeout_ms, EventFd};
use crate::protocol::v2::{Hello, HELLO_LEN};
use crate::transport::{
    AcceptStopper, Acceptor, CompletionQueue, Link, LinkId, RingConfig, SharedRings,
};
use crate::Error;

/// How long an accepted connection may take from CONNECT_REQUEST to ESTABLISHED.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first connection attempt may take before `connect` gives up on it and starts
/// over with a fresh cm id; each further attempt may take twice as long as the one before.
/// Shorter than the kernel CM's retransmission of a lost connect request (about 6 s on
/// Soft-RoCE), longer than a loaded server needs to answer one (tens of ms).
const FIRST_ATTEMPT: Duration = Duration::from_secs(2);
/// The pause before the first retry of a connection attempt; it doubles per retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Listen backlog.
const BACKLOG: i32 = 128;

/// What the endpoint, its acceptors and its links share.
#[derive(Clone)]
struct Core {
    list: Arc<Mutex<Arc<DeviceList>>>,
    cq: Arc<CqShared>,
    links: Arc<Links>,
    dispatcher: Arc<CmDispatcher>,
    next_link_id: Arc<AtomicU64>,
}

impl Core {
    fn ensure_device(&self, id: &CmId) -> Result<Arc<DeviceRes>, Error> {
        self.cq.ensure_device(&self.list, id.verbs())
    }

    /// Builds a link on `id`: QP, rings, every receive posted; or, given the endpoint's shared
    /// rings and the link's grant of them, a QP taking its receives from the shared receive
    /// queue and its send slots from the shared ones.
    fn build_link(
        &self,
        res: &Arc<DeviceRes>,
        id: Arc<CmId>,
        ring: RingConfig,
        link_id: LinkId,
        peer_name: String,
        shared: Option<(Arc<SharedPools>, Admission)>,
    ) -> Result<Arc<LinkInner>, Error> {
        let caps = res.device.caps();
        if ring.slot_count > caps.max_qp_wr {
            return Err(Error::InvalidConfig(format!(
                "slot_count {} exceeds the {} work requests per queue that RDMA device {} allows",
                ring.slot_count,
                caps.max_qp_wr,
                res.device.name()
            )));
        }
        // A shared-ring link sends and receives on its shard's CQ, which reserved entries for
        // its receives and SENDs; other links reserve two entries per slot on a CQ shard with
        // room.
        let (recv, send, grant, local_hello, cq, reservation) = match shared {
            Some((pools, admission)) => {
                let shard = admission.shard;
                let hello = Hello {
                    slot_count: shard.base(),
                    slot_size: shard.slot_size() as u32,
                    ..ring.hello()
                };
                let send = SendRing::shared(pools.send().clone(), ring.slot_count);
                let cq = shard.cq().clone();
                let recv = RecvRing::Shared(shard);
                (recv, send, Some(admission.grant), hello, cq, None)
            }
            None => {
                let recv = Region::new(&res.pd, ring.slot_count, ring.slot_size)?;
                let send = Region::new(&res.pd, ring.slot_count, ring.slot_size)?;
                let send = SendRing::own(send);
                let (cq, reservation) = res.cqs.reserve(ring.slot_count.saturating_mul(2))?;
                let hello = ring.hello();
                (
                    RecvRing::Own(recv),
                    send,
                    None,
                    hello,
                    cq,
                    Some(reservation),
                )
            }
        };
        let srq = match &recv {
            RecvRing::Shared(shared) => Some(shared.srq()),
            RecvRing::Own(_) => None,
        };
        let qp = Qp::new(id, &res.pd, &cq, ring.slot_count, srq)?;
        LinkInner::new(LinkParts {
            qp,
            recv,
            grant,
            send,
            reservation,
            id: link_id,
            local_hello,
            peer_name,
            links: self.links.clone(),
            dispatcher: self.dispatcher.clone(),
        })
    }

    fn port_mtu(res: &DeviceRes, id: &CmId) -> Option<u32> {
        res.device
            .port_attr(id.port_num())
            .map(|attr| attr.active_mtu)
            .ok()
    }
}

fn conn_param(hello: &Hello) -> ConnParam {
    ConnParam {
        private_data: hello.encode().to_vec(),
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY,
    }
}

/// The peer's HELLO from rdma_cm private data (which the CM may pad with zeros).
fn peer_hello(private_data: &[u8]) -> Result<Hello, Error> {
    if private_data.len() < HELLO_LEN {
        return Err(Error::ProtocolViolation(format!(
            "the peer sent {} bytes of connection private data, not a {HELLO_LEN}-byte HELLO",
            private_data.len()
        )));
    }
    Ok(Hello::decode(&private_data[..HELLO_LEN])?)
}

/// Why one connection attempt failed.
enum Attempt {
    /// Worth another attempt with a fresh cm id: a step did not finish in time, or rdma_cm
    /// reported an error that lost packets can cause.
    Retry(String),
    /// Final: the peer refused, or a local error that another attempt would only repeat.
    Fatal(Error),
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Attempt {
        Attempt::Fatal(e)
    }
}

/// How long connection attempt `attempt` (1, 2, ...) may take: [`FIRST_ATTEMPT`], doubled for
/// each attempt before it.
fn attempt_budget(attempt: u32) -> Duration {
    FIRST_ATTEMPT.saturating_mul(1 << attempt.saturating_sub(1).min(10))
}

/// The pause after failed attempt `attempt`: [`FIRST_BACKOFF`], doubled per attempt before it,
/// at most [`MAX_BACKOFF`].
fn retry_backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(MAX_BACKOFF)
}

/// Whether a REJECTED with this status (the IB CM reject reason) asks to try again: 4
/// (`IB_CM_REJ_TIMEOUT`: the peer's CM timed out waiting for us) and 10
/// (`IB_CM_REJ_STALE_CONN`: the peer still holds an earlier connection with our QP number).
/// Every other reason is the peer's answer (8, invalid service id: nothing listens on that
/// port; 28, consumer defined: the server refused our HELLO) and is final.
fn retryable_reject(status: i32) -> bool {
    matches!(status, 4 | 10)
}

/// One RDMA endpoint (a client or a server): one completion queue for all its links, one
/// device, and an rdma_cm event thread.
pub struct VerbsEndpoint {
    core: Core,
    cq: Arc<VerbsCq>,
    acceptors: Mutex<Vec<Weak<AcceptorStop>>>,
    connect_retries: AtomicU64,
}

impl VerbsEndpoint {
    /// A new endpoint. Fails with [`Error::TransportUnavailable`] ("no RDMA device found; ...")
    /// when libibverbs finds no device.
    pub fn new() -> Result<Arc<VerbsEndpoint>, Error> {
        Self::with_cq_shard_entries(0)
    }

    /// A new endpoint whose completion queues hold at most `entries` entries each (0: as many
    /// as the device allows, 32,767 on rdma_rxe). A link with rings of its own takes two
    /// entries per slot on the first queue with room for them, and a new queue is created
    /// when none has: small queues make tests use many.
    pub fn with_cq_shard_entries(entries: u32) -> Result<Arc<VerbsEndpoint>, Error> {
        let list = DeviceList::open()?;
        let links = Arc::new(Links::new()?);
        let cq = CqShared::new(links.clone(), entries);
        let closing = links.clone();
        let dispatcher = CmDispatcher::start(Box::new(move |key, event, reason| {
            LinkInner::close_by_event(&closing, key, event, reason)
        }))?;
        Ok(Arc::new(VerbsEndpoint {
            core: Core {
                list: Arc::new(Mutex::new(list)),
                cq: cq.clone(),
                links,
                dispatcher,
                next_link_id: Arc::new(AtomicU64::new(1)),
            },
            cq: Arc::new(VerbsCq::new(cq)),
            acceptors: Mutex::new(Vec::new()),
            connect_retries: AtomicU64::new(0),
        }))
    }

    /// The completion queue of all this endpoint's links.
    pub fn cq(&self) -> Arc<dyn CompletionQueue> {
        self.cq.clone()
    }

    /// Bytes this endpoint registered with its RDMA device now: its links' rings and, for a
    /// server, its shared receive queue.
    pub fn registered_bytes(&self) -> u64 {
        self.cq.registered_bytes()
    }

    /// How many completion queues the endpoint's links use now.
    pub fn cq_shards(&self) -> usize {
        self.core.cq.device().map_or(0, |res| res.cqs.len())
    }

    /// The RDMA device this endpoint uses, once a connection or listener chose it.
    pub fn device_name(&self) -> Option<String> {
        self.core
            .cq
            .device()
            .map(|res| res.device.name().to_string())
    }

    /// Connects to a verbs server at `addr`. The link's receives are all posted before the
    /// connection is established; its completions carry `link_id`. Completions may be reported
    /// before this returns (the server may send as soon as it is established).
    ///
    /// **Loss.** Each step of the set-up can lose a packet: address resolution sends ARP
    /// requests (the kernel retries them for about 3 s, then not again until it is asked to
    /// resolve anew), and the CM's connect request or its answer may be lost (the kernel CM
    /// retransmits only after its response timeout, about 6 s on Soft-RoCE). So `connect`
    /// makes attempts, each on a fresh cm id: an attempt that did not get through within its
    /// time (2 s for the first, twice as long for each next one) or that rdma_cm failed with
    /// ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, CONNECT_ERROR or a retryable REJECTED is
    /// abandoned (the CM tells the server if the request got through), and after a short pause
    /// (100 ms, doubling, at most 1 s) the next one starts, until `timeout` has passed; then
    /// it fails with [`std::io::ErrorKind::TimedOut`], naming the attempts and the last
    /// failure. Each retry is logged (`info`) and counted in
    /// [`VerbsEndpoint::connect_retries`]. Final at once: a REJECTED that is the server's
    /// answer ([`std::io::ErrorKind::ConnectionRefused`]: nothing listens there, or it refused
    /// our HELLO), an invalid HELLO, and local errors (no device, memory registration).
    /// A `timeout` that leaves room for several attempts (20 s, the client's default) rides
    /// out a few seconds of loss.
    pub fn connect(
        &self,
        addr: SocketAddr,
        ring: RingConfig,
        link_id: LinkId,
        timeout: Duration,
    ) -> Result<Arc<dyn Link>, Error> {
        Ok(self.connect_verbs(addr, ring, link_id, timeout)?)
    }

    /// [`VerbsEndpoint::connect`] with the concrete link type.
    pub fn connect_verbs(
        &self,
        addr: SocketAddr,
        ring: RingConfig,
        link_id: LinkId,
        timeout: Duration,
    ) -> Result<Arc<VerbsLink>, Error> {
        ring.validate()?;
        let start = Instant::now();
        let deadline = start + timeout;
        let mut attempt: u32 = 1;
        loop {
            let budget = attempt_budget(attempt).min(remaining(deadline));
            let last = match self.connect_attempt(addr, ring, link_id, Instant::now() + budget) {
                Ok(link) => {
                    if attempt > 1 {
                        tracing::info!(%addr, attempt, elapsed = ?start.elapsed(), "verbs: connected after retrying");
                    }
                    return Ok(link);
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(reason)) => reason,
            };
            let backoff = retry_backoff(attempt);
            if remaining(deadline) <= backoff {
                return Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "connecting to {addr}: timed out after {:?} ({attempt} attempt{}; last: \
                         {last})",
                        start.elapsed(),
                        if attempt == 1 { "" } else { "s" }
                    ),
                )));
            }
            self.connect_retries.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                %addr,
                attempt,
                reason = %last,
                ?backoff,
                "verbs: connect attempt failed; retrying with a fresh cm id"
            );
            std::thread::sleep(backoff);
            attempt += 1;
        }
    }

    /// Connect attempts started over since this endpoint was created, by all `connect` calls
    /// together: each time a step of a connection attempt (address resolution, route
    /// resolution, the CM's connect request) failed in a way that loss can cause or did not
    /// finish within the attempt's time, and `connect` began again with a fresh cm id (see
    /// [`VerbsEndpoint::connect`]). Zero on a loss-free network.
    pub fn connect_retries(&self) -> u64 {
        self.connect_retries.load(Ordering::Relaxed)
    }

    /// One connection attempt on a fresh event channel and cm id, all of it by `until`.
    fn connect_attempt(
        &self,
        addr: SocketAddr,
        ring: RingConfig,
        link_id: LinkId,
        until: Instant,
    ) -> Result<Arc<VerbsLink>, Attempt> {
        let budget = remaining(until);
        let channel = EventChannel::new()?;
        let id = CmId::new(&channel)?;
        let wait = |step: &str, expected| -> Result<CmEvent, Attempt> {
            match channel.get_until(until)? {
                Some(ev) if ev.kind == expected => Ok(ev),
                Some(ev) => Err(Attempt::Retry(format!("{step} failed: {}", ev.describe()))),
                None => Err(Attempt::Retry(format!(
                    "{step} did not finish within {budget:?}"
                ))),
            }
        };
        id.resolve_addr(addr, timeout_ms(remaining(until)))?;
        wait(
            "address resolution",
            rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
        )?;
        id.resolve_route(timeout_ms(remaining(until)))?;
        wait(
            "route resolution",
            rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
        )?;
        let res = self.core.ensure_device(&id)?;
        let id = Arc::new(id);
        let link = self
            .core
            .build_link(&res, id.clone(), ring, link_id, addr.to_string(), None)?;
        id.connect(&conn_param(&link.local_hello()))?;
        let ev = loop {
            let Some(ev) = channel.get_until(until)? else {
                return Err(Attempt::Retry(format!(
                    "no answer to the connect request within {budget:?}"
                )));
            };
            match ev.kind {
                rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED => break ev,
                rdma_cm_event_type::RDMA_CM_EVENT_REJECTED if retryable_reject(ev.status) => {
                    return Err(Attempt::Retry(format!(
                        "connect request rejected: {}",
                        ev.describe()
                    )));
                }
                rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => {
                    return Err(Attempt::Fatal(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!(
                            "RDMA connection to {addr} rejected ({}; nothing listening there, or \
                             the server refused our HELLO)",
                            ev.describe()
                        ),
                    ))));
                }
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_RESPONSE => {
                    tracing::debug!("verbs: unexpected CONNECT_RESPONSE (no QP?)");
                }
                rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    return Err(Attempt::Fatal(Error::TransportUnavailable {
                        transport: "verbs",
                        reason: format!("the RDMA device was removed while connecting to {addr}"),
                    }));
                }
                // UNREACHABLE (the CM gave up retransmitting), CONNECT_ERROR, ...
                _ => {
                    return Err(Attempt::Retry(format!(
                        "connect request failed: {}",
                        ev.describe()
                    )));
                }
            }
        };
        let hello = match peer_hello(&ev.private_data) {
            Ok(hello) => hello,
            Err(e) => {
                link.close_with("invalid HELLO from the server".into());
                return Err(Attempt::Fatal(e));
            }
        };
        link.set_peer_hello(hello);
        link.qp().tune_and_log(Core::port_mtu(&res, &id));
        self.core.dispatcher.adopt(&id, link.key())?;
        tracing::debug!(
            link = link_id,
            %addr,
            device = res.device.name(),
            ?hello,
            "verbs: connected"
        );
        Ok(Arc::new(VerbsLink::new(link)))
    }

    /// Listens on `addr` (a local RDMA address, or the wildcard). The acceptor assigns link
    /// ids 1, 2, 3, ... (unique within this endpoint, as long as `connect` is not also given
    /// ids from that range).
    pub fn listen(&self, addr: SocketAddr, ring: RingConfig) -> Result<Box<dyn Acceptor>, Error> {
        Ok(Box::new(self.listen_verbs(addr, ring)?))
    }

    /// [`VerbsEndpoint::listen`] with the concrete acceptor type.
    pub fn listen_verbs(&self, addr: SocketAddr, ring: RingConfig) -> Result<VerbsAcceptor, Error> {
        self.listen_shared(addr, ring, None)
    }

    /// [`VerbsEndpoint::listen_verbs`] whose links, given `shared`, use the endpoint's shared
    /// rings (created with the first link, of `ring.slot_size` slots; see [`SharedRings`]):
    /// their HELLO announces `shared.base_grant` slots, each holds up to `ring.slot_count`
    /// send slots, and a link whose base grant does not fit in the pool is rejected.
    pub fn listen_shared(
        &self,
        addr: SocketAddr,
        ring: RingConfig,
        shared: Option<SharedRings>,
    ) -> Result<VerbsAcceptor, Error> {
        ring.validate()?;
        if let Some(config) = shared {
            config.validate()?;
        }
        let channel = EventChannel::new()?;
        let id = CmId::new(&channel)?;
        id.bind(addr).map_err(|e| {
            if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                Error::InvalidAddress(format!("{addr}: not a local address"))
            } else {
                sys::os_error("rdma_bind_addr", e)
            }
        })?;
        if !addr.ip().is_unspecified() {
            if id.verbs().is_null() {
                return Err(Error::TransportUnavailable {
                    transport: "verbs",
                    reason: format!("no RDMA device serves {}", addr.ip()),
                });
            }
            self.core.ensure_device(&id)?;
        }
        id.listen(BACKLOG)?;
        let local = id.local_addr().unwrap_or(addr);
        let stop = Arc::new(AcceptorStop {
            fd: EventFd::new()?,
            stopped: Flag::new(false),
        });
        {
            let mut acceptors = self.acceptors.lock();
            acceptors.retain(|a| a.strong_count() > 0);
            acceptors.push(Arc::downgrade(&stop));
        }
        tracing::debug!(%local, "verbs: listening");
        Ok(VerbsAcceptor {
            core: self.core.clone(),
            pending: HashMap::new(),
            listen: id,
            channel,
            ring,
            shared,
            local,
            stop,
            device_removed: false,
        })
    }

    /// Makes every acceptor of this endpoint return `Ok(None)` from `accept` (now, and from
    /// then on). Dropping the endpoint does not do this: acceptors and links keep what they
    /// need alive.
    pub fn stop_accepting(&self) {
        for stop in self.acceptors.lock().iter().filter_map(Weak::upgrade) {
            stop.stop();
        }
    }
}

struct AcceptorStop {
    fd: EventFd,
    stopped: Flag,
}

impl AcceptorStop {
    fn stop(&self) {
        self.stopped.raise();
        self.fd.notify();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.is_raised()
    }
}

struct Pending {
    link: Arc<LinkInner>,
    id: Arc<CmId>,
    deadline: Instant,
}

/// Accepts verbs links on a listening cm id.
pub struct VerbsAcceptor {
    core: Core,
    /// Accepted, not yet established, by cm id address. Dropped before the listener.
    pending: HashMap<usize, Pending>,
    listen: CmId,
    channel: Arc<EventChannel>,
    ring: RingConfig,
    /// The links' receives come from the endpoint's shared receive queue.
    shared: Option<SharedRings>,
    local: SocketAddr,
    stop: Arc<AcceptorStop>,
    /// The listener's device was removed: the acceptor is gone for good.
    device_removed: bool,
}

impl VerbsAcceptor {
    /// Makes `accept` return `Ok(None)` (now, and from then on).
    pub fn stop(&self) {
        self.stop.stop();
    }

    /// Handles a CONNECT_REQUEST: build the link and accept, or reject.
    fn on_request(&mut self, mut ev: CmEvent) -> Result<(), Error> {
        let Some(id) = ev.new_id.take() else {
            return Err(Error::Verbs {
                call: "rdma_get_cm_event",
                reason: "CONNECT_REQUEST without an id".into(),
            });
        };
        let id = Arc::new(id);
        let peer = id
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        let result = (|| {
            let hello = peer_hello(&ev.private_data)?;
            let res = self.core.ensure_device(&id)?;
            let link_id = self.core.next_link_id.fetch_add(1, Ordering::Relaxed);
            let shared = match self.shared {
                Some(config) => {
                    let pools = (self.core.cq).ensure_shared(&res, config, self.ring.slot_size)?;
                    let admission = pools.admit((&res.pd, &res.cqs))?;
                    Some((pools, admission))
                }
                None => None,
            };
            let link =
                self.core
                    .build_link(&res, id.clone(), self.ring, link_id, peer.clone(), shared)?;
            link.set_peer_hello(hello);
            id.accept(&conn_param(&link.local_hello()))?;
            link.qp().tune_and_log(Core::port_mtu(&res, &id));
            tracing::debug!(link = link_id, %peer, ?hello, "verbs: accepted, waiting for ESTABLISHED");
            Ok(link)
        })();
        match result {
            Ok(link) => {
                self.pending.insert(
                    id.addr(),
                    Pending {
                        link,
                        id,
                        deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                    },
                );
                Ok(())
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "verbs: rejecting a connection");
                id.reject();
                Err(e)
            }
        }
    }
}

impl Acceptor for VerbsAcceptor {
    fn accept(&mut self, timeout: Duration) -> Result<Option<Arc<dyn Link>>, Error> {
        Ok(self
            .accept_verbs(timeout)?
            .map(|link| -> Arc<dyn Link> { link }))
    }

    fn stopper(&self) -> Option<AcceptStopper> {
        let stop = Arc::clone(&self.stop);
        Some(Box::new(move || stop.stop()))
    }

    fn is_gone(&self) -> bool {
        self.device_removed
    }

    fn local_addr(&self) -> String {
        self.local.to_string()
    }
}

impl VerbsAcceptor {
    /// [`Acceptor::accept`] with the concrete link type.
    pub fn accept_verbs(&mut self, timeout: Duration) -> Result<Option<Arc<VerbsLink>>, Error> {
        let until = Instant::now() + timeout;
        loop {
            if self.stop.is_stopped() {
                return Ok(None);
            }
            let now = Instant::now();
            self.pending.retain(|_, p| {
                let alive = p.deadline > now;
                if !alive {
                    tracing::debug!(link = p.link.id(), "verbs: handshake timed out");
                }
                alive
            });
            let wake_at = self
                .pending
                .values()
                .map(|p| p.deadline)
                .fold(until, Instant::min);
            let ready = poll_readable(
                &[self.channel.fd(), self.stop.fd.raw()],
                Some(remaining(wake_at)),
            )
            .map_err(|e| sys::os_error("poll", e))?;
            if ready[1] {
                self.stop.fd.drain();
            }
            while let Some((ev, ())) = self.channel.try_get(|_| ())? {
                match ev.kind {
                    rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST => self.on_request(ev)?,
                    rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED => {
                        let Some(p) = self.pending.remove(&ev.id_addr) else {
                            continue;
                        };
                        self.core.dispatcher.adopt(&p.id, p.link.key())?;
                        tracing::debug!(link = p.link.id(), "verbs: link established");
                        return Ok(Some(Arc::new(VerbsLink::new(p.link))));
                    }
                    rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL
                        if ev.id_addr == self.listen.addr() =>
                    {
                        self.stop.stop();
                        self.device_removed = true;
                        return Err(Error::TransportUnavailable {
                            transport: "verbs",
                            reason: "the listener's RDMA device was removed".into(),
                        });
                    }
                    _ => {
                        if let Some(p) = self.pending.remove(&ev.id_addr) {
                            return Err(Error::Verbs {
                                call: "rdma_accept",
                                reason: format!(
                                    "handshake with {} failed: {}",
                                    p.link
                                        .qp()
                                        .id()
                                        .peer_addr()
                                        .map(|a| a.to_string())
                                        .unwrap_or_default(),
                                    ev.describe()
                                ),
                            });
                        }
                        tracing::debug!(event = %ev.describe(), "verbs: listener event ignored");
                    }
                }
            }
            if Instant::now() >= until {
                return Ok(None);
            }
        }
    }
}

impl Drop for VerbsAcceptor {
    fn drop(&mut self) {
        self.pending.clear();
        self.stop.stop();
    }
}
