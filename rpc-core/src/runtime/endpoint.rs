//! An endpoint: the links of one client or server, their shared completion queue, and the
//! poller thread that drains it.
//!
//! Poller policy: busy-poll while completions come; once the queue has been empty for
//! `idle_spin`, sleep in [`CompletionQueue::wait`] (which arms the notification and polls once
//! more before sleeping), so an idle endpoint costs no CPU. Sleeping is bounded by the next
//! call deadline, so futures time out without a timer thread.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpc_sync::{Exclusive, Flag, Mutex, PollDuty, RwLock};

use super::conn::{Conn, ConnTimeouts, Work};
use super::port::Dispatch;
use super::Counters;
use crate::protocol::v2::{ConnectionMemory, MemoryBudget, Role, CALL_RECORD};
use crate::protocol::Keepalive;
use crate::transport::{Completion, CompletionQueue, Driver, Link, LinkId};

mod caller_spin;
mod calls;
mod ticks;
mod woken_inline;

pub(crate) use woken_inline::run_on_this_poller;

/// Longest sleep without a deadline: bounds how long a missed wake-up could stall.
const MAX_SLEEP: Duration = Duration::from_millis(200);
/// The longest a caller driving the queue sleeps on it before it looks at its call again.
const DRIVER_NAP: Duration = Duration::from_millis(10);
/// Completions taken per poll.
const POLL_BATCH: usize = 32;
/// How often outstanding calls are checked against their deadlines.
const DEADLINE_TICK: Duration = Duration::from_millis(1);
/// A client's poller on a polled queue (verbs, memory) stands back after this long without
/// work or calls (`PollDuty::stand_back_idle`); closer calls find it where they always did.
const IDLE_STAND_BACK: Duration = Duration::from_millis(10);
/// How long an idle server sleeps at most while a call's deadline is watched: its calls end
/// within about this much of their deadline (a busy server looks every `DEADLINE_TICK`).
const SERVER_DEADLINE_TICK: Duration = Duration::from_millis(10);
/// How many ticks a blocking stream reader sleeps on the completion queue's notification,
/// waiting for its next message, before it hands polling back to the poller thread.
const READER_NAPS: u32 = 20;

/// How long completions of an unknown link are held for it to be registered, and how long
/// the id of a closed link is remembered so its stragglers are dropped at once.
const ORPHAN_TTL: Duration = Duration::from_secs(10);
const RETIRED_TTL: Duration = Duration::from_secs(60);
/// How often the remembered ids of closed links are swept: the map holds those of at most
/// `RETIRED_TTL + RETIRED_SWEEP` of closes.
const RETIRED_SWEEP: Duration = Duration::from_secs(1);

/// The ids of links closed within `RETIRED_TTL` (and up to `RETIRED_SWEEP` more), and when.
struct Retired {
    ids: HashMap<LinkId, Instant>,
    swept: Instant,
}

pub(crate) struct Endpoint {
    cq: Arc<dyn CompletionQueue>,
    links: RwLock<HashMap<LinkId, Arc<Conn>>>,
    /// The connections of `links` as a list, rebuilt when a link comes or goes, so that the
    /// periodic deadline and keepalive ticks need no allocation.
    snapshot: RwLock<Arc<[Arc<Conn>]>>,
    /// Links closed recently: their late completions are dropped, not held.
    retired: Mutex<Retired>,
    /// Whoever holds this polls the completion queue: the poller thread, or a caller that
    /// drives completions itself while it waits (no thread hand-off on the reply path).
    /// Try-only: a thread that finds it taken leaves the polling to its owner.
    polling: Exclusive<PollState>,
    /// Who polls: the poller thread, or a caller driving completions itself (the poller
    /// thread then stands back); with the counts that decide it: client calls outstanding,
    /// of those the streams (whose readers and senders wait without being counted as
    /// waiters), and the unary calls somebody waits for without driving.
    ///
    /// A caller that drove completions is likely to drive again at once: a blocking stream
    /// reader whose message came (its call the client's only one), or, over verbs, a caller
    /// whose reply came while its other calls (futures it has not waited for yet) are still
    /// outstanding. The poller thread keeps standing back (it looks once per tick), so the
    /// caller's own polling is the only client thread on the reply path. It stops standing
    /// back when a stream call starts, when somebody starts waiting without driving, when
    /// the caller gives up driving, or after a tick in which nobody drove.
    duty: PollDuty,
    /// A link was registered since the last poll: completions held for it may wait.
    adoption_pending: Flag,
    /// How long a blocking caller spins before it sleeps on the queue.
    caller_spin: caller_spin::CallerSpin,
    poller_thread: std::sync::OnceLock<std::thread::Thread>,
    role: Role,
    dispatch: Option<Arc<dyn Dispatch>>,
    pub(crate) counters: Arc<Counters>,
    stop: Flag,
    idle_spin: Duration,
    keepalive: Option<Keepalive>,
    /// What connections may hold for their peers (PROTOCOL.md §15).
    memory: MemoryBudget,
    /// The connections' stall timeout and call time limit.
    timeouts: ConnTimeouts,
    /// Client: offer the protocol extensions on each connection (PROTOCOL.md §22).
    offer_extensions: bool,
}

/// How an endpoint's poller thread runs.
pub(crate) struct PollerSettings {
    /// Busy-polling after the last completion before sleeping.
    pub(crate) idle_spin: Duration,
    pub(crate) keepalive: Option<Keepalive>,
    /// The thread's name suffix (`rpc-poller-NAME`).
    pub(crate) name: &'static str,
    /// Wraps the thread's loop (an async runtime's context).
    pub(crate) context: Option<super::pool::ThreadContext>,
    /// What the endpoint's connections may hold for their peers.
    pub(crate) memory: MemoryBudget,
    /// The connections' stall timeout and (server) call time limit.
    pub(crate) timeouts: ConnTimeouts,
    /// Client: offer the protocol extensions on each connection (PROTOCOL.md §22).
    pub(crate) offer_extensions: bool,
}

impl Endpoint {
    /// Creates the endpoint and starts its poller thread.
    pub(crate) fn start(
        cq: Arc<dyn CompletionQueue>,
        role: Role,
        dispatch: Option<Arc<dyn Dispatch>>,
        counters: Arc<Counters>,
        settings: PollerSettings,
    ) -> Result<(Arc<Endpoint>, JoinHandle<()>), crate::Error> {
        let PollerSettings {
            idle_spin,
            keepalive,
            name,
            context,
            memory,
            timeouts,
            offer_extensions,
        } = settings;
        let ep = Arc::new(Endpoint {
            duty: PollDuty::new(cq.needs_polling()),
            cq,
            links: RwLock::new(HashMap::new()),
            snapshot: RwLock::new(Arc::from(Vec::new())),
            retired: Mutex::new(Retired {
                ids: HashMap::new(),
                swept: Instant::now(),
            }),
            polling: Exclusive::new(PollState {
                orphans: Orphans::default(),
                batch: Vec::with_capacity(POLL_BATCH),
                last: None,
                clock: None,
            }),
            adoption_pending: Flag::new(false),
            caller_spin: caller_spin::CallerSpin::default(),
            poller_thread: std::sync::OnceLock::new(),
            role,
            dispatch,
            counters,
            stop: Flag::new(false),
            idle_spin,
            keepalive,
            memory,
            timeouts,
            offer_extensions,
        });
        let runner = Arc::clone(&ep);
        let handle = std::thread::Builder::new()
            .name(format!("rpc-poller-{name}"))
            .spawn(move || match context {
                Some(wrap) => wrap(&mut || Arc::clone(&runner).run_poller()),
                None => runner.run_poller(),
            })?;
        let _ = ep.poller_thread.set(handle.thread().clone());
        let driver: Arc<dyn Driver> = Arc::clone(&ep) as Arc<dyn Driver>;
        ep.cq.set_driver(Arc::downgrade(&driver));
        Ok((ep, handle))
    }

    /// Reserves from the memory budget what a new link's connection holds: its own rings
    /// ([`Link::ring_bytes`]), its floor and, for a client, a record per call it may have open
    /// (a server's core reserves records as calls open), with a share bounded by what its ring
    /// configuration lets a peer make it hold (PROTOCOL.md §15). `None`: no room for it, and
    /// the link is to be refused.
    pub(crate) fn admit(&self, link: &Arc<dyn Link>) -> Option<ConnectionMemory> {
        let local = link.local_hello();
        let (calls, records) = match self.role {
            Role::Server => (local.max_calls as usize, 0),
            Role::Client => {
                let calls = link.peer_hello().max_calls as usize;
                (calls, calls.saturating_mul(CALL_RECORD))
            }
        };
        let fixed = link.ring_bytes() + records;
        let per_call = local.call_window as usize + local.max_message_size as usize;
        let per_call = per_call + 16 + 2 * local.max_metadata_size as usize;
        self.memory
            .admit_with_share(fixed, per_call.saturating_mul(calls))
    }

    /// Bytes the endpoint's transport registered with an RDMA device now.
    pub(crate) fn registered_bytes(&self) -> u64 {
        self.cq.registered_bytes()
    }

    /// The endpoint's memory budget.
    pub(crate) fn memory(&self) -> &MemoryBudget {
        &self.memory
    }

    /// Registers a link admitted with `memory` ([`Endpoint::admit`]) as a connection.
    pub(crate) fn add_link(&self, link: Arc<dyn Link>, memory: ConnectionMemory) -> Arc<Conn> {
        // A connection starts at the keepalive pace of the endpoint it joins (a server
        // announces it to its client, PROTOCOL.md §22.5); the ticks keep it up to date.
        let (keepalive, _) = self.paced(self.links.read().len() + 1);
        let conn = Conn::new(
            link,
            self.role,
            self.dispatch.clone(),
            Arc::clone(&self.counters),
            memory,
            (keepalive, self.timeouts),
            self.offer_extensions,
        );
        {
            let mut links = self.links.write();
            links.insert(conn.link.id(), Arc::clone(&conn));
            *self.snapshot.write() = links.values().cloned().collect();
        }
        // Completions may have arrived before the link was registered, and be held for it
        // by whoever polled then: the next poll hands them over. The poller does not sleep
        // while this is pending, even if another thread holds the poll ownership just now.
        self.adoption_pending.raise();
        self.cq.wake();
        if self.role == Role::Client {
            // The offer of extensions leaves now, ahead of the first call (PROTOCOL.md §22.1).
            conn.submit(Work::Flush);
        }
        conn
    }

    /// Closes a link that will not be registered (a server's connection limit): whatever
    /// it already received, and its closing, are dropped as those of a closed connection.
    pub(crate) fn refuse_link(&self, link: &Arc<dyn Link>) {
        self.retire(link.id());
        link.close();
    }

    /// The connections now registered.
    pub(crate) fn conns(&self) -> Arc<[Arc<Conn>]> {
        Arc::clone(&self.snapshot.read())
    }

    /// Tears a connection down and fails its calls.
    pub(crate) fn close_conn(&self, conn: &Arc<Conn>, reason: &str) {
        self.retire(conn.link.id());
        conn.close();
        conn.submit(Work::Closed(reason.to_string()));
    }

    /// Stops the poller (after the current batch).
    pub(crate) fn stop(&self) {
        self.stop.raise();
        self.cq.wake();
        // A client's poller may be parked (standing back) rather than on the queue.
        self.wake_the_poller();
    }

    fn retire(&self, id: LinkId) -> Option<Arc<Conn>> {
        let conn = {
            let mut links = self.links.write();
            let conn = links.remove(&id);
            if conn.is_some() {
                *self.snapshot.write() = links.values().cloned().collect();
            }
            conn
        };
        let mut retired = self.retired.lock();
        let now = Instant::now();
        // Swept at most once per RETIRED_SWEEP, not at every close: under a flood of short
        // connections a sweep per close would cost the map's size each time.
        if now.duration_since(retired.swept) >= RETIRED_SWEEP {
            retired
                .ids
                .retain(|_, at| now.duration_since(*at) < RETIRED_TTL);
            retired.swept = now;
        }
        retired.ids.insert(id, now);
        conn
    }

    /// Polls and handles one batch of completions, unless another thread is polling
    /// (`None`). Returns how many completions were handled.
    pub(crate) fn poll_once(&self) -> Option<usize> {
        self.poll_once_at(None)
    }

    /// [`Endpoint::poll_once`] with the time `clock` read for the batch, if the caller read
    /// it: calls the batch opens with a timeout have their deadlines from it.
    fn poll_once_at(&self, clock: Option<Instant>) -> Option<usize> {
        if self.role != Role::Server {
            return self.poll_completions(clock);
        }
        let outermost = woken_inline::begin_polling();
        let n = self.poll_completions(clock);
        if outermost {
            woken_inline::run_woken_inline();
        }
        n
    }

    /// [`Endpoint::poll_once`] without running the inline tasks it woke.
    fn poll_completions(&self, clock: Option<Instant>) -> Option<usize> {
        let mut guard = self.polling.try_lock()?;
        // Cleared before polling: a link registered from now on finds this poll's
        // orphans in place, or sets the flag again.
        self.adoption_pending.lower();
        Some(guard.with(|state| {
            state.clock = clock;
            let n = self.cq.poll(&mut state.batch, POLL_BATCH);
            // In order, by value, popped from the end (cheaper than a `drain` for a few); the
            // batch keeps its capacity for the next poll.
            state.batch.reverse();
            while let Some(c) = state.batch.pop() {
                self.route(c, state);
            }
            // A closed connection is not kept for the next batch: its link, its registered
            // memory and its core go as soon as nothing else holds them.
            if state
                .last
                .as_ref()
                .is_some_and(|(_, conn)| conn.is_closed())
            {
                state.last = None;
            }
            if !state.orphans.held.is_empty() {
                self.adopt_orphans(&mut state.orphans);
            }
            n
        }))
    }

    /// Polls the completion queue on the calling thread until `ready()`, so that what the
    /// caller waits for needs no wake-up of another thread; returns whether `ready()` held
    /// when it stopped. It polls busily for up to `spin`, then, on a queue that [needs
    /// polling](CompletionQueue::needs_polling) (verbs, in-memory peers), sleeps on the
    /// queue's notification until `ready()` or `deadline`: the reply wakes this thread and no
    /// other (over TCP the I/O thread handles what it reads and wakes the caller itself).
    ///
    /// A caller drives when its call is the client's only one, or, on a queue that needs
    /// polling, when nobody else waits for a unary call and no stream is open: one thread
    /// keeping a window of futures then polls for all of them, and the poller thread stands
    /// back between its waits (see [`Endpoint::stop_driving`]). With others waiting, the
    /// poller thread is busy anyway, and a driver that stops must wake it again. One caller
    /// drives at a time: the others, and a caller found not ready, go on to park and leave
    /// polling to the poller thread.
    pub(crate) fn drive(
        &self,
        spin: Duration,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
    ) -> bool {
        self.drive_then(spin, deadline, ready, true)
    }

    /// [`Endpoint::drive`]; `may_sleep`: after the spin, on a queue that needs polling, sleep
    /// on its notification until `ready()` (a blocking caller), or not (a future).
    fn drive_then(
        &self,
        spin: Duration,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
        may_sleep: bool,
    ) -> bool {
        let sleeps_here = may_sleep && self.cq.needs_polling();
        if (spin.is_zero() && !sleeps_here) || !self.duty.start_driving() {
            return ready();
        }
        // Only the client's one call adapts the spin: with others outstanding, the poller
        // thread and their callers want the CPUs too.
        let adapts = sleeps_here && self.duty.calls_outstanding() == 1;
        let configured = spin;
        let spin = match adapts {
            true => self.caller_spin.spin(configured, self.idle_spin),
            false => configured,
        };
        let started = self
            .poll_until(spin, deadline, 1, &ready)
            .filter(|_| adapts);
        if sleeps_here && !ready() {
            self.sleep_until_ready(deadline, &ready);
            if let (Some(started), true) = (started, ready()) {
                self.caller_spin
                    .came_after(started.elapsed(), spin, self.idle_spin);
            }
        } else if started.is_some() {
            self.caller_spin.came_within(spin, configured);
        }
        let ready = ready();
        self.stop_driving(ready);
        ready
    }

    /// A blocking caller, the driver, sleeps on the queue until `ready()` or `deadline`.
    fn sleep_until_ready(&self, deadline: Option<Instant>, ready: &impl Fn() -> bool) {
        while !ready() {
            // Bounded: the poller thread may have taken the reply in a poll it began
            // just before this caller drove; it rings the queue then (`run`), and the
            // bound covers a ring missed all the same.
            let nap = match deadline {
                None => DRIVER_NAP,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(DRIVER_NAP),
                    _ => break,
                },
            };
            self.nap_on_queue(nap, ready);
        }
    }

    /// [`Endpoint::drive`] for a future's first poll: the busy polling for up to `spin`
    /// only, never the sleep on the queue after it (a future must not hold its executor's
    /// thread), so that a reply that comes within `spin` needs no wake-up, as a blocking
    /// caller's does not. Not ready by then, the future leaves its waker, and the poller
    /// thread (woken by [`Endpoint::stop_driving`] if it stood back) takes over. Not on a
    /// thread polling a server's completions (an inline handler awaiting a call of its own):
    /// the server's poller must not stall for it.
    pub(crate) fn drive_briefly(
        &self,
        spin: Duration,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
    ) -> bool {
        if !spin.is_zero() && woken_inline::on_a_poller() {
            return ready();
        }
        self.drive_then(spin, deadline, ready, false)
    }

    /// [`Endpoint::drive`] for a blocking reader of a response stream whose inbox is empty,
    /// on a queue that [needs polling](CompletionQueue::needs_polling) (over TCP the I/O
    /// thread handles what it reads, and a spinning reader only takes its CPU). A reader
    /// whose message came keeps the poller thread standing back: its next wait polls again,
    /// and a stream needs no thread but the reader's on the client (the poller thread
    /// would be a third busy thread beside the reader and the server's poller, and on 2
    /// CPUs whichever two share one take turns at every message).
    pub(crate) fn drive_stream(&self, spin: Duration, ready: impl Fn() -> bool) -> bool {
        if !self.cq.needs_polling() || spin.is_zero() || !self.duty.start_driving() {
            return ready();
        }
        self.poll_until(spin, None, 16, &ready);
        // Nothing yet: sleep on the queue's notification, as the poller thread would, but
        // here, so that the message wakes the thread that wants it and no other.
        let mut naps = 0;
        while !ready() && naps < READER_NAPS {
            self.nap_on_queue(DEADLINE_TICK, &ready);
            naps += 1;
        }
        let ready = ready();
        // The poller thread keeps standing back for a reader whose message came, unless
        // other calls are outstanding (a call started now is seen, or sees the standing back).
        if self.duty.stop_driving_stream(ready) {
            self.wake_the_poller();
        }
        ready
    }

    /// Sleeps on the queue's notification for up to `nap`, as the poller thread would, then,
    /// as the driver, polls what came until `ready()` or the queue is empty.
    fn nap_on_queue(&self, nap: Duration, ready: &impl Fn() -> bool) {
        self.cq.wait(Some(nap));
        while !ready() && self.poll_once().is_some_and(|n| n > 0) {}
    }

    /// Polls, as the driver, until `ready()` or `spin` (or `deadline`) passes; when it
    /// started (`None`: `spin` is zero, nothing polled).
    fn poll_until(
        &self,
        spin: Duration,
        deadline: Option<Instant>,
        clock_every: u32,
        ready: impl Fn() -> bool,
    ) -> Option<Instant> {
        if spin.is_zero() {
            return None;
        }
        let started = Instant::now();
        let until = started + spin;
        let until = deadline.map_or(until, |d| d.min(until));
        let mut empty = 0u32;
        while !ready() {
            if self.poll_once().is_some_and(|n| n > 0) {
                continue;
            }
            empty = empty.wrapping_add(1);
            if empty % clock_every == 0 && Instant::now() >= until {
                break;
            }
            std::hint::spin_loop();
        }
        Some(started)
    }

    /// The driver stops; polling goes back to the poller thread. A driver whose own call
    /// is done wakes the poller only if other calls wait for completions: otherwise the
    /// poller thread stands back until one of its naps passes without a driver (see `run`),
    /// and a caller making one call after another costs no wake-up per call. Over verbs,
    /// when the other calls are futures nobody waits for (a window of calls that this caller
    /// waits for one by one), the poller thread stands back too: the caller's next wait
    /// drives again ([`PollDuty::stop_driving`]).
    fn stop_driving(&self, own_call_done: bool) {
        if self.duty.stop_driving(own_call_done) {
            self.wake_the_poller();
        }
    }

    /// Whether the poller's spin after work may catch what comes next: not for a client
    /// with one unary call at most and no stream on a polled queue (verbs, in-memory), whose
    /// caller polls for its call; the spin took the CPU of the caller it woke (an async p50
    /// of 200 µs became 1–2 ms on 2 CPUs in some runs, BENCHMARKS.md).
    fn spin_pays(&self) -> bool {
        self.role == Role::Server
            || !self.cq.needs_polling()
            || self.duty.calls_outstanding() > 1
            || self.duty.streams_open() > 0
    }

    fn wake_the_poller(&self) {
        if let Some(t) = self.poller_thread.get() {
            rpc_sync::woke_a_thread();
            t.unpark();
        }
    }

    /// The poller thread, entered under a name per role: `make bench` counts the server's
    /// receive stage as what runs under [`Endpoint::run_server_poller`] (BENCHMARKS.md).
    fn run_poller(self: Arc<Self>) {
        match self.role {
            Role::Server => self.run_server_poller(),
            Role::Client => self.run_client_poller(),
        }
    }

    // Each passes its role, so that the two bodies differ and are never merged into one
    // symbol.
    #[inline(never)]
    fn run_server_poller(self: Arc<Self>) {
        self.run(Role::Server);
    }

    #[inline(never)]
    fn run_client_poller(self: Arc<Self>) {
        self.run(Role::Client);
    }

    fn run(self: Arc<Self>, role: Role) {
        let mut last_work = Instant::now();
        let mut next_tick = last_work + DEADLINE_TICK;
        let (_, conn_tick_every) = self.paced(self.conns().len());
        let mut next_conn_tick = conn_tick_every.map(|t| last_work + t);
        let (mut worked, mut busy_batches) = (false, 0u32);
        while !self.stop.is_raised() {
            let standing_back = self.duty.is_standing_back();
            if standing_back || self.duty.is_driving() {
                // A caller polls; stay off the CPU (and the CQ) until it stops. With no call
                // but the driver's (which minds its own deadline), nothing needs this thread
                // before the next keepalive step: a call that starts and does not drive, or a
                // stream, calls it back (`PollDuty`). Otherwise the other calls' deadlines
                // are looked at every tick.
                let nap = if self.duty.calls_outstanding() <= 1 && self.duty.streams_open() == 0 {
                    // Until the connections' next tick, not an interval from the last look.
                    next_conn_tick.map_or(MAX_SLEEP, |at| {
                        at.saturating_duration_since(Instant::now())
                            .clamp(DEADLINE_TICK, MAX_SLEEP)
                    })
                } else {
                    DEADLINE_TICK
                };
                rpc_sync::park_timeout(nap);
                let now = Instant::now();
                let mut active = self.duty.is_driving();
                if standing_back && !active {
                    // What came meanwhile (before the tick, which then counts a PONG of the
                    // nap); a reader that did not wait during a whole tick polls no more.
                    let polled = self.poll_once().unwrap_or(0);
                    active = self.duty.tick() || polled > 0;
                }
                // A caller may drive for long (a window of calls kept full): pings still go.
                self.tick(now, &mut next_tick, &mut next_conn_tick);
                // The nap of an idle client's poller is no work: it does not spin after it.
                if active {
                    last_work = now;
                }
                continue;
            }
            // One clock read per batch: the batch's frames and the ticks below share it.
            let now = Instant::now();
            let n = self.poll_once_at(Some(now)).unwrap_or(0);
            if n > 0 && self.duty.is_driving() {
                // A caller started driving while this poll ran, and may sleep on the queue
                // for a reply this poll took: ring it, so that it looks at its call again.
                self.cq.wake();
            }
            if n > 0 {
                worked = true;
                busy_batches = busy_batches.wrapping_add(1);
                // While full batches come, look at the ticks (idle timing, deadlines) every
                // 64 of them. After a partial batch the queue is likely empty: rather than
                // poll it once more, go to the wait, which returns at once if it is not.
                if n == POLL_BATCH && busy_batches % 64 != 0 {
                    continue;
                }
            }
            let idle_since = if worked {
                worked = false;
                last_work = now;
                Duration::ZERO
            } else {
                now.saturating_duration_since(last_work)
            };
            self.tick(now, &mut next_tick, &mut next_conn_tick);
            if n == POLL_BATCH {
                continue;
            }
            if (!self.idle_spin.is_zero() && idle_since < self.idle_spin && self.spin_pays())
                || self.adoption_pending.is_raised()
            {
                std::hint::spin_loop();
                continue;
            }
            // Clients wake every tick while a call has a deadline; servers when something
            // arrives, or every SERVER_DEADLINE_TICK while a call's deadline is watched;
            // otherwise for the connections' ticks (a call with a deadline rings a client's).
            let long = conn_tick_every.map_or(MAX_SLEEP, |t| t.min(MAX_SLEEP));
            let (sleep, idle) = match role {
                // Not where callers sleep on the queue too (verbs, memory): one of them could
                // take the ring meant for this thread.
                Role::Client if !self.cq.needs_polling() && self.duty.idle_wait() => (long, true),
                // There, a client with no call for a while stands back instead: it parks
                // between its connections' ticks (a caller that waits without driving, or a
                // stream, calls it back) rather than wake every tick for nothing.
                Role::Client
                    if self.cq.needs_polling()
                        && idle_since >= IDLE_STAND_BACK
                        && self.duty.stand_back_idle() =>
                {
                    continue
                }
                Role::Client => (DEADLINE_TICK, false),
                Role::Server if self.counters.deadlines_watched() => (SERVER_DEADLINE_TICK, false),
                Role::Server => (long, false),
            };
            self.cq.wait(Some(sleep));
            if idle {
                self.duty.end_idle_wait();
            }
        }
    }

    /// Handles a completion, or holds it if its link is not registered yet: a transport may
    /// deliver a peer's first frames before the acceptor has handed the link over.
    fn route(&self, completion: Completion, state: &mut PollState) {
        let id = match &completion {
            Completion::Recv { link, .. }
            | Completion::SendDone { link }
            | Completion::Closed { link, .. } => *link,
        };
        let orphans = &mut state.orphans;
        // Consecutive completions mostly belong to the same link: skip the map (and the
        // reference count) for those; a link's held completions come before its others.
        if let Some((last, conn)) = &state.last {
            if *last == id && !conn.is_closed() && orphans.held.is_empty() {
                self.handle(completion, conn, state.clock);
                return;
            }
        }
        let known = self.links.read().get(&id).cloned();
        state.last = known.as_ref().map(|c| (id, Arc::clone(c)));
        match known {
            Some(conn) => {
                // Held completions are rare (a link's first ones, before it is registered).
                let held = if orphans.held.is_empty() {
                    None
                } else {
                    orphans.held.remove(&id)
                };
                if let Some((_, held)) = held {
                    for c in held {
                        self.handle(c, &conn, state.clock);
                    }
                }
                self.handle(completion, &conn, state.clock);
            }
            None if self.retired.lock().ids.contains_key(&id) => {}
            None => orphans
                .held
                .entry(id)
                .or_insert_with(|| (Instant::now(), Vec::new()))
                .1
                .push(completion),
        }
    }

    fn adopt_orphans(&self, orphans: &mut Orphans) {
        let now = Instant::now();
        let ids: Vec<LinkId> = orphans.held.keys().copied().collect();
        for id in ids {
            let known = self.links.read().get(&id).cloned();
            if let Some(conn) = known {
                let (_, held) = orphans.held.remove(&id).expect("listed");
                for c in held {
                    self.handle(c, &conn, None);
                }
            } else if orphans.held[&id].0 + ORPHAN_TTL < now
                || self.retired.lock().ids.contains_key(&id)
            {
                orphans.held.remove(&id);
            }
        }
    }

    fn handle(&self, completion: Completion, conn: &Arc<Conn>, clock: Option<Instant>) {
        match completion {
            Completion::Recv { buf, .. } => {
                if !conn.is_closed() {
                    conn.submit_frame(buf, clock);
                }
            }
            Completion::SendDone { .. } => conn.submit(Work::Flush),
            Completion::Closed { link, reason } => {
                self.retire(link);
                tracing::info!(peer = %conn.peer, %reason, "connection closed");
                conn.close();
                conn.submit(Work::Closed(reason));
            }
        }
    }
}

impl Driver for Endpoint {
    fn drive_once(&self) -> bool {
        loop {
            match self.poll_once() {
                None => return false,
                Some(0) => return true,
                Some(_) => {}
            }
        }
    }

    fn link_closed(&self) {
        // Only a client's poller parks between ticks (standing back); a server's sleeps on
        // its queue, which the transport rang. The `Closed` is queued before this unpark,
        // and the parked poller polls after every park: unparked now, or its next park
        // returns at once (the token is kept), it finds the `Closed`. Not made conditional
        // on the poller standing back: it may be about to, and closes are rare.
        if self.role == Role::Client {
            self.wake_the_poller();
        }
    }
}

/// What the thread polling the completion queue works with.
struct PollState {
    orphans: Orphans,
    batch: Vec<Completion>,
    /// The link of the previous completion, and its connection.
    last: Option<(LinkId, Arc<Conn>)>,
    /// The time the poller thread read for the batch being handled (`None` for a caller's
    /// or the TCP I/O thread's poll: a frame that needs the time reads it).
    clock: Option<Instant>,
}

/// Completions held for links not registered yet, with when the first arrived.
#[derive(Default)]
struct Orphans {
    held: HashMap<LinkId, (Instant, Vec<Completion>)>,
}
