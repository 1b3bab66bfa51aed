//! Generates the `grpc.testing` messages and tonic's client stubs from the repository's
//! `proto/grpc/testing/test.proto`, without `protoc` (protox parses the files in Rust).

use std::path::PathBuf;

const PROTO: &str = "../../proto/grpc/testing/test.proto";
const INCLUDE: &str = "../../proto";

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let fds = match protox::compile([PROTO], [INCLUDE]) {
        Ok(fds) => fds,
        Err(err) => panic!("parsing {PROTO} with protox failed: {err:?}"),
    };
    // Clients only, on a channel the client builds itself (`Endpoint::connect`).
    if let Err(err) = tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .out_dir(&out_dir)
        .compile_fds(fds)
    {
        panic!("generating tonic stubs for {PROTO} failed: {err}");
    }
    for file in ["test.proto", "messages.proto", "empty.proto"] {
        println!("cargo:rerun-if-changed={INCLUDE}/grpc/testing/{file}");
    }
}
