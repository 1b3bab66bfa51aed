//! gRPC's interop tests ("gRPC Interop Test Case Descriptions", `doc/interop-test-descriptions.md`
//! in grpc/grpc) over this framework's transports: the server's `grpc.testing.TestService`
//! ([`TestServiceImpl`]) and the client's test cases ([`Case`], [`InteropClient`]).
//!
//! The contract is `proto/grpc/testing/test.proto` as the gRPC project defines it, so the
//! same cases can later run against stock gRPC servers through the framework's gRPC face.
//!
//! ```no_run
//! use std::time::Duration;
//! use rpc_examples::grpc_testing::test_service_server::TestServiceServer;
//! use rpc_examples::interop::{run_cases, Case, InteropClient, TestServiceImpl};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = rpc_core::Server::builder()
//!     .add_service(TestServiceServer::new(TestServiceImpl::new()))
//!     .start("127.0.0.1:0", rpc_core::TransportKind::Tcp)?;
//! let client = rpc_core::Client::builder()
//!     .transport(rpc_core::TransportKind::Tcp)
//!     .connect(server.local_addr())?;
//! let summary = run_cases(&InteropClient::new(client), &Case::ALL, Duration::from_secs(10), |line| {
//!     println!("{line}")
//! });
//! assert_eq!(summary.failed, 0);
//! # Ok(())
//! # }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::executor::block_on;
use futures::stream::{self, BoxStream, StreamExt};
use futures::FutureExt;
use rpc_core::metadata::{AsciiMetadataValue, BinaryMetadataValue, MetadataValue};
use rpc_core::{Code, MetadataMap, Request, Response, Status, Streaming};

use crate::grpc_testing::test_service_client::{self, blocking::TestServiceClient};
use crate::grpc_testing::test_service_server::TestService;
use crate::grpc_testing::unimplemented_service_client::blocking::UnimplementedServiceClient;
use crate::grpc_testing::{
    BoolValue, EchoStatus, Empty, Payload, PayloadType, ResponseParameters, SimpleRequest,
    SimpleResponse, StreamingInputCallRequest, StreamingInputCallResponse,
    StreamingOutputCallRequest, StreamingOutputCallResponse,
};

/// The request header whose value the server echoes as a response header.
pub const ECHO_INITIAL_KEY: &str = "x-grpc-test-echo-initial";
/// The binary request header whose value the server echoes as a trailer.
pub const ECHO_TRAILING_KEY: &str = "x-grpc-test-echo-trailing-bin";
/// The largest payload the server makes for one response (4 MiB, the framework's default
/// message limit): a larger `response_size` fails with INVALID_ARGUMENT before anything is
/// allocated.
pub const MAX_PAYLOAD_SIZE: usize = 4 << 20;
/// The most requests HalfDuplexCall holds before answering: more fail with
/// RESOURCE_EXHAUSTED.
pub const MAX_HALF_DUPLEX_REQUESTS: usize = 10_000;

// ===== the server ======================================================================

/// `grpc.testing.TestService` as the interop descriptions' "Server" section specifies it:
///
/// - EmptyCall answers an Empty.
/// - UnaryCall answers a payload of `response_size` zero bytes; a non-zero
///   `response_status` is answered as that status instead.
/// - CacheableUnaryCall answers the current time (nanoseconds since the epoch, in decimal)
///   as its payload, with a `cache-control` header.
/// - StreamingOutputCall sends one response per `response_parameters` entry, `size` zero
///   bytes each, after waiting `interval_us` (on a timer, not a thread), then ends with
///   `response_status` if it is non-zero.
/// - StreamingInputCall answers the sum of the request payloads' sizes.
/// - FullDuplexCall answers each request as it arrives, as StreamingOutputCall would, and
///   ends the call at a request with a non-zero `response_status`.
/// - HalfDuplexCall reads every request first, then answers them in order.
/// - UnimplementedCall answers UNIMPLEMENTED.
///
/// Echo metadata, on every method but EmptyCall and UnimplementedCall: a request's
/// `x-grpc-test-echo-initial` header comes back as a response header, its
/// `x-grpc-test-echo-trailing-bin` as a trailer (also when the call ends with an error).
///
/// `response_type` must be COMPRESSABLE and a request that expects to have been compressed
/// (`expect_compressed`) fails with INVALID_ARGUMENT: the framework does not compress.
/// `UnimplementedService` is deliberately not implemented here: a server that does not
/// register it answers its calls UNIMPLEMENTED, as the `unimplemented_service` case wants.
///
/// The first call from each connection (each peer address) is logged at `info`, "calls from
/// a new connection" (`scripts/interop` counts them: the client's cases must share one
/// connection), and [`TestServiceImpl::connections_seen`] counts them. Clones share these
/// counts and [`TestServiceImpl::calls_in_progress`].
#[derive(Debug, Clone, Default)]
pub struct TestServiceImpl {
    in_progress: Arc<AtomicUsize>,
    peers: Arc<Mutex<HashSet<String>>>,
}

/// How many peer addresses [`TestServiceImpl`] remembers; calls from further ones are
/// neither logged nor counted as new.
pub const MAX_PEERS_REMEMBERED: usize = 4096;

impl TestServiceImpl {
    /// A new service.
    pub fn new() -> TestServiceImpl {
        TestServiceImpl::default()
    }

    /// Calls whose handler, or response stream, is alive: it goes back down when a call
    /// ends, also when the client cancelled it or its deadline passed (the framework then
    /// drops the handler). Tests use it to see that a cancel reached the server.
    pub fn calls_in_progress(&self) -> usize {
        self.in_progress.load(Ordering::SeqCst)
    }

    /// The connections (peer addresses) calls came from, up to [`MAX_PEERS_REMEMBERED`].
    pub fn connections_seen(&self) -> usize {
        self.peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Counts a call from `peer` until the guard is dropped; logs a new peer.
    fn enter(&self, peer: Option<&str>) -> InProgress {
        if let Some(peer) = peer {
            let new = {
                let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
                peers.len() < MAX_PEERS_REMEMBERED && peers.insert(peer.to_owned())
            };
            if new {
                tracing::info!(peer, "calls from a new connection");
            }
        }
        self.in_progress.fetch_add(1, Ordering::SeqCst);
        InProgress(Arc::clone(&self.in_progress))
    }
}

/// Counts a call in [`TestServiceImpl::calls_in_progress`] while alive.
struct InProgress(Arc<AtomicUsize>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps `guard` alive as long as `responses` is.
fn guarded<T: Send + 'static>(
    guard: InProgress,
    responses: impl futures::Stream<Item = T> + Send + 'static,
) -> BoxStream<'static, T> {
    responses
        .map(move |item| {
            let _alive = &guard;
            item
        })
        .boxed()
}

/// The response stream of the streaming methods.
pub type ResponseStream = BoxStream<'static, Result<StreamingOutputCallResponse, Status>>;

/// What a call's request metadata asks to be echoed.
#[derive(Debug, Clone, Default)]
struct Echo {
    initial: Option<AsciiMetadataValue>,
    trailing: Option<BinaryMetadataValue>,
}

impl Echo {
    fn of(metadata: &MetadataMap) -> Echo {
        Echo {
            initial: metadata.get(ECHO_INITIAL_KEY).cloned(),
            trailing: metadata.get_bin(ECHO_TRAILING_KEY).cloned(),
        }
    }

    /// The response headers: the echoed initial value.
    fn headers(&self) -> MetadataMap {
        let mut headers = MetadataMap::new();
        if let Some(value) = &self.initial {
            headers.insert(ECHO_INITIAL_KEY, value.clone());
        }
        headers
    }

    /// The trailers: the echoed binary value.
    fn trailers(&self) -> MetadataMap {
        let mut trailers = MetadataMap::new();
        if let Some(value) = &self.trailing {
            trailers.insert_bin(ECHO_TRAILING_KEY, value.clone());
        }
        trailers
    }

    /// `response` with the echoed headers and trailers.
    fn apply<T>(&self, response: Response<T>) -> Response<T> {
        let (mut headers, message, mut trailers) = response.into_parts();
        headers.extend(self.headers());
        trailers.extend(self.trailers());
        Response::from_parts(headers, message, trailers)
    }

    /// `status` carrying the echoed trailers (a failed call's trailers are its status's
    /// metadata).
    fn status(&self, mut status: Status) -> Status {
        status.metadata_mut().extend(self.trailers());
        status
    }
}

/// The status a request's `response_status` asks for, if its code is not OK.
fn requested_status(status: Option<&EchoStatus>) -> Option<Status> {
    let status = status?;
    let code = u32::try_from(status.code).map_or(Code::Unknown, Code::from_u32);
    (code != Code::Ok).then(|| Status::new(code, status.message.clone()))
}

/// A payload of `size` zero bytes.
fn zero_payload(size: i32) -> Result<Payload, Status> {
    let size = usize::try_from(size)
        .map_err(|_| Status::invalid_argument(format!("negative payload size {size}")))?;
    if size > MAX_PAYLOAD_SIZE {
        return Err(Status::invalid_argument(format!(
            "payload size {size} is above this server's limit of {MAX_PAYLOAD_SIZE} bytes"
        )));
    }
    Ok(Payload {
        r#type: PayloadType::Compressable as i32,
        body: vec![0; size],
    })
}

fn check_response_type(response_type: i32) -> Result<(), Status> {
    if response_type == PayloadType::Compressable as i32 {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "response_type {response_type} is not supported: only COMPRESSABLE (0)"
        )))
    }
}

/// A request that says it was sent compressed was not: nothing in this framework
/// compresses (the interop descriptions' compression probe expects INVALID_ARGUMENT).
fn check_not_expecting_compression(expect_compressed: Option<&BoolValue>) -> Result<(), Status> {
    if expect_compressed.is_some_and(|b| b.value) {
        Err(Status::invalid_argument(
            "expect_compressed is set, but the request was not compressed (no compression here)",
        ))
    } else {
        Ok(())
    }
}

/// Checks every entry of `response_parameters` before any response goes out.
fn check_parameters(parameters: &[ResponseParameters]) -> Result<(), Status> {
    for p in parameters {
        if p.interval_us < 0 {
            return Err(Status::invalid_argument(format!(
                "negative interval_us {}",
                p.interval_us
            )));
        }
        match usize::try_from(p.size) {
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "negative response size {}",
                    p.size
                )))
            }
            Ok(size) if size > MAX_PAYLOAD_SIZE => {
                return Err(Status::invalid_argument(format!(
                    "response size {size} is above this server's limit of {MAX_PAYLOAD_SIZE} bytes"
                )))
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// One response per entry of `parameters`, each after its interval (an async timer: the
/// worker thread is free meanwhile).
fn responses_for(
    parameters: Vec<ResponseParameters>,
) -> impl futures::Stream<Item = Result<StreamingOutputCallResponse, Status>> + Send + 'static {
    stream::iter(parameters).then(|p| async move {
        if p.interval_us > 0 {
            let interval = Duration::from_micros(p.interval_us.unsigned_abs().into());
            futures_timer::Delay::new(interval).await;
        }
        Ok(StreamingOutputCallResponse {
            payload: Some(zero_payload(p.size)?),
        })
    })
}

/// What one StreamingOutputCallRequest asks for: its responses, then its status if that
/// is not OK (which ends the call).
fn answer(request: StreamingOutputCallRequest, echo: &Echo) -> ResponseStream {
    let checked = check_response_type(request.response_type)
        .and_then(|()| check_parameters(&request.response_parameters));
    if let Err(status) = checked {
        return stream::once(async move { Err(status) }).boxed();
    }
    let end = requested_status(request.response_status.as_ref()).map(|s| Err(echo.status(s)));
    responses_for(request.response_parameters)
        .chain(stream::iter(end))
        .boxed()
}

impl TestService for TestServiceImpl {
    async fn empty_call(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        let _call = self.enter(request.peer());
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let _call = self.enter(request.peer());
        let echo = Echo::of(request.metadata());
        let request = request.into_inner();
        tracing::debug!(
            response_size = request.response_size,
            "UnaryCall with a {}-byte payload",
            request.payload.as_ref().map_or(0, |p| p.body.len())
        );
        let answer = check_response_type(request.response_type)
            .and_then(|()| check_not_expecting_compression(request.expect_compressed.as_ref()))
            .and_then(
                |()| match requested_status(request.response_status.as_ref()) {
                    Some(status) => Err(status),
                    None => zero_payload(request.response_size),
                },
            );
        match answer {
            Ok(payload) => Ok(echo.apply(Response::new(SimpleResponse {
                payload: Some(payload),
                ..SimpleResponse::default()
            }))),
            Err(status) => Err(echo.status(status)),
        }
    }

    async fn cacheable_unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let _call = self.enter(request.peer());
        let echo = Echo::of(request.metadata());
        let request = request.into_inner();
        check_response_type(request.response_type).map_err(|s| echo.status(s))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut response = Response::new(SimpleResponse {
            payload: Some(Payload {
                r#type: PayloadType::Compressable as i32,
                body: now.to_string().into_bytes(),
            }),
            ..SimpleResponse::default()
        });
        response.metadata_mut().insert(
            "cache-control",
            MetadataValue::from_static("max-age=60, public"),
        );
        Ok(echo.apply(response))
    }

    type StreamingOutputCallStream = ResponseStream;

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Self::StreamingOutputCallStream>, Status> {
        let call = self.enter(request.peer());
        let echo = Echo::of(request.metadata());
        let request = request.into_inner();
        check_response_type(request.response_type)
            .and_then(|()| check_parameters(&request.response_parameters))
            .map_err(|s| echo.status(s))?;
        tracing::debug!(
            "StreamingOutputCall: {} responses",
            request.response_parameters.len()
        );
        let responses = answer(request, &echo);
        Ok(echo.apply(Response::new(guarded(call, responses))))
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        let _call = self.enter(request.peer());
        let mut requests = request.into_inner();
        let mut total: i32 = 0;
        let mut count = 0u64;
        while let Some(request) = requests.message().await? {
            check_not_expecting_compression(request.expect_compressed.as_ref())?;
            let size = request.payload.map_or(0, |p| p.body.len());
            total = i32::try_from(size)
                .ok()
                .and_then(|size| total.checked_add(size))
                .ok_or_else(|| {
                    Status::out_of_range("the payloads add up to more than an int32 holds")
                })?;
            count += 1;
        }
        tracing::debug!("StreamingInputCall: {count} requests, {total} payload bytes");
        Ok(Response::new(StreamingInputCallResponse {
            aggregated_payload_size: total,
        }))
    }

    type FullDuplexCallStream = ResponseStream;

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Self::FullDuplexCallStream>, Status> {
        let call = self.enter(request.peer());
        let echo = Echo::of(request.metadata());
        let requests = request.into_inner();
        let each = echo.clone();
        // Each request's responses in turn; the framework stops at the first error item,
        // so a requested status ends the call there.
        let responses = requests.flat_map(move |request| match request {
            Ok(request) => answer(request, &each),
            Err(status) => stream::once(async move { Err(status) }).boxed(),
        });
        Ok(echo.apply(Response::new(guarded(call, responses))))
    }

    type HalfDuplexCallStream = ResponseStream;

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Self::HalfDuplexCallStream>, Status> {
        let call = self.enter(request.peer());
        let echo = Echo::of(request.metadata());
        let mut requests = request.into_inner();
        let each = echo.clone();
        // Every request first (without its payload, which plays no part in the answer).
        let all = async move {
            let mut all = Vec::new();
            while let Some(mut request) = requests.message().await? {
                if all.len() == MAX_HALF_DUPLEX_REQUESTS {
                    return Err(Status::resource_exhausted(format!(
                        "HalfDuplexCall holds at most {MAX_HALF_DUPLEX_REQUESTS} requests"
                    )));
                }
                request.payload = None;
                all.push(request);
            }
            Ok(all)
        };
        let responses = stream::once(all).flat_map(move |all| match all {
            Ok(all) => {
                let each = each.clone();
                stream::iter(all)
                    .flat_map(move |request| answer(request, &each))
                    .boxed()
            }
            Err(status) => stream::once(async move { Err(status) }).boxed(),
        });
        Ok(echo.apply(Response::new(guarded(call, responses))))
    }

    async fn unimplemented_call(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        let _call = self.enter(request.peer());
        Err(Status::unimplemented(
            "grpc.testing.TestService/UnimplementedCall is left unimplemented on purpose",
        ))
    }
}

// ===== the client ======================================================================

/// The interop test cases this client runs, in the descriptions' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// One EmptyCall.
    EmptyUnary,
    /// UnaryCall: 271828 bytes out, 314159 back.
    LargeUnary,
    /// StreamingInputCall with payloads of 27182, 8, 1828 and 45904 bytes: 74922 in all.
    ClientStreaming,
    /// StreamingOutputCall answering 31415, 9, 2653 and 58979 bytes.
    ServerStreaming,
    /// FullDuplexCall, four requests each answered before the next is sent.
    PingPong,
    /// FullDuplexCall closed at once: no responses, status OK.
    EmptyStream,
    /// FullDuplexCall with a 1 ms deadline the server never answers within:
    /// DEADLINE_EXCEEDED, then the connection still serves an EmptyCall.
    TimeoutOnSleepingServer,
    /// StreamingInputCall cancelled before any request was sent, then an EmptyCall.
    ///
    /// rpc-core cancels a call when its future or handle is dropped, which leaves nothing to
    /// read the CANCELLED status from: the case checks the call was open and unanswered when
    /// dropped, and that the connection serves the EmptyCall afterwards.
    CancelAfterBegin,
    /// FullDuplexCall cancelled (dropped) after its first response, then an EmptyCall; as for
    /// `cancel_after_begin`, the CANCELLED status itself cannot be read.
    CancelAfterFirstResponse,
    /// UnaryCall and FullDuplexCall asked to end with code 2 and "test status message".
    StatusCodeAndMessage,
    /// UnaryCall asked to end with code 2 and a message of whitespace and Unicode.
    SpecialStatusMessage,
    /// TestService/UnimplementedCall: UNIMPLEMENTED.
    UnimplementedMethod,
    /// UnimplementedService/UnimplementedCall, a service the server lacks: UNIMPLEMENTED.
    UnimplementedService,
    /// UnaryCall and FullDuplexCall with the echo headers: both come back.
    CustomMetadata,
}

impl Case {
    /// Every case, in the descriptions' order.
    pub const ALL: [Case; 14] = [
        Case::EmptyUnary,
        Case::LargeUnary,
        Case::ClientStreaming,
        Case::ServerStreaming,
        Case::PingPong,
        Case::EmptyStream,
        Case::TimeoutOnSleepingServer,
        Case::CancelAfterBegin,
        Case::CancelAfterFirstResponse,
        Case::StatusCodeAndMessage,
        Case::SpecialStatusMessage,
        Case::UnimplementedMethod,
        Case::UnimplementedService,
        Case::CustomMetadata,
    ];

    /// The case's name in the interop descriptions (`empty_unary`).
    pub fn name(self) -> &'static str {
        match self {
            Case::EmptyUnary => "empty_unary",
            Case::LargeUnary => "large_unary",
            Case::ClientStreaming => "client_streaming",
            Case::ServerStreaming => "server_streaming",
            Case::PingPong => "ping_pong",
            Case::EmptyStream => "empty_stream",
            Case::TimeoutOnSleepingServer => "timeout_on_sleeping_server",
            Case::CancelAfterBegin => "cancel_after_begin",
            Case::CancelAfterFirstResponse => "cancel_after_first_response",
            Case::StatusCodeAndMessage => "status_code_and_message",
            Case::SpecialStatusMessage => "special_status_message",
            Case::UnimplementedMethod => "unimplemented_method",
            Case::UnimplementedService => "unimplemented_service",
            Case::CustomMetadata => "custom_metadata",
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Case {
    type Err = String;

    fn from_str(s: &str) -> Result<Case, String> {
        Case::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown test case `{s}`"))
    }
}

/// The message of `special_status_message`: whitespace, a BMP and a non-BMP character.
pub const SPECIAL_STATUS_MESSAGE: &str =
    "\t\ntest with whitespace\r\nand Unicode BMP \u{263a} and non-BMP \u{1f608}\t\n";
/// The echo header value of `custom_metadata`.
pub const ECHO_INITIAL_VALUE: &str = "test_initial_metadata_value";
/// The echo trailer value of `custom_metadata`.
pub const ECHO_TRAILING_VALUE: [u8; 3] = [0xab, 0xab, 0xab];

/// The payload sizes of `client_streaming` and their sum.
const CLIENT_STREAMING_SIZES: [i32; 4] = [27_182, 8, 1_828, 45_904];
const CLIENT_STREAMING_TOTAL: i32 = 74_922;
/// The response sizes of `server_streaming`.
const SERVER_STREAMING_SIZES: [i32; 4] = [31_415, 9, 2_653, 58_979];
/// `ping_pong`'s (response size, request payload size) pairs.
const PING_PONG: [(i32, i32); 4] = [(31_415, 27_182), (9, 8), (2_653, 1_828), (58_979, 45_904)];

/// Extra time the case runner gives a case past its deadline before it reports it stuck.
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(2);

/// A case's verdict: `Err` holds why it failed.
pub type Verdict = Result<(), String>;

/// Runs the interop cases over one connection, through the generated clients of
/// `TestService` and `UnimplementedService`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InteropClient {
    test: TestServiceClient,
    unimplemented: UnimplementedServiceClient,
}

impl InteropClient {
    /// The cases' client over `client`'s connection (every case shares it).
    pub fn new(client: rpc_core::Client) -> InteropClient {
        InteropClient {
            test: TestServiceClient::new(client.clone()),
            unimplemented: UnimplementedServiceClient::new(client),
        }
    }

    /// Runs `case` on this thread; every call of the case gets what is left of `timeout`.
    pub fn run(&self, case: Case, timeout: Duration) -> Verdict {
        let run = CaseRun {
            test: &self.test,
            unimplemented: &self.unimplemented,
            deadline: Instant::now() + timeout,
            timeout,
        };
        match case {
            Case::EmptyUnary => run.empty_unary(),
            Case::LargeUnary => run.large_unary(),
            Case::ClientStreaming => run.client_streaming(),
            Case::ServerStreaming => run.server_streaming(),
            Case::PingPong => run.ping_pong(),
            Case::EmptyStream => run.empty_stream(),
            Case::TimeoutOnSleepingServer => run.timeout_on_sleeping_server(),
            Case::CancelAfterBegin => run.cancel_after_begin(),
            Case::CancelAfterFirstResponse => run.cancel_after_first_response(),
            Case::StatusCodeAndMessage => run.echo_status("test status message", true),
            Case::SpecialStatusMessage => run.echo_status(SPECIAL_STATUS_MESSAGE, false),
            Case::UnimplementedMethod => run.unimplemented_method(),
            Case::UnimplementedService => run.unimplemented_service(),
            Case::CustomMetadata => run.custom_metadata(),
        }
    }
}

/// How many cases passed and failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "summary: {} passed, {} failed", self.passed, self.failed)
    }
}

/// The output line of a case: `case NAME: PASS`, or `case NAME: FAIL ` and the reason on one
/// line (the format of the Python and Node interop clients in `interop/`).
pub fn result_line(case: Case, verdict: &Verdict) -> String {
    match verdict {
        Ok(()) => format!("case {case}: PASS"),
        Err(reason) => {
            let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
            let reason = if reason.is_empty() {
                "(no reason given)".to_owned()
            } else {
                reason
            };
            format!("case {case}: FAIL {reason}")
        }
    }
}

/// Runs `cases` in order, each on a thread of its own under a watchdog (a case stuck
/// [`WATCHDOG_GRACE`] past its deadline fails, its thread is left behind, and the run goes
/// on), and hands each case's [`result_line`] to `line` as soon as it is known.
pub fn run_cases(
    client: &InteropClient,
    cases: &[Case],
    timeout: Duration,
    mut line: impl FnMut(&str),
) -> Summary {
    let mut summary = Summary::default();
    for &case in cases {
        let verdict = run_watched(client, case, timeout);
        match verdict {
            Ok(()) => summary.passed += 1,
            Err(_) => summary.failed += 1,
        }
        line(&result_line(case, &verdict));
    }
    summary
}

fn run_watched(client: &InteropClient, case: Case, timeout: Duration) -> Verdict {
    let (done, verdict) = std::sync::mpsc::channel();
    let client = client.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("case-{case}"))
        .spawn(move || {
            let _ = done.send(client.run(case, timeout));
        });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(err) => return Err(format!("could not start a thread for the case: {err}")),
    };
    match verdict.recv_timeout(timeout + WATCHDOG_GRACE) {
        Ok(verdict) => {
            let _ = thread.join();
            verdict
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            tracing::warn!("case {case} is stuck; leaving its thread behind");
            Err(format!(
                "still running {:.1} s after its deadline of {:.1} s",
                WATCHDOG_GRACE.as_secs_f64(),
                timeout.as_secs_f64()
            ))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let why = match thread.join() {
                Err(panic) => panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned()),
                Ok(()) => "the case ended without a verdict".to_owned(),
            };
            Err(format!("the case panicked: {why}"))
        }
    }
}

/// `condition`, or the failure `reason()`.
fn check(condition: bool, reason: impl FnOnce() -> String) -> Verdict {
    if condition {
        Ok(())
    } else {
        Err(reason())
    }
}

/// A status for a failure reason: code and quoted message.
fn describe(status: &Status) -> String {
    format!("{} {:?}", status.code(), status.message())
}

fn zeros(size: i32) -> Option<Payload> {
    Some(Payload {
        r#type: PayloadType::Compressable as i32,
        body: vec![0; usize::try_from(size).unwrap_or(0)],
    })
}

fn streaming_request(
    sizes: &[i32],
    payload: Option<i32>,
    status: Option<(i32, &str)>,
) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_type: PayloadType::Compressable as i32,
        response_parameters: sizes
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..ResponseParameters::default()
            })
            .collect(),
        payload: payload.and_then(zeros),
        response_status: status.map(|(code, message)| EchoStatus {
            code,
            message: message.to_owned(),
        }),
    }
}

/// Whether `payload` is `size` zero bytes; `Err` says what it is instead.
fn check_zeros(what: &str, payload: Option<&Payload>, size: i32) -> Verdict {
    let body = payload.map_or(&[][..], |p| p.body.as_slice());
    check(
        usize::try_from(size).is_ok_and(|size| body.len() == size) && body.iter().all(|&b| b == 0),
        || {
            format!(
                "{what}: want {size} zero bytes, got {} bytes{}",
                body.len(),
                if body.iter().all(|&b| b == 0) {
                    ""
                } else {
                    " (not all zero)"
                }
            )
        },
    )
}

/// A call's failure as a verdict, named after the method.
fn failed(what: &str) -> impl FnOnce(Status) -> String + '_ {
    move |status| format!("{what}: unexpected status {}", describe(&status))
}

/// The echoed metadata a `custom_metadata` call must have come back with.
fn check_echoed(what: &str, headers: &MetadataMap, trailers: Option<&MetadataMap>) -> Verdict {
    check(
        headers
            .get(ECHO_INITIAL_KEY)
            .is_some_and(|v| v == ECHO_INITIAL_VALUE),
        || {
            format!(
                "{what}: the response headers lack {ECHO_INITIAL_KEY}: {ECHO_INITIAL_VALUE} (have {})",
                show(headers)
            )
        },
    )?;
    let trailers = trailers.ok_or_else(|| format!("{what}: no trailers"))?;
    check(
        trailers
            .get_bin(ECHO_TRAILING_KEY)
            .is_some_and(|v| *v == ECHO_TRAILING_VALUE[..]),
        || {
            format!(
                "{what}: the trailers lack {ECHO_TRAILING_KEY}: {ECHO_TRAILING_VALUE:02x?} (have {})",
                show(trailers)
            )
        },
    )
}

/// Metadata for a failure reason.
fn show(metadata: &MetadataMap) -> String {
    let entries: Vec<String> = metadata
        .iter()
        .map(|(k, v)| match std::str::from_utf8(v) {
            Ok(text) if !k.ends_with("-bin") => format!("{k}: {text:?}"),
            _ => format!("{k}: {v:02x?}"),
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// One run of one case: the clients and the case's deadline.
struct CaseRun<'a> {
    test: &'a TestServiceClient,
    unimplemented: &'a UnimplementedServiceClient,
    deadline: Instant,
    timeout: Duration,
}

impl CaseRun<'_> {
    /// What is left of the case's deadline.
    fn left(&self) -> Result<Duration, String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(format!(
                "the case's deadline of {:.1} s passed",
                self.timeout.as_secs_f64()
            ))
        } else {
            Ok(left)
        }
    }

    /// `message` as a request that gets what is left of the deadline.
    fn request<T>(&self, message: T) -> Result<Request<T>, String> {
        Ok(Request::new(message).with_timeout(self.left()?))
    }

    /// After a cancel or a timeout: the connection still serves an EmptyCall. (rpc-core's
    /// client would reconnect without a word had the connection been lost; the server's
    /// [`TestServiceImpl::connections_seen`] tells.)
    fn connection_still_works(&self, after: &str) -> Verdict {
        self.test
            .empty_call(self.request(Empty {})?)
            .map(drop)
            .map_err(|status| {
                format!(
                    "EmptyCall on the same connection after {after} failed: {}",
                    describe(&status)
                )
            })
    }

    fn empty_unary(&self) -> Verdict {
        // The response decoded as an Empty: nothing more to check.
        self.test
            .empty_call(self.request(Empty {})?)
            .map(drop)
            .map_err(failed("EmptyCall"))
    }

    fn large_unary(&self) -> Verdict {
        let request = SimpleRequest {
            response_type: PayloadType::Compressable as i32,
            response_size: 314_159,
            payload: zeros(271_828),
            ..SimpleRequest::default()
        };
        let response = self
            .test
            .unary_call(self.request(request)?)
            .map_err(failed("UnaryCall"))?
            .into_inner();
        check_zeros("UnaryCall", response.payload.as_ref(), 314_159)
    }

    fn client_streaming(&self) -> Verdict {
        let requests = CLIENT_STREAMING_SIZES
            .map(|size| StreamingInputCallRequest {
                payload: zeros(size),
                expect_compressed: None,
            })
            .to_vec();
        // Blocking: the requests go out one by one as the server's window allows.
        let response = self
            .test
            .streaming_input_call(self.request(requests)?)
            .map_err(failed("StreamingInputCall"))?
            .into_inner();
        check(
            response.aggregated_payload_size == CLIENT_STREAMING_TOTAL,
            || {
                format!(
                    "aggregated_payload_size {}, want {CLIENT_STREAMING_TOTAL}",
                    response.aggregated_payload_size
                )
            },
        )
    }

    fn server_streaming(&self) -> Verdict {
        let request = streaming_request(&SERVER_STREAMING_SIZES, None, None);
        let responses = self
            .test
            .streaming_output_call(self.request(request)?)
            .map_err(failed("StreamingOutputCall"))?
            .into_inner();
        let mut count = 0;
        for response in responses.into_blocking_iter() {
            let response = response.map_err(|status| {
                format!(
                    "StreamingOutputCall: status {} after {count} responses",
                    describe(&status)
                )
            })?;
            let want = SERVER_STREAMING_SIZES.get(count).copied().ok_or_else(|| {
                format!(
                    "StreamingOutputCall: more than {} responses",
                    SERVER_STREAMING_SIZES.len()
                )
            })?;
            count += 1;
            check_zeros(
                &format!("response {count}"),
                response.payload.as_ref(),
                want,
            )?;
        }
        check(count == SERVER_STREAMING_SIZES.len(), || {
            format!(
                "StreamingOutputCall: {count} responses, want {}",
                SERVER_STREAMING_SIZES.len()
            )
        })
    }

    fn ping_pong(&self) -> Verdict {
        let mut call = self
            .test
            .full_duplex_call(self.request(())?)
            .map_err(failed("FullDuplexCall"))?;
        for (i, &(size, body)) in PING_PONG.iter().enumerate() {
            let sent = call.send(&streaming_request(&[size], Some(body), None));
            if let Err(status) = sent {
                // The call is over; its status is in the responses.
                let status = call.recv().err().unwrap_or(status);
                return Err(format!(
                    "FullDuplexCall: request {} not sent: {}",
                    i + 1,
                    describe(&status)
                ));
            }
            let response = call
                .recv()
                .map_err(|status| {
                    format!(
                        "FullDuplexCall: status {} instead of response {}",
                        describe(&status),
                        i + 1
                    )
                })?
                .ok_or_else(|| {
                    format!("FullDuplexCall: the stream ended before response {}", i + 1)
                })?;
            check_zeros(
                &format!("response {}", i + 1),
                response.payload.as_ref(),
                size,
            )?;
        }
        call.close_send();
        match call.recv() {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("FullDuplexCall: a fifth response".to_owned()),
            Err(status) => Err(format!(
                "FullDuplexCall: ended with {} after the four responses",
                describe(&status)
            )),
        }
    }

    fn empty_stream(&self) -> Verdict {
        let mut call = self
            .test
            .full_duplex_call(self.request(())?)
            .map_err(failed("FullDuplexCall"))?;
        call.close_send();
        match call.recv() {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("FullDuplexCall: a response to no request".to_owned()),
            Err(status) => Err(format!("FullDuplexCall: ended with {}", describe(&status))),
        }
    }

    fn timeout_on_sleeping_server(&self) -> Verdict {
        self.left()?;
        let request = Request::new(()).with_timeout(Duration::from_millis(1));
        let mut call = self
            .test
            .full_duplex_call(request)
            .map_err(failed("FullDuplexCall"))?;
        // One request and no half-close: the server waits for more, and the deadline
        // passes. Sending may already find the call over.
        let _ = call.send(&streaming_request(&[], Some(27_182), None));
        let outcome = call.recv();
        drop(call);
        match outcome {
            Err(status) if status.code() == Code::DeadlineExceeded => {}
            Err(status) => {
                return Err(format!(
                    "FullDuplexCall: want DEADLINE_EXCEEDED, got {}",
                    describe(&status)
                ))
            }
            Ok(response) => {
                return Err(format!(
                    "FullDuplexCall: want DEADLINE_EXCEEDED, got {}",
                    if response.is_some() {
                        "a response"
                    } else {
                        "the end of the stream (OK)"
                    }
                ))
            }
        }
        self.connection_still_works("the timeout")
    }

    fn cancel_after_begin(&self) -> Verdict {
        // A request stream that never yields: nothing is sent before the cancel.
        let requests =
            Request::new(stream::pending::<StreamingInputCallRequest>()).with_timeout(self.left()?);
        let mut test = test_service_client::TestServiceClient::from(self.test.clone());
        let mut call = Box::pin(test.streaming_input_call(requests));
        // The first poll opens the call (the server sees it start) and finds no response.
        if let Some(outcome) = call.as_mut().now_or_never() {
            return Err(match outcome {
                Ok(_) => "StreamingInputCall answered before any request".to_owned(),
                Err(status) => format!(
                    "StreamingInputCall ended before the cancel: {}",
                    describe(&status)
                ),
            });
        }
        // Dropping the future is how this framework's client cancels a call: the server is
        // sent a CANCEL and drops the handler. The call's CANCELLED outcome has no reader
        // left: rpc-core has no cancel that keeps the call to read its status, so what is
        // checked is that the cancel leaves the connection working.
        drop(call);
        self.connection_still_works("the cancel")
    }

    fn cancel_after_first_response(&self) -> Verdict {
        let mut call = self
            .test
            .full_duplex_call(self.request(())?)
            .map_err(failed("FullDuplexCall"))?;
        call.send(&streaming_request(&[31_415], Some(27_182), None))
            .map_err(|status| {
                let status = call.recv().err().unwrap_or(status);
                format!("FullDuplexCall: request not sent: {}", describe(&status))
            })?;
        let first = call
            .recv()
            .map_err(|status| {
                format!(
                    "FullDuplexCall: status {} instead of the first response",
                    describe(&status)
                )
            })?
            .ok_or_else(|| {
                "FullDuplexCall: the stream ended before the first response".to_owned()
            })?;
        check_zeros("first response", first.payload.as_ref(), 31_415)?;
        // Dropping the call's handle cancels it.
        drop(call);
        self.connection_still_works("the cancel")
    }

    fn echo_status(&self, message: &str, full_duplex: bool) -> Verdict {
        let want = |what: &str, outcome: Result<String, Status>| -> Verdict {
            match outcome {
                Err(status) if status.code() == Code::Unknown && status.message() == message => {
                    Ok(())
                }
                Err(status) => Err(format!(
                    "{what}: want UNKNOWN {message:?}, got {}",
                    describe(&status)
                )),
                Ok(got) => Err(format!("{what}: want UNKNOWN {message:?}, got {got}")),
            }
        };
        let request = SimpleRequest {
            response_type: PayloadType::Compressable as i32,
            response_status: Some(EchoStatus {
                code: 2,
                message: message.to_owned(),
            }),
            ..SimpleRequest::default()
        };
        let outcome = self
            .test
            .unary_call(self.request(request)?)
            .map(|_| "a response".to_owned());
        want("UnaryCall", outcome)?;
        if !full_duplex {
            return Ok(());
        }
        let mut call = self
            .test
            .full_duplex_call(self.request(())?)
            .map_err(failed("FullDuplexCall"))?;
        // If the send fails the call is over, and its status is what recv returns.
        let _ = call.send(&streaming_request(&[], None, Some((2, message))));
        call.close_send();
        let outcome = call.recv().map(|response| match response {
            Some(_) => "a response".to_owned(),
            None => "the end of the stream (OK)".to_owned(),
        });
        want("FullDuplexCall", outcome)
    }

    fn unimplemented_method(&self) -> Verdict {
        match self.test.unimplemented_call(self.request(Empty {})?) {
            Err(status) if status.code() == Code::Unimplemented => Ok(()),
            Err(status) => Err(format!(
                "TestService/UnimplementedCall: want UNIMPLEMENTED, got {}",
                describe(&status)
            )),
            Ok(_) => Err("TestService/UnimplementedCall: want UNIMPLEMENTED, got OK".to_owned()),
        }
    }

    fn unimplemented_service(&self) -> Verdict {
        match self
            .unimplemented
            .unimplemented_call(self.request(Empty {})?)
        {
            Err(status) if status.code() == Code::Unimplemented => Ok(()),
            Err(status) => Err(format!(
                "UnimplementedService/UnimplementedCall: want UNIMPLEMENTED, got {}",
                describe(&status)
            )),
            Ok(_) => {
                Err("UnimplementedService/UnimplementedCall: want UNIMPLEMENTED, got OK".to_owned())
            }
        }
    }

    /// The echo headers on `request`.
    fn with_echo_metadata<T>(&self, message: T) -> Result<Request<T>, String> {
        let mut request = self.request(message)?;
        let metadata = request.metadata_mut();
        metadata.insert(
            ECHO_INITIAL_KEY,
            MetadataValue::from_static(ECHO_INITIAL_VALUE),
        );
        metadata.insert_bin(
            ECHO_TRAILING_KEY,
            MetadataValue::from_bytes(&ECHO_TRAILING_VALUE),
        );
        Ok(request)
    }

    fn custom_metadata(&self) -> Verdict {
        let request = SimpleRequest {
            response_type: PayloadType::Compressable as i32,
            response_size: 314_159,
            payload: zeros(271_828),
            ..SimpleRequest::default()
        };
        let response = self
            .test
            .unary_call(self.with_echo_metadata(request)?)
            .map_err(failed("UnaryCall"))?;
        check_zeros("UnaryCall", response.get_ref().payload.as_ref(), 314_159)?;
        check_echoed("UnaryCall", response.metadata(), Some(response.trailers()))?;

        // The async form: its response carries the headers (the blocking handle's does not).
        let requests = stream::iter([streaming_request(&[314_159], Some(271_828), None)]);
        let request = self.with_echo_metadata(requests)?;
        let mut test = test_service_client::TestServiceClient::from(self.test.clone());
        block_on(async {
            let response = test
                .full_duplex_call(request)
                .await
                .map_err(failed("FullDuplexCall"))?;
            let (headers, mut responses, _) = response.into_parts();
            let mut count = 0;
            while let Some(response) = responses
                .message()
                .await
                .map_err(failed("FullDuplexCall"))?
            {
                count += 1;
                check_zeros(
                    &format!("FullDuplexCall response {count}"),
                    response.payload.as_ref(),
                    314_159,
                )?;
            }
            check(count == 1, || {
                format!("FullDuplexCall: {count} responses, want 1")
            })?;
            check_echoed("FullDuplexCall", &headers, responses.trailers())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_round_trip() {
        for case in Case::ALL {
            assert_eq!(case.name().parse::<Case>(), Ok(case));
        }
        assert!("all".parse::<Case>().is_err());
        assert_eq!(Case::ALL.len(), 14);
    }

    #[test]
    fn result_lines_have_the_stock_clients_format() {
        assert_eq!(
            result_line(Case::EmptyUnary, &Ok(())),
            "case empty_unary: PASS"
        );
        assert_eq!(
            result_line(Case::PingPong, &Err("two\nlines\t here".into())),
            "case ping_pong: FAIL two lines here"
        );
        assert_eq!(
            result_line(Case::PingPong, &Err(" ".into())),
            "case ping_pong: FAIL (no reason given)"
        );
        assert_eq!(
            Summary {
                passed: 13,
                failed: 1
            }
            .to_string(),
            "summary: 13 passed, 1 failed"
        );
    }

    #[test]
    fn the_sizes_add_up() {
        assert_eq!(
            CLIENT_STREAMING_SIZES.iter().sum::<i32>(),
            CLIENT_STREAMING_TOTAL
        );
    }

    #[test]
    fn requested_statuses() {
        let status = |code, message: &str| EchoStatus {
            code,
            message: message.to_owned(),
        };
        assert_eq!(requested_status(None), None);
        assert_eq!(requested_status(Some(&status(0, "ignored"))), None);
        let s = requested_status(Some(&status(2, "m"))).unwrap();
        assert_eq!((s.code(), s.message()), (Code::Unknown, "m"));
        let s = requested_status(Some(&status(5, ""))).unwrap();
        assert_eq!(s.code(), Code::NotFound);
        let s = requested_status(Some(&status(-3, ""))).unwrap();
        assert_eq!(s.code(), Code::Unknown);
    }

    #[test]
    fn payload_limits() {
        assert_eq!(zero_payload(3).unwrap().body, [0, 0, 0]);
        assert_eq!(zero_payload(-1).unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(
            zero_payload(MAX_PAYLOAD_SIZE as i32 + 1)
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
        let p = |size, interval_us| ResponseParameters {
            size,
            interval_us,
            compressed: None,
        };
        assert!(check_parameters(&[p(1, 0), p(0, 5)]).is_ok());
        assert!(check_parameters(&[p(1, 0), p(-1, 0)]).is_err());
        assert!(check_parameters(&[p(1, -1)]).is_err());
        assert!(check_parameters(&[p(i32::MAX, 0)]).is_err());
    }

    #[test]
    fn unary_call_echoes_metadata_and_status() {
        let service = TestServiceImpl::new();
        let mut request = Request::new(SimpleRequest {
            response_size: 5,
            ..SimpleRequest::default()
        });
        request
            .metadata_mut()
            .insert(ECHO_INITIAL_KEY, MetadataValue::from_static("v"));
        request
            .metadata_mut()
            .insert_bin(ECHO_TRAILING_KEY, MetadataValue::from_bytes(&[1, 2]));
        let response = block_on(service.unary_call(request.clone())).unwrap();
        assert_eq!(response.get_ref().payload.as_ref().unwrap().body, [0; 5]);
        assert_eq!(response.metadata().get(ECHO_INITIAL_KEY).unwrap(), "v");
        assert_eq!(
            *response.trailers().get_bin(ECHO_TRAILING_KEY).unwrap(),
            [1, 2][..]
        );

        request.get_mut().response_status = Some(EchoStatus {
            code: 9,
            message: "no".into(),
        });
        let status = block_on(service.unary_call(request)).unwrap_err();
        assert_eq!(
            (status.code(), status.message()),
            (Code::FailedPrecondition, "no")
        );
        assert_eq!(
            *status.metadata().get_bin(ECHO_TRAILING_KEY).unwrap(),
            [1, 2][..]
        );
        assert_eq!(service.calls_in_progress(), 0);
    }

    #[test]
    fn streaming_output_call_paces_its_responses() {
        let service = TestServiceImpl::new();
        let request = StreamingOutputCallRequest {
            response_parameters: vec![
                ResponseParameters {
                    size: 2,
                    interval_us: 20_000,
                    compressed: None,
                },
                ResponseParameters {
                    size: 0,
                    interval_us: 20_000,
                    compressed: None,
                },
            ],
            response_status: Some(EchoStatus {
                code: 2,
                message: "after".into(),
            }),
            ..StreamingOutputCallRequest::default()
        };
        let start = Instant::now();
        let responses = block_on(service.streaming_output_call(Request::new(request)))
            .unwrap()
            .into_inner();
        assert_eq!(service.calls_in_progress(), 1);
        let items: Vec<_> = block_on(responses.collect());
        assert!(start.elapsed() >= Duration::from_millis(40));
        assert_eq!(items.len(), 3);
        assert_eq!(
            items[0].as_ref().unwrap().payload.as_ref().unwrap().body,
            [0, 0]
        );
        assert_eq!(
            items[1].as_ref().unwrap().payload.as_ref().unwrap().body,
            []
        );
        assert_eq!(items[2].as_ref().unwrap_err().message(), "after");
        assert_eq!(service.calls_in_progress(), 0);
    }
}
