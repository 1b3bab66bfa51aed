//! Frame header encoding and validation. Every message on the wire (HELLO, REQUEST, RESPONSE,
//! CREDIT, GOODBYE) is one or more frames; each frame is a fixed 40-byte little-endian header
//! followed by `segment_len` payload bytes, and a frame never exceeds the receiver's slot size.
//! `docs/PROTOCOL.md` is the normative description; this module is its implementation.

use crate::Error;

/// Size of the fixed frame header in bytes.
pub const HEADER_LEN: usize = 40;
/// The first two bytes of every frame: ASCII `R`, `P`.
pub const MAGIC: [u8; 2] = *b"RP";
/// The protocol version this implementation speaks.
pub const VERSION: u8 = 1;
/// Length of the HELLO payload.
pub const HELLO_LEN: usize = 16;
/// Smallest slot size a peer may advertise: a header plus 24 payload bytes (the HELLO fits).
pub const MIN_SLOT_SIZE: u32 = 64;
/// Largest slot size a peer may advertise (16 MiB).
pub const MAX_SLOT_SIZE: u32 = 16 << 20;
/// Fewest receive slots a peer may advertise (one is kept in reserve for CREDIT frames).
pub const MIN_SLOT_COUNT: u32 = 2;
/// Most receive slots a peer may advertise (credits travel in a 16-bit field).
pub const MAX_SLOT_COUNT: u32 = u16::MAX as u32;

/// The kind of a frame (header byte 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Connection parameters: the sender's receive slot count and size and its message limit.
    Hello = 1,
    /// A segment of a request message.
    Request = 2,
    /// A segment of a response: a reply message (status OK) or a UTF-8 status message.
    Response = 3,
    /// Returns credits only; carries no payload.
    Credit = 4,
    /// The sender will start no new calls; calls in flight complete.
    Goodbye = 5,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Hello,
            2 => FrameKind::Request,
            3 => FrameKind::Response,
            4 => FrameKind::Credit,
            5 => FrameKind::Goodbye,
            _ => return None,
        })
    }
}

/// A decoded frame header. Field meanings depend on [`FrameKind`]; see `docs/PROTOCOL.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: FrameKind,
    /// Credits returned to the receiver of this frame (slots the sender re-posted).
    pub credits: u16,
    /// Request id (REQUEST, RESPONSE); 0 otherwise.
    pub request_id: u64,
    /// Method id for REQUEST, status code for RESPONSE, 0 otherwise.
    pub code: u32,
    /// REQUEST: the caller's remaining timeout in microseconds, 0 for none. 0 otherwise.
    pub timeout_us: u32,
    /// Total length of the message this frame is a segment of.
    pub message_len: u32,
    /// Offset of this segment's payload within the message.
    pub segment_offset: u32,
    /// Payload bytes following the header in this frame.
    pub segment_len: u32,
}

impl Header {
    /// A header for a payload-less frame (CREDIT, GOODBYE).
    pub fn control(kind: FrameKind, credits: u16) -> Header {
        Header {
            kind,
            credits,
            request_id: 0,
            code: 0,
            timeout_us: 0,
            message_len: 0,
            segment_offset: 0,
            segment_len: 0,
        }
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`].
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4..6].copy_from_slice(&0u16.to_le_bytes());
        out[6..8].copy_from_slice(&self.credits.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.code.to_le_bytes());
        out[20..24].copy_from_slice(&self.timeout_us.to_le_bytes());
        out[24..28].copy_from_slice(&self.message_len.to_le_bytes());
        out[28..32].copy_from_slice(&self.segment_offset.to_le_bytes());
        out[32..36].copy_from_slice(&self.segment_len.to_le_bytes());
        out[36..40].copy_from_slice(&0u32.to_le_bytes());
    }

    /// Parses and validates a header from the start of `frame`, without looking at the payload.
    /// Checks magic, version, kind, reserved fields and segment bounds (`segment_offset +
    /// segment_len <= message_len`). The caller checks `segment_len` against the bytes it has.
    pub fn decode(frame: &[u8]) -> Result<Header, Error> {
        if frame.len() < HEADER_LEN {
            return Err(Error::TruncatedFrame {
                len: frame.len(),
                needed: HEADER_LEN,
            });
        }
        if frame[0..2] != MAGIC {
            return Err(Error::BadMagic([frame[0], frame[1]]));
        }
        if frame[2] != VERSION {
            return Err(Error::UnsupportedVersion(frame[2]));
        }
        let kind = FrameKind::from_u8(frame[3]).ok_or(Error::UnknownFrameKind(frame[3]))?;
        let u16_at = |i: usize| u16::from_le_bytes([frame[i], frame[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(frame[i..i + 4].try_into().expect("4 bytes"));
        if u16_at(4) != 0 || u32_at(36) != 0 {
            return Err(Error::MalformedFrame("reserved header bits are not zero"));
        }
        let header = Header {
            kind,
            credits: u16_at(6),
            request_id: u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")),
            code: u32_at(16),
            timeout_us: u32_at(20),
            message_len: u32_at(24),
            segment_offset: u32_at(28),
            segment_len: u32_at(32),
        };
        let end = u64::from(header.segment_offset) + u64::from(header.segment_len);
        if end > u64::from(header.message_len) {
            return Err(Error::MalformedFrame(
                "segment extends past the declared message length",
            ));
        }
        Ok(header)
    }

    /// Whether this frame holds the first segment of its message.
    pub fn is_first_segment(&self) -> bool {
        self.segment_offset == 0
    }

    /// Whether this frame holds the last segment of its message.
    pub fn is_last_segment(&self) -> bool {
        self.segment_offset + self.segment_len == self.message_len
    }
}

/// Connection parameters each side announces in its HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Number of receive slots the sender has posted for this connection (= initial credits).
    pub slot_count: u32,
    /// Size in bytes of each receive slot; no frame sent to this side may be larger.
    pub slot_size: u32,
    /// Largest message (request or response body) the sender accepts.
    pub max_message_size: u32,
}

impl Hello {
    /// Encodes the 16-byte HELLO payload.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0..4].copy_from_slice(&self.slot_count.to_le_bytes());
        out[4..8].copy_from_slice(&self.slot_size.to_le_bytes());
        out[8..12].copy_from_slice(&self.max_message_size.to_le_bytes());
        out
    }

    /// Decodes and validates a HELLO payload.
    pub fn decode(payload: &[u8]) -> Result<Hello, Error> {
        if payload.len() != HELLO_LEN {
            return Err(Error::MalformedFrame("HELLO payload is not 16 bytes"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(payload[i..i + 4].try_into().expect("4 bytes"));
        let hello = Hello {
            slot_count: u32_at(0),
            slot_size: u32_at(4),
            max_message_size: u32_at(8),
        };
        if u32_at(12) != 0 {
            return Err(Error::MalformedFrame("reserved HELLO bytes are not zero"));
        }
        if !(MIN_SLOT_COUNT..=MAX_SLOT_COUNT).contains(&hello.slot_count) {
            return Err(Error::MalformedFrame("HELLO slot count out of range"));
        }
        if !(MIN_SLOT_SIZE..=MAX_SLOT_SIZE).contains(&hello.slot_size) {
            return Err(Error::MalformedFrame("HELLO slot size out of range"));
        }
        Ok(hello)
    }

    /// A complete HELLO frame (header and payload).
    pub fn to_frame(&self) -> [u8; HEADER_LEN + HELLO_LEN] {
        let mut frame = [0u8; HEADER_LEN + HELLO_LEN];
        Header {
            message_len: HELLO_LEN as u32,
            segment_len: HELLO_LEN as u32,
            ..Header::control(FrameKind::Hello, 0)
        }
        .encode(&mut frame);
        frame[HEADER_LEN..].copy_from_slice(&self.encode());
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            kind: FrameKind::Request,
            credits: 7,
            request_id: 0x0102_0304_0506_0708,
            code: 0xdead_beef,
            timeout_us: 1_000_000,
            message_len: 100,
            segment_offset: 24,
            segment_len: 76,
        }
    }

    #[test]
    fn header_round_trips_in_little_endian() {
        let mut buf = [0u8; HEADER_LEN];
        sample().encode(&mut buf);
        assert_eq!(&buf[0..4], b"RP\x01\x02");
        assert_eq!(buf[8], 0x08, "request id is little-endian");
        assert_eq!(Header::decode(&buf).unwrap(), sample());
        assert!(sample().is_last_segment());
        assert!(!sample().is_first_segment());
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let mut buf = [0u8; HEADER_LEN];
        sample().encode(&mut buf);
        assert!(matches!(
            Header::decode(&buf[..39]),
            Err(Error::TruncatedFrame { .. })
        ));
        let mut bad = buf;
        bad[0] = b'X';
        assert!(matches!(Header::decode(&bad), Err(Error::BadMagic(_))));
        let mut bad = buf;
        bad[2] = 9;
        assert!(matches!(
            Header::decode(&bad),
            Err(Error::UnsupportedVersion(9))
        ));
        let mut bad = buf;
        bad[3] = 77;
        assert!(matches!(
            Header::decode(&bad),
            Err(Error::UnknownFrameKind(77))
        ));
        let mut bad = buf;
        bad[4] = 1;
        assert!(matches!(
            Header::decode(&bad),
            Err(Error::MalformedFrame(_))
        ));
        let mut h = sample();
        h.segment_len = 77; // 24 + 77 > 100
        h.encode(&mut bad);
        assert!(matches!(
            Header::decode(&bad),
            Err(Error::MalformedFrame(_))
        ));
    }

    #[test]
    fn hello_round_trips_and_validates() {
        let hello = Hello {
            slot_count: 64,
            slot_size: 8192,
            max_message_size: 4 << 20,
        };
        let frame = hello.to_frame();
        let header = Header::decode(&frame).unwrap();
        assert_eq!(header.kind, FrameKind::Hello);
        assert_eq!(Hello::decode(&frame[HEADER_LEN..]).unwrap(), hello);
        let tiny = Hello {
            slot_count: 1,
            ..hello
        };
        assert!(Hello::decode(&tiny.encode()).is_err());
        let small = Hello {
            slot_size: 63,
            ..hello
        };
        assert!(Hello::decode(&small.encode()).is_err());
    }
}
