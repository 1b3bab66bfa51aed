//! A scripted driver of the protocol core for fuzzing: `fuzz/fuzz_targets/core.rs` runs
//! [`drive`] under libFuzzer (`make fuzz`), and this module's `corpus` tests replay the
//! committed corpus through it in `make test`, so every input the fuzzer kept stays a
//! regression test.
//!
//! The contract under test is the one a peer cannot break: whatever bytes arrive,
//! [`Connection::handle_frame`] returns an event or an error (after which the connection is
//! closed and fed no more), never panics, loops or grows without bound; and whatever the peer,
//! the application and the clock do within their APIs, every frame the core emits is one a
//! correct peer accepts.
//!
//! Raw bytes alone would almost never get past the header checks, so the input is read as a
//! script: a prologue chooses the role and both HELLOs (clamped into their valid ranges, small,
//! so that slots, windows, credits and `max_calls` run out within a few operations), then each
//! operation byte picks one step: a raw or deliberately malformed frame, a frame synthesized
//! from a few input bytes with a valid header (whole or as the first of several segments, its
//! credits never more than the peer could return), the next segment of such a frame, or an
//! API call of the application (open, send, end, cancel, release slots, consume window, ping,
//! goodbye, transmit with an allocator that fails on demand), or a move of the virtual clock
//! ([`op::TIME`]): the core is given the time there, through [`Connection::handle_timeout`],
//! and at each frame it handles. Keepalive and the stall timeout are set from the prologue,
//! call deadlines from the timeouts of opening frames (a client's from what its application
//! sends, as the runtime sets them). Missing input reads as zeros, and at most [`MAX_OPS`]
//! operations run, so one execution stays short.
//!
//! The driver keeps its own model of what the peer may rely on, built from the frames alone,
//! and checks every emitted frame against it (the header decodes; the length fits the frame,
//! the peer's slots and the send buffer; a data frame needs two credits; a MESSAGE starts only
//! within the call's window; segments are contiguous and restate their first segment; a
//! payload arrives exactly as the application sent it; metadata blocks are valid and within
//! the peer's limits; nothing but CANCEL or WINDOW follows a call's END, nothing at all a
//! CANCEL or the peer's closing of the call; WINDOW returns no more than was consumed), and
//! that the core's send credits, [`Connection::wants_transmit`] and the calls' data (each
//! given back exactly once) agree with that model. The frames time makes the core queue
//! (a client's CANCEL and a server's END at a deadline, a refusal of stalled reassembly, a
//! keepalive PING) go through the same checks; a deadline expires only once it passed, and no
//! call is left open past it; the peer is given up exactly when it was silent, as keepalive
//! measures silence, for its interval and timeout.

#[cfg(test)]
mod corpus;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::conn::{status_block, Connection, Event, Expiry, Keepalive, Outgoing, Payload, Role};
use crate::frame::{
    flags, Header, Hello, Kind, HEADER_LEN, MAX_WINDOW, MESSAGE_OVERHEAD, MIN_MESSAGE_SIZE,
    MIN_METADATA_SIZE, MIN_SLOT_COUNT, MIN_SLOT_SIZE,
};
use crate::metadata;
use crate::{Code, CreditPool, WireStatus};

/// Most operations one input runs (a longer script is cut here).
pub const MAX_OPS: usize = 1000;
/// Most frames one transmit operation takes out of the core.
const MAX_DRAIN: usize = 64;
/// Most synthesized frames whose later segments are still to be fed.
const MAX_PENDING: usize = 4;
/// Whether scripts may send an END frame with the END flag. [`Connection::send`](crate::Connection::send) passes the
/// flag through into the header, a frame the peer must refuse (`bad-flags`), where it should
/// refuse the frame as it does END on HEADERS; set once it does.
const END_FLAG_ON_END: bool = false;

/// The operation codes of a script (an operation byte is taken modulo [`op::COUNT`]); each
/// comment lists the argument bytes that follow it. Before the first operation comes the
/// prologue: a byte (bit 0: this side is the client; bits 1 and 2: our and the peer's call
/// window close to the largest), six bytes of our HELLO and six of the peer's (see `hello`),
/// and a byte choosing the size of the send buffers. Bits 3 and 4 of the first byte set
/// keepalive (off, or an interval of 10 ms, 100 ms or 1 s with a timeout of four intervals),
/// bits 5 and 6 the stall timeout (off, 5 ms, 50 ms or 500 ms); they matter only once the
/// clock moves ([`op::TIME`]). Bit 7 gives a server's receive slots from a pool (shared
/// credits, `docs/PROTOCOL.md` §22.4), so an offer can agree on raising and withholding.
pub mod op {
    /// `len: u16`, then `len` bytes (fewer if the input ends): fed as one frame.
    pub const FEED_RAW: u8 = 0;
    /// `kind, flags, credits, call, code: u32, timeout, message_len: u16, offset, len,
    /// tweak`: a header with arbitrary fields (malformed more often than not) and a payload.
    pub const FEED_WILD: u8 = 1;
    /// `kind, call, flags|credits, code, payload, split` (a HEADERS or END payload byte with
    /// the top bit clear is followed by a metadata block's bytes, see `block`): a frame with
    /// a valid header, fed whole or as its first segment.
    pub const SYNTH: u8 = 2;
    /// `which, len, tweak`: the next segment of a synthesized frame, returning `tweak % 32`
    /// credits; tweak bit 5 moves it back a byte (a gap), bit 6 changes its `message_len`.
    pub const CONTINUE: u8 = 3;
    /// `n`: releases up to `n % 4 + 1` received slots.
    pub const RELEASE: u8 = 4;
    /// `call, amount`: consumes up to `(amount + 1) × 16` window bytes received on a call.
    pub const CONSUME: u8 = 5;
    /// (none): a client opens a call.
    pub const OPEN: u8 = 6;
    /// `call, flags, len, method, timeout`: sends a MESSAGE (flags bit 0: OPEN, bit 1: END,
    /// bit 2: a payload too large for one frame is offered in a buffer all the same).
    pub const SEND_MESSAGE: u8 = 7;
    /// `call, flags, method, timeout`, a block: sends HEADERS (flags as for MESSAGE).
    pub const SEND_HEADERS: u8 = 8;
    /// `call, flags, code`, a block: sends END through [`Connection::send`](crate::Connection::send) (flags as for
    /// MESSAGE).
    pub const SEND_END: u8 = 9;
    /// `call, code, message_len: u16, chars, details, trailers`: a server's
    /// [`Connection::end_call`](crate::Connection::end_call).
    pub const END_CALL: u8 = 10;
    /// `call, reason`: cancels a call.
    pub const CANCEL: u8 = 11;
    /// `data`: queues a PING.
    pub const PING: u8 = 12;
    /// (none): queues a GOODBYE.
    pub const GOODBYE: u8 = 13;
    /// `failures`: takes frames out of [`Connection::poll_transmit`](crate::Connection::poll_transmit); bit `i % 8` of
    /// `failures` makes the `i`th allocation fail.
    pub const POLL: u8 = 14;
    /// `len: u16`, then `len % 512` bytes: given to the stand-alone decoders.
    pub const PARSE: u8 = 15;
    /// Number of operation codes.
    pub const COUNT: u8 = 16;
    /// `by`: the virtual clock moves (bit 7 clear: `by` ms; set: `(by & 0x7f) × 100` ms), then
    /// [`Connection::handle_timeout`](crate::Connection::handle_timeout) runs. The one
    /// operation byte not taken modulo [`COUNT`]: the sixteen codes were all taken when time
    /// came, and no input of the committed corpus ran `0xf0` as an operation (it would have
    /// been a [`FEED_RAW`]), so every one keeps its meaning.
    pub const TIME: u8 = 0xf0;
}

/// Keepalive and the stall timeout, from the prologue's first byte (see [`op`]).
fn timers(prologue: u8) -> (Option<Keepalive>, Option<Duration>) {
    let ms = |n: u64| Duration::from_millis(n);
    let keepalive = match (prologue >> 3) & 3 {
        0 => None,
        n => {
            let interval = ms(10u64.pow(u32::from(n)));
            Some(Keepalive {
                interval,
                timeout: 4 * interval,
            })
        }
    };
    let stall = match (prologue >> 5) & 3 {
        0 => None,
        n => Some(ms(5 * 10u64.pow(u32::from(n) - 1))),
    };
    (keepalive, stall)
}

/// Runs one script; see the module docs. Panics exactly when the core broke its contract.
pub fn drive(data: &[u8]) {
    run(data);
}

/// What one script reached, for tests that check their seeds reach the states they were
/// written for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reached {
    /// Operations run.
    pub ops: usize,
    /// Frames fed to the core.
    pub fed: usize,
    /// Frames the core accepted.
    pub accepted: usize,
    /// Frames the core emitted (each checked).
    pub emitted: usize,
    /// The non-empty events, by name (`Message` with `end` set reads `MessageEnd`).
    pub events: Vec<&'static str>,
    /// Kinds of the emitted frames, by name.
    pub sent: Vec<&'static str>,
    /// The error that closed the connection, if one did.
    pub error: Option<String>,
    /// What [`Connection::handle_timeout`] reported, by name (`Deadline`, `Stalled`,
    /// `PeerSilent`).
    pub expired: Vec<&'static str>,
}

/// [`drive`], returning what the script reached.
pub fn run(data: &[u8]) -> Reached {
    let mut input = Input { data };
    let mut driver = Driver::new(&mut input);
    while driver.reached.ops < MAX_OPS && !input.data.is_empty() {
        driver.reached.ops += 1;
        if !driver.step(&mut input) {
            break;
        }
        driver.check_credits();
    }
    driver.finish();
    driver.reached
}

/// Builds scripts (for seeds written by tests): the prologue, then operations.
#[derive(Debug, Clone)]
pub struct Script(Vec<u8>);

impl Script {
    /// A script for `role`, both sides with 4 slots of 256 bytes, 1,024-byte messages,
    /// 1,025-byte windows, 4 calls and the smallest metadata limit; send buffers of 256
    /// bytes.
    pub fn new(role: Role) -> Script {
        let hello = [1, 38, 60, 3, 128, 0];
        let mut bytes = vec![u8::from(role == Role::Client)];
        bytes.extend_from_slice(&hello);
        bytes.extend_from_slice(&hello);
        bytes.push(19);
        Script(bytes)
    }

    /// A server whose receive slots come from a pool (prologue bit 7, see [`op`]).
    pub fn pooled(mut self) -> Script {
        self.0[0] |= 0x80;
        self
    }

    /// Sets the prologue's timer bits (3 to 6 of its first byte, see [`op`]).
    pub fn timers(mut self, bits: u8) -> Script {
        self.0[0] |= bits & 0x78;
        self
    }

    /// Appends operation `code` with its argument bytes.
    pub fn op(mut self, code: u8, args: &[u8]) -> Script {
        self.0.push(code);
        self.0.extend_from_slice(args);
        self
    }

    /// The script's bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// The input, read front to back; missing bytes read as zeros.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }
}

/// A HELLO from six input bytes, each field within its valid range and small (or, `wide`, a
/// call window close to the largest, where window arithmetic could overflow).
fn hello(input: &mut Input<'_>, wide: bool) -> Hello {
    let b: [u8; 6] = std::array::from_fn(|_| input.byte());
    Hello {
        slot_count: MIN_SLOT_COUNT + u32::from(b[0] % 6),
        slot_size: MIN_SLOT_SIZE + u32::from(b[1]) * 4,
        max_message_size: MIN_MESSAGE_SIZE + u32::from(b[2]) * 16,
        max_calls: 1 + u32::from(b[3] % 4),
        call_window: if wide {
            MAX_WINDOW - u32::from(b[4])
        } else {
            1 + u32::from(b[4]) * 8
        },
        max_metadata_size: MIN_METADATA_SIZE + u32::from(b[5]) * 4,
    }
}

/// Metadata names for generated blocks: plain, binary, and reserved ones.
const NAMES: [&str; 6] = [
    "x-user",
    "trace-bin",
    "a",
    "grpc-message",
    "grpc-status-details-bin",
    "content-type",
];

/// A valid metadata block from a count byte `n`, then per entry (`n % 4` of them) a name byte
/// (see [`NAMES`]) and a length byte (the value has 8 times as many bytes).
fn block(input: &mut Input<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..input.byte() % 4 {
        let name = NAMES[usize::from(input.byte()) % NAMES.len()];
        let len = usize::from(input.byte()) * 8;
        let value: Vec<u8> = if name.ends_with("-bin") {
            (0..len).map(|k| k as u8).collect()
        } else {
            (0..len).map(|k| b'a' + (k % 26) as u8).collect()
        };
        metadata::push_entry(&mut out, name, &value);
    }
    out
}

/// A recognizable payload of `len` bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A frame: `h` encoded, then `payload`.
fn frame(h: &Header, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0; HEADER_LEN + payload.len()];
    h.encode(&mut f);
    f[HEADER_LEN..].copy_from_slice(payload);
    f
}

/// A synthesized frame whose later segments are still to be fed.
struct Pending {
    header: Header,
    payload: Vec<u8>,
    offset: usize,
}

/// A frame the application hands to the core.
struct AppFrame {
    kind: Kind,
    flags: u16,
    code: u32,
    payload: Vec<u8>,
    /// Encoded in a send buffer ([`Payload::InBuffer`]) if it fits one frame, or (`oversize`)
    /// whether it fits or not.
    in_buffer: bool,
    oversize: bool,
    /// Of a client's opening frame.
    method: u32,
    timeout_us: u32,
}

/// A frame the application handed to the core, as the peer must receive it.
struct Expected {
    kind: Kind,
    flags: u16,
    code: u32,
    timeout_us: u32,
    payload: Vec<u8>,
}

/// What the peer knows of one call, from the frames alone.
struct CallModel {
    /// The call's send window as the peer counts it.
    window: i64,
    /// The logical frame being emitted in segments, with the bytes so far.
    partial: Option<(Header, Vec<u8>)>,
    /// The core emitted the opening frame (client).
    opened: bool,
    /// The core emitted this side's END (or MESSAGE with END).
    ended: bool,
    /// The core emitted a CANCEL.
    cancelled: bool,
    /// The peer ended or cancelled the call: no HEADERS, MESSAGE or END may follow.
    peer_closed: bool,
    /// Frames the application sent, in order.
    expected: VecDeque<Expected>,
    /// Frames the application sent (the first opens the call).
    sends: u32,
    /// Window bytes the application consumed, and the increments the core sent for them.
    consumed: u64,
    window_returned: u64,
    /// Server: the call's deadline passed, so the core may end it with DEADLINE_EXCEEDED.
    expired: bool,
}

impl CallModel {
    fn new(window: u32) -> CallModel {
        CallModel {
            window: window.into(),
            partial: None,
            opened: false,
            ended: false,
            cancelled: false,
            peer_closed: false,
            expected: VecDeque::new(),
            sends: 0,
            consumed: 0,
            window_returned: 0,
            expired: false,
        }
    }
}

/// The core under test, the model of its peer, and what its application holds.
struct Driver {
    core: Connection<u32, Vec<u8>>,
    role: Role,
    local: Hello,
    peer: Hello,
    send_buffer: usize,
    /// Received frames whose slots were not released yet, and all slots released.
    unreleased: u32,
    released: u64,
    /// Credits returned by the emitted frames.
    returned: u64,
    /// Server: the pool its slots come from (prologue bit 7); its grant moves the credits
    /// returned away from the slots released by what was raised and withheld.
    pool: Option<CreditPool>,
    /// The core's send credits, counted from the frames.
    credits: u32,
    /// Call ids known (opened by either side), oldest first, and the highest.
    calls: Vec<u64>,
    highest: u64,
    models: BTreeMap<u64, CallModel>,
    pending: Vec<Pending>,
    /// Window bytes received and not consumed, per call.
    unconsumed: BTreeMap<u64, u64>,
    next_user: u32,
    /// The data of calls the core holds, and that of calls the server ended itself.
    users: BTreeMap<u32, u64>,
    retired: BTreeSet<u32>,
    /// The virtual clock, and each call's deadline as the application or the opening frame
    /// set it.
    now: Instant,
    deadlines: BTreeMap<u64, Instant>,
    keepalive: Option<Keepalive>,
    stall_timeout: Option<Duration>,
    /// Keepalive as the core measures it: the time of the first tick since the last frame
    /// (or of the first tick), and whether a frame came since the last tick.
    alive_at: Option<Instant>,
    heard: bool,
    reached: Reached,
}

impl Driver {
    fn new(input: &mut Input<'_>) -> Driver {
        let prologue = input.byte();
        let role = if prologue & 1 != 0 {
            Role::Client
        } else {
            Role::Server
        };
        let local = hello(input, prologue & 2 != 0);
        let peer = hello(input, prologue & 4 != 0);
        for h in [local, peer] {
            h.validate().expect("clamped HELLOs are valid");
            assert_eq!(Hello::from_frame(&h.to_frame()).ok(), Some(h));
        }
        let send_buffer = MIN_SLOT_SIZE as usize + usize::from(input.byte()) * 8;
        let mut core = Connection::new(role, local, peer, send_buffer);
        let pool = (role == Role::Server && prologue & 0x80 != 0).then(|| {
            let pool = CreditPool::with_max_grant(local.slot_count * 4, local.slot_count * 3);
            core.set_grant(pool.admit(local.slot_count).expect("the first base fits"));
            pool
        });
        let (keepalive, stall_timeout) = timers(prologue);
        core.set_keepalive(keepalive);
        core.set_stall_timeout(stall_timeout);
        Driver {
            core,
            role,
            local,
            peer,
            send_buffer,
            unreleased: 0,
            released: 0,
            returned: 0,
            pool,
            credits: peer.slot_count,
            calls: Vec::new(),
            highest: 0,
            models: BTreeMap::new(),
            pending: Vec::new(),
            unconsumed: BTreeMap::new(),
            next_user: 0,
            users: BTreeMap::new(),
            retired: BTreeSet::new(),
            now: Instant::now(),
            deadlines: BTreeMap::new(),
            keepalive,
            stall_timeout,
            alive_at: None,
            heard: false,
            reached: Reached::default(),
        }
    }

    /// A call id from one byte: mostly a known call (0: the latest), else the next id or a
    /// few above it, a small literal (0 included), or the largest id.
    fn call(&self, b: u8) -> u64 {
        match b {
            0..=0x7f if !self.calls.is_empty() => {
                self.calls[self.calls.len() - 1 - usize::from(b) % self.calls.len()]
            }
            0..=0x7f => u64::from(b),
            0x80..=0xbf => self.highest.saturating_add(1 + u64::from(b & 0x3f)),
            0xc0..=0xfe => u64::from(b & 0x3f),
            0xff => u64::MAX,
        }
    }

    /// Credits the peer could return now: one per frame the core sent it, not yet returned.
    fn peer_owes(&self) -> u32 {
        self.peer.slot_count.saturating_sub(self.credits)
    }

    /// One operation; false when the connection closed.
    fn step(&mut self, input: &mut Input<'_>) -> bool {
        let code = input.byte();
        if code == op::TIME {
            return self.time(input);
        }
        match code % op::COUNT {
            op::FEED_RAW => {
                let len = usize::from(input.u16());
                let f = input.bytes(len);
                return self.feed(f);
            }
            op::FEED_WILD => return self.feed_wild(input),
            op::SYNTH => return self.synth(input),
            op::CONTINUE => return self.continue_pending(input),
            op::RELEASE => {
                let n = (u32::from(input.byte() % 4) + 1).min(self.unreleased);
                self.unreleased -= n;
                self.released += u64::from(n);
                self.core.released(n);
            }
            op::CONSUME => {
                let call = self.call(input.byte());
                let want = (u64::from(input.byte()) + 1) * 16;
                let have = self.unconsumed.get(&call).copied().unwrap_or(0);
                let n = want.min(have);
                if n > 0 {
                    self.unconsumed.insert(call, have - n);
                    if let Some(m) = self.models.get_mut(&call) {
                        m.consumed += n;
                    }
                    self.core.consumed(call, n as u32);
                }
            }
            op::OPEN => {
                let user = self.user();
                if let Ok(id) = self.core.open_call(user) {
                    assert_eq!(self.role, Role::Client);
                    self.register(id);
                    self.users.insert(user, id);
                }
            }
            op::SEND_MESSAGE => {
                let call = self.call(input.byte());
                let fb = input.byte();
                let fl = u16::from(fb & 3);
                let sel = input.byte();
                let len = match sel {
                    0..=0x7f => usize::from(sel),
                    _ => usize::from(sel & 0x7f) * 40,
                };
                let (method, timeout) = (u32::from(input.byte()), u32::from(input.byte()) * 1000);
                let payload = pattern(len, sel);
                self.send(
                    call,
                    AppFrame {
                        kind: Kind::Message,
                        flags: fl,
                        code: 0,
                        payload,
                        in_buffer: sel & 1 == 0,
                        oversize: fb & 4 != 0,
                        method,
                        timeout_us: timeout,
                    },
                );
            }
            op::SEND_HEADERS => {
                let call = self.call(input.byte());
                let fb = input.byte();
                let fl = u16::from(fb & 3);
                let (method, timeout) = (u32::from(input.byte()), u32::from(input.byte()) * 1000);
                let payload = block(input);
                self.send(
                    call,
                    AppFrame {
                        kind: Kind::Headers,
                        flags: fl,
                        code: 0,
                        in_buffer: payload.len() % 2 == 0,
                        oversize: fb & 4 != 0,
                        payload,
                        method,
                        timeout_us: timeout,
                    },
                );
            }
            op::SEND_END => {
                let call = self.call(input.byte());
                let fb = input.byte();
                let mut fl = u16::from(fb & 3);
                if !END_FLAG_ON_END {
                    fl &= !flags::END;
                }
                let code = u32::from(input.byte());
                let payload = block(input);
                self.send(
                    call,
                    AppFrame {
                        kind: Kind::End,
                        flags: fl,
                        code,
                        in_buffer: payload.len() % 2 == 0,
                        oversize: fb & 4 != 0,
                        payload,
                        method: 0,
                        timeout_us: 0,
                    },
                );
            }
            op::END_CALL => self.end_call(input),
            op::CANCEL => {
                let call = self.call(input.byte());
                let reason = Code::from_u32(u32::from(input.byte() % 20));
                if let Some(user) = self.core.cancel(call, reason) {
                    self.give_back(call, user);
                }
            }
            op::PING => {
                let b = input.byte();
                self.core.ping(u64::from(b) * 0x0101_0101_0101_0101);
            }
            op::GOODBYE => self.core.goodbye(),
            op::POLL => {
                let failures = input.byte();
                self.poll(failures);
            }
            op::PARSE => {
                let len = usize::from(input.u16() % 512);
                parse(input.bytes(len));
            }
            _ => unreachable!("op codes are taken modulo op::COUNT"),
        }
        true
    }

    /// The clock moves and the core's timers run (see [`op::TIME`]); false when the core gave
    /// the peer up (the connection is closed).
    fn time(&mut self, input: &mut Input<'_>) -> bool {
        let by = input.byte();
        self.now += if by & 0x80 == 0 {
            Duration::from_millis(u64::from(by))
        } else {
            Duration::from_millis(u64::from(by & 0x7f) * 100)
        };
        let now = self.now;
        // Keepalive as the core counts it: silence runs from the first tick after a frame.
        let silent = match self.alive_at {
            Some(at) if !self.heard => now - at,
            _ => {
                self.alive_at = Some(now);
                Duration::ZERO
            }
        };
        self.heard = false;
        let mut gave_up = false;
        for expiry in self.core.handle_timeout(now) {
            match expiry {
                Expiry::Deadline { call, user } => {
                    self.reached.expired.push("Deadline");
                    let at = self.deadlines.remove(&call);
                    assert!(
                        at.is_some_and(|at| at <= now),
                        "call {call} expired at {:?}, deadline {at:?}",
                        now
                    );
                    match (self.role, user) {
                        (_, Some(user)) => self.give_back(call, user),
                        (Role::Client, None) => panic!("call {call} expired without its data"),
                        (Role::Server, None) => {}
                    }
                    if let Some(m) = self.models.get_mut(&call) {
                        m.expired = true;
                    }
                }
                Expiry::Stalled { call, status, user } => {
                    self.reached.expired.push("Stalled");
                    assert!(self.stall_timeout.is_some(), "stalled without a timeout");
                    assert_eq!(status.code(), Code::ResourceExhausted);
                    self.give_back(call, user);
                }
                Expiry::PeerSilent { silent: reported } => {
                    self.reached.expired.push("PeerSilent");
                    assert_eq!(reported, silent, "silence measured");
                    gave_up = true;
                }
            }
        }
        let limit = self.keepalive.map(|k| k.interval + k.timeout);
        assert_eq!(
            gave_up,
            limit.is_some_and(|limit| silent >= limit),
            "gave the peer up after {silent:?} of silence, keepalive {:?}",
            self.keepalive
        );
        for &call in &self.calls {
            if let Some(at) = self.core.deadline(call) {
                assert!(at > now, "call {call} open past its deadline");
            }
        }
        !gave_up
    }

    fn user(&mut self) -> u32 {
        self.next_user += 1;
        self.next_user
    }

    /// A call became known: the client opened it, or the peer's opening frame arrived.
    fn register(&mut self, id: u64) {
        self.calls.push(id);
        self.highest = self.highest.max(id);
        self.models
            .entry(id)
            .or_insert_with(|| CallModel::new(self.peer.call_window));
    }

    /// Feeds one frame; false when the core refused it (the connection is closed).
    fn feed(&mut self, f: &[u8]) -> bool {
        self.reached.fed += 1;
        let header = Header::decode(f);
        let now = self.now;
        match self.core.handle_frame(f, || now) {
            Ok(event) => {
                let h = header.expect("the core accepted a frame whose header does not decode");
                self.reached.accepted += 1;
                self.unreleased += 1;
                self.heard = true;
                self.credits += u32::from(h.credits);
                self.incoming(&h);
                let opened = match event {
                    Event::Opened {
                        call, timeout_us, ..
                    }
                    | Event::Message {
                        call,
                        opened: Some((_, timeout_us)),
                        ..
                    } => Some((call, timeout_us)),
                    _ => None,
                };
                self.event(event);
                if let Some((call, timeout_us)) = opened.filter(|&(_, t)| t != 0) {
                    // A server's deadline runs from the receipt of the opening frame.
                    let at = now + Duration::from_micros(u64::from(timeout_us));
                    if self.core.is_open(call) {
                        assert_eq!(self.core.deadline(call), Some(at), "deadline of {call}");
                        self.deadlines.insert(call, at);
                    }
                }
                true
            }
            Err(e) => {
                self.reached.error = Some(e.to_string());
                false
            }
        }
    }

    /// What an accepted frame tells the peer model.
    fn incoming(&mut self, h: &Header) {
        let last = h.is_last_segment();
        match h.kind {
            Kind::Headers | Kind::Message
                if self.role == Role::Server && h.has(flags::OPEN) && h.is_first_segment() =>
            {
                self.register(h.call_id);
            }
            Kind::Window => {
                if let Some(m) = self.models.get_mut(&h.call_id) {
                    m.window += i64::from(h.code);
                }
            }
            Kind::Cancel => {
                if let Some(m) = self.models.get_mut(&h.call_id) {
                    m.peer_closed = true;
                }
            }
            _ => {}
        }
        let ends = h.kind == Kind::End || (h.kind == Kind::Message && h.has(flags::END));
        if self.role == Role::Client && ends && last {
            if let Some(m) = self.models.get_mut(&h.call_id) {
                m.peer_closed = true;
            }
        }
    }

    fn event(&mut self, event: Event<'_, u32>) {
        let name = match event {
            Event::None => return,
            Event::Opened { call, headers, .. } => {
                metadata::validate(&headers).expect("delivered headers are valid");
                self.adopt(call);
                "Opened"
            }
            Event::Headers { headers, .. } => {
                metadata::validate(&headers).expect("delivered headers are valid");
                "Headers"
            }
            Event::Message {
                call,
                opened,
                body,
                end,
                ended,
                ..
            } => {
                if opened.is_some() {
                    self.adopt(call);
                }
                let cost = u64::from(Connection::<u32, Vec<u8>>::message_cost(body.len()));
                *self.unconsumed.entry(call).or_default() += cost;
                if let Some(user) = ended {
                    self.give_back(call, user);
                }
                if end {
                    "MessageEnd"
                } else {
                    "Message"
                }
            }
            Event::HalfClosed { .. } => "HalfClosed",
            Event::Ended {
                call,
                trailers,
                user,
                ..
            } => {
                metadata::validate(&trailers).expect("delivered trailers are valid");
                self.give_back(call, user);
                "Ended"
            }
            Event::Cancelled { call, user, .. } => {
                self.give_back(call, user);
                "Cancelled"
            }
            Event::Refused { call, user, .. } => {
                self.give_back(call, user);
                "Refused"
            }
            Event::Goodbye {
                last_call,
                unprocessed,
            } => {
                for (call, user) in unprocessed {
                    assert!(
                        call > last_call,
                        "call {call} given back by GOODBYE {last_call}"
                    );
                    self.give_back(call, user);
                }
                "Goodbye"
            }
            Event::Pong { .. } => "Pong",
        };
        self.reached.events.push(name);
    }

    /// Server: gives a newly opened call its data (all but every fourth call, so that calls
    /// without data are exercised too).
    fn adopt(&mut self, call: u64) {
        assert_eq!(
            self.role,
            Role::Server,
            "only a server is told of opened calls"
        );
        if call % 4 != 3 {
            let user = self.user();
            assert!(
                self.core.set_user(call, user),
                "call {call} opened but not open"
            );
            self.users.insert(user, call);
        }
    }

    /// The core gave back a call's data: it must hold it, for that call, once.
    fn give_back(&mut self, call: u64, user: u32) {
        assert_eq!(
            self.users.remove(&user),
            Some(call),
            "data {user} given back for call {call}"
        );
    }

    /// Checks the core's credit count against the one derived from the frames.
    fn check_credits(&self) {
        assert_eq!(
            self.core.send_credits(),
            self.credits,
            "send credits drifted"
        );
        // A client that agreed on shared credits may be granted up to 65535 (§22.4).
        let most = match self.role {
            Role::Client if self.core.shared_credits() => u32::from(u16::MAX),
            _ => self.peer.slot_count,
        };
        assert!(
            self.credits <= most,
            "{} credits held, at most {most}",
            self.credits
        );
        let limit = match self.role {
            Role::Client => self.peer.max_calls,
            Role::Server => self.local.max_calls,
        };
        assert!(
            self.core.open_calls() <= limit,
            "more calls open than max_calls"
        );
    }

    fn feed_wild(&mut self, input: &mut Input<'_>) -> bool {
        let kind = input.byte() % 12;
        let fl = u16::from(input.byte() & 0x0f);
        let credits = u16::from(input.byte());
        let call_id = self.call(input.byte());
        let code = input.u32();
        let timeout = input.byte();
        let message_len = u32::from(input.u16());
        let offset = u32::from(input.byte());
        let len = u32::from(input.byte());
        let tweak = input.byte();
        let h = Header {
            kind: Kind::Ping,
            flags: fl,
            credits,
            call_id,
            code,
            timeout_us: u32::from(timeout) * 1000,
            message_len,
            segment_offset: offset,
            segment_len: len,
        };
        let payload_len = match tweak % 4 {
            0 => len as usize + 1,
            1 => (len as usize).saturating_sub(1),
            _ => len as usize,
        };
        let mut f = frame(&h, &pattern(payload_len, tweak));
        f[3] = kind;
        if tweak & 0x80 != 0 {
            f[36] = 1;
        }
        if tweak & 0x40 != 0 {
            f[2] = tweak & 3;
        }
        self.feed(&f)
    }

    /// A frame with a valid header (whether it is valid where it arrives is up to the
    /// input), fed whole or as its first segment.
    fn synth(&mut self, input: &mut Input<'_>) -> bool {
        const KINDS: [Kind; 8] = [
            Kind::Headers,
            Kind::Message,
            Kind::End,
            Kind::Cancel,
            Kind::Window,
            Kind::Credit,
            Kind::Ping,
            Kind::Goodbye,
        ];
        let kind = KINDS[usize::from(input.byte() % 8)];
        let sel = input.byte();
        let fc = input.byte();
        let c = input.byte();
        let mut fl = kind.allowed_flags() & u16::from(fc & 7);
        // Once the core agreed on whole requests (§22), bit 3 is METADATA on a MESSAGE (a
        // violation at a client). Before, it only counts credits, as the seeds expect.
        if kind == Kind::Message && fc & 8 != 0 && self.core.whole_requests() {
            fl |= flags::METADATA;
        }
        let mut h = Header {
            flags: fl,
            credits: u16::from(fc >> 3).min(self.peer_owes() as u16),
            call_id: match kind {
                // 0xff: a client's offer of extensions, or a server's acceptance (§22.1).
                Kind::Ping if sel == 0xff && fl & flags::ACK != 0 => {
                    crate::extension::acceptance(u32::from(c))
                }
                Kind::Ping if sel == 0xff => crate::extension::offer(u32::from(c)),
                Kind::Ping => u64::from(sel) << 8 | u64::from(c),
                Kind::Credit => 0,
                _ => self.call(sel),
            },
            ..Header::new(kind)
        };
        if h.call_id == 0 && kind.is_call_frame() {
            h.call_id = 1;
        }
        let opening = h.has(flags::OPEN);
        match kind {
            Kind::Headers | Kind::Message if opening => {
                h.code = u32::from(c) * 0x0101_0101;
                h.timeout_us = u32::from(c & 0x0f) * 1000;
            }
            // A client's END has neither: bit 6 breaks that rule.
            Kind::End if self.role == Role::Client || c & 0x40 != 0 => h.code = u32::from(c % 20),
            Kind::Cancel => h.code = u32::from(c),
            Kind::Window => {
                h.code = match c {
                    0 => MAX_WINDOW,
                    0xff => 1,
                    _ => u32::from(c) * 64,
                }
            }
            Kind::Credit => h.credits = h.credits.max(1),
            _ => {}
        }
        let payload = match kind {
            Kind::Message if h.has(flags::METADATA) => {
                let block = self.synth_block(input);
                let p = input.byte();
                let mut payload = (block.len() as u32).to_le_bytes().to_vec();
                payload.extend_from_slice(&block);
                payload.extend_from_slice(&pattern(usize::from(p) * 24, p));
                payload
            }
            Kind::Message => {
                let p = input.byte();
                pattern(usize::from(p) * 24, p)
            }
            Kind::Headers => self.synth_block(input),
            Kind::End if self.role == Role::Client || c & 0x40 != 0 => self.synth_block(input),
            _ => Vec::new(),
        };
        let split = usize::from(input.byte()) * 8;
        h.message_len = payload.len() as u32;
        let room = self.local.slot_size as usize - HEADER_LEN;
        let first = if split == 0 { room } else { split.min(room) };
        let pending = Pending {
            header: h,
            payload,
            offset: 0,
        };
        self.feed_segment(pending, first, 0)
    }

    /// A HEADERS or END payload: a valid block, or (top bit of the first byte) a likely
    /// malformed one.
    fn synth_block(&mut self, input: &mut Input<'_>) -> Vec<u8> {
        let b = input.byte();
        if b & 0x80 != 0 {
            pattern(usize::from(b & 0x7f) * 4, b)
        } else {
            block(input)
        }
    }

    /// Feeds the next segment of `p`, at most `max` bytes (at least one when any are left),
    /// returning `tweak % 32` credits (at most what the peer owes), broken as `tweak` says
    /// (see [`op::CONTINUE`]); keeps `p` if more remain.
    fn feed_segment(&mut self, mut p: Pending, max: usize, tweak: u8) -> bool {
        let total = p.payload.len();
        let n = (total - p.offset).min(max.max(1));
        let mut h = p.header;
        h.segment_offset = p.offset as u32;
        h.segment_len = n as u32;
        if p.offset > 0 {
            h.credits = u16::from(tweak % 32).min(self.peer_owes() as u16);
            if tweak & 0x20 != 0 {
                h.segment_offset -= 1;
            }
            if tweak & 0x40 != 0 {
                h.message_len += 1;
            }
        }
        let f = frame(&h, &p.payload[p.offset..p.offset + n]);
        p.offset += n;
        if p.offset < total {
            if self.pending.len() == MAX_PENDING {
                self.pending.remove(0);
            }
            self.pending.push(p);
        }
        self.feed(&f)
    }

    fn continue_pending(&mut self, input: &mut Input<'_>) -> bool {
        let which = input.byte();
        let len = usize::from(input.byte()) * 8;
        let tweak = input.byte();
        if self.pending.is_empty() {
            return true;
        }
        let p = self.pending.remove(usize::from(which) % self.pending.len());
        let room = self.local.slot_size as usize - HEADER_LEN;
        let max = if len == 0 { room } else { len.min(room) };
        self.feed_segment(p, max, tweak)
    }

    /// The application sends a frame on a call.
    fn send(&mut self, call: u64, f: AppFrame) {
        let len = f.payload.len();
        let payload = if f.in_buffer && (len <= self.core.max_segment() || f.oversize) {
            let mut buf = vec![0x5a; HEADER_LEN + len];
            buf[HEADER_LEN..].copy_from_slice(&f.payload);
            Payload::InBuffer(buf, len)
        } else {
            Payload::Bytes(f.payload.clone())
        };
        let frame = Outgoing {
            kind: f.kind,
            flags: f.flags,
            code: f.code,
            payload,
        };
        let Ok(out) = self.core.send(call, frame, f.method, f.timeout_us) else {
            return;
        };
        let ends = f.kind == Kind::End || f.flags & flags::END != 0;
        let opens =
            self.role == Role::Client && self.models.get(&call).is_some_and(|m| m.sends == 0);
        if opens && f.timeout_us != 0 {
            // The client's deadline is the timeout it asks of the server.
            let at = self.now + Duration::from_micros(u64::from(f.timeout_us));
            self.core.set_deadline(call, at);
            self.deadlines.insert(call, at);
        }
        self.expect_sent(call, f);
        if self.role == Role::Server && ends {
            self.retire(call);
        }
        if let Some((buf, n)) = out {
            self.emitted(&buf, n);
        }
    }

    /// Records a frame the core accepted from the application, as the peer must get it.
    fn expect_sent(&mut self, call: u64, f: AppFrame) {
        let role = self.role;
        let m = self
            .models
            .get_mut(&call)
            .unwrap_or_else(|| panic!("the core sent on call {call}, which never opened"));
        let opens = role == Role::Client && m.sends == 0;
        m.sends += 1;
        let (flags, code, timeout_us) = match (role, f.kind) {
            _ if opens => (f.flags | flags::OPEN, f.method, f.timeout_us),
            (Role::Server, Kind::End) => (f.flags & !flags::OPEN, f.code, 0),
            _ => (f.flags & !flags::OPEN, 0, 0),
        };
        m.expected.push_back(Expected {
            kind: f.kind,
            flags,
            code,
            timeout_us,
            payload: f.payload,
        });
    }

    /// Server: the call's data stays with the core, which will not give it back (the
    /// application ended the call itself).
    fn retire(&mut self, call: u64) {
        let user = self.users.iter().find(|(_, &c)| c == call).map(|(&u, _)| u);
        if let Some(user) = user {
            self.users.remove(&user);
            self.retired.insert(user);
        }
    }

    fn end_call(&mut self, input: &mut Input<'_>) {
        let call = self.call(input.byte());
        let code = Code::from_u32(u32::from(input.byte() % 17));
        let len = usize::from(input.u16() % 3000);
        let chars = ['a', 'é', '%', '\n', 'Z', ' '];
        let c = usize::from(input.byte());
        let message: String = (0..len).map(|i| chars[(c + i * (c % 5 + 1)) % 6]).collect();
        let details = pattern(usize::from(input.byte()) * 4, 1);
        let long = vec![b'v'; usize::from(input.byte()) * 8];
        let all: [(&str, &[u8]); 3] = [
            ("x-t", b"v"),
            ("trace-bin", &[0, 1, 2, 255]),
            ("x-long", &long),
        ];
        let trailers = &all[..usize::from(input.byte() % 4)];
        let status = WireStatus::new(code, message).with_details(details);
        let Ok(out) = self.core.end_call(call, &status, trailers) else {
            return;
        };
        let block = status_block(&status, trailers, self.peer.max_metadata_size as usize);
        let f = AppFrame {
            kind: Kind::End,
            flags: 0,
            code: code as u32,
            payload: block,
            in_buffer: false,
            oversize: false,
            method: 0,
            timeout_us: 0,
        };
        self.expect_sent(call, f);
        self.retire(call);
        if let Some((buf, n)) = out {
            self.emitted(&buf, n);
        }
    }

    /// Takes frames out of the core until it has none (or [`MAX_DRAIN`]); allocations fail
    /// as `failures` says.
    fn poll(&mut self, failures: u8) {
        let size = self.send_buffer;
        for i in 0..MAX_DRAIN {
            let fail = failures & (1 << (i % 8)) != 0;
            let wants = self.core.wants_transmit();
            let got = self
                .core
                .poll_transmit(&mut || (!fail).then(|| vec![0xa5; size]));
            match got {
                Some((buf, n)) => {
                    assert!(wants, "a frame came out while wants_transmit was false");
                    self.emitted(&buf, n);
                }
                None if fail => {}
                None => {
                    assert!(
                        !self.core.wants_transmit(),
                        "wants_transmit with buffers available, yet nothing came out"
                    );
                    break;
                }
            }
        }
    }

    /// Checks one emitted frame against what the peer may rely on.
    fn emitted(&mut self, buf: &[u8], len: usize) {
        self.reached.emitted += 1;
        assert!(
            len <= buf.len(),
            "frame of {len} bytes in a {}-byte buffer",
            buf.len()
        );
        let f = &buf[..len];
        let h = Header::decode(f).unwrap_or_else(|e| panic!("the core emitted {f:02x?}: {e}"));
        self.reached.sent.push(h.kind.name());
        assert_eq!(len, HEADER_LEN + h.segment_len as usize, "length of {h:?}");
        assert!(
            len <= self.peer.slot_size as usize && len <= self.send_buffer,
            "{len}-byte frame, peer slots {}, send buffers {}",
            self.peer.slot_size,
            self.send_buffer
        );
        // Credits: a data frame needs two; a control frame may spend the last one if it
        // returns at least two.
        let control = matches!(
            h.kind,
            Kind::Cancel | Kind::Window | Kind::Credit | Kind::Goodbye
        );
        assert!(
            self.credits >= 2 || (self.credits == 1 && control && h.credits >= 2),
            "{} sent holding {} credits",
            h.kind.name(),
            self.credits
        );
        self.credits -= 1;
        self.returned += u64::from(h.credits);
        // Every released slot was returned, is owed, or was withheld; raised credits were
        // returned without a slot (§22.4): the grant's change from the base is the difference.
        let base = u64::from(self.local.slot_count);
        let grant = u64::from(self.core.grant());
        assert_eq!(
            self.released + grant,
            self.returned + u64::from(self.core.owed()) + base,
            "{} credits returned and {} owed for {} slots released, grant {grant}",
            self.returned,
            self.core.owed(),
            self.released
        );
        if let Some(pool) = &self.pool {
            assert_eq!(
                pool.granted(),
                self.core.grant(),
                "the pool and the grant disagree"
            );
        }
        let role = self.role;
        let max_metadata = self.peer.max_metadata_size as usize;
        let max_message = self.peer.max_message_size as usize;
        let m = match h.kind {
            Kind::Hello => panic!("HELLO after the handshake"),
            Kind::Credit | Kind::Ping | Kind::Goodbye => return,
            _ => self
                .models
                .get_mut(&h.call_id)
                .unwrap_or_else(|| panic!("{} for unknown call {}", h.kind.name(), h.call_id)),
        };
        assert!(!m.cancelled, "{:?} after CANCEL", h);
        match h.kind {
            Kind::Cancel => {
                assert!(
                    role == Role::Server || m.opened,
                    "CANCEL for a call never opened"
                );
                m.cancelled = true;
                m.partial = None;
                return;
            }
            Kind::Window => {
                m.window_returned += u64::from(h.code);
                assert!(
                    m.window_returned <= m.consumed,
                    "WINDOW returns {} of {} consumed",
                    m.window_returned,
                    m.consumed
                );
                return;
            }
            _ => {}
        }
        assert!(!m.peer_closed, "{h:?} after the peer closed the call");
        let payload = &f[HEADER_LEN..];
        if let Some((first, so_far)) = m.partial.as_mut() {
            assert!(
                h.segment_offset as usize == so_far.len() && h.same_frame_as(first),
                "segment {h:?} after {first:?} and {} bytes",
                so_far.len()
            );
            so_far.extend_from_slice(payload);
        } else {
            assert_eq!(h.segment_offset, 0, "continuation without a first segment");
            assert!(!m.ended, "{h:?} after this side's END");
            assert_eq!(
                h.has(flags::OPEN),
                role == Role::Client && !m.opened,
                "OPEN on {h:?}"
            );
            m.opened = true;
            if h.kind == Kind::Message {
                assert!(m.window > 0, "MESSAGE started with window {}", m.window);
                m.window -= i64::from(h.message_len) + i64::from(MESSAGE_OVERHEAD);
            }
            m.partial = Some((h, payload.to_vec()));
        }
        if !h.is_last_segment() {
            return;
        }
        let (first, whole) = m.partial.take().expect("set above");
        if let Some(e) = m.expected.pop_front() {
            assert_eq!(
                (first.kind, first.flags, first.code, first.timeout_us),
                (e.kind, e.flags, e.code, e.timeout_us),
                "header of a frame sent"
            );
            assert!(
                whole == e.payload,
                "payload of {first:?} changed on the way"
            );
        } else {
            // Only a server's own refusal (an over-limit frame, an opening after its GOODBYE)
            // comes out after everything the application sent.
            // and, once its deadline passed, its END DEADLINE_EXCEEDED.
            let refusal = [Code::ResourceExhausted as u32, Code::Unavailable as u32];
            let expired = m.expired && first.code == Code::DeadlineExceeded as u32;
            assert!(
                role == Role::Server
                    && first.kind == Kind::End
                    && (refusal.contains(&first.code) || expired),
                "{first:?} the application never sent"
            );
        }
        if first.kind == Kind::Message {
            assert!(whole.len() <= max_message, "message above the peer's limit");
        } else {
            assert!(whole.len() <= max_metadata, "block above the peer's limit");
            metadata::validate(&whole).expect("emitted metadata is valid");
        }
        if first.kind == Kind::End || first.has(flags::END) {
            m.ended = true;
        }
    }

    /// The connection is gone: every call's data comes back, except that of calls a server
    /// ended itself (which it may or may not get back).
    fn finish(&mut self) {
        for (call, user) in self.core.drain_calls() {
            if self.users.get(&user) == Some(&call) {
                self.users.remove(&user);
            } else {
                assert!(
                    self.retired.contains(&user),
                    "drain_calls gave back data {user} of call {call} again"
                );
            }
        }
        assert!(
            self.users.is_empty(),
            "data never given back (call: data): {:?}",
            self.users
        );
    }
}

/// The stand-alone decoders on arbitrary bytes: whatever they accept re-encodes to the same
/// bytes.
fn parse(bytes: &[u8]) {
    if let Ok(h) = Header::decode(bytes) {
        let mut out = [0u8; HEADER_LEN];
        h.encode(&mut out);
        assert_eq!(&out[..], &bytes[..HEADER_LEN], "header round trip");
    }
    if let Ok(hello) = Hello::decode(bytes) {
        assert_eq!(&hello.encode()[..], bytes, "HELLO round trip");
    }
    if let Ok(hello) = Hello::from_frame(bytes) {
        assert_eq!(&hello.to_frame()[..], bytes, "HELLO frame round trip");
    }
    let entries: Vec<_> = metadata::entries(bytes).collect();
    match metadata::validate(bytes) {
        Ok(n) => {
            assert_eq!(n, entries.len());
            let mut again = Vec::new();
            for entry in entries {
                let (name, value) = entry.expect("validated");
                metadata::push_entry(&mut again, name, value);
            }
            assert_eq!(again, bytes, "metadata round trip");
        }
        Err(_) => assert!(matches!(entries.last(), Some(Err(_)))),
    }
    let text = metadata::percent_decode(bytes);
    assert_eq!(
        metadata::percent_decode(&metadata::percent_encode(&text)),
        text,
        "percent-encoding round trip"
    );
}
