//! The protocol core: framing, credits, calls, windows, segmentation and reassembly, size
//! limits, as pure state machines with no I/O and no clock of their own. The runtime drives
//! them from completions; the tests drive two of them against each other in memory.
//! `docs/PROTOCOL.md` is the normative description.

pub mod v2;

pub use v2::{Connection, Event, Header, Hello, Kind, Role, Violation, HEADER_LEN};
