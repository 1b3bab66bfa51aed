//! Streaming calls' client API edge cases, over this framework's TCP transport and over
//! standard gRPC against the gRPC face: an async bidirectional call read with the blocking
//! API still sends its requests, and a cancelled call reports CANCELLED and leaves the
//! connection usable.

use std::time::Duration;

use futures::{stream, StreamExt};
use rpc_core::{Code, Request, Server, TransportKind};
use rpc_examples::grpc_testing::test_service_client::blocking::TestServiceClient;
use rpc_examples::grpc_testing::test_service_server::TestServiceServer;
use rpc_examples::grpc_testing::{Empty, Payload, ResponseParameters, StreamingOutputCallRequest};
use rpc_examples::interop::TestServiceImpl;

fn setup(transport: TransportKind) -> (Server, TestServiceClient) {
    let server = Server::builder()
        .add_service(TestServiceServer::new(TestServiceImpl::new()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap();
    let addr = server
        .addr_for(transport)
        .expect("the server has a gRPC face");
    let client = rpc_core::Client::builder()
        .transport(transport)
        .connect(&addr)
        .unwrap();
    (server, TestServiceClient::new(client))
}

/// Ten requests of 1 MiB (more than a call's window), each answered with `size` bytes.
fn big_requests() -> impl futures::Stream<Item = StreamingOutputCallRequest> {
    stream::iter((1..=10).map(|size| StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size,
            ..Default::default()
        }],
        payload: Some(Payload {
            r#type: 0,
            body: vec![0; 1 << 20],
        }),
        ..Default::default()
    }))
}

fn blocking_reads_pull_the_requests(transport: TransportKind) {
    let (_server, test) = setup(transport);
    let request = Request::new(big_requests()).with_timeout(Duration::from_secs(20));
    let responses = futures::executor::block_on(
        rpc_examples::grpc_testing::test_service_client::TestServiceClient::from(test.clone())
            .full_duplex_call(request),
    )
    .unwrap()
    .into_inner();
    let sizes: Vec<usize> = responses
        .into_blocking_iter()
        .map(|r| r.unwrap().payload.unwrap().body.len())
        .collect();
    assert_eq!(sizes, (1..=10).collect::<Vec<usize>>());
}

#[test]
fn blocking_reads_of_an_async_bidi_call_pull_its_requests_over_tcp() {
    blocking_reads_pull_the_requests(TransportKind::Tcp);
}

#[test]
fn blocking_reads_of_an_async_bidi_call_pull_its_requests_over_grpc() {
    blocking_reads_pull_the_requests(TransportKind::Grpc);
}

fn cancel_reports_cancelled(transport: TransportKind) {
    let (_server, test) = setup(transport);
    for _ in 0..20 {
        let mut call = test.full_duplex_call(()).unwrap();
        call.send(&StreamingOutputCallRequest {
            response_parameters: vec![ResponseParameters {
                size: 8,
                ..Default::default()
            }],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(call.recv().unwrap().unwrap().payload.unwrap().body.len(), 8);
        call.cancel();
        let err = call.recv().unwrap_err();
        assert_eq!(err.code(), Code::Cancelled, "{err}");
        // The call is over for the sender too.
        assert!(call.send(&StreamingOutputCallRequest::default()).is_err());
        test.empty_call(Empty {})
            .expect("the connection still works");
    }
    // Before anything was sent, and on an async server stream.
    let mut call = test.full_duplex_call(()).unwrap();
    call.cancel();
    assert_eq!(call.recv().unwrap_err().code(), Code::Cancelled);
    // Requests that never end: the server never ends the call by itself. (One is answered
    // first: over gRPC the call is answered when its response headers come, and they come
    // with the first response message, as stock servers send them.)
    let one = StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 8,
            ..Default::default()
        }],
        ..Default::default()
    };
    let requests = stream::once(async move { one }).chain(stream::pending());
    let mut responses = futures::executor::block_on(
        rpc_examples::grpc_testing::test_service_client::TestServiceClient::from(test.clone())
            .full_duplex_call(requests),
    )
    .unwrap()
    .into_inner();
    let first = futures::executor::block_on(responses.next());
    assert_eq!(first.unwrap().unwrap().payload.unwrap().body.len(), 8);
    responses.cancel();
    let next = futures::executor::block_on(responses.next());
    assert_eq!(next.unwrap().unwrap_err().code(), Code::Cancelled);
    test.empty_call(Empty {})
        .expect("the connection still works");
}

#[test]
fn cancel_reports_cancelled_over_tcp() {
    cancel_reports_cancelled(TransportKind::Tcp);
}

#[test]
fn cancel_reports_cancelled_over_grpc() {
    cancel_reports_cancelled(TransportKind::Grpc);
}
