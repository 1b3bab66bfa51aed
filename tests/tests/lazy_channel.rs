//! tonic's `Endpoint::connect_lazy`: a channel made before its server is up connects at its
//! first call; a call that cannot connect fails with UNAVAILABLE and the next one tries again;
//! concurrent first calls end up on one connection; `http://` to an HTTP/2 server is called
//! over standard gRPC, as an eager connect's is.

use std::net::TcpListener;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rpc_core::transport::Endpoint;
use rpc_core::{Code, Server, TransportKind};
use rpc_tests::scenarios::{payload, with_watchdog, TortureService, RING};
use rpc_tests::testing::torture_client::{blocking, TortureClient};
use rpc_tests::testing::torture_server::TortureServer;

fn serve(addr: &str) -> Server {
    Server::builder()
        .ring(RING)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .start(addr, TransportKind::Tcp)
        .expect("a server starts")
}

/// An address nobody listens on (a port the system just handed out and took back).
fn unused_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("its address").to_string()
}

#[test]
fn a_lazy_channel_connects_at_its_first_call_and_again_after_a_failed_one() {
    with_watchdog("lazy channel", Duration::from_secs(60), || {
        let addr = unused_addr();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("an endpoint")
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        assert_eq!(channel.transport_name(), "unconnected");
        let mut client = TortureClient::new(channel.clone());

        // No server yet: the call fails, and says why.
        let status = runtime
            .block_on(client.echo(payload(1, 10)))
            .expect_err("nobody listens");
        assert_eq!(status.code(), Code::Unavailable, "{status}");
        assert!(status.message().contains("not connected"), "{status}");
        let status = blocking::TortureClient::new(channel.clone())
            .echo(payload(1, 10))
            .expect_err("nobody listens");
        assert_eq!(status.code(), Code::Unavailable, "{status}");

        // The server comes up: the next calls connect, async and blocking alike.
        let server = serve(&addr);
        let reply = runtime
            .block_on(client.echo(payload(2, 100)))
            .expect("the first call after the server came up");
        assert_eq!(reply.into_inner(), payload(2, 100));
        assert_eq!(channel.transport_name(), "tcp");
        let sync = blocking::TortureClient::new(channel.clone());
        assert_eq!(
            sync.echo(payload(3, 100))
                .expect("blocking echo")
                .into_inner(),
            payload(3, 100)
        );
        // The blocking wait of an async call's future, on a lazy channel not yet connected.
        let fresh = Endpoint::from_shared(format!("http://{addr}"))
            .expect("an endpoint")
            .connect_lazy();
        let reply = TortureClient::new(fresh.clone())
            .echo(payload(4, 10))
            .wait()
            .expect("waited for");
        assert_eq!(reply.into_inner(), payload(4, 10));
        assert_eq!(server.connections(), 2, "one connection per channel");
    });
}

#[test]
fn concurrent_first_calls_of_a_lazy_channel_end_on_one_connection() {
    with_watchdog("lazy channel race", Duration::from_secs(60), || {
        let server = serve("127.0.0.1:0");
        let channel = Endpoint::from_shared(format!("http://{}", server.local_addr()))
            .expect("an endpoint")
            .connect_lazy();
        const CALLERS: usize = 8;
        let start = Arc::new(Barrier::new(CALLERS));
        let callers: Vec<_> = (0..CALLERS)
            .map(|i| {
                let (client, start) =
                    (blocking::TortureClient::new(channel.clone()), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    client.echo(payload(i as u64, 64)).map(|r| r.into_inner())
                })
            })
            .collect();
        for (i, caller) in callers.into_iter().enumerate() {
            let reply = caller.join().expect("a caller").expect("its echo");
            assert_eq!(reply, payload(i as u64, 64));
        }
        // Racing connects that lost are closed: one connection stays.
        let give_up = Instant::now() + Duration::from_secs(10);
        while server.connections() > 1 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(server.connections(), 1);
        let sync = blocking::TortureClient::new(channel);
        assert_eq!(
            sync.echo(payload(99, 8)).expect("echo").into_inner(),
            payload(99, 8)
        );
    });
}

#[test]
fn a_lazy_channel_to_an_http2_server_calls_it_over_standard_grpc() {
    with_watchdog("lazy channel to gRPC", Duration::from_secs(60), || {
        let server = serve("127.0.0.1:0");
        let face = server.grpc_local_addr().expect("a gRPC face");
        let channel = Endpoint::from_shared(format!("http://{face}"))
            .expect("an endpoint")
            .connect_lazy();
        let sync = blocking::TortureClient::new(channel.clone());
        assert_eq!(
            sync.echo(payload(5, 100)).expect("echo").into_inner(),
            payload(5, 100)
        );
        assert_eq!(channel.transport_name(), "grpc");
    });
}
