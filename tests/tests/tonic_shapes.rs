//! The client in tonic's shape: a generated async client connected with tonic's
//! `http://host:port` URI from inside a tokio runtime, its calls awaited under the proto's
//! names; `grpc://` reaching the gRPC face; the blocking client on the same connection.

use std::time::Duration;

use rpc_core::{Code, Server, TransportKind};
use rpc_tests::scenarios::{payload, with_watchdog, TortureService, RING};
use rpc_tests::testing::torture_client::{blocking, TortureClient};
use rpc_tests::testing::torture_server::TortureServer;
use rpc_tests::testing::FailRequest;

fn serve() -> Server {
    Server::builder()
        .ring(RING)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .serve("127.0.0.1:0", TransportKind::Tcp)
        .expect("a server starts")
}

#[test]
fn an_async_client_connects_with_a_tonic_uri_and_awaits_its_calls() {
    with_watchdog("tonic-shaped client", Duration::from_secs(60), || {
        let server = serve();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let uri = format!("http://{}", server.local_addr());
            let client = TortureClient::connect(uri).await.expect("connects");
            let req = payload(1, 100);
            let reply = client.echo(req.clone()).await.expect("echo");
            assert_eq!(reply.into_inner(), req);
            let mut copies = client
                .watch(payload(2, 10))
                .await
                .expect("watch")
                .into_inner();
            let mut n = 0;
            while let Some(copy) = copies.message().await.expect("a copy") {
                assert_eq!(copy, payload(2, 10));
                n += 1;
            }
            assert_eq!(n, 3);
            let refused = FailRequest {
                code: Code::NotFound as u32,
                message: "nope".into(),
            };
            let status = client.fail(refused).await.expect_err("a status");
            assert_eq!((status.code(), status.message()), (Code::NotFound, "nope"));

            // The same connection, blocking (off the runtime's threads).
            let sync = blocking::TortureClient::from(client.clone());
            let echoed = tokio::task::spawn_blocking(move || sync.echo(payload(3, 8)))
                .await
                .expect("the blocking task")
                .expect("echo");
            assert_eq!(echoed.into_inner(), payload(3, 8));

            // `grpc://` chooses standard gRPC: the server's face.
            let face = server.grpc_local_addr().expect("a face");
            let grpc = TortureClient::connect(format!("grpc://{face}"))
                .await
                .expect("connects to the face");
            assert_eq!(grpc.inner().transport_name(), "grpc");
            assert_eq!(
                grpc.echo(req.clone()).await.expect("echo").into_inner(),
                req
            );

            // What it cannot take, it says.
            let err = TortureClient::connect(format!("https://{}", server.local_addr()))
                .await
                .expect_err("https is not plain TCP");
            assert!(err.to_string().contains("grpc_tls"), "{err}");
        });
        server.shutdown();
    });
}
