//! Client and server interceptors, over TCP and over the gRPC face: a server interceptor
//! refuses calls without a token before any handler runs, and hands the handler who the
//! caller is through the request's extensions (which a client cannot forge); a client
//! interceptor adds the token, and a client interceptor's error fails the call without
//! sending it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rpc_core::{Client, Code, Request, Server, Status, TransportKind};
use rpc_tests::scenarios::{payload, Caller, TortureService, RING};
use rpc_tests::testing::torture_client::blocking::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;

const TOKEN: &str = "Bearer let-me-in";

fn server(service: TortureService) -> Server {
    Server::builder()
        .ring(RING)
        .workers(2)
        .interceptor(|mut request: Request<()>| {
            if request.metadata().get("authorization") == Some(TOKEN) {
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
            metadata.insert("authorization", TOKEN).unwrap();
            // A forgery: the handler reads the caller from the extensions only.
            metadata.insert("x-caller", "a forger").unwrap();
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
        echoed.metadata().get_all("x-caller").collect::<Vec<_>>(),
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
