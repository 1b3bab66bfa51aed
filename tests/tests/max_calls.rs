//! Calls beyond the server's `max_calls` wait in the client's protocol core, in order, and
//! start as calls end: the server never has more open than it announced, every call ends, and
//! a call whose deadline passes while it waits ends DEADLINE_EXCEEDED without reaching the
//! server. Over TCP, each under a watchdog.

use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use futures::future;
use rpc_core::{Client, Code, Request, RingConfig, Server, TransportKind};
use rpc_tests::race::{Census, RaceService};
use rpc_tests::scenarios::with_watchdog;
use rpc_tests::testing::race_client::blocking::RaceClient;
use rpc_tests::testing::race_server::RaceServer;
use rpc_tests::testing::SleepRequest;

const T: TransportKind = TransportKind::Tcp;

fn serve(census: &Arc<Census>, max_calls: u32) -> Server {
    Server::builder()
        .ring(RingConfig {
            max_calls,
            ..RingConfig::DEFAULT
        })
        .workers(2)
        .add_service(RaceServer::new(RaceService::new(census)))
        .start("127.0.0.1:0", T)
        .expect("a server starts")
}

fn connect(server: &Server) -> RaceClient {
    let client = Client::builder()
        .transport(T)
        .connect(server.local_addr())
        .expect("connects");
    RaceClient::new(client)
}

fn nap(millis: u32) -> SleepRequest {
    SleepRequest { millis, micros: 0 }
}

#[test]
fn calls_beyond_max_calls_wait_and_all_complete() {
    with_watchdog(
        "calls_beyond_max_calls_wait_and_all_complete",
        Duration::from_secs(60),
        || {
            let census = Census::new();
            let server = serve(&census, 2);
            let client = connect(&server);
            // Twelve at once against a server that takes two: ten wait in the client.
            let calls = (0..12).map(|_| {
                rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(nap(20))
            });
            for result in block_on(future::join_all(calls)) {
                result.expect("every call completes");
            }
            assert_eq!(census.started(), 12);
            assert!(
                census.peak() <= 2,
                "the server had {} calls open at once, beyond its max_calls of 2",
                census.peak()
            );
        },
    );
}

#[test]
fn a_call_waiting_for_max_calls_expires_without_reaching_the_server() {
    with_watchdog(
        "a_call_waiting_for_max_calls_expires_without_reaching_the_server",
        Duration::from_secs(60),
        || {
            let census = Census::new();
            let server = serve(&census, 1);
            let client = connect(&server);
            let long =
                rpc_tests::testing::race_client::RaceClient::from(client.clone()).nap(nap(1_000));
            // The first call reaches the server and takes its one place.
            while census.started() < 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut waiting = Request::new(nap(0));
            waiting.set_timeout(Duration::from_millis(100));
            let status = client
                .nap(waiting)
                .expect_err("the waiting call cannot start within its deadline");
            assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
            assert_eq!(
                census.started(),
                1,
                "the expired call never reached the server"
            );
            block_on(long).expect("the first call completes");
            // The place is free again: a new call starts at once.
            client.nap(nap(0)).expect("a later call runs");
            assert_eq!(census.started(), 2);
        },
    );
}
