//! Client and server interceptors, over TCP and over the gRPC face: a server interceptor
//! refuses calls without a token before any handler runs, and hands the handler who the
//! caller is through the request's extensions (which a client cannot forge); a client
//! interceptor adds the token, and a client interceptor's error fails the call without
//! sending it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rpc_core::standard::health::health_client::blocking::HealthClient;
use rpc_core::standard::health::HealthCheckRequest;
use rpc_core::{Client, Code, MetadataValue, Request, Response, Server, Status, TransportKind};
use rpc_tests::scenarios::{payload, Caller, TortureService, RING};
use rpc_tests::testing::gate_client::blocking::GateClient;
use rpc_tests::testing::gate_server::{Gate, GateServer};
use rpc_tests::testing::torture_client::blocking::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;
use rpc_tests::testing::Ticket;

const TOKEN: &str = "Bearer let-me-in";

fn server(service: TortureService) -> Server {
    Server::builder()
        .ring(RING)
        .workers(2)
        .interceptor(|mut request: Request<()>| {
            if request
                .metadata()
                .get("authorization")
                .is_some_and(|t| t == TOKEN)
            {
                request
                    .extensions_mut()
                    .insert(Caller("the token holder".into()));
                Ok(request)
            } else {
                Err(Status::unauthenticated("a valid token is required"))
            }
        })
        .add_service(TortureServer::new(service))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("server starts")
}

fn client(server: &Server, transport: TransportKind, with_token: bool) -> TortureClient {
    let addr = server
        .addr_for(transport)
        .expect("the server has a gRPC face");
    let mut builder = Client::builder().transport(transport).ring(RING);
    if with_token {
        builder = builder.interceptor(|mut request: Request<()>| {
            let metadata = request.metadata_mut();
            metadata.insert("authorization", MetadataValue::from_static(TOKEN));
            // A forgery: the handler reads the caller from the extensions only.
            metadata.insert("x-caller", MetadataValue::from_static("a forger"));
            Ok(request)
        });
    }
    TortureClient::new(builder.connect(&addr).expect("client connects"))
}

fn check(transport: TransportKind) {
    let service = TortureService::default();
    let handled = Arc::clone(&service.calls);
    let server = server(service);

    let anonymous = client(&server, transport, false);
    let err = anonymous.echo(payload(1, 8)).unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let err = anonymous.watch(payload(1, 8)).unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    assert_eq!(
        handled.load(Ordering::SeqCst),
        0,
        "a refused call reached its handler"
    );

    let trusted = client(&server, transport, true);
    let req = payload(2, 64);
    let echoed = trusted.echo(req.clone()).unwrap();
    assert_eq!(
        echoed
            .metadata()
            .get_all("x-caller")
            .iter()
            .collect::<Vec<_>>(),
        [&b"the token holder"[..]],
        "the interceptor's extension reached the handler"
    );
    assert_eq!(echoed.into_inner(), req);
    let copies = trusted
        .watch(req.clone())
        .unwrap()
        .into_inner()
        .into_blocking_iter()
        .count();
    assert_eq!(copies, 3);
    assert_eq!(handled.load(Ordering::SeqCst), 1);

    let addr = server
        .addr_for(transport)
        .expect("the server has a gRPC face");
    let refusing = TortureClient::new(
        Client::builder()
            .transport(transport)
            .interceptor(|_: Request<()>| Err(Status::permission_denied("not from this client")))
            .connect(&addr)
            .unwrap(),
    );
    let err = refusing.echo(payload(3, 8)).unwrap_err();
    assert_eq!(err, Status::permission_denied("not from this client"));
    let err = futures::executor::block_on(
        rpc_tests::testing::torture_client::TortureClient::from(refusing.clone())
            .echo(payload(3, 8)),
    )
    .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "an intercepted call went out"
    );
}

#[test]
fn interceptors_over_tcp() {
    check(TransportKind::Tcp);
}

#[test]
fn interceptors_over_grpc() {
    check(TransportKind::Grpc);
}

/// The server-wide interceptor guards the application's services, not health checking:
/// a token check does not turn health probes away, unless the server asks for that.
#[test]
fn health_checks_pass_the_server_interceptor_unless_asked() {
    for intercept_standard in [false, true] {
        let server = Server::builder()
            .ring(RING)
            .interceptor(|request: Request<()>| {
                if request
                    .metadata()
                    .get("authorization")
                    .is_some_and(|t| t == TOKEN)
                {
                    Ok(request)
                } else {
                    Err(Status::unauthenticated("a valid token is required"))
                }
            })
            .intercept_standard_services(intercept_standard)
            .add_service(TortureServer::new(TortureService::default()))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("server starts");
        let connection = Client::builder()
            .transport(TransportKind::Tcp)
            .connect(server.local_addr())
            .unwrap();
        let health = HealthClient::new(connection.clone());
        let probe = health.check(HealthCheckRequest::default());
        match intercept_standard {
            false => assert!(probe.is_ok(), "{probe:?}"),
            true => assert_eq!(probe.unwrap_err().code(), Code::Unauthenticated),
        }
        let err = TortureClient::new(connection)
            .echo(payload(1, 8))
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    }
}

/// `FooServer::with_interceptor` (tonic's shape) guards that service only: another service
/// of the same server is called without the token, and the guarded one's handler gets what
/// the interceptor put into the extensions.
#[test]
fn a_service_interceptor_guards_its_service_only() {
    let service = TortureService::default();
    let handled = Arc::clone(&service.calls);
    let server = Server::builder()
        .ring(RING)
        .add_service(TortureServer::with_interceptor(
            service,
            |mut request: Request<()>| {
                if !request
                    .metadata()
                    .get("authorization")
                    .is_some_and(|t| t == TOKEN)
                {
                    return Err(Status::unauthenticated("a valid token is required"));
                }
                request
                    .extensions_mut()
                    .insert(Caller("the token holder".into()));
                Ok(request)
            },
        ))
        .add_service(GateServer::new(OpenGate))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("server starts");
    for transport in [TransportKind::Tcp, TransportKind::Grpc] {
        let anonymous = client(&server, transport, false);
        let err = anonymous.echo(payload(1, 8)).unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err}");
        let gate = GateClient::new(anonymous.inner().clone());
        assert_eq!(
            gate.open(Ticket { id: 7 })
                .expect("not guarded")
                .into_inner()
                .id,
            7
        );
        let echoed = client(&server, transport, true)
            .echo(payload(2, 8))
            .expect("with the token");
        assert_eq!(
            echoed.metadata().get("x-caller").unwrap(),
            "the token holder"
        );
    }
    assert_eq!(
        handled.load(Ordering::SeqCst),
        2,
        "refused calls reached the handler"
    );
}

/// A service beside the guarded one: answers every ticket at once.
struct OpenGate;

impl Gate for OpenGate {
    async fn hold(&self, request: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    async fn open(&self, request: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    async fn relay(&self, _: Request<Ticket>) -> Result<Response<Ticket>, Status> {
        Err(Status::unimplemented("no other server"))
    }
}
