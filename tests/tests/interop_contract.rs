//! `proto/grpc/testing` is gRPC's interop contract, not a look-alike: stock interop clients and
//! servers only understand us if the method paths, shapes and field numbers are exactly
//! theirs. These tests pin them against bytes written out by hand from the public contract.

use rpc_core::codegen::MethodKind;
use rpc_tests::grpc_testing::{
    test_service_server, unimplemented_service_server, EchoStatus, Payload, ResponseParameters,
    SimpleRequest, SimpleResponse, StreamingInputCallResponse, StreamingOutputCallRequest,
};

#[test]
fn the_services_have_grpcs_paths_and_shapes() {
    let methods: Vec<(&str, MethodKind)> = test_service_server::SERVICE
        .methods
        .iter()
        .map(|m| (m.path, m.kind))
        .collect();
    assert_eq!(
        methods,
        [
            ("/grpc.testing.TestService/EmptyCall", MethodKind::Unary),
            ("/grpc.testing.TestService/UnaryCall", MethodKind::Unary),
            (
                "/grpc.testing.TestService/CacheableUnaryCall",
                MethodKind::Unary
            ),
            (
                "/grpc.testing.TestService/StreamingOutputCall",
                MethodKind::ServerStreaming
            ),
            (
                "/grpc.testing.TestService/StreamingInputCall",
                MethodKind::ClientStreaming
            ),
            (
                "/grpc.testing.TestService/FullDuplexCall",
                MethodKind::BidiStreaming
            ),
            (
                "/grpc.testing.TestService/HalfDuplexCall",
                MethodKind::BidiStreaming
            ),
            (
                "/grpc.testing.TestService/UnimplementedCall",
                MethodKind::Unary
            ),
        ]
    );
    let unimplemented: Vec<&str> = unimplemented_service_server::SERVICE
        .methods
        .iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(
        unimplemented,
        ["/grpc.testing.UnimplementedService/UnimplementedCall"]
    );
}

/// large_unary's request: `response_size` 314159 (field 2) and a payload (field 3) of 271828
/// zero bytes (`Payload.body`, field 2).
#[test]
fn large_unary_request_has_grpcs_field_numbers() {
    let request = SimpleRequest {
        response_size: 314_159,
        payload: Some(Payload {
            r#type: 0,
            body: vec![0; 271_828],
        }),
        ..Default::default()
    };
    let bytes = prost::Message::encode_to_vec(&request);
    let head = [
        0x10, 0xaf, 0x96, 0x13, // field 2, varint 314159
        0x1a, 0xd8, 0xcb, 0x10, // field 3, 271832 bytes
        0x12, 0xd4, 0xcb, 0x10, // Payload field 2, 271828 bytes
    ];
    assert_eq!(&bytes[..head.len()], &head);
    assert_eq!(bytes.len(), head.len() + 271_828);
    assert!(bytes[head.len()..].iter().all(|&b| b == 0));
}

/// status_code_and_message's request (`response_status`, field 7) and the streaming cases'
/// `response_parameters` (field 2: `size` 1, `interval_us` 2).
#[test]
fn status_and_streaming_fields_have_grpcs_numbers() {
    let request = StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 31_415,
            interval_us: 2,
            compressed: None,
        }],
        response_status: Some(EchoStatus {
            code: 2,
            message: "x".into(),
        }),
        ..Default::default()
    };
    assert_eq!(
        prost::Message::encode_to_vec(&request),
        [
            0x12, 0x06, 0x08, 0xb7, 0xf5, 0x01, 0x10, 0x02, // field 2: size 31415, interval 2
            0x3a, 0x05, 0x08, 0x02, 0x12, 0x01, b'x', // field 7: code 2, message "x"
        ]
    );
    let response = SimpleResponse {
        username: "u".into(),
        ..Default::default()
    };
    assert_eq!(prost::Message::encode_to_vec(&response), [0x12, 0x01, b'u']);
    let aggregated = StreamingInputCallResponse {
        aggregated_payload_size: 74_922,
    };
    assert_eq!(
        prost::Message::encode_to_vec(&aggregated),
        [0x08, 0xaa, 0xc9, 0x04]
    );
}
