//! gRPC's interop test server over this framework: serves `grpc.testing.TestService` (see
//! `proto/grpc/testing/test.proto` and [`rpc_examples::interop::TestServiceImpl`]).
//!
//! ```text
//! interop-server [--listen ADDR:PORT] [--transport auto|tcp|verbs]
//!                [--grpc-listen ADDR:PORT | --port N] [--use_tls=false]
//! ```
//!
//! Serves this framework's protocol on `--listen` (default: a free port of 127.0.0.1, TCP)
//! and, with `--grpc-listen` or `--port N` (`0.0.0.0:N`, as gRPC's interop runners pass it),
//! the same service as standard gRPC over HTTP/2, with health and reflection; port 0 picks
//! a free port. Once serving, prints `listening on ADDR:PORT` and, for the gRPC face,
//! `grpc listening on ADDR:PORT` (the real ports) on stdout, which scripts wait for, and
//! runs until SIGTERM or SIGINT (Ctrl-C), then shuts down gracefully (GOODBYE to every
//! client, up to 5 s for calls in flight, exit status 0). `UnimplementedService` is not
//! served, so its calls get UNIMPLEMENTED from the framework.
//!
//! `--use_tls=false` is accepted for the runners; `--use_tls=true` is refused (exit status
//! 2): the interop server speaks plaintext.
//!
//! Run the cases against it with `interop-client` (`--transport grpc` for the gRPC face),
//! or with the stock clients of `interop/`.

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
    // Before serving: a SIGTERM or Ctrl-C from then on is a graceful shutdown.
    let signals = match rpc_examples::ShutdownSignals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("interop-server: cannot catch SIGTERM and SIGINT: {err}");
            return ExitCode::FAILURE;
        }
    };
    let service = TestServiceImpl::new();

    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:0");
    let mut builder = rpc_core::Server::builder().add_service(TestServiceServer::new(service));
    if let Some(addr) = &args.grpc_listen {
        builder = builder.grpc_listen(addr);
    }
    let server = match builder.start(listen, args.transport.into()) {
        Ok(server) => server,
        Err(err) => {
            eprintln!(
                "interop-server: cannot serve on {listen} over {}{}: {err}",
                args.transport,
                args.grpc_listen
                    .as_ref()
                    .map(|a| format!(" and gRPC on {a}"))
                    .unwrap_or_default()
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        "interop-server serving grpc.testing.TestService on {} (transport: {}, requested: {}), gRPC face: {:?}",
        server.local_addr(),
        server.transport_name(),
        args.transport,
        server.grpc_local_addr()
    );
    let mut stdout = std::io::stdout().lock();
    let mut announce = writeln!(stdout, "listening on {}", server.local_addr());
    if let Some(addr) = server.grpc_local_addr() {
        announce = announce.and_then(|()| writeln!(stdout, "grpc listening on {addr}"));
    }
    if announce.and_then(|()| stdout.flush()).is_err() {
        // Whoever waits for the lines is gone; serving on would help nobody.
        eprintln!("interop-server: cannot write to stdout");
        return ExitCode::FAILURE;
    }
    drop(stdout);
    rpc_examples::serve_until_signalled(server, signals, "interop-server")
}
