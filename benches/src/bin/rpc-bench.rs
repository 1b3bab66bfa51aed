//! `rpc-bench`: rpc-core next to a raw TCP ping-pong and tonic. See the `rpc_benches` crate
//! documentation for what is measured and how, and `rpc-bench --help` for the commands:
//!
//! ```text
//! rpc-bench serve  --system ours|tcp|tonic --listen ADDR:PORT [--transport tcp|verbs]
//!                  [--async] [--grpc-listen ADDR:PORT]
//! rpc-bench load   --system ours|tcp|tonic --connect ADDR:PORT [--transport tcp|verbs]
//!                  --size N --outstanding N --count N [--warmup N]
//! rpc-bench stream --connect ADDR:PORT [--transport tcp|verbs] --size N --count N
//! rpc-bench idle   [--connections 64] [--seconds 10] [--transport tcp] [--addr 127.0.0.1]
//! rpc-bench inproc --calls N [--size 64]
//! rpc-bench tcp-conns [--conns 2000]
//! rpc-bench verbs-conns --connect ADDR:PORT --conns N [--in-flight 16] [--out F] [--hold F]
//! rpc-bench tcp-idle [--conns 10000] [--seconds 10] [--in-flight 16]
//! ```

use std::process::ExitCode;

/// Counts allocations for `inproc`'s `allocations_per_call`.
#[global_allocator]
static ALLOCATOR: rpc_sync::CountingAllocator = rpc_sync::CountingAllocator;

use rpc_benches::cli::{self, CliError, Command, LoadArgs, ServeArgs, System};
use rpc_benches::{conns, grpc, idle, inproc, ours, raw_tcp, stream, tcp_idle, verbs_conns};

fn main() -> ExitCode {
    // Warnings (a connection given up on, a refused admission) to stderr; RUST_LOG for more.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
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
        Command::Stream(args) => {
            let result = stream::run(&args.connect, args.transport, args.params);
            println!("{}", result.to_json());
            if result.errors > 0 {
                eprintln!(
                    "rpc-bench stream: {} messages missing or wrong; first: {}",
                    result.errors,
                    result.first_error.as_deref().unwrap_or("(unknown)")
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Command::Idle(args) => print_json("idle", idle::run(&args).map(|r| r.to_json())),
        Command::TcpConns(args) => print_json("tcp-conns", conns::run(&args).map(|r| r.to_json())),
        Command::TcpIdle(args) => print_json("tcp-idle", tcp_idle::run(&args).map(|r| r.to_json())),
        Command::VerbsConns(args) => {
            print_json("verbs-conns", verbs_conns::run(&args).map(|r| r.to_json()))
        }
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
    // Each arm keeps its server alive in `running` for as long as the process lives.
    let (running, local, transport): (Box<dyn std::any::Any>, String, String) = match args.system {
        System::Ours => match serve_ours(args) {
            Ok(server) => {
                let mut local = server.local_addr().to_owned();
                if let Some(face) = server.grpc_local_addr() {
                    local = format!("{local} (gRPC face on {face})");
                }
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
    if let (Some(path), Some(server)) = (&args.stats, running.downcast_ref::<rpc_core::Server>()) {
        write_stats_every_second(server, path);
    }
    loop {
        std::thread::park();
    }
}

/// `serve --system ours`: sync or async handlers, with or without the gRPC face.
fn serve_ours(args: &ServeArgs) -> Result<rpc_core::Server, rpc_core::Error> {
    let mut builder = rpc_core::Server::builder().ring(args.ring);
    if let Some(addr) = &args.grpc_listen {
        builder = builder.grpc_listen(addr);
    }
    if args.async_handlers {
        ours::serve_async_with(builder, &args.listen, args.transport)
    } else {
        ours::serve_with(builder, &args.listen, args.transport)
    }
}

/// `serve --stats`: the server's connections, registered bytes and resident memory, rewritten
/// into `path` every second (written aside, then renamed: a reader never sees half of it).
fn write_stats_every_second(server: &rpc_core::Server, path: &str) -> ! {
    loop {
        let rss = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * 4096);
        let json = format!(
            "{{\"connections\":{},\"registered_bytes\":{},\"rss_bytes\":{rss}}}\n",
            server.connections(),
            server.registered_bytes()
        );
        let aside = format!("{path}.tmp");
        if std::fs::write(&aside, json)
            .and_then(|()| std::fs::rename(&aside, path))
            .is_err()
        {
            eprintln!("rpc-bench serve: cannot write {path}");
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
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
        System::Ours if args.async_client => {
            ours::load_async(&args.connect, args.transport, args.params)
        }
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
