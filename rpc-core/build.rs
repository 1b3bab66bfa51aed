//! Generates the standard services every server can offer: gRPC health checking
//! (`grpc.health.v1`) and server reflection (`grpc.reflection.v1` and the older
//! `grpc.reflection.v1alpha` that many tools still ask for).

fn main() {
    let protos = [
        "proto/grpc/health/v1/health.proto",
        "proto/grpc/reflection/v1/reflection.proto",
        "proto/grpc/reflection/v1alpha/reflection.proto",
    ];
    if let Err(err) = rpc_codegen::configure()
        .build_client(true)
        .compile_protos(&protos, &["proto"])
    {
        panic!("generating the standard services failed: {err}");
    }
}
