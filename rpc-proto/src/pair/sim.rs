//! The randomized simulation: a client core and a server core on a [`Pair`], in an order a
//! seeded generator picks, step by step: the client opens calls (some with deadlines) and
//! streams requests, either side's application holds receive slots (for at most
//! [`MAX_HOLD`]) and releases them, runs out of send buffers, consumes windows late, the
//! client cancels, the server answers, frames are handed over one at a time in either
//! direction, and the virtual clock moves by up to [`STEP`] while both sides keep alive (and,
//! for some seeds, drop stalled reassembly). With a [`CreditPool`], the server's slots come
//! from it and its grant moves with the load (`pair/shared.rs` runs several such pairs).
//!
//! After every step: credits are conserved; no call is open at either side past its deadline
//! by more than [`STEP`]. Throughout: every payload arrives as sent; every call ends exactly
//! once at the client (its reply, its cancel, DEADLINE_EXCEEDED, or RESOURCE_EXHAUSTED when
//! reassembly stalled) with its own data; the server sees only the cancels and expiries this
//! allows; nobody gives up on its live peer. At the end nothing is open or in flight, and a
//! run that stops making progress fails. Every failure names its seed:
//! `RPC_SIM_SEEDS=n` runs seeds 1 to n.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::{Core, Pair, Seen};
use crate::conn::tests::out;
use crate::{flags, Code, CreditPool, Hello, Keepalive, Kind, Role, SendError, WireStatus};

/// The most the clock moves in one step (and how late a side may run its timers).
const STEP: Duration = Duration::from_millis(5);
/// Calls per seed.
const CALLS: u32 = 12;
/// Steps in any order before the sides drain: they then release every slot and always have
/// send buffers.
const CHAOS_STEPS: u32 = 2_000;
/// Steps after which a run that has not finished is stuck.
const MAX_STEPS: u32 = 200_000;
/// Both sides' keepalive. The peer is always alive, so neither may give up on it.
const KEEPALIVE: Keepalive = Keepalive {
    interval: Duration::from_millis(40),
    timeout: Duration::from_millis(160),
};
/// For one seed in [`STALL_EVERY`]: both sides drop reassembly stalled this long, and hold
/// their slots longer.
const STALL_TIMEOUT: Duration = Duration::from_millis(15);
const STALL_EVERY: u64 = 4;
/// The longest an application holds a receive slot (this implementation's runtime releases
/// one as soon as its frame is copied out or consumed): a side whose slots stay held for the
/// keepalive's interval and timeout starves its peer of every frame, PINGs included, and is
/// then rightly given up as dead.
const MAX_HOLD: Duration = Duration::from_millis(20);
/// A deadline that never passes within a run.
const LONG: Duration = Duration::from_secs(10);

/// xorshift64*: deterministic, dependency-free randomness.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// One of `items`, if any.
    fn pick(&mut self, items: &[u64]) -> Option<u64> {
        (!items.is_empty()).then(|| items[self.below(items.len() as u64) as usize])
    }
}

/// The payload of message `i` of call `call` in direction `up`: checkable on arrival.
fn payload(call: u64, i: usize, up: bool, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (call as usize * 31 + i * 7 + k + usize::from(up)) as u8)
        .collect()
}

/// One call as one side's application sees it.
#[derive(Default)]
struct SimCall {
    /// Client: request lengths still to send (then END); server: replies still to send.
    to_send: VecDeque<usize>,
    sent: usize,
    received: usize,
    half_closed: bool,
    /// This side sent its last frame of the call.
    done: bool,
    unconsumed: Vec<u32>,
    /// The call's data (client) and the timeout its opening frame carries.
    user: u32,
    timeout_us: u32,
    /// The deadline: client, from the open; server, from the opening frame's receipt.
    deadline: Option<Instant>,
}

/// How a call ended at the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Reply,
    Cancelled,
    DeadlineExceeded,
    /// Reassembly stalled (a stall-timeout seed only).
    Stalled,
}

pub(super) struct Sim {
    seed: u64,
    rng: Rng,
    pair: Pair,
    client: BTreeMap<u64, SimCall>,
    server: BTreeMap<u64, SimCall>,
    /// Calls the client opened, and those the server's application saw end.
    opened: u32,
    server_ended: BTreeSet<u64>,
    /// Each call's outcome at the client, once.
    outcomes: BTreeMap<u64, Outcome>,
    /// The client's deadline of each call that has one.
    deadlines: BTreeMap<u64, Instant>,
    stall: bool,
    step: u32,
    /// Since when each side's application holds a receive slot (client, server).
    holding_since: [Option<Instant>; 2],
}

fn simulate(seed: u64) {
    let mut sim = Sim::new(seed, None);
    while !sim.done() {
        sim.one_step();
    }
    sim.finish();
}

impl Sim {
    /// A run for `seed`; with `pool`, the server's receive slots come from it (§22.4) and the
    /// client offers extensions, so that the grant moves with the load.
    pub(super) fn new(seed: u64, pool: Option<&CreditPool>) -> Sim {
        // Spread over the state (xorshift must not start at 0; `seed | 1` would run even seeds
        // as the odd ones).
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let h = Hello {
            slot_count: 3 + rng.below(6) as u32,
            slot_size: 128 + rng.below(400) as u32,
            max_message_size: 2000,
            max_calls: 1 + rng.below(4) as u32,
            call_window: 200 + rng.below(2000) as u32,
            max_metadata_size: 1024,
        };
        let stall = seed % STALL_EVERY == 0;
        let mut pair = Pair::with(h, h);
        if let Some(pool) = pool {
            let grant = pool.admit(h.slot_count).expect("the pool holds every base");
            pair.server.core.set_grant(grant);
            pair.client.core.offer_extensions();
        }
        for role in [Role::Client, Role::Server] {
            let side = pair.side(role);
            side.release_at_once = false;
            side.core.set_keepalive(Some(KEEPALIVE));
            side.core.set_stall_timeout(stall.then_some(STALL_TIMEOUT));
            // Keepalive counts from the first tick.
            pair.timers(role);
        }
        Sim {
            seed,
            rng,
            pair,
            client: BTreeMap::new(),
            server: BTreeMap::new(),
            opened: 0,
            server_ended: BTreeSet::new(),
            outcomes: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            stall,
            step: 0,
            holding_since: [None, None],
        }
    }

    /// Every call was opened and ended at the client.
    pub(super) fn done(&self) -> bool {
        self.opened == CALLS && self.outcomes.len() == CALLS as usize
    }

    /// One random step, then what both sides saw and the invariants.
    pub(super) fn one_step(&mut self) {
        self.step += 1;
        if self.step >= MAX_STEPS {
            panic!(
                "seed {}: no progress (deadlock?)\n{}",
                self.seed,
                self.describe()
            );
        }
        self.act();
        self.observe();
        self.check();
    }

    /// The server's core (its grant, for a shared pool's checks).
    pub(super) fn server_core(&self) -> &Core {
        &self.pair.server.core
    }

    /// The seed, for failures found beside this run.
    pub(super) fn seed(&self) -> u64 {
        self.seed
    }
}

impl Sim {
    fn draining(&self) -> bool {
        self.step > CHAOS_STEPS
    }

    /// One random step.
    fn act(&mut self) {
        let draining = self.draining();
        match self.rng.below(11) {
            0 if self.opened < CALLS => self.open(),
            1 => {
                let pending: Vec<u64> = (self.client.iter())
                    .filter(|(_, c)| !c.done)
                    .map(|(&id, _)| id)
                    .collect();
                if let Some(id) = self.rng.pick(&pending) {
                    self.send_next(Role::Client, id);
                }
            }
            2 if !draining && self.rng.chance(3) => {
                let open: Vec<u64> = self.client.keys().copied().collect();
                if let Some(id) = self.rng.pick(&open) {
                    if let Some(user) = self.pair.client.core.cancel(id, Code::Cancelled) {
                        self.outcome(id, Outcome::Cancelled, user);
                    }
                }
            }
            3 | 4 => {
                let to = self.either();
                self.pair.deliver_one(to);
            }
            5 if !self.stall || self.rng.chance(30) => {
                let role = self.either();
                let held = self.pair.side(role).held;
                let n = self.rng.below(u64::from(held) + 1) as u32;
                let side = self.pair.side(role);
                side.held -= n;
                side.core.released(n);
            }
            6 => {
                // The server answers half-closed calls, and consumes what arrived.
                let ids: Vec<u64> = self.server.keys().copied().collect();
                for id in ids {
                    let c = self.server.get_mut(&id).expect("present");
                    for cost in c.unconsumed.drain(..) {
                        self.pair.server.core.consumed(id, cost);
                    }
                    if c.half_closed && !c.done && self.rng.chance(50) {
                        self.send_next(Role::Server, id);
                    }
                }
            }
            7 => {
                let from = self.either();
                let buffers = draining || self.rng.chance(80);
                self.pair.transmit(from, buffers);
            }
            8 => {
                for (&id, c) in self.client.iter_mut() {
                    for cost in c.unconsumed.drain(..) {
                        self.pair.client.core.consumed(id, cost);
                    }
                }
            }
            9 => self.tick(),
            _ => {}
        }
        for (i, role) in [Role::Client, Role::Server].into_iter().enumerate() {
            let now = self.pair.now;
            let since = match self.pair.side(role).held {
                0 => None,
                _ => Some(self.holding_since[i].unwrap_or(now)),
            };
            if draining || since.is_some_and(|t| now >= t + MAX_HOLD) {
                self.pair.release(role);
                self.holding_since[i] = None;
            } else {
                self.holding_since[i] = since;
            }
        }
    }

    fn either(&mut self) -> Role {
        if self.rng.chance(50) {
            Role::Client
        } else {
            Role::Server
        }
    }

    /// The client opens a call: no deadline, one that may well pass, or one that will not.
    fn open(&mut self) {
        let user = self.opened;
        let id = match self.pair.client.core.open_call(user) {
            Ok(id) => id,
            Err(SendError::AtCapacity) => return,
            Err(e) => panic!("seed {}: open refused: {e:?}", self.seed),
        };
        self.opened += 1;
        let timeout = match self.rng.below(10) {
            0..=3 => None,
            4..=6 => Some(Duration::from_micros(1 + self.rng.below(40_000))),
            _ => Some(LONG),
        };
        let deadline = timeout.map(|t| self.pair.now + t);
        if let Some(at) = deadline {
            self.pair.client.core.set_deadline(id, at);
            self.deadlines.insert(id, at);
        }
        let n = 1 + self.rng.below(3) as usize;
        let lens = (0..n).map(|_| self.rng.below(700) as usize).collect();
        self.client.insert(
            id,
            SimCall {
                to_send: lens,
                user,
                timeout_us: timeout.map_or(0, |t| t.as_micros() as u32),
                deadline,
                ..Default::default()
            },
        );
        self.send_next(Role::Client, id);
    }

    /// The next frame of a call: a message (the client's last one sometimes with END), or
    /// the END.
    fn send_next(&mut self, from: Role, call: u64) {
        let up = from == Role::Client;
        let calls = if up {
            &mut self.client
        } else {
            &mut self.server
        };
        let Some(c) = calls.get_mut(&call) else {
            return;
        };
        let (kind, fl, body) = match c.to_send.pop_front() {
            Some(len) => {
                let end = up && c.to_send.is_empty() && c.sent % 2 == 1;
                let fl = if end { flags::END } else { 0 };
                (Kind::Message, fl, payload(call, c.sent, up, len))
            }
            None => (Kind::End, 0, Vec::new()),
        };
        c.sent += usize::from(kind == Kind::Message);
        c.done |= kind == Kind::End || fl & flags::END != 0;
        let core = &mut self.pair.side(from).core;
        let sent = if kind == Kind::End && !up {
            core.end_call(call, &WireStatus::new(Code::Ok, ""), &[])
        } else {
            let frame = out(core, kind, fl, 0, &body);
            core.send(call, frame, 5, c.timeout_us)
        };
        match self.pair.posted(from, sent) {
            Ok(()) => {}
            Err(SendError::NotOpen) => c.done = true,
            Err(e) => panic!("seed {}: send refused: {e:?}", self.seed),
        }
    }

    /// The clock moves; each side runs its timers when [`Core::poll_timeout`] says they are
    /// due, as a runtime does (and now and then when nothing is due).
    fn tick(&mut self) {
        let by = self.rng.below(STEP.as_micros() as u64 + 1);
        self.pair.now += Duration::from_micros(by);
        for role in [Role::Client, Role::Server] {
            let now = self.pair.now;
            let due = (self.pair.side(role).core.poll_timeout()).is_some_and(|at| at <= now);
            if due || self.rng.chance(10) {
                self.pair.timers(role);
            }
        }
    }

    /// What both applications saw since the last step.
    fn observe(&mut self) {
        for seen in self.pair.server.take_seen() {
            self.at_server(seen);
        }
        for seen in self.pair.client.take_seen() {
            self.at_client(seen);
        }
    }

    fn at_server(&mut self, seen: Seen) {
        let seed = self.seed;
        let now = self.pair.now;
        match seen {
            Seen::Message(id, body, end, ended) => {
                assert_eq!(ended, None, "seed {seed}: only a client's call ends");
                // The first message of a call (a later one may complete first).
                if !self.server.contains_key(&id) && !self.server_ended.contains(&id) {
                    let deadline = self.pair.server.core.deadline(id);
                    self.server.insert(
                        id,
                        SimCall {
                            deadline,
                            ..Default::default()
                        },
                    );
                }
                let c = (self.server.get_mut(&id))
                    .unwrap_or_else(|| panic!("seed {seed}: message of call {id}, not open"));
                received(seed, c, id, true, &body);
                if end {
                    half_close(c);
                }
            }
            Seen::HalfClosed(id) => half_close(
                (self.server.get_mut(&id))
                    .unwrap_or_else(|| panic!("seed {seed}: call {id} half-closed, not open")),
            ),
            Seen::Cancelled(id, reason, user) => {
                let allowed = [Code::Cancelled, Code::DeadlineExceeded];
                assert!(
                    allowed.contains(&reason) || (self.stall && reason == Code::ResourceExhausted),
                    "seed {seed}: call {id} cancelled with {reason:?}"
                );
                assert_eq!(user, id as u32, "seed {seed}: data of call {id}");
                self.server_end(id);
            }
            Seen::Deadline(id, user) => {
                assert_eq!(user, Some(id as u32), "seed {seed}: data of call {id}");
                let c = (self.server_end(id))
                    .unwrap_or_else(|| panic!("seed {seed}: deadline of unknown call {id}"));
                let at = c.deadline.expect("a call without a deadline expired");
                assert!(
                    at <= now && now <= at + STEP,
                    "seed {seed}: call {id} expired {:?} after its deadline",
                    now.saturating_duration_since(at)
                );
            }
            Seen::Stalled(id, user) => {
                assert!(
                    self.stall,
                    "seed {seed}: call {id} stalled without a timeout"
                );
                assert_eq!(user, id as u32, "seed {seed}: data of call {id}");
                self.server_end(id);
            }
            Seen::Pong(_) => {}
            Seen::PeerSilent => panic!("seed {seed}: the server gave up on its live peer"),
            other => panic!("seed {seed}: the server saw {other:?}"),
        }
    }

    /// The server's application saw `id` end: its messages are not delivered any more.
    fn server_end(&mut self, id: u64) -> Option<SimCall> {
        self.server_ended.insert(id);
        self.server.remove(&id)
    }

    fn at_client(&mut self, seen: Seen) {
        let seed = self.seed;
        match seen {
            Seen::Message(id, body, _, ended) => {
                let c = (self.client.get_mut(&id))
                    .unwrap_or_else(|| panic!("seed {seed}: message of call {id} after its end"));
                received(seed, c, id, false, &body);
                if let Some(user) = ended {
                    self.outcome(id, Outcome::Reply, user);
                }
            }
            Seen::Ended(id, code, user) => {
                let outcome = match code {
                    Code::Ok => Outcome::Reply,
                    Code::DeadlineExceeded if self.deadlines.contains_key(&id) => {
                        Outcome::DeadlineExceeded
                    }
                    Code::ResourceExhausted if self.stall => Outcome::Stalled,
                    _ => panic!("seed {seed}: call {id} ended with {code:?}"),
                };
                self.outcome(id, outcome, user);
            }
            Seen::Deadline(id, user) => {
                let user = user.unwrap_or_else(|| panic!("seed {seed}: call {id} without data"));
                self.outcome(id, Outcome::DeadlineExceeded, user);
            }
            Seen::Stalled(id, user) => {
                assert!(
                    self.stall,
                    "seed {seed}: call {id} stalled without a timeout"
                );
                self.outcome(id, Outcome::Stalled, user);
            }
            Seen::Pong(_) => {}
            Seen::PeerSilent => panic!("seed {seed}: the client gave up on its live peer"),
            other => panic!("seed {seed}: the client saw {other:?}"),
        }
    }

    /// A call ended at the client: once, with its own data, and not later than a step past
    /// its deadline (nor, for DEADLINE_EXCEEDED, before it).
    fn outcome(&mut self, id: u64, outcome: Outcome, user: u32) {
        let seed = self.seed;
        let now = self.pair.now;
        if let Some(first) = self.outcomes.insert(id, outcome) {
            panic!("seed {seed}: call {id} ended twice: {first:?}, then {outcome:?}");
        }
        let c = (self.client.remove(&id))
            .unwrap_or_else(|| panic!("seed {seed}: call {id} ended, never opened"));
        assert_eq!(user, c.user, "seed {seed}: data of call {id}");
        if let Some(at) = c.deadline {
            assert!(
                now <= at + STEP,
                "seed {seed}: call {id} ended ({outcome:?}) {:?} after its deadline",
                now - at
            );
            assert!(
                outcome != Outcome::DeadlineExceeded || at <= now,
                "seed {seed}: call {id} expired {:?} early",
                at - now
            );
        } else {
            assert_ne!(outcome, Outcome::DeadlineExceeded, "seed {seed}: call {id}");
        }
    }

    /// The invariants that hold after every step.
    fn check(&self) {
        let (seed, step, now) = (self.seed, self.step, self.pair.now);
        if let Err(e) = self.pair.credits_conserved() {
            panic!("seed {seed} step {step}: {e}");
        }
        for (id, at) in &self.deadlines {
            assert!(
                self.outcomes.contains_key(id) || now <= *at + STEP,
                "seed {seed} step {step}: call {id} open at the client {:?} past its deadline",
                now - *at
            );
        }
        for id in self.server.keys() {
            if let Some(at) = self.pair.server.core.deadline(*id) {
                assert!(
                    now <= at + STEP,
                    "seed {seed} step {step}: call {id} open at the server {:?} past its \
                     deadline",
                    now - at
                );
            }
        }
    }

    /// Both sides release everything and talk until quiet: then nothing is open or owed.
    pub(super) fn finish(&mut self) {
        for role in [Role::Client, Role::Server] {
            self.pair.release(role);
            self.pair.side(role).release_at_once = true;
        }
        self.pair.drive();
        self.observe();
        self.check();
        let seed = self.seed;
        for side in [&self.pair.client, &self.pair.server] {
            assert!(
                side.core.open_calls() == 0 && side.core.call_records() == 0,
                "seed {seed}: {:?} still has calls: {}",
                side.core.role(),
                side.core.describe()
            );
        }
        assert!(
            self.server.values().all(|c| c.done),
            "seed {seed}: the server never answered {:?}",
            (self.server.iter().filter(|(_, c)| !c.done))
                .map(|(id, _)| id)
                .collect::<Vec<_>>()
        );
    }

    /// Both sides' state, for a run that stopped making progress.
    fn describe(&self) -> String {
        let calls = |calls: &BTreeMap<u64, SimCall>| {
            (calls.iter())
                .map(|(id, c)| {
                    format!(
                        "{id}: to send {}, done {}, half-closed {}, received {}, unconsumed {}",
                        c.to_send.len(),
                        c.done,
                        c.half_closed,
                        c.received,
                        c.unconsumed.len()
                    )
                })
                .collect::<Vec<_>>()
        };
        let side = |s: &super::Side| {
            format!(
                "held {} inbound {} {}",
                s.held,
                s.inbound.len(),
                s.core.describe()
            )
        };
        format!(
            "outcomes {:?}\nclient {}\n  calls {:?}\nserver {}\n  calls {:?}",
            self.outcomes,
            side(&self.pair.client),
            calls(&self.client),
            side(&self.pair.server),
            calls(&self.server)
        )
    }
}

/// A message arrived on call `id`: it is the next one sent, intact.
fn received(seed: u64, c: &mut SimCall, id: u64, up: bool, body: &[u8]) {
    let expected = payload(id, c.received, up, body.len());
    assert!(
        body == expected,
        "seed {seed}: call {id} message {}",
        c.received
    );
    c.received += 1;
    c.unconsumed.push(Core::message_cost(body.len()));
}

/// The client half-closed: the server answers with as many messages as it got.
fn half_close(c: &mut SimCall) {
    c.half_closed = true;
    c.to_send = (0..c.received).map(|i| (i * 300) % 900).collect();
}

#[test]
fn random_interleavings_of_two_cores_never_violate_lose_or_hang() {
    let seeds: u64 = std::env::var("RPC_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    for seed in 1..=seeds {
        simulate(seed);
    }
}
