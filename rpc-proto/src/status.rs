//! [`WireStatus`]: what an END frame says about how a call ended, as the core encodes it.

use std::fmt;

use crate::Code;

/// A call's status as it crosses the wire: a [`Code`], a message (`grpc-message`) and binary
/// details (`grpc-status-details-bin`). The runtime's user-facing status adds metadata
/// (trailers) around it; the core builds one for the calls it refuses itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireStatus {
    code: Code,
    message: String,
    details: Vec<u8>,
}

impl WireStatus {
    /// A status with the given code and message and no details.
    pub fn new(code: Code, message: impl Into<String>) -> WireStatus {
        WireStatus {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The same status with binary `details`.
    pub fn with_details(mut self, details: impl Into<Vec<u8>>) -> WireStatus {
        self.details = details.into();
        self
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message (may be empty).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The binary details (empty when there are none).
    pub fn details(&self) -> &[u8] {
        &self.details
    }
}

impl AsRef<WireStatus> for WireStatus {
    fn as_ref(&self) -> &WireStatus {
        self
    }
}

impl fmt::Display for WireStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}
