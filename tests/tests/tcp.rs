//! The end-to-end scenarios over TCP on loopback (run everywhere; the verbs suite runs the
//! same scenarios inside the Soft-RoCE VM).

use std::time::Duration;

use rpc_core::TransportKind;
use rpc_tests::scenarios::{self, connect, serve};

const T: TransportKind = TransportKind::Tcp;

#[test]
fn eight_threads_with_32_outstanding_calls_each_get_their_own_replies() {
    let server = serve("127.0.0.1:0", T);
    let client = connect(&server, T);
    scenarios::concurrent_calls(&client, 8, 32, 400);
    assert_eq!(client.inner().stats().errors, 0);
}

#[test]
fn message_sizes_round_trip_and_oversized_is_refused() {
    let server = serve("127.0.0.1:0", T);
    scenarios::message_sizes(&connect(&server, T));
}

#[test]
fn deadline_exceeded() {
    let server = serve("127.0.0.1:0", T);
    scenarios::deadline(&connect(&server, T));
}

#[test]
fn statuses_and_handler_panics() {
    let server = serve("127.0.0.1:0", T);
    scenarios::statuses(&connect(&server, T));
}

#[test]
fn server_stopped_mid_run_gives_unavailable() {
    let server = serve("127.0.0.1:0", T);
    let client = connect(&server, T);
    scenarios::server_stopped_mid_run(server, &client);
}

/// The hang of issue 7: blocking callers with a 1 ms timeout against a handler that takes
/// about as long. A watchdog fails the test instead of letting it hang.
#[test]
fn replies_racing_their_deadlines_never_hang() {
    scenarios::with_watchdog("deadline races over TCP", Duration::from_secs(120), || {
        let server = scenarios::serve_for_deadline_races("127.0.0.1:0", T);
        let client = connect(&server, T);
        let (ok, late) = scenarios::deadline_races(&client, 4, 3000);
        eprintln!("deadline races over TCP: {ok} ok, {late} deadline exceeded");
    });
}
