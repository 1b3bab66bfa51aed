//! The gRPC face against requests no stock client would send, over raw HTTP/2 (hyper's
//! client): each gets a clear status or HTTP error, and the face keeps serving.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use rpc_core::{Server, TransportKind};
use rpc_tests::scenarios::{payload, TortureService, RING};
use rpc_tests::testing::torture_server::TortureServer;
use rpc_tests::testing::{FailRequest, SleepRequest};

/// What came back: the HTTP status, the headers, the body bytes, the trailers.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    trailers: HeaderMap,
}

impl Answer {
    /// `grpc-status` from the trailers, or from the headers of a trailers-only answer.
    fn grpc_status(&self) -> Option<u32> {
        self.trailers
            .get("grpc-status")
            .or_else(|| self.headers.get("grpc-status"))
            .map(|v| v.to_str().unwrap().parse().unwrap())
    }

    fn grpc_message(&self) -> String {
        self.trailers
            .get("grpc-message")
            .or_else(|| self.headers.get("grpc-message"))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

fn framed(message: &impl Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    out
}

/// Sends one request with `headers` and `body` over a fresh HTTP/2 connection.
fn raw_call(addr: &str, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Answer {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        let mut request = Request::post(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let response = tokio::time::timeout(Duration::from_secs(20), sender.send_request(request))
            .await
            .expect("an answer within 20 s")
            .unwrap();
        let (parts, body) = response.into_parts();
        let collected = tokio::time::timeout(Duration::from_secs(20), body.collect())
            .await
            .expect("the body within 20 s")
            .unwrap();
        let trailers = collected.trailers().cloned().unwrap_or_default();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: collected.to_bytes(),
            trailers,
        }
    })
}

const GRPC: (&str, &str) = ("content-type", "application/grpc");

/// A Torture server with its gRPC face, and the face's address.
fn face() -> (Server, String) {
    let server = Server::builder()
        .ring(RING)
        .add_service(TortureServer::new(TortureService::default()))
        .grpc_listen("127.0.0.1:0")
        .start("127.0.0.1:0", TransportKind::Tcp)
        .unwrap();
    let addr = server.grpc_local_addr().unwrap().to_string();
    (server, addr)
}
const ECHO: &str = "/testing.Torture/Echo";

#[test]
fn malformed_requests_get_clear_errors_and_the_face_keeps_serving() {
    let (_server, addr) = face();
    let good = framed(&payload(1, 10));

    // Not gRPC at all.
    let answer = raw_call(&addr, ECHO, &[("content-type", "text/plain")], good.clone());
    assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // An unknown method and an unknown service: UNIMPLEMENTED.
    for path in ["/testing.Torture/Nope", "/no.Such/Method"] {
        let answer = raw_call(&addr, path, &[GRPC], good.clone());
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.grpc_status(), Some(12), "{path}");
    }

    // A compression the face does not offer: UNIMPLEMENTED, and what it accepts.
    let answer = raw_call(
        &addr,
        ECHO,
        &[GRPC, ("grpc-encoding", "gzip")],
        good.clone(),
    );
    assert_eq!(answer.grpc_status(), Some(12));
    assert_eq!(answer.headers["grpc-accept-encoding"], "identity");

    // A compressed message without a negotiated encoding: INTERNAL.
    let mut compressed = good.clone();
    compressed[0] = 1;
    let answer = raw_call(&addr, ECHO, &[GRPC], compressed);
    assert_eq!(answer.grpc_status(), Some(13), "{}", answer.grpc_message());

    // A length prefix beyond the limit: RESOURCE_EXHAUSTED, before any of it is buffered.
    let mut huge = vec![0u8, 0xff, 0xff, 0xff, 0xff];
    huge.extend_from_slice(&[0; 16]);
    let answer = raw_call(&addr, ECHO, &[GRPC], huge);
    assert_eq!(answer.grpc_status(), Some(8), "{}", answer.grpc_message());

    // A message cut short, two messages for a unary method, none at all.
    let answer = raw_call(&addr, ECHO, &[GRPC], good[..good.len() - 1].to_vec());
    assert_eq!(answer.grpc_status(), Some(13), "{}", answer.grpc_message());
    // INTERNAL, as over this framework's own protocol (docs/PROTOCOL.md).
    let answer = raw_call(&addr, ECHO, &[GRPC], [good.clone(), good.clone()].concat());
    assert_eq!(answer.grpc_status(), Some(13), "{}", answer.grpc_message());
    let answer = raw_call(&addr, ECHO, &[GRPC], Vec::new());
    assert_eq!(answer.grpc_status(), Some(13), "{}", answer.grpc_message());

    // Bytes that are no protobuf: INVALID_ARGUMENT.
    let answer = raw_call(&addr, ECHO, &[GRPC], vec![0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    assert_eq!(answer.grpc_status(), Some(3), "{}", answer.grpc_message());

    // A malformed grpc-timeout: INTERNAL; a real one is honoured.
    let answer = raw_call(&addr, ECHO, &[GRPC, ("grpc-timeout", "soon")], good.clone());
    assert_eq!(answer.grpc_status(), Some(13), "{}", answer.grpc_message());
    let sleep = framed(&SleepRequest {
        millis: 5000,
        micros: 0,
    });
    let t0 = Instant::now();
    let answer = raw_call(
        &addr,
        "/testing.Torture/Sleep",
        &[GRPC, ("grpc-timeout", "100m")],
        sleep,
    );
    assert_eq!(answer.grpc_status(), Some(4), "{}", answer.grpc_message());
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());

    // After all that, a good call still works, and its answer is well framed.
    let answer = raw_call(&addr, ECHO, &[GRPC, ("te", "trailers")], good.clone());
    assert_eq!(answer.grpc_status(), Some(0), "{}", answer.grpc_message());
    assert_eq!(&answer.body[..], &good[..]);
}

/// A call that ends before its first message is answered Trailers-Only, as stock servers
/// answer it: one HEADERS frame with the status (and the handler's response metadata),
/// no body, no trailers. Clients built on tonic report only that as the call's failure;
/// headers followed by trailers would be a call that succeeded and a stream that failed.
/// A call with a message gets its headers with the message, and its status as trailers.
#[test]
fn a_call_that_ends_before_its_first_message_is_answered_trailers_only() {
    let (_server, addr) = face();

    let refusal = framed(&FailRequest {
        code: 9,
        message: "not now".into(),
    });
    let answer = raw_call(&addr, "/testing.Torture/Refuse", &[GRPC], refusal);
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer
            .headers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap()),
        Some("9")
    );
    assert_eq!(answer.headers["grpc-message"], "not now");
    assert_eq!(
        answer.headers["x-refused-by"], "torture",
        "the response metadata too"
    );
    assert!(answer.body.is_empty(), "no body: {:?}", answer.body);
    assert!(
        answer.trailers.is_empty(),
        "no trailers: {:?}",
        answer.trailers
    );

    // A unary failure, the same.
    let failure = framed(&FailRequest {
        code: 7,
        message: "denied".into(),
    });
    let answer = raw_call(&addr, "/testing.Torture/Fail", &[GRPC], failure);
    assert_eq!(
        answer
            .headers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap()),
        Some("7")
    );
    assert!(answer.trailers.is_empty() && answer.body.is_empty());

    // A stream with messages: headers without a status, the messages, then trailers.
    let good = payload(5, 10);
    let answer = raw_call(&addr, "/testing.Torture/Watch", &[GRPC], framed(&good));
    assert!(
        answer.headers.get("grpc-status").is_none(),
        "{:?}",
        answer.headers
    );
    assert_eq!(
        &answer.body[..],
        &[framed(&good), framed(&good), framed(&good)].concat()[..]
    );
    assert_eq!(
        answer
            .trailers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap()),
        Some("0")
    );
}
