//! The standard services every server offers: health checking and server reflection, over
//! the gRPC face and over TCP, driven with the generated clients of `rpc_core::standard`.

use prost::Message;
use rpc_core::standard::health::health_check_response::ServingStatus;
use rpc_core::standard::health::health_client::blocking::HealthClient;
use rpc_core::standard::health::HealthCheckRequest;
use rpc_core::standard::reflection_v1::server_reflection_client::blocking::ServerReflectionClient;
use rpc_core::standard::reflection_v1::server_reflection_request::MessageRequest;
use rpc_core::standard::reflection_v1::server_reflection_response::MessageResponse;
use rpc_core::standard::reflection_v1::ServerReflectionRequest;
use rpc_core::{Client, Code, Server, TransportKind};
use rpc_tests::scenarios::TortureService;
use rpc_tests::testing::torture_server::TortureServer;

fn server() -> Server {
    Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("server starts")
}

fn connect(server: &Server, transport: TransportKind) -> Client {
    let addr = server
        .addr_for(transport)
        .expect("the server has a gRPC face");
    Client::builder()
        .transport(transport)
        .connect(&addr)
        .expect("client connects")
}

fn health(transport: TransportKind) {
    let server = server();
    let health = HealthClient::new(connect(&server, transport));
    for service in ["", "testing.Torture", "grpc.health.v1.Health"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let err = health
        .check(HealthCheckRequest {
            service: "no.Such".to_string(),
        })
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "testing.Torture".to_string(),
        })
        .unwrap()
        .into_inner();
    let first = watch.blocking_message().unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
}

fn reflection(transport: TransportKind) {
    let server = server();
    let reflection = ServerReflectionClient::new(connect(&server, transport));
    let mut call = reflection.server_reflection_info(()).unwrap();
    let mut ask = |request: MessageRequest| {
        call.send(&ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        })
        .unwrap();
        call.recv().unwrap().unwrap().message_response.unwrap()
    };

    let MessageResponse::ListServicesResponse(list) =
        ask(MessageRequest::ListServices(String::new()))
    else {
        panic!("not a service list");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "testing.Torture",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }

    for symbol in ["testing.Torture", "testing.Torture.Echo", "testing.Payload"] {
        let MessageResponse::FileDescriptorResponse(files) =
            ask(MessageRequest::FileContainingSymbol(symbol.to_string()))
        else {
            panic!("no file for {symbol}");
        };
        let first = prost_types::FileDescriptorProto::decode(&*files.file_descriptor_proto[0])
            .expect("a file descriptor");
        assert_eq!(first.name(), "testing.proto", "{symbol}");
        assert!(first.service.iter().any(|s| s.name() == "Torture"));
        assert!(first.message_type.iter().any(|m| m.name() == "Payload"));
    }
    let MessageResponse::FileDescriptorResponse(files) =
        ask(MessageRequest::FileByFilename("testing.proto".to_string()))
    else {
        panic!("no file by name");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    let MessageResponse::ErrorResponse(error) =
        ask(MessageRequest::FileContainingSymbol("no.Such".to_string()))
    else {
        panic!("an unknown symbol was found");
    };
    assert_eq!(error.error_code, Code::NotFound as i32);
    call.close_send();
    assert!(
        call.recv().unwrap().is_none(),
        "the answers end with the requests"
    );
}

#[test]
fn health_over_grpc() {
    health(TransportKind::Grpc);
}

#[test]
fn health_over_tcp() {
    health(TransportKind::Tcp);
}

#[test]
fn reflection_over_grpc() {
    reflection(TransportKind::Grpc);
}

#[test]
fn reflection_over_tcp() {
    reflection(TransportKind::Tcp);
}

/// A health watch open at shutdown is told NOT_SERVING and ends, instead of holding the
/// graceful shutdown up for its whole grace period.
fn watch_ends_at_shutdown(transport: TransportKind) {
    let server = server();
    let health = HealthClient::new(connect(&server, transport));
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .unwrap()
        .into_inner();
    let first = watch.blocking_message().unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    let t0 = std::time::Instant::now();
    let stopper = std::thread::spawn(move || server.shutdown());
    let next = watch.blocking_message().expect("the watch ends cleanly");
    assert_eq!(
        next.map(|n| n.status),
        Some(ServingStatus::NotServing as i32)
    );
    assert_eq!(watch.blocking_message().unwrap(), None);
    stopper.join().unwrap();
    // The grace period is 5 s; the watch must not have used it up.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn health_watch_ends_at_shutdown_over_grpc() {
    watch_ends_at_shutdown(TransportKind::Grpc);
}

#[test]
fn health_watch_ends_at_shutdown_over_tcp() {
    watch_ends_at_shutdown(TransportKind::Tcp);
}
