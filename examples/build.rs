//! Generates the message types and the client and server stubs of the demo services and of
//! gRPC's interop test service (`proto/grpc/testing/test.proto`, package `grpc.testing`).

fn main() {
    if let Err(err) = rpc_codegen::configure().compile_protos(
        &[
            "../proto/calculator.proto",
            "../proto/echo.proto",
            "../proto/grpc/testing/test.proto",
        ],
        &["../proto"],
    ) {
        panic!("generating code for the demo and interop protos failed: {err}");
    }
}
