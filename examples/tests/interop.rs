//! gRPC's interop cases over TCP on the loopback interface: every case against the interop
//! server in-process, the same cases against a server that gets everything wrong (each must
//! fail, or the client checks nothing), and the `interop-server` and `interop-client`
//! binaries as separate processes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::stream::{self, BoxStream, StreamExt};
use rpc_core::{Request, Response, Status, Streaming, TransportKind};
use rpc_examples::grpc_testing::test_service_client::blocking::TestServiceClient;
use rpc_examples::grpc_testing::test_service_server::{TestService, TestServiceServer};
use rpc_examples::grpc_testing::unimplemented_service_server::{
    UnimplementedService, UnimplementedServiceServer,
};
use rpc_examples::grpc_testing::{
    Empty, Payload, ResponseParameters, SimpleRequest, SimpleResponse, StreamingInputCallRequest,
    StreamingInputCallResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use rpc_examples::interop::{result_line, run_cases, Case, InteropClient, TestServiceImpl};

const CASE_TIMEOUT: Duration = Duration::from_secs(10);

fn tcp_client(addr: &str) -> rpc_core::Client {
    rpc_core::Client::builder()
        .transport(TransportKind::Tcp)
        .connect(addr)
        .expect("connecting to the test server")
}

/// A client of `server`: over standard gRPC to its gRPC face, or over TCP.
fn client_of(server: &rpc_core::Server, transport: TransportKind) -> rpc_core::Client {
    let addr = server
        .addr_for(transport)
        .expect("the server has a gRPC face");
    match transport {
        TransportKind::Grpc => rpc_core::Client::builder()
            .transport(TransportKind::Grpc)
            .connect(&addr)
            .expect("connecting to the gRPC face"),
        _ => tcp_client(&addr),
    }
}

/// Waits up to 5 s for `service` to have no call in progress.
fn wait_idle(service: &TestServiceImpl) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    while service.calls_in_progress() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    service.calls_in_progress()
}

#[test]
fn every_case_passes_over_tcp() {
    every_case_passes(TransportKind::Tcp);
}

#[test]
fn every_case_passes_over_the_grpc_face() {
    every_case_passes(TransportKind::Grpc);
}

/// Every case in-process, over this framework's TCP transport or over standard gRPC
/// against the same server's gRPC face.
fn every_case_passes(transport: TransportKind) {
    let service = TestServiceImpl::new();
    let server = rpc_core::Server::builder()
        .add_service(TestServiceServer::new(service.clone()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the interop server");
    let client = client_of(&server, transport);
    let client = InteropClient::new(client);
    let mut failures = Vec::new();
    for case in Case::ALL {
        let verdict = client.run(case, CASE_TIMEOUT);
        println!("{}", result_line(case, &verdict));
        if verdict.is_err() {
            failures.push(result_line(case, &verdict));
        }
        // Cancels and deadlines end the server's side of the call too: its handler and
        // response stream are dropped.
        assert_eq!(
            wait_idle(&service),
            0,
            "after {case}, the server still runs a call"
        );
    }
    assert!(failures.is_empty(), "failed:\n{}", failures.join("\n"));
    // All over one connection: no cancel or timeout broke it (the client would have
    // reconnected without a word).
    assert_eq!(service.connections_seen(), 1);

    // The runner, with its watchdog, says the same.
    let mut lines = Vec::new();
    let summary = run_cases(&client, &Case::ALL, CASE_TIMEOUT, |l| {
        lines.push(l.to_owned())
    });
    assert_eq!((summary.passed, summary.failed), (14, 0), "{lines:#?}");
    assert_eq!(lines[0], "case empty_unary: PASS");
    server.shutdown();
}

/// The cancel and timeout cases, over and over: each time, the server's handler of the
/// cancelled call is dropped (the client cannot see that: the cancel is a drop).
#[test]
fn cancels_reach_the_server() {
    cancels_reach_the_server_over(TransportKind::Tcp);
}

/// The same over the gRPC face: a cancel is an HTTP/2 RST_STREAM.
#[test]
fn cancels_reach_the_server_over_the_grpc_face() {
    cancels_reach_the_server_over(TransportKind::Grpc);
}

fn cancels_reach_the_server_over(transport: TransportKind) {
    let service = TestServiceImpl::new();
    let server = rpc_core::Server::builder()
        .add_service(TestServiceServer::new(service.clone()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the interop server");
    let client = client_of(&server, transport);
    let client = InteropClient::new(client);
    for case in [
        Case::CancelAfterBegin,
        Case::CancelAfterFirstResponse,
        Case::TimeoutOnSleepingServer,
    ] {
        for i in 0..20 {
            assert_eq!(client.run(case, CASE_TIMEOUT), Ok(()), "{case}, run {i}");
            assert_eq!(wait_idle(&service), 0, "after {case}, run {i}");
        }
    }
    assert_eq!(service.connections_seen(), 1);
    server.shutdown();
}

/// A TestService that gets every case wrong, in a way each case must notice.
struct Broken;

fn payload(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; size],
    })
}

type Responses = BoxStream<'static, Result<StreamingOutputCallResponse, Status>>;

impl TestService for Broken {
    async fn empty_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        // Every cancel and timeout case ends with an EmptyCall that must succeed.
        Err(Status::internal("broken"))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        // One byte short, no echoed metadata, the requested status ignored.
        let size = usize::try_from(request.get_ref().response_size).unwrap_or(0);
        Ok(Response::new(SimpleResponse {
            payload: payload(size.saturating_sub(1)),
            ..SimpleResponse::default()
        }))
    }

    async fn cacheable_unary_call(
        &self,
        _: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        Err(Status::internal("broken"))
    }

    type StreamingOutputCallStream = Responses;

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Responses>, Status> {
        // One response too few.
        let mut sizes: Vec<i32> = request
            .into_inner()
            .response_parameters
            .iter()
            .map(|p| p.size)
            .collect();
        sizes.pop();
        let responses = stream::iter(sizes).map(|size| {
            Ok(StreamingOutputCallResponse {
                payload: payload(size as usize),
            })
        });
        Ok(Response::new(responses.boxed()))
    }

    async fn streaming_input_call(
        &self,
        _: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        // Answers without reading a request.
        Ok(Response::new(StreamingInputCallResponse {
            aggregated_payload_size: 1,
        }))
    }

    type FullDuplexCallStream = Responses;

    async fn full_duplex_call(
        &self,
        _: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        // One 7-byte response whatever the requests, then OK.
        let responses = stream::iter([Ok(StreamingOutputCallResponse {
            payload: payload(7),
        })]);
        Ok(Response::new(responses.boxed()))
    }

    type HalfDuplexCallStream = Responses;

    async fn half_duplex_call(
        &self,
        _: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        Err(Status::internal("broken"))
    }

    async fn unimplemented_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }
}

impl UnimplementedService for Broken {
    async fn unimplemented_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }
}

#[test]
fn every_case_fails_against_a_broken_server() {
    let server = rpc_core::Server::builder()
        .add_service(TestServiceServer::new(Broken))
        .add_service(UnimplementedServiceServer::new(Broken))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the broken server");
    let client = InteropClient::new(tcp_client(server.local_addr()));
    let mut lines = Vec::new();
    let summary = run_cases(&client, &Case::ALL, Duration::from_secs(5), |l| {
        lines.push(l.to_owned())
    });
    for line in &lines {
        println!("{line}");
    }
    let passed: Vec<&String> = lines.iter().filter(|l| l.ends_with(": PASS")).collect();
    assert!(
        passed.is_empty(),
        "passed against a broken server: {passed:#?}"
    );
    assert_eq!((summary.passed, summary.failed), (0, 14), "{lines:#?}");
    for (want, got) in [
        (
            "case large_unary: FAIL UnaryCall: want 314159 zero bytes, got 314158 bytes",
            &lines[1],
        ),
        (
            "case client_streaming: FAIL aggregated_payload_size 1, want 74922",
            &lines[2],
        ),
        (
            "case server_streaming: FAIL StreamingOutputCall: 3 responses, want 4",
            &lines[3],
        ),
        (
            "case unimplemented_service: FAIL UnimplementedService/UnimplementedCall: want UNIMPLEMENTED, got OK",
            &lines[12],
        ),
    ] {
        assert_eq!(got, want);
    }
    server.shutdown();
}

/// The interop server with one flaw: on UnaryCall (`unary`) or on FullDuplexCall (`!unary`)
/// it drops the echoed trailers (and the headers too on FullDuplexCall) and rewrites the
/// requested status's message: the metadata and status checks of each call must notice.
struct Forgetful {
    inner: TestServiceImpl,
    unary: bool,
}

fn reworded(status: Status) -> Status {
    Status::new(status.code(), "something else")
}

impl TestService for Forgetful {
    async fn empty_call(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.inner.empty_call(request).await
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let response = self.inner.unary_call(request).await;
        if !self.unary {
            return response;
        }
        match response {
            Ok(response) => {
                let (headers, message, _trailers) = response.into_parts();
                Ok(Response::from_parts(headers, message, Default::default()))
            }
            Err(status) => Err(reworded(status)),
        }
    }

    async fn cacheable_unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        self.inner.cacheable_unary_call(request).await
    }

    type StreamingOutputCallStream = Responses;

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Responses>, Status> {
        self.inner.streaming_output_call(request).await
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        self.inner.streaming_input_call(request).await
    }

    type FullDuplexCallStream = Responses;

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let response = self.inner.full_duplex_call(request).await?;
        if self.unary {
            return Ok(response);
        }
        let responses = response.into_inner().map(|r| r.map_err(reworded));
        Ok(Response::new(responses.boxed()))
    }

    type HalfDuplexCallStream = Responses;

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        self.inner.half_duplex_call(request).await
    }

    async fn unimplemented_call(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        TestService::unimplemented_call(&self.inner, request).await
    }
}

#[test]
fn metadata_and_status_checks_notice_what_is_missing() {
    for unary in [true, false] {
        let server = rpc_core::Server::builder()
            .add_service(TestServiceServer::new(Forgetful {
                inner: TestServiceImpl::new(),
                unary,
            }))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("starting the forgetful server");
        let client = InteropClient::new(tcp_client(server.local_addr()));
        let verdicts: Vec<String> = [
            Case::StatusCodeAndMessage,
            Case::SpecialStatusMessage,
            Case::CustomMetadata,
            Case::PingPong,
        ]
        .into_iter()
        .map(|case| result_line(case, &client.run(case, CASE_TIMEOUT)))
        .collect();
        let want = if unary {
            [
                "case status_code_and_message: FAIL UnaryCall: want UNKNOWN \"test status message\", got UNKNOWN \"something else\"",
                "case special_status_message: FAIL UnaryCall: want UNKNOWN \"\\t\\ntest with whitespace\\r\\nand Unicode BMP ☺ and non-BMP 😈\\t\\n\", got UNKNOWN \"something else\"",
                "case custom_metadata: FAIL UnaryCall: the trailers lack x-grpc-test-echo-trailing-bin: [ab, ab, ab] (have {})",
                "case ping_pong: PASS",
            ]
        } else {
            [
                "case status_code_and_message: FAIL FullDuplexCall: want UNKNOWN \"test status message\", got UNKNOWN \"something else\"",
                "case special_status_message: PASS",
                "case custom_metadata: FAIL FullDuplexCall: the response headers lack x-grpc-test-echo-initial: test_initial_metadata_value (have {})",
                "case ping_pong: PASS",
            ]
        };
        assert_eq!(verdicts, want);
        server.shutdown();
    }
}

/// The two methods no case calls: HalfDuplexCall answers only after the requests end, in
/// order; CacheableUnaryCall answers a timestamp with a cache-control header.
#[test]
fn half_duplex_and_cacheable_calls() {
    let server = rpc_core::Server::builder()
        .add_service(TestServiceServer::new(TestServiceImpl::new()))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the interop server");
    let test = TestServiceClient::new(tcp_client(server.local_addr()));
    let request = |sizes: &[i32]| StreamingOutputCallRequest {
        response_parameters: sizes
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..ResponseParameters::default()
            })
            .collect(),
        ..StreamingOutputCallRequest::default()
    };
    let mut call = test
        .half_duplex_call(Request::new(()).with_timeout(CASE_TIMEOUT))
        .expect("HalfDuplexCall opens");
    call.send(&request(&[3, 1])).expect("send");
    call.send(&request(&[])).expect("send");
    call.send(&request(&[2])).expect("send");
    // Nothing comes before the requests end (the server waits for the half-close).
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        futures::FutureExt::now_or_never(call.message()).is_none(),
        "HalfDuplexCall answered before the requests ended"
    );
    call.close_send();
    let mut sizes = Vec::new();
    while let Some(response) = call.recv().expect("no error") {
        sizes.push(response.payload.map_or(0, |p| p.body.len()));
    }
    assert_eq!(sizes, [3, 1, 2]);

    let response = test
        .cacheable_unary_call(SimpleRequest::default())
        .expect("CacheableUnaryCall");
    assert_eq!(
        response.metadata().get("cache-control").unwrap(),
        "max-age=60, public"
    );
    let body = &response.get_ref().payload.as_ref().expect("a payload").body;
    let nanos: u128 = std::str::from_utf8(body)
        .expect("text")
        .parse()
        .expect("a number");
    assert!(nanos > 1_600_000_000 * 1_000_000_000, "{nanos}");
    server.shutdown();
}

/// An `interop-server` process, killed when dropped.
struct ServerProcess {
    child: Child,
    /// Where this framework's protocol listens.
    addr: String,
    /// Where its gRPC face listens, if it has one.
    grpc_addr: Option<String>,
}

impl ServerProcess {
    /// Starts it with `args` and waits for its `listening on ADDR` line (and with
    /// `grpc_face`, its `grpc listening on ADDR` line).
    fn start(args: &[&str]) -> ServerProcess {
        let grpc_face = args
            .iter()
            .any(|a| a.starts_with("--port") || a.starts_with("--grpc-listen"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_interop-server"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting interop-server");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        let Some(addr) = line.trim_end().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!(
                "interop-server printed {line:?} ({read:?}) instead of `listening on ADDR`; \
                 status {:?}",
                child.wait()
            );
        };
        let addr = addr.to_owned();
        let mut grpc_addr = None;
        if grpc_face {
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            match line.trim_end().strip_prefix("grpc listening on ") {
                Some(a) => grpc_addr = Some(a.to_owned()),
                None => {
                    let _ = child.kill();
                    panic!("interop-server printed {line:?} instead of `grpc listening on ADDR`");
                }
            }
        }
        ServerProcess {
            child,
            addr,
            grpc_addr,
        }
    }

    /// The port of the gRPC face.
    fn grpc_port(&self) -> &str {
        let addr = self.grpc_addr.as_deref().expect("a gRPC face");
        addr.rsplit_once(':').expect("ADDR:PORT").1
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a binary; returns its exit code, stdout and stderr.
fn run(binary: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(binary)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CLIENT: &str = env!("CARGO_BIN_EXE_interop-client");
const SERVER: &str = env!("CARGO_BIN_EXE_interop-server");

#[test]
fn the_binaries_pass_every_case() {
    // gRPC's harness style: --port on the server (its gRPC face), --server_host and
    // --server_port on the client (which then speaks gRPC).
    let server = ServerProcess::start(&["--port", "0", "--use_tls=false"]);
    let grpc_addr = server.grpc_addr.as_deref().unwrap_or_default();
    assert!(grpc_addr.starts_with("0.0.0.0:"), "{grpc_addr}");
    let (code, stdout, stderr) = run(
        CLIENT,
        &[
            "--server_host",
            "127.0.0.1",
            "--server_port",
            server.grpc_port(),
            "--use_tls=false",
            "--test_case=all",
        ],
    );
    let want: Vec<String> = Case::ALL
        .iter()
        .map(|c| format!("case {c}: PASS"))
        .chain(["summary: 14 passed, 0 failed".to_owned()])
        .collect();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        want,
        "stderr:\n{stderr}"
    );
    assert_eq!(code, Some(0));

    // This framework's style: --listen and --connect, a list of cases.
    let server = ServerProcess::start(&["--listen", "127.0.0.1:0", "--transport", "tcp"]);
    let (code, stdout, stderr) = run(
        CLIENT,
        &[
            "--connect",
            &server.addr,
            "--transport=tcp",
            "--test_case",
            "ping_pong,custom_metadata",
            "--case_timeout_s",
            "5",
        ],
    );
    assert_eq!(
        stdout, "case ping_pong: PASS\ncase custom_metadata: PASS\nsummary: 2 passed, 0 failed\n",
        "stderr:\n{stderr}"
    );
    assert_eq!(code, Some(0));
}

#[test]
fn an_unreachable_server_fails_every_case() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a probe socket")
        .port()
        .to_string();
    let (code, stdout, stderr) = run(
        CLIENT,
        &[
            "--server_port",
            &port,
            "--test_case",
            "empty_unary,large_unary",
        ],
    );
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("case empty_unary: FAIL cannot connect to 127.0.0.1:"));
    assert!(lines[1].starts_with("case large_unary: FAIL cannot connect"));
    assert_eq!(lines[2], "summary: 0 passed, 2 failed");
}

#[test]
fn what_is_not_supported_is_refused_clearly() {
    for (binary, args, message) in [
        (
            SERVER,
            &["--port", "0", "--use_tls=true"][..],
            "--use_tls=true is not supported",
        ),
        (
            CLIENT,
            &["--server_port", "1", "--use_tls", "true"][..],
            "--use_tls=true is not supported",
        ),
        (
            CLIENT,
            &["--server_port", "1", "--test_case", "empty_unary,nope"][..],
            "unknown test case `nope` in --test_case; known: all, empty_unary,",
        ),
        (
            SERVER,
            &["--grpc-listen", "127.0.0.1:0", "--port", "1"][..],
            "give either --grpc-listen ADDR:PORT or --port N, not both",
        ),
        (SERVER, &[][..], "nothing to serve"),
        (CLIENT, &[][..], "no server given"),
    ] {
        let (code, stdout, stderr) = run(binary, args);
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    let (code, stdout, _) = run(CLIENT, &["--help"]);
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("usage: interop-client"), "{stdout}");
    assert!(stdout.contains("cancel_after_first_response"), "{stdout}");
}
