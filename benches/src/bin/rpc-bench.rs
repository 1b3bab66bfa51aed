//! `rpc-bench`: rpc-core next to a raw TCP ping-pong and tonic. See the `rpc_benches` crate
//! documentation for what is measured and how, and `rpc-bench --help` for the commands:
//!
//! ```text
//! rpc-bench serve  --system ours|tcp|tonic --listen ADDR:PORT [--transport tcp|verbs]
//! rpc-bench load   --system ours|tcp|tonic --connect ADDR:PORT [--transport tcp|verbs]
//!                  --size N --outstanding N --count N [--warmup N]
//! rpc-bench idle   [--connections 64] [--seconds 10] [--transport tcp] [--addr 127.0.0.1]
//! rpc-bench inproc --calls N [--size 64]
//! rpc-bench tcp-conns [--conns 2000]
//! ```

use std::process::ExitCode;

/// Counts allocations for `inproc`'s `allocations_per_call`.
#[global_allocator]
static ALLOCATOR: rpc_sync::CountingAllocator = rpc_sync::CountingAllocator;

use rpc_benches::cli::{self, CliError, Command, LoadArgs, ServeArgs, System};
use rpc_benches::{conns, grpc, idle, inproc, ours, raw_tcp};

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(CliError::Help(usage)) => {
            print!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(CliError::Invalid(message, usage)) => {
            eprintln!("rpc-bench: {message}\n\n{usage}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Serve(args) => serve(&args),
        Command::Load(args) => load(&args),
        Command::Idle(args) => print_json("idle", idle::run(&args).map(|r| r.to_json())),
        Command::TcpConns(args) => print_json("tcp-conns", conns::run(&args).map(|r| r.to_json())),
        Command::Inproc(args) => {
            match inproc::run(&args, Some(rpc_sync::CountingAllocator::allocations)) {
                Ok(result) => {
                    println!("{}", result.to_json(args.calls));
                    if result.failed > 0 {
                        eprintln!(
                            "rpc-bench inproc: {} calls failed or mismatched",
                            result.failed
                        );
                        return ExitCode::FAILURE;
                    }
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("rpc-bench inproc: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Prints a measurement's JSON line, or why it failed.
fn print_json(command: &str, result: Result<String, String>) -> ExitCode {
    match result {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("rpc-bench {command}: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the server, reports where it listens, and blocks until the process is killed.
fn serve(args: &ServeArgs) -> ExitCode {
    // Many connections (tcp-conns, idle) need more descriptors than a default soft limit.
    if let Err(err) = conns::raise_nofile() {
        eprintln!("rpc-bench serve: {err}");
    }
    // Each arm keeps its server alive in `_running` for as long as the process lives.
    let (_running, local, transport): (Box<dyn std::any::Any>, String, String) = match args.system {
        System::Ours => match ours::serve_with(
            rpc_core::Server::builder().ring(args.ring),
            &args.listen,
            args.transport,
        ) {
            Ok(server) => {
                let local = server.local_addr().to_owned();
                let transport = server.transport_name().to_owned();
                (Box::new(server), local, transport)
            }
            Err(err) => return serve_failed(args, &err.to_string()),
        },
        System::Tcp => match raw_tcp::serve(&args.listen) {
            Ok(server) => {
                let local = server.local_addr().to_string();
                (Box::new(server), local, "tcp".to_owned())
            }
            Err(err) => return serve_failed(args, &err.to_string()),
        },
        System::Tonic => match grpc::serve(&args.listen) {
            Ok(server) => {
                let local = server.local_addr().to_string();
                (Box::new(server), local, "tcp".to_owned())
            }
            Err(err) => return serve_failed(args, &err),
        },
    };
    eprintln!(
        "rpc-bench serve: {} echo server listening on {local} over {transport}",
        args.system
    );
    loop {
        std::thread::park();
    }
}

fn serve_failed(args: &ServeArgs, err: &str) -> ExitCode {
    eprintln!(
        "rpc-bench serve: cannot serve {} on {}: {err}",
        args.system, args.listen
    );
    ExitCode::FAILURE
}

fn load(args: &LoadArgs) -> ExitCode {
    let result = match args.system {
        System::Ours => ours::load(&args.connect, args.transport, args.params),
        System::Tcp => raw_tcp::load(&args.connect, args.params),
        System::Tonic => grpc::load(&args.connect, args.params),
    };
    println!("{}", result.to_json());
    if result.errors > 0 {
        eprintln!(
            "rpc-bench load: {} of {} calls failed or mismatched; first: {}",
            result.errors,
            args.params.count + args.params.warmup,
            result.first_error.as_deref().unwrap_or("(unknown)")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
