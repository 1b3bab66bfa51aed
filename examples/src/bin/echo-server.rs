//! Serves `echo.Echo` (see `proto/echo.proto`): every reply carries its request's payload.
//!
//! ```text
//! echo-server [--listen ADDR:PORT] [--transport auto|tcp|verbs]
//! ```
//!
//! Listens on `--listen` (default `127.0.0.1:50052`; port 0 picks a free port, which is
//! logged) over `--transport` (default `auto`: RDMA verbs if a usable device is present, TCP
//! otherwise) and logs which transport it chose. The handler is cheap, so it runs inline on
//! the completion poller thread (`Execution::Inline`) rather than on the worker pool, which
//! saves two thread hand-offs per call. Runs until SIGTERM or SIGINT (Ctrl-C), then shuts
//! down gracefully: GOODBYE to every client, up to 5 s for calls in flight, exit status 0.
//!
//! Measure it with `echo-client`.

use std::process::ExitCode;

use rpc_examples::cli::{self, ServerArgs};
use rpc_examples::echo::echo_server::EchoServer;
use rpc_examples::services::EchoService;

const DEFAULT_LISTEN: &str = "127.0.0.1:50052";

fn main() -> ExitCode {
    let args = cli::parse_or_exit(&ServerArgs::usage("echo-server", DEFAULT_LISTEN), |args| {
        ServerArgs::parse(args, DEFAULT_LISTEN)
    });
    rpc_examples::init_tracing();
    // Before serving: a SIGTERM or Ctrl-C from then on is a graceful shutdown.
    let signals = match rpc_examples::ShutdownSignals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("echo-server: cannot catch SIGTERM and SIGINT: {err}");
            return ExitCode::FAILURE;
        }
    };

    let server = match rpc_core::Server::builder()
        .add_service_with(EchoServer::new(EchoService), rpc_core::Execution::Inline)
        .start(&args.listen, args.transport.into())
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!(
                "echo-server: cannot serve on {} over {}: {err}",
                args.listen, args.transport
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        "echo-server listening on {} (transport: {}, requested: {})",
        server.local_addr(),
        server.transport_name(),
        args.transport
    );
    rpc_examples::serve_until_signalled(server, signals, "echo-server")
}
