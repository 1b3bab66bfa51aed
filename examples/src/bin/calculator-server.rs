//! Serves `calc.Calculator` (see `proto/calculator.proto`).
//!
//! ```text
//! calculator-server [--listen ADDR:PORT] [--transport auto|tcp|verbs]
//! ```
//!
//! Listens on `--listen` (default `127.0.0.1:50051`; port 0 picks a free port, which is
//! logged) over `--transport` (default `auto`: RDMA verbs if a usable device is present, TCP
//! otherwise) and logs which transport it chose. Handlers run on the server's worker pool.
//! Runs until SIGTERM or SIGINT (Ctrl-C), then shuts down gracefully: GOODBYE to every
//! client, up to 5 s for calls in flight, exit status 0. Logs go to stderr; `RUST_LOG=debug`
//! logs every call.
//!
//! Try it with `calculator-client`, which runs a scripted set of calls against it.

use std::process::ExitCode;

use rpc_examples::calc::calculator_server::CalculatorServer;
use rpc_examples::cli::{self, ServerArgs};
use rpc_examples::services::CalculatorService;

const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

fn main() -> ExitCode {
    let args = cli::parse_or_exit(
        &ServerArgs::usage("calculator-server", DEFAULT_LISTEN),
        |args| ServerArgs::parse(args, DEFAULT_LISTEN),
    );
    rpc_examples::init_tracing();
    // Before serving: a SIGTERM or Ctrl-C from then on is a graceful shutdown.
    let signals = match rpc_examples::ShutdownSignals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("calculator-server: cannot catch SIGTERM and SIGINT: {err}");
            return ExitCode::FAILURE;
        }
    };

    let server = match rpc_core::Server::builder()
        .add_service(CalculatorServer::new(CalculatorService))
        .start(&args.listen, args.transport.into())
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!(
                "calculator-server: cannot serve on {} over {}: {err}",
                args.listen, args.transport
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        "calculator-server listening on {} (transport: {}, requested: {})",
        server.local_addr(),
        server.transport_name(),
        args.transport
    );
    rpc_examples::serve_until_signalled(server, signals, "calculator-server")
}
