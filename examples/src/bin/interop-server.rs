//! gRPC's interop test server over this framework: serves `grpc.testing.TestService` (see
//! `proto/grpc/testing/test.proto` and [`rpc_examples::interop::TestServiceImpl`]).
//!
//! ```text
//! interop-server (--listen ADDR:PORT | --port N) [--transport auto|tcp|verbs]
//!                [--grpc-listen ADDR:PORT] [--use_tls=false]
//! ```
//!
//! Listens on `--listen`, or with `--port N` on every address (`0.0.0.0:N`, over TCP unless
//! `--transport` says otherwise: gRPC's interop harness passes `--port`); port 0 picks a
//! free port. Once serving, prints `listening on ADDR:PORT` (the real port) on stdout, which
//! scripts wait for, and runs until killed. `UnimplementedService` is not served, so its calls
//! get UNIMPLEMENTED from the framework.
//!
//! `--use_tls=false` is accepted for the harness; `--use_tls=true` is refused (exit status 2):
//! the tcp and verbs transports carry no TLS. `--grpc-listen ADDR:PORT` asks for rpc-core's
//! standard gRPC (HTTP/2) face, which does not exist yet: it fails with exit status 2.
//!
//! Run the cases against it with `interop-client`, or with the stock clients of `interop/`
//! once the gRPC face exists.

use std::io::Write;
use std::process::ExitCode;

use rpc_examples::cli::{self, InteropServerArgs};
use rpc_examples::grpc_testing::test_service_server::TestServiceServer;
use rpc_examples::interop::TestServiceImpl;

fn main() -> ExitCode {
    let args = cli::parse_or_exit(
        &InteropServerArgs::usage("interop-server"),
        InteropServerArgs::parse,
    );
    rpc_examples::init_tracing();
    let service = TestServiceImpl::new();

    if let Some(addr) = &args.grpc_listen {
        // rpc-core's gRPC (HTTP/2) face is being written. Once it exists, start it here on
        // `addr` with `TestServiceServer::new(service.clone())` (clones share one service)
        // and keep its handle alive next to `server` below.
        eprintln!(
            "interop-server: --grpc-listen {addr}: this build of rpc-core has no gRPC (HTTP/2) \
             face yet; serve this framework's protocol with --listen ADDR:PORT or --port N"
        );
        return ExitCode::from(2);
    }
    let Some(listen) = &args.listen else {
        eprintln!("interop-server: nothing to serve: give --listen ADDR:PORT or --port N");
        return ExitCode::from(2);
    };

    let server = match rpc_core::Server::builder()
        .add_service(TestServiceServer::new(service))
        .serve(listen, args.transport.into())
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!(
                "interop-server: cannot serve on {listen} over {}: {err}",
                args.transport
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        "interop-server serving grpc.testing.TestService on {} (transport: {}, requested: {})",
        server.local_addr(),
        server.transport_name(),
        args.transport
    );
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "listening on {}", server.local_addr())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        // Whoever waits for the line is gone; serving on would help nobody.
        eprintln!("interop-server: cannot write to stdout");
        return ExitCode::FAILURE;
    }
    drop(stdout);
    rpc_examples::run_until_killed(server)
}
