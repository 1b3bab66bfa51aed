//! [`Violation`]: every way a peer can break protocol version 2, one variant per row of the
//! violation table in `docs/PROTOCOL.md`. Each has a stable short name (the row's name, and the
//! name of the test that provokes it); a violation closes the connection.

use std::fmt;

/// Declares [`Violation`] from one table: each row's doc, variant and stable name, in the
/// order of the table in `docs/PROTOCOL.md`; the name match and [`Violation::ALL`] follow
/// from it, so the three cannot drift apart.
macro_rules! violations {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// A rule of `docs/PROTOCOL.md` the peer broke. The connection is closed; every call on
        /// it fails with UNAVAILABLE.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Violation {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Violation {
            /// The row's stable name in the violation table (`credit-overrun`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Violation::$variant => $name,)*
                }
            }

            /// Every violation, in table order.
            pub const ALL: [Violation; [$(Violation::$variant),*].len()] =
                [$(Violation::$variant),*];
        }
    };
}

violations! {
    /// A frame shorter than the 40-byte header.
    ShortFrame = "short-frame",
    /// A frame whose length is not `40 + segment_len`.
    LengthMismatch = "length-mismatch",
    /// The first two bytes are not `RP`.
    BadMagic = "bad-magic",
    /// A version other than 2 after the handshake.
    BadVersion = "bad-version",
    /// A kind outside 1..=9.
    UnknownKind = "unknown-kind",
    /// A flag the kind (or the sender's role) does not allow.
    BadFlags = "bad-flags",
    /// A field the kind does not use is not zero (or `reserved` is not zero).
    NonzeroField = "nonzero-field",
    /// `segment_offset + segment_len > message_len`.
    SegmentBounds = "segment-bounds",
    /// A frame longer than the receiver's `slot_size`.
    FrameTooLarge = "frame-too-large",
    /// A segment of 0 bytes in a message that is not empty.
    EmptySegment = "empty-segment",
    /// The first frame on a TCP connection is not a HELLO.
    HelloExpected = "hello-expected",
    /// A HELLO whose payload is not 32 bytes, or whose magic, version or reserved bytes are
    /// wrong.
    HelloMalformed = "hello-malformed",
    /// A HELLO value outside its range.
    HelloOutOfRange = "hello-out-of-range",
    /// A HELLO after the handshake (TCP), or any HELLO frame (RDMA).
    HelloRepeated = "hello-repeated",
    /// A frame arrived when the sender held no credit.
    CreditOverrun = "credit-overrun",
    /// A frame other than CREDIT arrived when the sender held only its reserve credit.
    ReserveSpent = "reserve-spent",
    /// Returned credits would exceed the receiver's `slot_count`.
    CreditExcess = "credit-excess",
    /// A CREDIT frame returning no credit.
    EmptyCredit = "empty-credit",
    /// A call frame with call id 0.
    CallIdZero = "call-id-zero",
    /// An opening frame whose call id is not above every call id opened before.
    CallIdOrder = "call-id-order",
    /// A call frame (not opening) for a call id that was never opened.
    UnknownCall = "unknown-call",
    /// An opening frame beyond the receiver's `max_calls`.
    TooManyCalls = "too-many-calls",
    /// An opening frame sent by a server, or a server-only frame sent by a client.
    WrongRole = "wrong-role",
    /// A HEADERS frame where the call's state allows none.
    HeadersOutOfOrder = "headers-out-of-order",
    /// A frame on a call whose sender already ended its side.
    AfterEnd = "after-end",
    /// A MESSAGE sent while the call's window was exhausted.
    WindowOverrun = "window-overrun",
    /// A WINDOW frame that would raise a window above 2^31 − 1.
    WindowExcess = "window-excess",
    /// A new HEADERS, MESSAGE or END frame of a call while one of its frames is still
    /// arriving.
    SegmentRestart = "segment-restart",
    /// A continuation segment with no frame of that call in progress.
    SegmentOrphan = "segment-orphan",
    /// A segment whose `segment_offset` is not the number of bytes received so far.
    SegmentGap = "segment-gap",
    /// A segment whose kind, flags, code, `timeout_us` or `message_len` differ from its
    /// frame's first segment.
    SegmentMismatch = "segment-mismatch",
    /// A metadata block that does not parse, or has an invalid name or value.
    MalformedMetadata = "malformed-metadata",
    /// A GOODBYE whose last call id is higher than a previous GOODBYE's.
    GoodbyeRaised = "goodbye-raised",
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
