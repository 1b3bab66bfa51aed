//! The gRPC face (standard gRPC over HTTP/2) and the gRPC client transport, against each
//! other: the scenarios the TCP and verbs suites run, here over HTTP/2.

use rpc_core::{Client, Server, TransportKind};
use rpc_tests::scenarios::{self, TortureService, RING};
use rpc_tests::testing::torture_client::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;

/// A Torture server with its gRPC face, and a client of the face.
fn setup() -> (Server, TortureClient) {
    let server = Server::builder()
        .ring(RING)
        .workers(4)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .serve("127.0.0.1:0", TransportKind::Tcp)
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
