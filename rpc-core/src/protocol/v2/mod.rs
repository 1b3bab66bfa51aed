//! Protocol version 2 (`docs/PROTOCOL.md`): calls as streams of messages with metadata,
//! half-close, status and trailers; CANCEL; per-call windows on top of connection credits;
//! PING; GOODBYE. Pure state machines without I/O or a clock.

pub mod conn;
pub mod frame;
pub mod memory;
pub mod metadata;
mod violation;

/// The fuzz harness: only in this crate's tests (which replay the committed corpus) and
/// under `cargo fuzz` (`--cfg fuzzing`, `make fuzz`); not part of the public API.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;

pub use conn::{Connection, Event, Outgoing, Payload, Role, SendError, CALL_RECORD};
pub use frame::{flags, Header, Hello, Kind, HEADER_LEN, HELLO_LEN};
pub use memory::{ConnectionMemory, MemoryBudget, Reservation};
pub use violation::Violation;
