//! Generates the code the tests compile against: the tricky protos of `proto/tricky` (which
//! exist to break the code generator), the demo protos, the integration-test proto and gRPC's
//! interop contract (`proto/grpc/testing`).

use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let tricky = proto.join("tricky");

    let mut protos: Vec<PathBuf> = match fs::read_dir(&tricky) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "proto"))
            .collect(),
        Err(err) => panic!("cannot list {}: {err}", tricky.display()),
    };
    protos.sort();
    for file in [
        "calculator.proto",
        "echo.proto",
        "testing.proto",
        "grpc/testing/test.proto",
    ] {
        protos.push(proto.join(file));
    }
    // A .proto file added to proto/tricky must rerun this script.
    println!("cargo:rerun-if-changed={}", tricky.display());

    // `tricky` first: its files import each other by bare name, and must not also be seen as
    // `tricky/<name>.proto` through `proto`.
    if let Err(err) = rpc_codegen::configure().compile_protos(&protos, &[&tricky, &proto]) {
        panic!("code generation failed: {err}");
    }

    // The calculator's server again, its handlers chosen per method: `Add` and `RunningTotal`
    // blocking, the rest async (`tests/mixed_handlers.rs`).
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(err) = rpc_codegen::configure()
        .build_client(false)
        .sync_handlers_for("calc.Calculator.Add")
        .sync_handlers_for("calc.Calculator.RunningTotal")
        .out_dir(out.join("mixed"))
        .compile_protos(&[proto.join("calculator.proto")], &[&proto])
    {
        panic!("code generation (mixed handlers) failed: {err}");
    }
}
