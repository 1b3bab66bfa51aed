//! `rpc-bench inproc`: echo round trips inside one process, for instruction counting.
//!
//! An `ours` echo server listens on `mem:bench` (rpc-core's in-process transport: slot
//! rings in memory, completions through a channel, no system calls on the data path except
//! the wake-ups of sleeping threads), its handler inline on the poller; a client in the same
//! process makes `calls` blocking echo calls and checks every reply.
//!
//! Both pollers are given an idle spin of 0, so they sleep as soon as their queue is empty:
//! with the default 1 ms of busy-polling, the instructions spent spinning would swamp the
//! ones spent working and vary from run to run. The calls carry no timeout (no deadline
//! bookkeeping, no timer wake-ups), and nothing is printed per call. Under
//! `valgrind --tool=callgrind`, `(I(N2) - I(N1)) / (N2 - N1)` over two runs then is the
//! cost of one round trip: building the request, encoding, both protocol cores, the memory
//! transport, dispatch, the handler, the reply and waking the caller.

use std::time::Duration;

use rpc_core::{Client, TransportKind};

use crate::echo::echo_client::EchoClient;
use crate::echo::EchoRequest;
use crate::payload::Payload;

/// The in-process address used.
pub const ADDR: &str = "mem:bench";

/// Makes `calls` echo calls of `size` bytes; returns the number of failed or mismatched
/// calls, or an error if the server or client could not be set up.
pub fn run(calls: u64, size: usize) -> Result<u64, String> {
    let server = crate::ours::serve_with(
        rpc_core::Server::builder().idle_spin(Duration::ZERO),
        ADDR,
        TransportKind::Tcp, // not used: a `mem:` address always means the memory transport
    )
    .map_err(|e| format!("cannot serve on {ADDR}: {e}"))?;
    let client = Client::builder()
        .idle_spin(Duration::ZERO)
        .spin(Duration::ZERO)
        .connect(ADDR)
        .map_err(|e| format!("cannot connect to {ADDR}: {e}"))?;
    let echo = EchoClient::new(client);
    let payload = Payload::new(size);
    let mut failed = 0u64;
    for seq in 0..calls {
        let request = EchoRequest {
            payload: payload.request(seq),
        };
        match echo.echo(request) {
            Ok(reply) if payload.matches(seq, &reply.payload) => {}
            Ok(_) => failed += 1,
            Err(status) => {
                if failed == 0 {
                    eprintln!("rpc-bench inproc: call {seq} failed: {status}");
                }
                failed += 1;
            }
        }
    }
    drop(echo);
    server.shutdown();
    Ok(failed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_in_process() {
        assert_eq!(super::run(50, 100), Ok(0));
    }
}
