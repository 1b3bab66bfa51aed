//! The protocol core: framing, credits, request ids, segmentation and reassembly, size limits
//! and deadlines, as pure state machines with no I/O and no clock of their own (time is passed
//! in). The runtime drives them from completions; the tests drive two of them against each
//! other in memory.

pub mod conn;
pub mod frame;

pub use conn::{Body, Connection, Event, MessageHead};
pub use frame::{FrameKind, Header, Hello, HEADER_LEN};
pub mod v2;
