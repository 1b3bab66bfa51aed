//! The client in tonic's shape: a generated async client connected with tonic's
//! `http://host:port` URI from inside a tokio runtime, its calls awaited under the proto's
//! names; `grpc://` reaching the gRPC face, and `http://` too (an HTTP/2 server is called
//! over standard gRPC); the blocking client on the same connection. The server in tonic's
//! shape: `serve` and `serve_with_shutdown`.

use std::time::Duration;

use rpc_core::{Code, Server, TransportKind};
use rpc_tests::scenarios::{payload, with_watchdog, Caller, TortureService, RING};
use rpc_tests::testing::torture_client::{blocking, TortureClient};
use rpc_tests::testing::torture_server::TortureServer;
use rpc_tests::testing::FailRequest;

fn serve() -> Server {
    Server::builder()
        .ring(RING)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("a server starts")
}

/// The application's runtime.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn an_async_client_connects_with_a_tonic_uri_and_awaits_its_calls() {
    with_watchdog("tonic-shaped client", Duration::from_secs(60), || {
        let server = serve();
        let runtime = runtime();
        runtime.block_on(async {
            let uri = format!("http://{}", server.local_addr());
            let mut client = TortureClient::connect(uri).await.expect("connects");
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
            let mut grpc = TortureClient::connect(format!("grpc://{face}"))
                .await
                .expect("connects to the face");
            assert_eq!(grpc.inner().transport_name(), "grpc");
            assert_eq!(
                grpc.echo(req.clone()).await.expect("echo").into_inner(),
                req
            );

            // `http://` to an HTTP/2 server (here the face; a tonic server alike): our HELLO
            // is answered with its SETTINGS, and the client calls it over standard gRPC.
            let mut fallen_back = TortureClient::connect(format!("http://{face}"))
                .await
                .expect("connects to the face");
            assert_eq!(fallen_back.inner().transport_name(), "grpc");
            assert_eq!(
                fallen_back
                    .echo(req.clone())
                    .await
                    .expect("echo")
                    .into_inner(),
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

/// The server in tonic's shape: `serve_with_shutdown(addr, signal)` spawned on tokio serves
/// until the signal, then stops gracefully and completes; a dropped `serve` future stops
/// its server too.
#[test]
fn serve_and_serve_with_shutdown_run_until_their_end() {
    with_watchdog("tonic-shaped server", Duration::from_secs(60), || {
        let runtime = runtime();
        runtime.block_on(async {
            let addr = free_port();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let serving = tokio::spawn(
                Server::builder()
                    .add_service(TortureServer::new(TortureService::default()))
                    .serve_with_shutdown(addr, async {
                        let _ = stopped.await;
                    }),
            );
            let mut client = connect_when_up(addr).await;
            let req = payload(7, 50);
            assert_eq!(client.echo(req.clone()).await.unwrap().into_inner(), req);
            stop.send(()).expect("the server waits for the signal");
            serving
                .await
                .expect("the serving task")
                .expect("served, then stopped");
            let after = client.echo(req.clone()).await;
            assert_eq!(after.map(drop).unwrap_err().code(), Code::Unavailable);

            // `serve`: until its future is dropped (here: aborted with its task).
            let addr = free_port();
            let serving = tokio::spawn(
                Server::builder()
                    .add_service(TortureServer::new(TortureService::default()))
                    .serve(addr),
            );
            let mut client = connect_when_up(addr).await;
            assert_eq!(client.echo(req.clone()).await.unwrap().into_inner(), req);
            serving.abort();
            let _ = serving.await;
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                match client.echo(req.clone()).await {
                    Err(status) if status.code() == Code::Unavailable => break,
                    _ if std::time::Instant::now() > deadline => {
                        panic!("the server outlived its dropped serve future")
                    }
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
    });
}

/// A port free now on 127.0.0.1 (tonic-style servers are given their address).
fn free_port() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    probe.local_addr().expect("its address")
}

/// The async client of the server about to listen on `addr`.
async fn connect_when_up(addr: std::net::SocketAddr) -> TortureClient {
    for _ in 0..200 {
        if let Ok(client) = TortureClient::connect(format!("http://{addr}")).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing listens on {addr}");
}

/// One TCP port, both protocols (docs/PROTOCOL.md §4.5): a server without `grpc_listen`
/// serves a standard gRPC client on its own port, beside clients of this protocol, and goes
/// on serving both.
#[test]
fn a_tcp_server_serves_standard_grpc_on_its_own_port() {
    with_watchdog("gRPC on the server's port", Duration::from_secs(60), || {
        let server = Server::builder()
            .ring(RING)
            .add_service(TortureServer::new(TortureService::default()))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        assert_eq!(server.grpc_local_addr(), None, "no second address");
        let port = server.local_addr().to_string();
        for round in 0..2u64 {
            let ours = blocking::TortureClient::connect(&format!("tcp://{port}")).unwrap();
            assert_eq!(ours.inner().transport_name(), "tcp");
            let grpc = blocking::TortureClient::connect(&format!("grpc://{port}")).unwrap();
            assert_eq!(grpc.inner().transport_name(), "grpc");
            for (client, id) in [(&ours, 10 + round), (&grpc, 20 + round)] {
                let req = payload(id, 300);
                assert_eq!(client.echo(req.clone()).unwrap().into_inner(), req);
                let copies = client
                    .watch(req.clone())
                    .unwrap()
                    .into_inner()
                    .into_blocking_iter()
                    .count();
                assert_eq!(copies, 3);
            }
        }
        server.shutdown();
    });
}

/// `max_connections` bounds the standard gRPC connections of the server's port too: with a
/// limit of one, a second gRPC client is refused while the first holds its connection, and
/// served once it is gone.
#[test]
fn max_connections_bounds_the_grpc_clients_of_the_port() {
    with_watchdog("gRPC connections bounded", Duration::from_secs(60), || {
        let server = Server::builder()
            .ring(RING)
            .max_connections(1)
            .add_service(TortureServer::new(TortureService::default()))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        let target = format!("grpc://{}", server.local_addr());
        let req = payload(1, 10);
        let first = blocking::TortureClient::connect(&target).expect("the first connects");
        assert_eq!(first.echo(req.clone()).unwrap().into_inner(), req);
        let second = blocking::TortureClient::connect(&target).and_then(|c| {
            c.echo(req.clone())
                .map_err(|s| rpc_core::Error::ConnectionClosed(s.to_string()))
        });
        assert!(
            second.is_err(),
            "a second connection was served beside the first"
        );
        drop(first);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let third = blocking::TortureClient::connect(&target)
                .ok()
                .and_then(|c| c.echo(req.clone()).ok());
            if third.is_some() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no room once the first connection was gone"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server.shutdown();
    });
}

/// Test-only TLS material (`tests/data/tls`).
fn tls_material(name: &str) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tls");
    std::fs::read(format!("{dir}/{name}")).expect("test TLS material")
}

/// tonic's TLS settings: a server given an identity serves gRPC over TLS on its own TCP port,
/// next to this protocol's clients there; an `https://` endpoint given a CA connects to it.
#[test]
fn tls_on_the_servers_own_port_for_an_https_endpoint() {
    use rpc_core::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};
    let identity = Identity::from_pem(tls_material("server.pem"), tls_material("server.key"));
    let server = Server::builder()
        .tls_config(ServerTlsConfig::new().identity(identity))
        .expect("the identity loads")
        .add_service(TortureServer::new(TortureService::default()))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("a server starts");
    let addr = server.local_addr().to_string();
    let https = format!("https://{addr}");
    runtime().block_on(async {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(tls_material("ca.pem")))
            .domain_name("localhost");
        let channel = Endpoint::from_shared(https.clone())
            .expect("an https:// endpoint")
            .tls_config(tls)
            .expect("a CA")
            .connect()
            .await
            .expect("connects over TLS");
        assert_eq!(channel.transport_name(), "grpc");
        let mut client = TortureClient::new(channel);
        let request = payload(3, 100);
        let echoed = client.echo(request.clone()).await.expect("served over TLS");
        assert_eq!(echoed.into_inner(), request);

        // Without TLS settings an https:// target is refused, not called in plaintext.
        let refused = Endpoint::from_shared(https.clone())
            .expect("an https:// endpoint")
            .connect()
            .await
            .expect_err("no TLS settings");
        assert!(
            matches!(refused, rpc_core::Error::InvalidAddress(_)),
            "{refused}"
        );
    });
    // This protocol's clients on the same port, as before.
    let plain = blocking::TortureClient::connect(&addr).expect("connects");
    let request = payload(4, 10);
    assert_eq!(plain.echo(request.clone()).unwrap().into_inner(), request);
    server.shutdown();
}

/// A TLS handshake to a server without TLS: closed, not answered with this protocol's HELLO
/// (which a TLS client could not read) nor left open.
#[test]
fn a_tls_client_of_a_server_without_tls_is_closed() {
    use std::io::{Read, Write};
    let server = serve();
    let mut stream = std::net::TcpStream::connect(server.local_addr()).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    // The start of a TLS record: handshake (22), TLS 1.0 framing, a few bytes of body.
    stream
        .write_all(&[22, 3, 1, 0, 4, 1, 0, 0, 0])
        .expect("writes");
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected the connection closed: {e}"),
    }
    assert!(answer.is_empty(), "answered {answer:?}");
    server.shutdown();
}

/// A client interceptor written as a type, as tonic's docs write one: it counts the calls it
/// saw (its `&mut self`) and adds a token.
#[derive(Clone)]
struct AddToken {
    token: rpc_core::MetadataValue<rpc_core::metadata::Ascii>,
    seen: usize,
}

impl rpc_core::service::Interceptor for AddToken {
    fn call(
        &mut self,
        mut request: rpc_core::Request<()>,
    ) -> Result<rpc_core::Request<()>, rpc_core::Status> {
        self.seen += 1;
        let seen = rpc_core::MetadataValue::from(self.seen as u64);
        request.metadata_mut().insert("x-seen", seen);
        request
            .metadata_mut()
            .insert("authorization", self.token.clone());
        Ok(request)
    }
}

/// A server interceptor written as a type: the token it wants. It hands the handler the
/// client's `x-seen` as the caller (which the echo answers as `x-caller`).
#[derive(Clone)]
struct RequireToken(&'static str);

impl rpc_core::service::Interceptor for RequireToken {
    fn call(
        &mut self,
        mut request: rpc_core::Request<()>,
    ) -> Result<rpc_core::Request<()>, rpc_core::Status> {
        match request.metadata().get("authorization") {
            Some(token) if token == self.0 => {
                let seen = request
                    .metadata()
                    .get("x-seen")
                    .and_then(|v| v.to_str().ok());
                let caller = Caller(seen.unwrap_or("none").to_string());
                request.extensions_mut().insert(caller);
                Ok(request)
            }
            _ => Err(rpc_core::Status::unauthenticated("no token")),
        }
    }
}

/// What a tonic application writes to name a client behind its own interceptor.
type AuthedClient = TortureClient<
    rpc_core::service::interceptor::InterceptedService<rpc_core::transport::Channel, AddToken>,
>;

#[test]
fn a_generated_client_with_its_own_interceptor_as_tonic_has_it() {
    with_watchdog("client with_interceptor", Duration::from_secs(60), || {
        let server = Server::builder()
            .ring(RING)
            .add_service(TortureServer::with_interceptor(
                TortureService::default(),
                RequireToken("Bearer s3cret"),
            ))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        let runtime = runtime();
        runtime.block_on(async {
            let channel = rpc_core::transport::Endpoint::from_shared(format!(
                "http://{}",
                server.local_addr()
            ))
            .expect("an endpoint")
            .connect()
            .await
            .expect("connects");

            // The plain client on the channel carries no token: refused.
            let mut plain = TortureClient::new(channel.clone());
            let status = plain.echo(payload(1, 8)).await.expect_err("refused");
            assert_eq!(status.code(), Code::Unauthenticated, "{status}");

            // The same channel behind the client's own interceptor: every call kind passes it.
            let add_token = AddToken {
                token: "Bearer s3cret".parse().expect("an ASCII value"),
                seen: 0,
            };
            let mut authed: AuthedClient =
                TortureClient::with_interceptor(channel.clone(), add_token);
            let reply = authed
                .echo(payload(2, 64))
                .await
                .expect("echo with a token");
            assert_eq!(reply.into_inner(), payload(2, 64));
            let mut copies = authed
                .watch(payload(3, 10))
                .await
                .expect("a server stream with a token")
                .into_inner();
            let mut n = 0;
            while copies.message().await.expect("a copy").is_some() {
                n += 1;
            }
            assert_eq!(n, 3);
            // The interceptor kept its state from call to call (`&mut self`): the server
            // sees the third call numbered 3.
            let third = authed.echo(payload(4, 8)).await.expect("a third call");
            let caller = third.metadata().get("x-caller").expect("x-caller");
            assert_eq!(caller, "3");
            // A clone keeps the interceptor; the plain client still does not have it.
            let mut clone = authed.clone();
            clone.echo(payload(5, 8)).await.expect("a clone's echo");
            let status = plain.echo(payload(6, 8)).await.expect_err("still refused");
            assert_eq!(status.code(), Code::Unauthenticated, "{status}");

            // An interceptor's status ends the call before it goes out.
            let mut refusing =
                TortureClient::with_interceptor(channel, |_: rpc_core::Request<()>| {
                    Err(rpc_core::Status::permission_denied("not from this client"))
                });
            let status = refusing
                .echo(payload(7, 8))
                .await
                .expect_err("refused here");
            assert_eq!(
                (status.code(), status.message()),
                (Code::PermissionDenied, "not from this client")
            );
        });
    });
}
