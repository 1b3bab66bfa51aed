//! The protocol core, [`rpc_proto`]: framing, credits, calls, windows, segmentation and
//! reassembly, size limits and memory accounting, as a state machine with no I/O and no clock
//! of its own. The runtime drives it from completions. `docs/PROTOCOL.md` is the normative
//! description. Re-exported here (and as `v2`, the protocol version it speaks) for the tests
//! and tools that drive the core directly.

pub use rpc_proto::*;

/// Protocol version 2, the one [`rpc_proto`] speaks.
pub mod v2 {
    pub use rpc_proto::*;
}
