//! gRPC's interop test client written on the `tonic` crate, the way a tonic application
//! calls a service: async methods of tonic's generated clients over a tonic `Channel`. It
//! runs the 14 cases of gRPC's interop descriptions and checks each result where tonic's
//! client API reports it: an error at the call (`client.method(request).await` is `Err`,
//! which tonic gives for a Trailers-Only response) or in the response stream
//! (`stream.message().await` is `Err`). Against this repository's gRPC face it shows what a
//! tonic client sees; against a stock server (`interop/python/server.py`) it shows the
//! expectations are the stock ones.
//!
//! ```text
//! tonic-interop-client --server_port N [--server_host H] [--test_case all|NAME[,NAME...]]
//!                      [--case_timeout_s S] [--use_tls=false]
//! ```
//!
//! Output, as the other interop clients print it: one line per case, `case NAME: PASS` or
//! `case NAME: FAIL reason`, then `summary: N passed, M failed`. Exit status 0 when every
//! case passed, 1 when one failed (or the server was unreachable), 2 for a bad command line.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use tokio::sync::mpsc::Sender;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status, Streaming};

#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod pb {
    tonic::include_proto!("grpc.testing");
}

use pb::test_service_client::TestServiceClient;
use pb::unimplemented_service_client::UnimplementedServiceClient;
use pb::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest, StreamingOutputCallResponse,
};

/// The message of `special_status_message`: whitespace, a BMP and a non-BMP character.
const SPECIAL_STATUS_MESSAGE: &str =
    "\t\ntest with whitespace\r\nand Unicode BMP \u{263a} and non-BMP \u{1f608}\t\n";
const ECHO_INITIAL_KEY: &str = "x-grpc-test-echo-initial";
const ECHO_INITIAL_VALUE: &str = "test_initial_metadata_value";
const ECHO_TRAILING_KEY: &str = "x-grpc-test-echo-trailing-bin";
const ECHO_TRAILING_VALUE: [u8; 3] = [0xab, 0xab, 0xab];
const CLIENT_STREAMING_SIZES: [i32; 4] = [27_182, 8, 1_828, 45_904];
const CLIENT_STREAMING_TOTAL: i32 = 74_922;
const SERVER_STREAMING_SIZES: [i32; 4] = [31_415, 9, 2_653, 58_979];
/// `ping_pong`'s (response size, request payload size) pairs.
const PING_PONG: [(i32, i32); 4] = [(31_415, 27_182), (9, 8), (2_653, 1_828), (58_979, 45_904)];

/// The cases, in the interop descriptions' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    EmptyUnary,
    LargeUnary,
    ClientStreaming,
    ServerStreaming,
    PingPong,
    EmptyStream,
    TimeoutOnSleepingServer,
    CancelAfterBegin,
    CancelAfterFirstResponse,
    StatusCodeAndMessage,
    SpecialStatusMessage,
    UnimplementedMethod,
    UnimplementedService,
    CustomMetadata,
}

impl Case {
    const ALL: [Case; 14] = [
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

    fn name(self) -> &'static str {
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

/// The command line.
struct Args {
    host: String,
    port: u16,
    cases: Vec<Case>,
    case_timeout: Duration,
}

const USAGE: &str = "usage: tonic-interop-client --server_port N [--server_host H] \
[--test_case all|NAME[,NAME...]] [--case_timeout_s S] [--use_tls=false]";

impl Args {
    fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut host = "localhost".to_string();
        let mut port = None;
        let mut cases = Case::ALL.to_vec();
        let mut case_timeout = Duration::from_secs(10);
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            // `--flag=value` or `--flag value`, as gRPC's interop runners pass them.
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--server_host" => host = value()?,
                "--server_port" => {
                    let v = value()?;
                    port = Some(v.parse().map_err(|_| format!("bad --server_port {v}"))?);
                }
                "--test_case" => {
                    let v = value()?;
                    if v != "all" {
                        cases = v
                            .split(',')
                            .map(|name| {
                                Case::ALL
                                    .into_iter()
                                    .find(|c| c.name() == name)
                                    .ok_or_else(|| format!("unknown test case `{name}`"))
                            })
                            .collect::<Result<_, _>>()?;
                    }
                }
                "--case_timeout_s" => {
                    let v = value()?;
                    let secs: u64 = v.parse().map_err(|_| format!("bad --case_timeout_s {v}"))?;
                    case_timeout = Duration::from_secs(secs);
                }
                "--use_tls" => {
                    if value()? != "false" {
                        return Err("TLS is not supported by this client".into());
                    }
                }
                "-h" | "--help" => return Err(USAGE.into()),
                _ => return Err(format!("unknown argument {arg}")),
            }
        }
        let port = port.ok_or("--server_port is required")?;
        Ok(Args {
            host,
            port,
            cases,
            case_timeout,
        })
    }
}

/// A case's verdict: `Err` holds why it failed.
type Verdict = Result<(), String>;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("tonic-interop-client: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tonic-interop-client: cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let failed = runtime.block_on(run(&args));
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the cases over one channel; returns how many failed.
async fn run(args: &Args) -> usize {
    // An IPv6 literal goes in brackets in the URI.
    let host = match args.host.contains(':') {
        true => format!("[{}]", args.host),
        false => args.host.clone(),
    };
    let uri = format!("http://{host}:{}", args.port);
    let connected = match Endpoint::from_shared(uri.clone()) {
        Ok(endpoint) => endpoint
            .connect_timeout(Duration::from_secs(10))
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {uri}: {}", chain(&e))),
        Err(e) => Err(format!("bad server address {uri}: {e}")),
    };
    let verdicts: Vec<(Case, Verdict)> = match connected {
        Ok(channel) => {
            let mut verdicts = Vec::new();
            for &case in &args.cases {
                // Every call of a case has its deadline; this bounds a case that hangs.
                let limit = args.case_timeout + Duration::from_secs(2);
                let verdict = tokio::time::timeout(limit, run_case(&channel, case))
                    .await
                    .unwrap_or_else(|_| Err(format!("no result within {limit:?}")));
                println!("{}", result_line(case, &verdict));
                verdicts.push((case, verdict));
            }
            verdicts
        }
        Err(why) => {
            eprintln!("tonic-interop-client: {why}");
            args.cases
                .iter()
                .map(|&case| {
                    let verdict = Err(why.clone());
                    println!("{}", result_line(case, &verdict));
                    (case, verdict)
                })
                .collect()
        }
    };
    let failed = verdicts.iter().filter(|(_, v)| v.is_err()).count();
    println!(
        "summary: {} passed, {failed} failed",
        verdicts.len() - failed
    );
    failed
}

/// An error and its sources, one after another (tonic's transport error alone says only
/// "transport error").
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn result_line(case: Case, verdict: &Verdict) -> String {
    match verdict {
        Ok(()) => format!("case {case}: PASS"),
        Err(why) => format!("case {case}: FAIL {}", why.replace('\n', " ")),
    }
}

async fn run_case(channel: &Channel, case: Case) -> Verdict {
    let test = TestServiceClient::new(channel.clone());
    match case {
        Case::EmptyUnary => empty_unary(test).await,
        Case::LargeUnary => large_unary(test).await,
        Case::ClientStreaming => client_streaming(test).await,
        Case::ServerStreaming => server_streaming(test).await,
        Case::PingPong => ping_pong(test).await,
        Case::EmptyStream => empty_stream(test).await,
        Case::TimeoutOnSleepingServer => timeout_on_sleeping_server(test).await,
        Case::CancelAfterBegin => cancel_after_begin(test).await,
        Case::CancelAfterFirstResponse => cancel_after_first_response(test).await,
        Case::StatusCodeAndMessage => echo_status(test, "test status message", true).await,
        Case::SpecialStatusMessage => echo_status(test, SPECIAL_STATUS_MESSAGE, false).await,
        Case::UnimplementedMethod => {
            let result = test.clone().unimplemented_call(Empty {}).await;
            expect_code("UnimplementedCall", result.map(drop), Code::Unimplemented)
        }
        Case::UnimplementedService => {
            let mut other = UnimplementedServiceClient::new(channel.clone());
            let result = other.unimplemented_call(Empty {}).await;
            expect_code(
                "UnimplementedService/UnimplementedCall",
                result.map(drop),
                Code::Unimplemented,
            )
        }
        Case::CustomMetadata => custom_metadata(test).await,
    }
}

fn zeros(size: i32) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; usize::try_from(size).unwrap_or(0)],
    })
}

fn check_zeros(what: &str, payload: Option<&Payload>, size: i32) -> Verdict {
    let body = payload.map_or(&[][..], |p| &p.body[..]);
    check(
        i32::try_from(body.len()) == Ok(size) && body.iter().all(|&b| b == 0),
        || format!("{what}: {} bytes, expected {size} zero bytes", body.len()),
    )
}

fn check(condition: bool, reason: impl FnOnce() -> String) -> Verdict {
    if condition {
        Ok(())
    } else {
        Err(reason())
    }
}

fn describe(status: &Status) -> String {
    format!("{:?}: {:?}", status.code(), status.message())
}

fn failed(what: &str) -> impl FnOnce(Status) -> String + '_ {
    move |status| format!("{what} failed: {}", describe(&status))
}

fn expect_code(what: &str, result: Result<(), Status>, code: Code) -> Verdict {
    match result {
        Ok(()) => Err(format!("{what} succeeded, expected {code:?}")),
        Err(status) if status.code() == code => Ok(()),
        Err(status) => Err(format!("{what}: {}, expected {code:?}", describe(&status))),
    }
}

fn streaming_request(sizes: &[(i32, i32)]) -> Vec<StreamingOutputCallRequest> {
    sizes
        .iter()
        .map(|&(response, payload)| StreamingOutputCallRequest {
            response_parameters: vec![ResponseParameters {
                size: response,
                ..ResponseParameters::default()
            }],
            payload: zeros(payload),
            ..StreamingOutputCallRequest::default()
        })
        .collect()
}

async fn empty_unary(mut test: TestServiceClient<Channel>) -> Verdict {
    let response = test
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall"))?;
    check(response.into_inner() == Empty {}, || {
        "EmptyCall answered something other than Empty".into()
    })
}

async fn large_unary(mut test: TestServiceClient<Channel>) -> Verdict {
    let request = SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..SimpleRequest::default()
    };
    let response = test
        .unary_call(request)
        .await
        .map_err(failed("UnaryCall"))?;
    check_zeros("UnaryCall", response.get_ref().payload.as_ref(), 314_159)
}

async fn client_streaming(mut test: TestServiceClient<Channel>) -> Verdict {
    let requests: Vec<_> = CLIENT_STREAMING_SIZES
        .iter()
        .map(|&size| StreamingInputCallRequest {
            payload: zeros(size),
            ..StreamingInputCallRequest::default()
        })
        .collect();
    let response = test
        .streaming_input_call(tokio_stream::iter(requests))
        .await
        .map_err(failed("StreamingInputCall"))?;
    let total = response.get_ref().aggregated_payload_size;
    check(total == CLIENT_STREAMING_TOTAL, || {
        format!("aggregated_payload_size {total}, expected {CLIENT_STREAMING_TOTAL}")
    })
}

async fn server_streaming(mut test: TestServiceClient<Channel>) -> Verdict {
    let request = StreamingOutputCallRequest {
        response_parameters: SERVER_STREAMING_SIZES
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..ResponseParameters::default()
            })
            .collect(),
        ..StreamingOutputCallRequest::default()
    };
    let mut responses = test
        .streaming_output_call(request)
        .await
        .map_err(failed("StreamingOutputCall"))?
        .into_inner();
    let mut seen = 0;
    while let Some(response) = responses
        .message()
        .await
        .map_err(failed("StreamingOutputCall's stream"))?
    {
        let Some(&size) = SERVER_STREAMING_SIZES.get(seen) else {
            return Err(format!("more than {seen} responses"));
        };
        check_zeros(&format!("response {seen}"), response.payload.as_ref(), size)?;
        seen += 1;
    }
    check(seen == SERVER_STREAMING_SIZES.len(), || {
        format!(
            "{seen} responses, expected {}",
            SERVER_STREAMING_SIZES.len()
        )
    })
}

/// The sender of a FullDuplexCall's further requests (the call's request stream ends when it
/// drops) and its response stream, `first` sent: tonic answers the call when the response
/// headers came, which a server sends with its first response.
async fn full_duplex(
    test: &mut TestServiceClient<Channel>,
    first: StreamingOutputCallRequest,
) -> Result<
    (
        Sender<StreamingOutputCallRequest>,
        Streaming<StreamingOutputCallResponse>,
    ),
    String,
> {
    let (requests, outgoing) = tokio::sync::mpsc::channel(1);
    requests
        .send(first)
        .await
        .map_err(|_| "the request stream closed".to_string())?;
    let responses = test
        .full_duplex_call(ReceiverStream::new(outgoing))
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    Ok((requests, responses))
}

async fn ping_pong(mut test: TestServiceClient<Channel>) -> Verdict {
    let mut pairs = streaming_request(&PING_PONG).into_iter();
    let first = pairs.next().expect("four pairs");
    let (requests, mut responses) = full_duplex(&mut test, first).await?;
    for (i, &(size, _)) in PING_PONG.iter().enumerate() {
        if i > 0 {
            let next = pairs.next().expect("four pairs");
            requests
                .send(next)
                .await
                .map_err(|_| "the request stream closed".to_string())?;
        }
        let response = responses
            .message()
            .await
            .map_err(failed("FullDuplexCall's stream"))?
            .ok_or_else(|| format!("the stream ended after {i} responses"))?;
        check_zeros(&format!("response {i}"), response.payload.as_ref(), size)?;
    }
    drop(requests);
    let after = responses
        .message()
        .await
        .map_err(failed("FullDuplexCall's end"))?;
    check(after.is_none(), || "a fifth response".into())
}

async fn empty_stream(mut test: TestServiceClient<Channel>) -> Verdict {
    let requests = tokio_stream::iter(Vec::<StreamingOutputCallRequest>::new());
    let mut responses = test
        .full_duplex_call(requests)
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    let first = responses
        .message()
        .await
        .map_err(failed("FullDuplexCall's stream"))?;
    check(first.is_none(), || "a response to no request".into())
}

async fn timeout_on_sleeping_server(mut test: TestServiceClient<Channel>) -> Verdict {
    // The server holds the request stream open and answers nothing; tonic's channel ends
    // the call at the deadline it sends (CANCELLED "Timeout expired") unless the server's
    // DEADLINE_EXCEEDED comes first: either is the deadline passing.
    let (requests, outgoing) = tokio::sync::mpsc::channel(1);
    let first = streaming_request(&[(31_415, 27_182)]).remove(0);
    let _ = requests.send(first).await;
    let mut request = Request::new(ReceiverStream::new(outgoing));
    request.set_timeout(Duration::from_millis(1));
    let result = match test.full_duplex_call(request).await {
        Ok(response) => {
            let mut responses = response.into_inner();
            loop {
                match responses.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => break Ok(()),
                    Err(status) => break Err(status),
                }
            }
        }
        Err(status) => Err(status),
    };
    drop(requests);
    match result {
        Err(status) if status.code() == Code::DeadlineExceeded => {}
        Err(status) if status.code() == Code::Cancelled && status.message().contains("Timeout") => {
        }
        Err(status) => {
            return Err(format!(
                "FullDuplexCall: {}, expected DEADLINE_EXCEEDED",
                describe(&status)
            ))
        }
        Ok(()) => return Err("FullDuplexCall ended OK past its 1 ms deadline".into()),
    }
    still_serves(test).await
}

/// After a cancelled or expired call, the channel serves the next one.
async fn still_serves(mut test: TestServiceClient<Channel>) -> Verdict {
    test.empty_call(Empty {})
        .await
        .map(drop)
        .map_err(failed("EmptyCall after the case"))
}

async fn cancel_after_begin(mut test: TestServiceClient<Channel>) -> Verdict {
    // A request stream that never yields: the call stays open until it is dropped, which is
    // how a tonic client cancels (the HTTP/2 stream is reset; there is no status to read).
    let (requests, outgoing) = tokio::sync::mpsc::channel::<StreamingInputCallRequest>(1);
    let call = test.streaming_input_call(ReceiverStream::new(outgoing));
    match tokio::time::timeout(Duration::from_millis(200), call).await {
        Err(_) => {}
        Ok(Ok(response)) => {
            return Err(format!(
                "StreamingInputCall answered before any request: {:?}",
                response.get_ref()
            ))
        }
        Ok(Err(status)) => {
            return Err(format!(
                "StreamingInputCall failed before it was cancelled: {}",
                describe(&status)
            ))
        }
    }
    drop(requests);
    still_serves(test).await
}

async fn cancel_after_first_response(mut test: TestServiceClient<Channel>) -> Verdict {
    let first = streaming_request(&PING_PONG[..1]).remove(0);
    let (requests, mut responses) = full_duplex(&mut test, first).await?;
    let response = responses
        .message()
        .await
        .map_err(failed("FullDuplexCall's stream"))?
        .ok_or("the stream ended before its first response")?;
    check_zeros("response 0", response.payload.as_ref(), PING_PONG[0].0)?;
    // Dropping the response stream (with the request side still open) cancels the call.
    drop(responses);
    drop(requests);
    still_serves(test).await
}

async fn echo_status(
    mut test: TestServiceClient<Channel>,
    message: &str,
    full_duplex_too: bool,
) -> Verdict {
    let status = EchoStatus {
        code: 2,
        message: message.to_string(),
    };
    let expect = |what: &str, result: Result<(), Status>| match result {
        Err(s) if s.code() == Code::Unknown && s.message() == message => Ok(()),
        Err(s) => Err(format!(
            "{what}: {}, expected Unknown: {message:?}",
            describe(&s)
        )),
        Ok(()) => Err(format!("{what} succeeded, expected Unknown: {message:?}")),
    };
    let unary = test
        .unary_call(SimpleRequest {
            response_status: Some(status.clone()),
            ..SimpleRequest::default()
        })
        .await;
    expect("UnaryCall", unary.map(drop))?;
    if !full_duplex_too {
        return Ok(());
    }
    // A call that ends before its first message is answered Trailers-Only by stock
    // servers: tonic reports that at the call itself, not in the response stream.
    let request = StreamingOutputCallRequest {
        response_status: Some(status),
        ..StreamingOutputCallRequest::default()
    };
    match test.full_duplex_call(tokio_stream::iter([request])).await {
        Err(status) => expect("FullDuplexCall", Err(status)),
        Ok(response) => {
            let mut responses = response.into_inner();
            let first = responses.message().await;
            Err(format!(
                "FullDuplexCall answered headers before its status (not Trailers-Only); \
                 its stream then gave {}",
                match first {
                    Ok(Some(_)) => "a message".to_string(),
                    Ok(None) => "its end".to_string(),
                    Err(s) => describe(&s),
                }
            ))
        }
    }
}

async fn custom_metadata(mut test: TestServiceClient<Channel>) -> Verdict {
    let echo_metadata = |metadata: &mut tonic::metadata::MetadataMap| {
        metadata.insert(
            ECHO_INITIAL_KEY,
            tonic::metadata::MetadataValue::from_static(ECHO_INITIAL_VALUE),
        );
        metadata.insert_bin(
            ECHO_TRAILING_KEY,
            tonic::metadata::MetadataValue::from_bytes(&ECHO_TRAILING_VALUE),
        );
    };
    let check_initial = |what: &str, metadata: &tonic::metadata::MetadataMap| {
        let value = metadata.get(ECHO_INITIAL_KEY).and_then(|v| v.to_str().ok());
        check(value == Some(ECHO_INITIAL_VALUE), || {
            format!("{what}: {ECHO_INITIAL_KEY} is {value:?}")
        })
    };
    let check_trailing = |what: &str, metadata: &tonic::metadata::MetadataMap| {
        let value = metadata
            .get_bin(ECHO_TRAILING_KEY)
            .and_then(|v| v.to_bytes().ok());
        check(value.as_deref() == Some(&ECHO_TRAILING_VALUE[..]), || {
            format!("{what}: {ECHO_TRAILING_KEY} is {value:?}")
        })
    };

    // Unary: tonic merges the trailers into the response's metadata.
    let mut request = Request::new(SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..SimpleRequest::default()
    });
    echo_metadata(request.metadata_mut());
    let response = test
        .unary_call(request)
        .await
        .map_err(failed("UnaryCall"))?;
    check_initial("UnaryCall", response.metadata())?;
    check_trailing("UnaryCall", response.metadata())?;
    check_zeros("UnaryCall", response.get_ref().payload.as_ref(), 314_159)?;

    // Full duplex: the headers with the response, the trailers at the stream's end.
    let mut request = Request::new(tokio_stream::iter(streaming_request(&[(314_159, 271_828)])));
    echo_metadata(request.metadata_mut());
    let response = test
        .full_duplex_call(request)
        .await
        .map_err(failed("FullDuplexCall"))?;
    check_initial("FullDuplexCall", response.metadata())?;
    let mut responses = response.into_inner();
    let first = responses
        .message()
        .await
        .map_err(failed("FullDuplexCall's stream"))?
        .ok_or("FullDuplexCall ended without a response")?;
    check_zeros("FullDuplexCall", first.payload.as_ref(), 314_159)?;
    if let Some(more) = responses
        .message()
        .await
        .map_err(failed("FullDuplexCall's end"))?
    {
        return Err(format!("a second response: {more:?}"));
    }
    let trailers = responses
        .trailers()
        .await
        .map_err(failed("FullDuplexCall's trailers"))?
        .ok_or("FullDuplexCall ended without trailers")?;
    check_trailing("FullDuplexCall", &trailers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, String> {
        Args::parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn the_command_line_of_grpc_interop_runners_is_understood() {
        let args = parse("--server_host=::1 --server_port=50051 --test_case=empty_unary,ping_pong --use_tls=false")
            .expect("valid");
        assert_eq!((args.host.as_str(), args.port), ("::1", 50051));
        assert_eq!(args.cases, [Case::EmptyUnary, Case::PingPong]);
        let args = parse("--server_port 8080 --case_timeout_s 3").expect("valid");
        assert_eq!((args.host.as_str(), args.cases.len()), ("localhost", 14));
        assert_eq!(args.case_timeout, Duration::from_secs(3));
    }

    #[test]
    fn bad_command_lines_are_refused() {
        assert!(parse("--server_host h").is_err(), "no port");
        assert!(parse("--server_port 1 --test_case nope").is_err());
        assert!(parse("--server_port 1 --use_tls=true").is_err());
        assert!(parse("--server_port x").is_err());
    }
}
