//! [`Status`]: the outcome of a call, a gRPC status code plus a message, details and metadata,
//! carried on the wire in END frames (see `docs/PROTOCOL.md`).

use std::fmt;

use crate::MetadataMap;

/// gRPC status codes, with the same numbers as gRPC so statuses map one to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The operation was cancelled, typically by the caller.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client specified an invalid argument (also: an undecodable request).
    InvalidArgument = 3,
    /// The deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// Some requested entity was not found.
    NotFound = 5,
    /// The entity that a client attempted to create already exists.
    AlreadyExists = 6,
    /// The caller does not have permission to execute the operation.
    PermissionDenied = 7,
    /// Some resource has been exhausted (also: a message above the size limit).
    ResourceExhausted = 8,
    /// The system is not in a state required for the operation's execution.
    FailedPrecondition = 9,
    /// The operation was aborted.
    Aborted = 10,
    /// The operation was attempted past the valid range.
    OutOfRange = 11,
    /// The method or service is not implemented or not supported.
    Unimplemented = 12,
    /// An internal invariant was broken (also: a handler panicked).
    Internal = 13,
    /// The service is currently unavailable (also: the connection was lost).
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request does not have valid authentication credentials.
    Unauthenticated = 16,
}

impl Code {
    /// The code for a wire value; values outside gRPC's range map to [`Code::Unknown`].
    pub fn from_u32(value: u32) -> Code {
        use Code::*;
        const ALL: [Code; 17] = [
            Ok,
            Cancelled,
            Unknown,
            InvalidArgument,
            DeadlineExceeded,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            ResourceExhausted,
            FailedPrecondition,
            Aborted,
            OutOfRange,
            Unimplemented,
            Internal,
            Unavailable,
            DataLoss,
            Unauthenticated,
        ];
        ALL.get(value as usize).copied().unwrap_or(Unknown)
    }

    /// The canonical upper-case name, as gRPC prints it (`INVALID_ARGUMENT`).
    pub fn name(self) -> &'static str {
        use Code::*;
        match self {
            Ok => "OK",
            Cancelled => "CANCELLED",
            Unknown => "UNKNOWN",
            InvalidArgument => "INVALID_ARGUMENT",
            DeadlineExceeded => "DEADLINE_EXCEEDED",
            NotFound => "NOT_FOUND",
            AlreadyExists => "ALREADY_EXISTS",
            PermissionDenied => "PERMISSION_DENIED",
            ResourceExhausted => "RESOURCE_EXHAUSTED",
            FailedPrecondition => "FAILED_PRECONDITION",
            Aborted => "ABORTED",
            OutOfRange => "OUT_OF_RANGE",
            Unimplemented => "UNIMPLEMENTED",
            Internal => "INTERNAL",
            Unavailable => "UNAVAILABLE",
            DataLoss => "DATA_LOSS",
            Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of a failed call: a [`Code`], a human-readable message, optional binary
/// details (by convention a serialized `google.rpc.Status`) and metadata (sent as the call's
/// trailers). All of it crosses the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    message: String,
    details: Vec<u8>,
    metadata: MetadataMap,
}

macro_rules! status_constructors {
    ($($(#[$doc:meta])* $name:ident => $code:ident,)*) => {
        impl Status {
            $(
                $(#[$doc])*
                pub fn $name(message: impl Into<String>) -> Status {
                    Status::new(Code::$code, message)
                }
            )*
        }
    };
}

status_constructors! {
    /// A [`Code::Cancelled`] status.
    cancelled => Cancelled,
    /// A [`Code::Unknown`] status.
    unknown => Unknown,
    /// A [`Code::InvalidArgument`] status.
    invalid_argument => InvalidArgument,
    /// A [`Code::DeadlineExceeded`] status.
    deadline_exceeded => DeadlineExceeded,
    /// A [`Code::NotFound`] status.
    not_found => NotFound,
    /// A [`Code::AlreadyExists`] status.
    already_exists => AlreadyExists,
    /// A [`Code::PermissionDenied`] status.
    permission_denied => PermissionDenied,
    /// A [`Code::ResourceExhausted`] status.
    resource_exhausted => ResourceExhausted,
    /// A [`Code::FailedPrecondition`] status.
    failed_precondition => FailedPrecondition,
    /// A [`Code::Aborted`] status.
    aborted => Aborted,
    /// A [`Code::OutOfRange`] status.
    out_of_range => OutOfRange,
    /// A [`Code::Unimplemented`] status.
    unimplemented => Unimplemented,
    /// A [`Code::Internal`] status.
    internal => Internal,
    /// A [`Code::Unavailable`] status.
    unavailable => Unavailable,
    /// A [`Code::DataLoss`] status.
    data_loss => DataLoss,
    /// A [`Code::Unauthenticated`] status.
    unauthenticated => Unauthenticated,
}

impl Status {
    /// A status with the given code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
            details: Vec::new(),
            metadata: MetadataMap::new(),
        }
    }

    /// The same status with `metadata` (sent as trailers).
    pub fn with_metadata(mut self, metadata: MetadataMap) -> Status {
        self.metadata = metadata;
        self
    }

    /// The metadata (a client sees the call's trailers here).
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// The same status with binary `details` (sent as `grpc-status-details-bin`).
    pub fn with_details(mut self, details: impl Into<Vec<u8>>) -> Status {
        self.details = details.into();
        self
    }

    /// The binary details (empty when there are none).
    pub fn details(&self) -> &[u8] {
        &self.details
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message (may be empty).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_value() {
        for v in 0..=16u32 {
            assert_eq!(Code::from_u32(v) as u32, v);
        }
        assert_eq!(Code::from_u32(17), Code::Unknown);
        assert_eq!(Code::from_u32(u32::MAX), Code::Unknown);
    }

    #[test]
    fn display_names_code_and_message() {
        let s = Status::invalid_argument("division by zero");
        assert_eq!(s.to_string(), "INVALID_ARGUMENT: division by zero");
        assert_eq!(Status::new(Code::Internal, "").to_string(), "INTERNAL");
    }
}
