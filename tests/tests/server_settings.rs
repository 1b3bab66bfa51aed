//! tonic's server settings: `timeout` (a limit on every call, over this framework's protocol
//! and the gRPC face alike), `concurrency_limit_per_connection` (calls beyond it wait for
//! earlier ones) and `add_optional_service`.

use std::time::{Duration, Instant};

use rpc_core::{Code, Server, ServerBuilder, TransportKind};
use rpc_tests::scenarios::{payload, with_watchdog, TortureService, RING};
use rpc_tests::testing::torture_client::blocking::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;
use rpc_tests::testing::SleepRequest;

fn serve(builder: ServerBuilder) -> Server {
    builder
        .ring(RING)
        .add_service(TortureServer::new(TortureService::default()))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("a server starts")
}

fn sleep_for(millis: u32) -> SleepRequest {
    SleepRequest { millis, micros: 0 }
}

#[test]
fn a_server_timeout_ends_calls_that_run_longer_on_both_faces() {
    with_watchdog("server timeout", Duration::from_secs(60), || {
        // A limit far above the quick call's 5 ms: a loaded machine may stall the handler
        // for a while, and a reply past the limit is DEADLINE_EXCEEDED however late.
        let server = serve(Server::builder().timeout(Duration::from_millis(1_000)));
        for scheme in ["tcp", "grpc"] {
            let client = TortureClient::connect(&format!("{scheme}://{}", server.local_addr()))
                .expect("connects");
            // No deadline of the client's: only the server's limit can end it so.
            let status = client
                .sleep(sleep_for(5_000))
                .expect_err("ended by the server");
            assert_eq!(status.code(), Code::DeadlineExceeded, "{scheme}: {status}");
            client.sleep(sleep_for(5)).expect("a call within the limit");
            // A client's sooner deadline still ends a call first.
            let mut soon = rpc_core::Request::new(sleep_for(5_000));
            soon.set_timeout(Duration::from_millis(20));
            let status = client.sleep(soon).expect_err("the client's deadline");
            assert_eq!(status.code(), Code::DeadlineExceeded, "{scheme}: {status}");
        }
    });
}

#[test]
fn calls_beyond_the_concurrency_limit_wait_for_earlier_ones() {
    with_watchdog("concurrency limit", Duration::from_secs(60), || {
        let server = serve(Server::builder().concurrency_limit_per_connection(1));
        for scheme in ["tcp", "grpc"] {
            let client = TortureClient::connect(&format!("{scheme}://{}", server.local_addr()))
                .expect("connects");
            // An HTTP/2 client learns the limit from the server's SETTINGS: calls sent before
            // those arrive may be refused (as by any HTTP/2 server), so one call goes first.
            client.sleep(sleep_for(1)).expect("a first call");
            let started = Instant::now();
            let calls: Vec<_> = (0..3)
                .map(|_| {
                    let client = client.clone();
                    std::thread::spawn(move || client.sleep(sleep_for(150)))
                })
                .collect();
            for call in calls {
                call.join()
                    .expect("a caller")
                    .expect("each call runs, in turn");
            }
            // One at a time: three calls of 150 ms cannot end sooner than 450 ms.
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(450), "{scheme}: {took:?}");
        }
    });
}

#[test]
fn an_optional_service_is_served_only_when_given() {
    with_watchdog("optional service", Duration::from_secs(60), || {
        let none: Option<TortureServer<TortureService>> = None;
        let without = Server::builder()
            .ring(RING)
            .add_optional_service(none)
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        let client =
            TortureClient::connect(&format!("tcp://{}", without.local_addr())).expect("connects");
        let status = client.echo(payload(1, 8)).expect_err("no such service");
        assert_eq!(status.code(), Code::Unimplemented, "{status}");

        let with = Server::builder()
            .ring(RING)
            .add_optional_service(Some(TortureServer::new(TortureService::default())))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        let client =
            TortureClient::connect(&format!("tcp://{}", with.local_addr())).expect("connects");
        assert_eq!(
            client.echo(payload(2, 8)).expect("echo").into_inner(),
            payload(2, 8)
        );
    });
}
