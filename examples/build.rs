//! Generates the message types and the client and server stubs of the demo services.

fn main() {
    if let Err(err) = rpc_codegen::compile_protos(
        &["../proto/calculator.proto", "../proto/echo.proto"],
        &["../proto"],
    ) {
        panic!("generating code for the demo protos failed: {err}");
    }
}
