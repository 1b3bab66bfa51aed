//! The protocol core of rpc-core (protocol version 2, `docs/PROTOCOL.md`): framing, credits,
//! calls, windows, segmentation and reassembly, size limits and the memory a peer makes a
//! connection hold, as a state machine with no I/O, no threads and no clock of its own. The
//! runtime drives one [`Connection`] per connection from its completions; the tests drive a
//! client core and a server core against each other in memory.
//!
//! - [`Connection`]: one connection's state, both roles. Received frames go in through
//!   [`Connection::handle_frame`] (or [`Connection::on_frame`], when no server deadline is
//!   watched) and come out as [`Event`]s; outgoing frames go in through
//!   [`Connection::send`] and come out of [`Connection::poll_transmit`], written into send
//!   buffers the caller provides; time goes in through [`Connection::handle_timeout`], which
//!   [`Connection::poll_timeout`] says when to call.
//! - The call rules an application would otherwise keep beside the core, each opt-in:
//!   calls beyond the server's `max_calls` wait in order
//!   ([`Connection::queue_beyond_max_calls`]); a unary request split from its END is held
//!   until the half-close, and two or none end the call ([`Connection::set_one_request`]); a
//!   unary reply's headers and split message are held until its END
//!   ([`Connection::open_unary_call`]).
//! - [`frame`]: headers and HELLO, encoded and decoded; [`metadata`]: metadata blocks.
//! - [`MemoryBudget`] / [`ConnectionMemory`]: the bytes peers make the process hold, bounded
//!   per connection and in total.
//! - [`CreditPool`] / [`Grant`]: receive slots a server shares among its connections, and each
//!   connection's grant of them (shared credits, §22.4).
//! - [`Violation`]: every way a peer can break the protocol, one per row of the spec's table.
//!
//! Quick start: a client opens a call and sends a request; the server's core reports it.
//!
//! ```
//! use rpc_proto::{flags, Connection, Event, Hello, Kind, Outgoing, Payload, Role, HEADER_LEN};
//!
//! let hello = Hello {
//!     slot_count: 8,
//!     slot_size: 256,
//!     max_message_size: 4096,
//!     max_calls: 4,
//!     call_window: 1024,
//!     max_metadata_size: 1024,
//! };
//! let mut client: Connection<&str, Vec<u8>> = Connection::new(Role::Client, hello, hello, 256);
//! let mut server: Connection<(), Vec<u8>> = Connection::new(Role::Server, hello, hello, 256);
//!
//! // The payload is encoded at HEADER_LEN of a send buffer; the core writes the header.
//! let call = client.open_call("my call").unwrap();
//! let mut buf = vec![0; 256];
//! buf[HEADER_LEN..HEADER_LEN + 5].copy_from_slice(b"hello");
//! let request = Outgoing {
//!     kind: Kind::Message,
//!     flags: flags::END,
//!     code: 0,
//!     payload: Payload::InBuffer(buf, 5),
//! };
//! let (frame, len) = client.send(call, request, 7, 0).unwrap().expect("credits allow it");
//!
//! match server.on_frame(&frame[..len]).unwrap() {
//!     Event::Message { call: id, opened, body, end, .. } => {
//!         assert_eq!((id, opened, &body[..], end), (call, Some((7, 0)), &b"hello"[..], true));
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```

mod code;
pub mod conn;
pub mod credit_pool;
mod error;
pub mod extension;
pub mod frame;
mod inline_drop;
pub mod memory;
pub mod metadata;
#[cfg(test)]
mod pair;
mod status;
mod violation;

/// The fuzz harness: only in this crate's tests (which replay the committed corpus) and
/// under `cargo fuzz` (`--cfg fuzzing`, `make fuzz`); not part of the public API.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;

pub use code::Code;
pub use conn::{
    capped_call_time, status_block, whole_request_parts, Connection, Event, Expiry, HeldReply,
    Keepalive, Outgoing, Payload, Role, SendError, CALL_RECORD, RECORD_CHUNK,
};
pub use credit_pool::{CreditPool, Grant};
pub use error::Error;
pub use frame::{flags, Header, Hello, Kind, HEADER_LEN, HELLO_LEN};
pub use inline_drop::InlineDrop;
pub use memory::{ConnectionMemory, MemoryBudget, Reservation};
pub use status::WireStatus;
pub use violation::Violation;
