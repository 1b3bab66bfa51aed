//! Demos of `rpc-core`: two services defined in `proto/`, their implementations, gRPC's
//! interop test service, and six binaries that serve and call them over RDMA verbs or TCP.
//!
//! | binary              | what it does                                                        |
//! |---------------------|---------------------------------------------------------------------|
//! | `calculator-server` | serves `calc.Calculator` (integer arithmetic, expression evaluation) |
//! | `calculator-client` | runs a scripted set of calls, checks every outcome, exits 1 on a mismatch |
//! | `echo-server`       | serves `echo.Echo`, answering on the poller thread                  |
//! | `echo-client`       | measures round-trip latency percentiles and calls/s for a payload size |
//! | `interop-server`    | serves `grpc.testing.TestService`, gRPC's interop test server ([`interop`]) |
//! | `interop-client`    | runs gRPC's 14 interop test cases, `case NAME: PASS` or `FAIL reason` each |
//!
//! # Quick start
//!
//! ```text
//! cargo build --release -p rpc-examples
//! target/release/calculator-server --listen 127.0.0.1:50051 --transport tcp &
//! target/release/calculator-client --connect 127.0.0.1:50051 --transport tcp
//!
//! target/release/echo-server --listen 127.0.0.1:50052 --transport tcp &
//! target/release/echo-client --connect 127.0.0.1:50052 --transport tcp \
//!     --size 64 --count 20000 --concurrency 8
//!
//! target/release/interop-server --port 50053 &      # prints `listening on 0.0.0.0:50053`
//! target/release/interop-client --server_port 50053 --test_case all
//! ```
//!
//! `--transport auto` (the default) uses RDMA verbs when a usable device is present and TCP
//! otherwise; `--transport verbs` insists on RDMA. Every binary takes `--help`. Logs go to
//! stderr, filtered by `RUST_LOG` (default `info`).
//!
//! # Using the generated code
//!
//! `build.rs` runs `rpc_codegen::compile_protos` on `proto/calculator.proto`,
//! `proto/echo.proto` and `proto/grpc/testing/test.proto`; [`calc`], [`echo`] and
//! [`grpc_testing`] include the result: the prost messages plus, for
//! each service, a `<service>_client` module with the blocking and async client and a
//! `<service>_server` module with the trait to implement and the server wrapper.
//!
//! ```no_run
//! use rpc_examples::calc::{calculator_client::blocking::CalculatorClient, AddRequest, SumRequest};
//! use rpc_examples::calc::calculator_server::CalculatorServer;
//! use rpc_examples::services::CalculatorService;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = rpc_core::Server::builder()
//!     .add_service(CalculatorServer::new(CalculatorService))
//!     .start("127.0.0.1:50051", rpc_core::TransportKind::Tcp)?;
//!
//! let client = rpc_core::Client::builder()
//!     .transport(rpc_core::TransportKind::Tcp)
//!     .connect("127.0.0.1:50051")?;
//! let calc = CalculatorClient::new(client);
//! assert_eq!(calc.add(AddRequest { a: 7, b: 5 })?.into_inner().value, 12);
//! // Client streaming: the numbers go out as a stream, one reply comes back.
//! let numbers = (1..=4).map(|value| SumRequest { value });
//! assert_eq!(calc.sum(numbers)?.into_inner().total, 10);
//! server.shutdown();
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

pub mod cli;
pub mod expr;
pub mod interop;
pub mod services;
pub mod stats;

pub use cli::connect;

/// The `calc` protobuf package: `calc.Calculator` and its messages (`proto/calculator.proto`).
pub mod calc {
    rpc_core::include_proto!("calc");
}

/// The `echo` protobuf package: `echo.Echo` and its messages (`proto/echo.proto`).
pub mod echo {
    rpc_core::include_proto!("echo");
}

/// gRPC's interop test contract, the `grpc.testing` protobuf package
/// (`proto/grpc/testing/test.proto`): `TestService`, `UnimplementedService` and their
/// messages, exactly as the gRPC project defines them.
#[allow(missing_docs)] // prost-build: messages and fields without `.proto` comments
pub mod grpc_testing {
    rpc_core::include_proto!("grpc.testing");
}

/// The per-call timeout the demo clients set: a call to a server that stopped answering fails
/// with DEADLINE_EXCEEDED instead of hanging.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs a `tracing` subscriber that logs to stderr, filtered by `RUST_LOG` (`info` when it
/// is unset or invalid).
pub fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;

    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|err| {
            eprintln!("ignoring RUST_LOG={spec:?} ({err}); logging at info");
            EnvFilter::new("info")
        }),
        _ => EnvFilter::new("info"),
    };
    // Colours only on a terminal, and not with NO_COLOR set (https://no-color.org).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Fails only if a subscriber is already installed, which is then kept.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// SIGTERM and SIGINT (Ctrl-C), caught: a demo server installs this before it starts
/// serving, so a signal that comes at any moment after its start is a graceful shutdown
/// ([`serve_until_signalled`]), never the default action that kills the process.
pub struct ShutdownSignals(signal_hook::iterator::Signals);

impl ShutdownSignals {
    /// Catches SIGTERM and SIGINT from now on.
    pub fn install() -> std::io::Result<ShutdownSignals> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map(ShutdownSignals)
    }
}

/// Serves until SIGTERM or SIGINT arrives, then shuts `server` down gracefully
/// ([`rpc_core::Server::shutdown`]: it stops accepting, sends every client GOODBYE, gives
/// calls in flight up to 5 s, then closes the connections) and returns success. Logs the
/// signal and the shutdown as `NAME: SIGTERM received, shutting down` (`docs/PROTOCOL.md`
/// §14).
pub fn serve_until_signalled(
    server: rpc_core::Server,
    mut signals: ShutdownSignals,
    name: &str,
) -> std::process::ExitCode {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let signal = match signals.0.forever().next() {
        Some(SIGTERM) => "SIGTERM",
        Some(SIGINT) => "SIGINT",
        Some(_) => "a signal",
        // The iterator ends only when closed, which nothing here does.
        None => "the end of the signal stream",
    };
    tracing::info!(
        "{name}: {signal} received, shutting down: GOODBYE to every client, calls in flight \
         get up to 5 s"
    );
    server.shutdown();
    tracing::info!("{name}: shut down");
    std::process::ExitCode::SUCCESS
}

/// The Rust code of the repository's README, compiled as doc tests of this crate: its quick
/// start includes the `echo` package, which this crate's build script generates, so an API
/// change that breaks the README fails `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
