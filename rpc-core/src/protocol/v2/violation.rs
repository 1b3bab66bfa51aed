//! [`Violation`]: every way a peer can break protocol version 2, one variant per row of the
//! violation table in `docs/PROTOCOL.md`. Each has a stable short name (the row's name, and the
//! name of the test that provokes it); a violation closes the connection.

use std::fmt;

/// A rule of `docs/PROTOCOL.md` the peer broke. The connection is closed; every call on it
/// fails with UNAVAILABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Violation {
    /// A frame shorter than the 40-byte header.
    ShortFrame,
    /// A frame whose length is not `40 + segment_len`.
    LengthMismatch,
    /// The first two bytes are not `RP`.
    BadMagic,
    /// A version other than 2 after the handshake.
    BadVersion,
    /// A kind outside 1..=9.
    UnknownKind,
    /// A flag the kind (or the sender's role) does not allow.
    BadFlags,
    /// A field the kind does not use is not zero (or `reserved` is not zero).
    NonzeroField,
    /// `segment_offset + segment_len > message_len`.
    SegmentBounds,
    /// A frame longer than the receiver's `slot_size`.
    FrameTooLarge,
    /// A segment of 0 bytes in a message that is not empty.
    EmptySegment,
    /// The first frame on a TCP connection is not a HELLO.
    HelloExpected,
    /// A HELLO whose payload is not 32 bytes, or whose magic, version or reserved bytes are
    /// wrong.
    HelloMalformed,
    /// A HELLO value outside its range.
    HelloOutOfRange,
    /// A HELLO after the handshake (TCP), or any HELLO frame (RDMA).
    HelloRepeated,
    /// A frame arrived when the sender held no credit.
    CreditOverrun,
    /// A frame other than CREDIT arrived when the sender held only its reserve credit.
    ReserveSpent,
    /// Returned credits would exceed the receiver's `slot_count`.
    CreditExcess,
    /// A CREDIT frame returning no credit.
    EmptyCredit,
    /// A call frame with call id 0.
    CallIdZero,
    /// An opening frame whose call id is not above every call id opened before.
    CallIdOrder,
    /// A call frame (not opening) for a call id that was never opened.
    UnknownCall,
    /// An opening frame beyond the receiver's `max_calls`.
    TooManyCalls,
    /// An opening frame sent by a server, or a server-only frame sent by a client.
    WrongRole,
    /// A HEADERS frame where the call's state allows none.
    HeadersOutOfOrder,
    /// A frame on a call whose sender already ended its side.
    AfterEnd,
    /// A MESSAGE sent while the call's window was exhausted.
    WindowOverrun,
    /// A WINDOW frame that would raise a window above 2^31 − 1.
    WindowExcess,
    /// A new HEADERS, MESSAGE or END frame of a call while one of its frames is still
    /// arriving.
    SegmentRestart,
    /// A continuation segment with no frame of that call in progress.
    SegmentOrphan,
    /// A segment whose `segment_offset` is not the number of bytes received so far.
    SegmentGap,
    /// A segment whose kind, flags, code, `timeout_us` or `message_len` differ from its
    /// frame's first segment.
    SegmentMismatch,
    /// A metadata block that does not parse, or has an invalid name or value.
    MalformedMetadata,
    /// A GOODBYE whose last call id is higher than a previous GOODBYE's.
    GoodbyeRaised,
}

impl Violation {
    /// The row's stable name in the violation table (`credit-overrun`).
    pub fn name(self) -> &'static str {
        use Violation::*;
        match self {
            ShortFrame => "short-frame",
            LengthMismatch => "length-mismatch",
            BadMagic => "bad-magic",
            BadVersion => "bad-version",
            UnknownKind => "unknown-kind",
            BadFlags => "bad-flags",
            NonzeroField => "nonzero-field",
            SegmentBounds => "segment-bounds",
            FrameTooLarge => "frame-too-large",
            EmptySegment => "empty-segment",
            HelloExpected => "hello-expected",
            HelloMalformed => "hello-malformed",
            HelloOutOfRange => "hello-out-of-range",
            HelloRepeated => "hello-repeated",
            CreditOverrun => "credit-overrun",
            ReserveSpent => "reserve-spent",
            CreditExcess => "credit-excess",
            EmptyCredit => "empty-credit",
            CallIdZero => "call-id-zero",
            CallIdOrder => "call-id-order",
            UnknownCall => "unknown-call",
            TooManyCalls => "too-many-calls",
            WrongRole => "wrong-role",
            HeadersOutOfOrder => "headers-out-of-order",
            AfterEnd => "after-end",
            WindowOverrun => "window-overrun",
            WindowExcess => "window-excess",
            SegmentRestart => "segment-restart",
            SegmentOrphan => "segment-orphan",
            SegmentGap => "segment-gap",
            SegmentMismatch => "segment-mismatch",
            MalformedMetadata => "malformed-metadata",
            GoodbyeRaised => "goodbye-raised",
        }
    }

    /// Every violation, in table order.
    pub const ALL: [Violation; 33] = {
        use Violation::*;
        [
            ShortFrame,
            LengthMismatch,
            BadMagic,
            BadVersion,
            UnknownKind,
            BadFlags,
            NonzeroField,
            SegmentBounds,
            FrameTooLarge,
            EmptySegment,
            HelloExpected,
            HelloMalformed,
            HelloOutOfRange,
            HelloRepeated,
            CreditOverrun,
            ReserveSpent,
            CreditExcess,
            EmptyCredit,
            CallIdZero,
            CallIdOrder,
            UnknownCall,
            TooManyCalls,
            WrongRole,
            HeadersOutOfOrder,
            AfterEnd,
            WindowOverrun,
            WindowExcess,
            SegmentRestart,
            SegmentOrphan,
            SegmentGap,
            SegmentMismatch,
            MalformedMetadata,
            GoodbyeRaised,
        ]
    };
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
