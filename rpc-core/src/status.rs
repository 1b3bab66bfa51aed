//! [`Status`]: the outcome of a call, a gRPC status code plus a message, details and metadata,
//! carried on the wire in END frames (see `docs/PROTOCOL.md`).

use std::fmt;

use rpc_proto::WireStatus;

use crate::{Code, Error, MetadataMap};

/// The outcome of a failed call: a [`Code`], a human-readable message, optional binary
/// details (by convention a serialized `google.rpc.Status`) and metadata (sent as the call's
/// trailers). All of it crosses the wire.
///
/// One pointer wide: results and the runtime's hand-offs that may carry a status stay
/// small to move on the path where there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status(Box<Parts>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Parts {
    /// What the protocol core sends in an END: code, message, details.
    wire: WireStatus,
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
        Status::from(WireStatus::new(code, message))
    }

    /// A status with metadata (sent as the call's trailers), as tonic's constructor.
    pub fn with_metadata(code: Code, message: impl Into<String>, metadata: MetadataMap) -> Status {
        let mut status = Status::new(code, message);
        status.0.metadata = metadata;
        status
    }

    /// A status with binary `details` (sent as `grpc-status-details-bin`; by convention a
    /// serialized `google.rpc.Status`), as tonic's constructor: a `Vec<u8>`, tonic's `Bytes`
    /// or a slice.
    pub fn with_details(
        code: Code,
        message: impl Into<String>,
        details: impl Into<Vec<u8>>,
    ) -> Status {
        Status::from(WireStatus::new(code, message).with_details(details))
    }

    /// A status with details and metadata (see [`Status::with_details`],
    /// [`Status::with_metadata`]).
    pub fn with_details_and_metadata(
        code: Code,
        message: impl Into<String>,
        details: impl Into<Vec<u8>>,
        metadata: MetadataMap,
    ) -> Status {
        let mut status = Status::with_details(code, message, details);
        status.0.metadata = metadata;
        status
    }

    /// The metadata (a client sees the call's trailers here).
    pub fn metadata(&self) -> &MetadataMap {
        &self.0.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.0.metadata
    }

    /// The binary details (empty when there are none).
    pub fn details(&self) -> &[u8] {
        self.0.wire.details()
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.0.wire.code()
    }

    /// The message (may be empty).
    pub fn message(&self) -> &str {
        self.0.wire.message()
    }
}

impl AsRef<WireStatus> for Status {
    /// What the protocol core encodes of this status in an END.
    fn as_ref(&self) -> &WireStatus {
        &self.0.wire
    }
}

impl From<WireStatus> for Status {
    /// A status the protocol core produced (a call it refused), without metadata.
    fn from(wire: WireStatus) -> Status {
        Status(Box::new(Parts {
            wire,
            metadata: MetadataMap::new(),
        }))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.wire, f)
    }
}

impl std::error::Error for Status {}

impl From<Error> for Status {
    /// An error met while handling a call (say, metadata a handler could not set) ends the
    /// call INTERNAL with the error's text, so handlers can use `?` on it.
    fn from(err: Error) -> Status {
        Status::internal(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_code_and_message() {
        let s = Status::invalid_argument("division by zero");
        assert_eq!(s.to_string(), "INVALID_ARGUMENT: division by zero");
        assert_eq!(Status::new(Code::Internal, "").to_string(), "INTERNAL");
    }

    #[test]
    fn tonic_constructors_carry_details_and_metadata() {
        let details = bytes::Bytes::from_static(&[8, 1]);
        let s = Status::with_details(Code::NotFound, "no such key", details);
        assert_eq!(
            (s.code(), s.message(), s.details()),
            (Code::NotFound, "no such key", &[8u8, 1][..])
        );
        assert!(s.metadata().is_empty());
        let mut md = MetadataMap::new();
        md.insert("retry-after", crate::MetadataValue::from_static("5"));
        let s = Status::with_metadata(Code::Unavailable, "busy", md.clone());
        assert_eq!((s.details(), s.metadata()), (&[][..], &md));
        let s = Status::with_details_and_metadata(Code::Aborted, "", &[3u8][..], md.clone());
        assert_eq!(
            (s.code(), s.details(), s.metadata()),
            (Code::Aborted, &[3u8][..], &md)
        );
    }
}
