//! gRPC's interop test client over this framework: runs the interop test cases against a
//! `grpc.testing.TestService` server (see [`rpc_examples::interop::Case`]).
//!
//! ```text
//! interop-client (--connect ADDR:PORT | [--server_host H] --server_port N)
//!                [--transport tcp|verbs|auto|grpc] [--test_case all|NAME[,NAME...]]
//!                [--case_timeout_s S] [--use_tls=false] [--extensions=false]
//! ```
//!
//! All cases share one connection. Each case has a deadline (`--case_timeout_s`, default
//! 10 s) that every one of its calls gets what is left of, and runs under a watchdog, so a
//! server that does not answer fails the case and the run goes on. After
//! `timeout_on_sleeping_server`, `cancel_after_begin` and `cancel_after_first_response`, an
//! EmptyCall on the same client must succeed too. (Whether it went over the same connection
//! is not visible here: rpc-core's client reconnects without a word. `interop-server` logs
//! each connection's first call, and `scripts/interop` fails unless there was one.)
//!
//! Output, as the Python and Node clients of `interop/` print it: one line per case, `case
//! NAME: PASS` or `case NAME: FAIL reason`, then `summary: N passed, M failed`. Exit status
//! 0 when every case passed, 1 when one failed (or the server was unreachable: every case
//! then fails with the reason), 2 for a bad command line (an unknown case,
//! `--use_tls=true`).
//!
//! `--transport grpc` (the default with `--server_port`, as gRPC's interop runners call it)
//! speaks standard gRPC over HTTP/2: against `interop-server --grpc-listen` or any stock
//! gRPC interop server.

use std::process::ExitCode;

use rpc_examples::cli::{self, InteropClientArgs, InteropTransport};
use rpc_examples::interop::{result_line, run_cases, InteropClient, Summary};

fn main() -> ExitCode {
    let args = cli::parse_or_exit(
        &InteropClientArgs::usage("interop-client"),
        InteropClientArgs::parse,
    );
    rpc_examples::init_tracing();

    let transport = match args.transport {
        InteropTransport::Rpc(transport) => rpc_core::TransportKind::from(transport),
        InteropTransport::Grpc => rpc_core::TransportKind::Grpc,
    };

    let client = match rpc_core::Client::builder()
        .transport(transport)
        .extensions(args.extensions)
        .connect(&args.connect)
    {
        Ok(client) => client,
        Err(err) => {
            let reason = format!(
                "cannot connect to {} over {}: {err}",
                args.connect, args.transport
            );
            eprintln!("interop-client: {reason}");
            for &case in &args.cases {
                println!("{}", result_line(case, &Err(reason.clone())));
            }
            let summary = Summary {
                passed: 0,
                failed: args.cases.len(),
            };
            println!("{summary}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        "interop-client connected to {} over {}",
        args.connect,
        client.transport_name()
    );

    let summary = run_cases(
        &InteropClient::new(client),
        &args.cases,
        args.case_timeout,
        |line| println!("{line}"),
    );
    println!("{summary}");
    if summary.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
