//! The crate's error type: why the core refused what a peer sent.

use crate::Violation;

/// A frame or HELLO the core cannot accept. After an error from
/// [`Connection::on_frame`](crate::Connection::on_frame) the connection is closed and fed no
/// more frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A HELLO or frame of a protocol version this build does not speak.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u8),
    /// The peer broke a rule of `docs/PROTOCOL.md`: `violation` names the row of its
    /// violation table.
    #[error("protocol violation `{violation}`: {detail}")]
    Protocol {
        /// The rule.
        violation: Violation,
        /// What exactly happened.
        detail: String,
    },
}
