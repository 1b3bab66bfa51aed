//! The gRPC face (standard gRPC over HTTP/2) and the gRPC client transport, against each
//! other: the scenarios the TCP and verbs suites run, here over HTTP/2.

use rpc_core::{Client, Server, TransportKind};
use rpc_tests::scenarios::{self, TortureService, RING};
use rpc_tests::testing::torture_client::blocking::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;

/// A Torture server with its gRPC face, and a client of the face.
fn setup() -> (Server, TortureClient) {
    let server = Server::builder()
        .ring(RING)
        .workers(4)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("server starts");
    let addr = server.grpc_local_addr().expect("a gRPC face").to_string();
    let client = Client::builder()
        .transport(TransportKind::Grpc)
        .ring(RING)
        .connect(&addr)
        .expect("client connects over gRPC");
    assert_eq!(client.transport_name(), "grpc");
    (server, TortureClient::new(client))
}

#[test]
fn concurrent_calls_over_grpc_get_their_own_replies() {
    let (_server, client) = setup();
    scenarios::concurrent_calls(&client, 4, 8, 200);
}

#[test]
fn message_sizes_over_grpc_and_oversized_is_refused() {
    let (_server, client) = setup();
    scenarios::message_sizes(&client);
}

#[test]
fn deadline_over_grpc() {
    let (_server, client) = setup();
    scenarios::deadline(&client);
}

#[test]
fn statuses_and_panics_over_grpc() {
    let (_server, client) = setup();
    scenarios::statuses(&client);
}

const TLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tls");

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{TLS_DIR}/{name}")).expect("test TLS material")
}

#[test]
fn tls_face_serves_a_client_that_trusts_its_ca_and_refuses_plaintext() {
    let server = Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .grpc_tls(&read("server.pem"), &read("server.key"))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("server starts");
    let addr = server.grpc_local_addr().unwrap().to_string();
    let client = TortureClient::new(
        Client::builder()
            .transport(TransportKind::Grpc)
            .grpc_tls(&read("ca.pem"), None)
            .connect(&addr)
            .expect("a TLS client connects"),
    );
    let req = scenarios::payload(9, 300);
    assert_eq!(client.echo(req.clone()).unwrap().into_inner(), req);
    scenarios::statuses(&client);

    // A plaintext client gets no HTTP/2 from a TLS port (its connect may succeed: HTTP/2
    // needs no answer before the first request), so its calls fail.
    let plain = Client::builder()
        .transport(TransportKind::Grpc)
        .timeout(std::time::Duration::from_secs(10))
        .connect(&addr);
    if let Ok(plain) = plain {
        let err = TortureClient::new(plain).echo(req).unwrap_err();
        assert_eq!(err.code(), rpc_core::Code::Unavailable, "{err}");
    }
}

#[test]
fn tls_face_with_a_bad_key_does_not_start() {
    let err = Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .grpc_tls(&read("server.pem"), b"not a key")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .err()
        .expect("a bad key is refused");
    assert!(err.to_string().contains("TLS"), "{err}");
}
