//! Frame headers and the HELLO of protocol version 2: encoding, decoding and the checks that
//! need nothing but the frame itself (`docs/PROTOCOL.md` §3–4). Every frame is a 40-byte
//! little-endian header followed by `segment_len` payload bytes.

use crate::Error;
use crate::Violation;

/// Size of the fixed frame header in bytes.
pub const HEADER_LEN: usize = 40;
/// The first two bytes of every frame and HELLO: ASCII `R`, `P`.
pub const MAGIC: [u8; 2] = *b"RP";
/// The protocol version this implementation speaks.
pub const VERSION: u8 = 2;
/// Length of the HELLO payload (it also fits in rdma_cm's 56 bytes of private data).
pub const HELLO_LEN: usize = 32;
/// Cost in window bytes of a MESSAGE beyond its length (so that empty messages cost too).
pub const MESSAGE_OVERHEAD: u32 = 16;
/// Largest per-call window (and window increment) anyone may reach: 2^31 − 1 bytes.
pub const MAX_WINDOW: u32 = i32::MAX as u32;

/// Smallest `slot_size` a peer may announce: a header and a 64-byte payload.
pub const MIN_SLOT_SIZE: u32 = 104;
/// Largest `slot_size` a peer may announce (16 MiB).
pub const MAX_SLOT_SIZE: u32 = 16 << 20;
/// Fewest receive slots a peer may announce: one is kept in reserve for CREDIT frames, and a
/// CREDIT frame must return at least two credits (with two slots, two sides could trade
/// single credits forever without either reaching the two a data frame needs).
pub const MIN_SLOT_COUNT: u32 = 3;
/// Most receive slots a peer may announce (credits travel in a 16-bit field).
pub const MAX_SLOT_COUNT: u32 = u16::MAX as u32;
/// Smallest `max_metadata_size`: room for an error status's trailers.
pub const MIN_METADATA_SIZE: u32 = 1024;
/// Smallest `max_message_size`.
pub const MIN_MESSAGE_SIZE: u32 = 64;

/// The kind of a frame (header byte 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Connection parameters (TCP only; over RDMA they travel in rdma_cm private data).
    Hello = 1,
    /// A metadata block: request headers (opening a call) or response headers.
    Headers = 2,
    /// One protobuf message of a call.
    Message = 3,
    /// The end of one side of a call: a client's half-close, a server's status and trailers.
    End = 4,
    /// Either side gives up a call.
    Cancel = 5,
    /// More bytes of a call's window.
    Window = 6,
    /// Returns connection credits only.
    Credit = 7,
    /// A liveness probe, or (flag ACK) the answer to one.
    Ping = 8,
    /// The sender will process no call opened after `call_id`.
    Goodbye = 9,
}

impl Kind {
    /// The kind for a wire value.
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Headers,
            3 => Kind::Message,
            4 => Kind::End,
            5 => Kind::Cancel,
            6 => Kind::Window,
            7 => Kind::Credit,
            8 => Kind::Ping,
            9 => Kind::Goodbye,
            _ => return None,
        })
    }

    /// The flags this kind may carry.
    pub fn allowed_flags(self) -> u16 {
        match self {
            Kind::Headers => flags::OPEN,
            Kind::Message => flags::OPEN | flags::END | flags::METADATA,
            Kind::Ping => flags::ACK,
            _ => 0,
        }
    }

    /// Whether frames of this kind carry a payload (and so may be segmented).
    pub fn has_payload(self) -> bool {
        matches!(
            self,
            Kind::Headers | Kind::Message | Kind::End | Kind::Hello
        )
    }

    /// Whether frames of this kind belong to a call (and need a non-zero call id).
    pub fn is_call_frame(self) -> bool {
        matches!(
            self,
            Kind::Headers | Kind::Message | Kind::End | Kind::Cancel | Kind::Window
        )
    }

    /// The upper-case name used in `docs/PROTOCOL.md`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "HELLO",
            Kind::Headers => "HEADERS",
            Kind::Message => "MESSAGE",
            Kind::End => "END",
            Kind::Cancel => "CANCEL",
            Kind::Window => "WINDOW",
            Kind::Credit => "CREDIT",
            Kind::Ping => "PING",
            Kind::Goodbye => "GOODBYE",
        }
    }
}

/// Header flag bits (bytes 4..6).
pub mod flags {
    /// HEADERS, MESSAGE (client only): this frame opens the call.
    pub const OPEN: u16 = 0x1;
    /// MESSAGE: the sender's last message (client: half-close; server: status OK, no
    /// trailers).
    pub const END: u16 = 0x2;
    /// PING: this is the answer to a PING.
    pub const ACK: u16 = 0x4;
    /// MESSAGE with OPEN and END, under the whole-requests extension (`docs/PROTOCOL.md`
    /// §22): the payload starts with the request's metadata block, after its 4-byte length.
    pub const METADATA: u16 = 0x8;
    /// OPEN and END, which METADATA needs beside it.
    pub(crate) const WHOLE: u16 = OPEN | END;
}

/// A decoded frame header. Field meanings depend on [`Kind`]; see `docs/PROTOCOL.md` §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: Kind,
    /// [`flags`] bits.
    pub flags: u16,
    /// Connection credits returned to the receiver of this frame.
    pub credits: u16,
    /// The call (call frames), the last call processed (GOODBYE), an opaque value (PING).
    pub call_id: u64,
    /// Method id (opening frame), status (server END), reason (CANCEL), increment (WINDOW).
    pub code: u32,
    /// Opening frame: the caller's timeout in microseconds, 0 for none.
    pub timeout_us: u32,
    /// Length of the whole payload this frame is a segment of.
    pub message_len: u32,
    /// Offset of this segment within the payload.
    pub segment_offset: u32,
    /// Payload bytes following the header in this frame.
    pub segment_len: u32,
}

impl Header {
    /// A header with only `kind` set (everything else 0).
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            credits: 0,
            call_id: 0,
            code: 0,
            timeout_us: 0,
            message_len: 0,
            segment_offset: 0,
            segment_len: 0,
        }
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// A whole one-segment frame: this header with `segment_len` set to the length of
    /// `payload`, then `payload`. For tools and tests; the runtime encodes straight into send
    /// slots with [`Header::encode`].
    pub fn to_frame(&self, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0u8; HEADER_LEN + payload.len()];
        Header {
            segment_len: payload.len() as u32,
            ..*self
        }
        .encode(&mut frame);
        frame[HEADER_LEN..].copy_from_slice(payload);
        frame
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`].
    #[inline]
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4..6].copy_from_slice(&self.flags.to_le_bytes());
        out[6..8].copy_from_slice(&self.credits.to_le_bytes());
        out[8..16].copy_from_slice(&self.call_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.code.to_le_bytes());
        out[20..24].copy_from_slice(&self.timeout_us.to_le_bytes());
        out[24..28].copy_from_slice(&self.message_len.to_le_bytes());
        out[28..32].copy_from_slice(&self.segment_offset.to_le_bytes());
        out[32..36].copy_from_slice(&self.segment_len.to_le_bytes());
        out[36..40].copy_from_slice(&0u32.to_le_bytes());
    }

    /// Parses a header from the start of `frame` and applies every check that needs nothing
    /// but the header: magic, version, kind, flags allowed for the kind, fields the kind does
    /// not use being zero, segment bounds and empty segments. The caller checks the frame's
    /// length against `segment_len` and its slot size.
    #[inline]
    pub fn decode(frame: &[u8]) -> Result<Header, Error> {
        // The common frames (a call's HEADERS, MESSAGE and END) are accepted by one run of
        // cheap comparisons; anything else, or anything that fails one of them, goes through
        // the full checks, which name the violation. The quick path accepts only what the
        // full checks accept.
        if let Some(head) = frame.first_chunk::<HEADER_LEN>() {
            if let Some(h) = Self::quick_call_frame(head) {
                return Ok(h);
            }
        }
        Self::decode_checked(frame)
    }

    /// A well-formed HEADERS, MESSAGE or END header, or `None` (then [`Header::decode`] runs
    /// the full checks).
    #[inline]
    fn quick_call_frame(head: &[u8; HEADER_LEN]) -> Option<Header> {
        let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]);
        let u32_at =
            |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let kind = match head[3] {
            2 => Kind::Headers,
            3 => Kind::Message,
            4 => Kind::End,
            _ => return None,
        };
        let h = Header {
            kind,
            flags: u16_at(4),
            credits: u16_at(6),
            call_id: u64::from_le_bytes(head[8..16].try_into().ok()?),
            code: u32_at(16),
            timeout_us: u32_at(20),
            message_len: u32_at(24),
            segment_offset: u32_at(28),
            segment_len: u32_at(32),
        };
        let opening = h.has(flags::OPEN);
        // §3's table for these kinds: a call id; outside the opening frame no timeout, and no
        // code but on END.
        let fields = h.call_id != 0
            && (opening || (h.timeout_us == 0 && (kind == Kind::End || h.code == 0)));
        let well_formed = head[0..2] == MAGIC
            && head[2] == VERSION
            && h.flags & !kind.allowed_flags() == 0
            && (!h.has(flags::METADATA) || h.flags & flags::WHOLE == flags::WHOLE)
            && u32_at(36) == 0
            && fields
            && u64::from(h.segment_offset) + u64::from(h.segment_len) <= u64::from(h.message_len)
            && (h.segment_len != 0 || h.message_len == 0);
        well_formed.then_some(h)
    }

    /// [`Header::decode`] with every check in turn, naming the first that fails.
    #[cold]
    fn decode_checked(frame: &[u8]) -> Result<Header, Error> {
        if frame.len() < HEADER_LEN {
            return Err(violation(
                Violation::ShortFrame,
                format!("{} bytes, the header alone is {HEADER_LEN}", frame.len()),
            ));
        }
        if frame[0..2] != MAGIC {
            return Err(violation(
                Violation::BadMagic,
                format!("{:02x} {:02x}", frame[0], frame[1]),
            ));
        }
        if frame[2] != VERSION {
            return Err(violation(
                Violation::BadVersion,
                format!("version {}, this side speaks {VERSION}", frame[2]),
            ));
        }
        let Some(kind) = Kind::from_u8(frame[3]) else {
            return Err(violation(
                Violation::UnknownKind,
                format!("kind {}", frame[3]),
            ));
        };
        let u16_at = |i: usize| u16::from_le_bytes([frame[i], frame[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(frame[i..i + 4].try_into().expect("4 bytes"));
        let h = Header {
            kind,
            flags: u16_at(4),
            credits: u16_at(6),
            call_id: u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")),
            code: u32_at(16),
            timeout_us: u32_at(20),
            message_len: u32_at(24),
            segment_offset: u32_at(28),
            segment_len: u32_at(32),
        };
        let lone_metadata = h.has(flags::METADATA) && h.flags & flags::WHOLE != flags::WHOLE;
        if h.flags & !kind.allowed_flags() != 0 || lone_metadata {
            return Err(violation(
                Violation::BadFlags,
                format!("flags {:#06x} on {}", h.flags, kind.name()),
            ));
        }
        if u32_at(36) != 0 {
            return Err(violation(
                Violation::NonzeroField,
                "reserved (bytes 36..40)",
            ));
        }
        h.check_fields()?;
        let end = u64::from(h.segment_offset) + u64::from(h.segment_len);
        if end > u64::from(h.message_len) {
            return Err(violation(
                Violation::SegmentBounds,
                format!(
                    "segment {}+{} past message_len {}",
                    h.segment_offset, h.segment_len, h.message_len
                ),
            ));
        }
        if h.segment_len == 0 && h.message_len != 0 {
            return Err(violation(
                Violation::EmptySegment,
                format!(
                    "empty segment at offset {} of a {}-byte {}",
                    h.segment_offset,
                    h.message_len,
                    kind.name()
                ),
            ));
        }
        Ok(h)
    }

    /// The per-kind field table of `docs/PROTOCOL.md` §3.
    fn check_fields(&self) -> Result<(), Error> {
        let opening = self.has(flags::OPEN);
        let zero = |name: &str, value: u64| {
            if value == 0 {
                Ok(())
            } else {
                Err(violation(
                    Violation::NonzeroField,
                    format!("{name} is {value} on {}", self.kind.name()),
                ))
            }
        };
        if self.kind.is_call_frame() && self.call_id == 0 {
            return Err(violation(
                Violation::CallIdZero,
                format!("{} with call id 0", self.kind.name()),
            ));
        }
        if !opening {
            zero("timeout_us", self.timeout_us.into())?;
        }
        if !self.kind.has_payload() {
            zero("message_len", self.message_len.into())?;
        }
        match self.kind {
            Kind::Hello => {
                zero("credits", self.credits.into())?;
                zero("call_id", self.call_id)?;
                zero("code", self.code.into())?;
            }
            Kind::Headers | Kind::Message if !opening => zero("code", self.code.into())?,
            Kind::Headers | Kind::Message | Kind::End | Kind::Cancel => {}
            Kind::Window => {
                if self.code == 0 || self.code > MAX_WINDOW {
                    return Err(violation(
                        Violation::WindowExcess,
                        format!("WINDOW increment {}", self.code),
                    ));
                }
            }
            Kind::Credit => {
                zero("call_id", self.call_id)?;
                zero("code", self.code.into())?;
                if self.credits == 0 {
                    return Err(violation(Violation::EmptyCredit, "CREDIT returning 0"));
                }
            }
            Kind::Ping | Kind::Goodbye => zero("code", self.code.into())?,
        }
        Ok(())
    }

    /// Whether this frame holds the first segment of its payload.
    pub fn is_first_segment(&self) -> bool {
        self.segment_offset == 0
    }

    /// Whether this frame holds the last segment of its payload.
    pub fn is_last_segment(&self) -> bool {
        self.segment_offset + self.segment_len == self.message_len
    }

    /// Whether a continuation segment repeats its first segment's fixed fields.
    pub fn same_frame_as(&self, first: &Header) -> bool {
        self.kind == first.kind
            && self.flags == first.flags
            && self.call_id == first.call_id
            && self.code == first.code
            && self.timeout_us == first.timeout_us
            && self.message_len == first.message_len
    }
}

/// A protocol violation as the crate's error.
#[cold]
pub fn violation(rule: Violation, detail: impl Into<String>) -> Error {
    Error::Protocol {
        violation: rule,
        detail: detail.into(),
    }
}

/// Connection parameters each side announces in its HELLO (`docs/PROTOCOL.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Receive slots the sender posted for this connection (= the peer's initial credits).
    pub slot_count: u32,
    /// Bytes per receive slot, header included; no frame to this side may be larger.
    pub slot_size: u32,
    /// Largest message (one MESSAGE payload) the sender accepts.
    pub max_message_size: u32,
    /// Most calls open at once: a server refuses more; a client opens no more.
    pub max_calls: u32,
    /// Initial window, in bytes, of each call's direction towards the sender.
    pub call_window: u32,
    /// Largest metadata block (HEADERS or END payload) the sender accepts.
    pub max_metadata_size: u32,
}

impl Hello {
    /// Encodes the 32-byte HELLO payload.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = 0;
        let fields = [
            self.slot_count,
            self.slot_size,
            self.max_message_size,
            self.max_calls,
            self.call_window,
            self.max_metadata_size,
        ];
        for (i, v) in fields.into_iter().enumerate() {
            out[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Decodes and validates a HELLO payload. A payload that starts with `RP` but names
    /// another version yields [`Error::UnsupportedVersion`], so the caller can refuse the
    /// peer clearly.
    pub fn decode(payload: &[u8]) -> Result<Hello, Error> {
        if payload.len() >= 3 && payload[0..2] == MAGIC && payload[2] != VERSION {
            return Err(Error::UnsupportedVersion(payload[2]));
        }
        if payload.len() != HELLO_LEN {
            return Err(violation(
                Violation::HelloMalformed,
                format!("{} bytes, not {HELLO_LEN}", payload.len()),
            ));
        }
        if payload[0..2] != MAGIC {
            return Err(violation(
                Violation::HelloMalformed,
                "no `RP` at the start: a version 1 peer or another protocol",
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes(payload[i..i + 4].try_into().expect("4 bytes"));
        if payload[3] != 0 || u32_at(28) != 0 {
            return Err(violation(
                Violation::HelloMalformed,
                "reserved HELLO bytes are not zero",
            ));
        }
        let hello = Hello {
            slot_count: u32_at(4),
            slot_size: u32_at(8),
            max_message_size: u32_at(12),
            max_calls: u32_at(16),
            call_window: u32_at(20),
            max_metadata_size: u32_at(24),
        };
        hello.validate()?;
        Ok(hello)
    }

    /// Checks every field against its range in `docs/PROTOCOL.md` §4.
    pub fn validate(&self) -> Result<(), Error> {
        let ranges = [
            (
                "slot_count",
                self.slot_count,
                MIN_SLOT_COUNT,
                MAX_SLOT_COUNT,
            ),
            ("slot_size", self.slot_size, MIN_SLOT_SIZE, MAX_SLOT_SIZE),
            (
                "max_message_size",
                self.max_message_size,
                MIN_MESSAGE_SIZE,
                MAX_WINDOW,
            ),
            ("max_calls", self.max_calls, 1, u32::MAX),
            ("call_window", self.call_window, 1, MAX_WINDOW),
            (
                "max_metadata_size",
                self.max_metadata_size,
                MIN_METADATA_SIZE,
                MAX_WINDOW,
            ),
        ];
        for (name, value, lo, hi) in ranges {
            if !(lo..=hi).contains(&value) {
                return Err(violation(
                    Violation::HelloOutOfRange,
                    format!("{name} {value} outside {lo}..={hi}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks the first bytes of a TCP HELLO frame while the rest is still arriving
    /// (`docs/PROTOCOL.md` §4.4): the bytes of `RP` present so far (→ `bad-magic`), then the
    /// version byte, if present ([`Error::UnsupportedVersion`] unless 2). A peer that does not
    /// speak version 2 (a version 1 peer's HELLO is shorter than 72 bytes) is refused at once
    /// instead of at the HELLO deadline; [`Hello::from_frame`] names the same error for the
    /// whole frame.
    pub fn check_frame_start(start: &[u8]) -> Result<(), Error> {
        let n = start.len().min(MAGIC.len());
        if start[..n] != MAGIC[..n] {
            return Err(violation(
                Violation::BadMagic,
                format!("{:02x?} where a HELLO frame starts with `RP`", &start[..n]),
            ));
        }
        match start.get(2) {
            Some(&version) if version != VERSION => Err(Error::UnsupportedVersion(version)),
            _ => Ok(()),
        }
    }

    /// Reads the HELLO frame that opens a TCP connection: a peer of another version gets
    /// [`Error::UnsupportedVersion`] (a version 1 peer's HELLO included), anything else that
    /// is not a HELLO frame of exactly 72 bytes a violation.
    pub fn from_frame(frame: &[u8]) -> Result<Hello, Error> {
        if frame.len() >= 3 && frame[0..2] == MAGIC && frame[2] != VERSION {
            return Err(Error::UnsupportedVersion(frame[2]));
        }
        let h = Header::decode(frame)?;
        if h.kind != Kind::Hello {
            return Err(violation(
                Violation::HelloExpected,
                format!("{} before the HELLO", h.kind.name()),
            ));
        }
        if h.message_len != HELLO_LEN as u32
            || h.segment_len != HELLO_LEN as u32
            || frame.len() != HEADER_LEN + HELLO_LEN
        {
            return Err(violation(
                Violation::HelloMalformed,
                format!(
                    "HELLO frame of {} bytes, message_len {}",
                    frame.len(),
                    h.message_len
                ),
            ));
        }
        Hello::decode(&frame[HEADER_LEN..])
    }

    /// A complete HELLO frame (header and payload), as sent first on TCP.
    pub fn to_frame(&self) -> [u8; HEADER_LEN + HELLO_LEN] {
        let mut frame = [0u8; HEADER_LEN + HELLO_LEN];
        Header {
            message_len: HELLO_LEN as u32,
            segment_len: HELLO_LEN as u32,
            ..Header::new(Kind::Hello)
        }
        .encode(&mut frame);
        frame[HEADER_LEN..].copy_from_slice(&self.encode());
        frame
    }
}

#[cfg(test)]
mod tests;
