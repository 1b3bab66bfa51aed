//! The crate's error type. Call outcomes are [`crate::Status`]; [`Error`] is for everything
//! that is not the result of a call: connection set-up, transports, protocol violations.

/// Errors of connection set-up, transports and the wire protocol.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A frame shorter than its header or than its declared payload.
    #[error("truncated frame: {len} bytes, at least {needed} needed")]
    TruncatedFrame {
        /// Bytes received.
        len: usize,
        /// Bytes the frame needs.
        needed: usize,
    },
    /// A frame that does not start with the protocol's magic bytes.
    #[error("bad magic bytes {0:02x?}: the peer does not speak this protocol")]
    BadMagic([u8; 2]),
    /// A frame of a protocol version this build does not speak.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u8),
    /// A frame kind this build does not know.
    #[error("unknown frame kind {0}")]
    UnknownFrameKind(u8),
    /// A frame that breaks a rule of `docs/PROTOCOL.md`.
    #[error("malformed frame: {0}")]
    MalformedFrame(&'static str),
    /// The peer broke a rule of `docs/PROTOCOL.md`: `violation` names the row of its
    /// violation table. The connection is closed.
    #[error("protocol violation `{violation}`: {detail}")]
    Protocol {
        /// The rule.
        violation: rpc_proto::Violation,
        /// What exactly happened.
        detail: String,
    },
    /// The peer broke the protocol's sequencing or flow-control rules.
    #[error("protocol violation: {0}")]
    ProtocolViolation(String),
    /// A frame larger than the receive slot it was meant for.
    #[error("frame of {len} bytes exceeds the slot size of {slot_size} bytes")]
    FrameTooLarge {
        /// Frame length.
        len: usize,
        /// Slot size.
        slot_size: usize,
    },
    /// The requested transport cannot be used here.
    #[error("transport `{transport}` is unavailable: {reason}")]
    TransportUnavailable {
        /// Transport name (`tcp`, `verbs`).
        transport: &'static str,
        /// Why.
        reason: String,
    },
    /// An address that could not be parsed or resolved.
    #[error("invalid address `{0}`")]
    InvalidAddress(String),
    /// A metadata name or value that cannot be sent (see [`crate::MetadataMap`]).
    #[error("invalid metadata {0}")]
    InvalidMetadata(String),
    /// An invalid configuration value.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The connection is closed.
    #[error("connection closed: {0}")]
    ConnectionClosed(String),
    /// A new connection's rings do not fit in what is left of the memory budget.
    #[error("memory budget spent: {0}")]
    MemoryBudget(String),
    /// A verbs (libibverbs / librdmacm) call failed.
    #[error("verbs: {call} failed: {reason}")]
    Verbs {
        /// The verbs call that failed.
        call: &'static str,
        /// The failure, with the OS or verbs status string.
        reason: String,
    },
}

impl From<rpc_proto::Error> for Error {
    /// The protocol core's errors keep their variants here, so code matching on
    /// [`Error::Protocol`] sees the same error whichever layer detected it.
    fn from(err: rpc_proto::Error) -> Error {
        match err {
            rpc_proto::Error::UnsupportedVersion(v) => Error::UnsupportedVersion(v),
            rpc_proto::Error::Protocol { violation, detail } => {
                Error::Protocol { violation, detail }
            }
        }
    }
}
