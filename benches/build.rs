//! Generates the `echo.Echo` code three times from `proto/echo.proto`, all without `protoc`
//! (the file is parsed in Rust by protox):
//!
//! * `OUT_DIR/ours/echo.rs`: prost messages plus rpc-core's client and server stubs
//!   (rpc-codegen, synchronous handlers);
//! * `OUT_DIR/ours_async/echo.rs`: the same with rpc-codegen's default, async handlers;
//! * `OUT_DIR/tonic/echo.rs`: prost messages plus tonic's client and server
//!   (tonic-prost-build, fed the protox-parsed descriptor set).

use std::path::PathBuf;

const PROTO: &str = "../proto/echo.proto";
const INCLUDE: &str = "../proto";

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // Synchronous handlers: the unary benchmarks measure the lowest-latency path.
    if let Err(err) = rpc_codegen::configure()
        .sync_handlers(true)
        .out_dir(out_dir.join("ours"))
        .compile_protos(&[PROTO], &[INCLUDE])
    {
        panic!("generating rpc-core stubs for {PROTO} failed: {err}");
    }
    // The default, async handlers: what a service ported from tonic uses; measured for its
    // allocations per call, its server stream and behind the gRPC face.
    if let Err(err) = rpc_codegen::configure()
        .out_dir(out_dir.join("ours_async"))
        .compile_protos(&[PROTO], &[INCLUDE])
    {
        panic!("generating rpc-core async stubs for {PROTO} failed: {err}");
    }

    let fds = match protox::compile([PROTO], [INCLUDE]) {
        Ok(fds) => fds,
        Err(err) => panic!("parsing {PROTO} with protox failed: {err:?}"),
    };
    let tonic_dir = out_dir.join("tonic");
    if let Err(err) = std::fs::create_dir_all(&tonic_dir) {
        panic!("creating {}: {err}", tonic_dir.display());
    }
    // The channel is built by hand (`EchoClient::new`), so no `connect` helper is needed.
    if let Err(err) = tonic_prost_build::configure()
        .build_transport(false)
        .out_dir(&tonic_dir)
        .compile_fds(fds)
    {
        panic!("generating tonic stubs for {PROTO} failed: {err}");
    }
    println!("cargo:rerun-if-changed={PROTO}");
}
