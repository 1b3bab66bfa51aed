//! Integration-test support: code generated from the test protos.

/// End-to-end scenarios shared by the TCP and verbs test suites.
pub mod scenarios;

/// A hostile peer speaking the protocol by hand (TCP or verbs): the memory attack.
pub mod attack;

/// The `testing.Race` service with counted handlers, for the race and async tests.
pub mod race;

/// The demo calculator service (`proto/calculator.proto`).
pub mod calc {
    rpc_core::include_proto!("calc");
}

/// The calculator's server with handlers chosen per method (`Add` and `RunningTotal`
/// blocking, the others async: `build.rs`).
pub mod calc_mixed {
    include!(concat!(env!("OUT_DIR"), "/mixed/calc.rs"));
}

/// The demo echo service (`proto/echo.proto`).
pub mod echo {
    rpc_core::include_proto!("echo");
}

/// gRPC's interop test contract (`proto/grpc/testing`: package `grpc.testing`).
#[allow(missing_docs)] // prost-build: messages and fields without `.proto` comments
pub mod grpc_testing {
    rpc_core::include_proto!("grpc.testing");
}

/// The service the integration scenarios drive (`proto/testing.proto`).
#[allow(missing_docs)] // prost-build: messages and fields without `.proto` comments
pub mod testing {
    rpc_core::include_proto!("testing");
}

/// Code generated from `proto/tricky/*.proto`, files written to break the code generator:
/// keywords, prelude names, collisions, cross-package imports, well-known types, streaming,
/// a package-less file and a nested package. `tests/codegen_compile.rs` checks it.
///
/// The packages are nested the way prost-build's include file nests them, with the
/// package-less file (`_.rs`) at the top, so that the `super::` paths between them resolve.
#[allow(missing_docs)]
pub mod tricky_protos {
    rpc_core::include_proto!("_");

    pub mod other {
        rpc_core::include_proto!("other");
    }

    pub mod svc {
        rpc_core::include_proto!("svc");
    }

    /// Package `type`: prost-build names its module and file `r#type`.
    pub mod r#type {
        rpc_core::include_proto!("r#type");
    }

    pub mod tricky {
        rpc_core::include_proto!("tricky");

        pub mod nested {
            pub mod deep {
                rpc_core::include_proto!("tricky.nested.deep");
            }
        }
    }
}
