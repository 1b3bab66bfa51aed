//! Measures round-trip latency and call rate against an `echo-server`.
//!
//! ```text
//! echo-client [--connect ADDR:PORT] [--transport auto|tcp|verbs] [--size N] [--count N]
//!             [--concurrency N]
//! ```
//!
//! Connects to `--connect` (default `127.0.0.1:50052`) over `--transport` (default `auto`)
//! and starts `--concurrency` threads (default 1) that share the connection. Each thread makes
//! calls one at a time, each carrying a payload of `--size` bytes (default 64; `4k`, `1M`
//! allowed) of pseudo-random content stamped with a sequence number, and checks that every
//! reply equals its request. The threads first make about 1% extra calls as an unmeasured
//! warm-up, then `--count` measured calls between them (default 10 000).
//!
//! Prints the parameters, the transport, the p50 / p99 / p99.9 latency in microseconds, the
//! rate in calls/s and the number of errors; then makes one server-streaming `EchoRepeat`
//! call of `--count` (at most 100,000) replies of `--size` bytes, given the per-call timeout
//! plus 20 ms a reply, and prints their rate. Runs longer than a second report progress on
//! stderr. Exits with status 1 if any call failed or any reply differed from its request.
//!
//! ```text
//! $ echo-client --connect 127.0.0.1:50052 --transport tcp --size 64 --count 20000
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rpc_examples::cli::{self, EchoClientArgs};
use rpc_examples::echo::echo_client::blocking::EchoClient;
use rpc_examples::echo::{EchoRepeatRequest, EchoRequest};
use rpc_examples::stats::{calls_per_second, Latencies};

const DEFAULT_CONNECT: &str = "127.0.0.1:50052";

/// A worker gives up after this many failed calls in a row (the server is most likely gone).
const GIVE_UP_AFTER: u32 = 100;

/// What one worker thread did.
struct WorkerReport {
    latencies: Latencies,
    /// Calls that failed with a status.
    errors: u64,
    /// Calls whose reply differed from the request.
    mismatches: u64,
    /// Measured calls made (successful or not).
    attempted: u64,
    /// The first failure, for the report.
    first_error: Option<String>,
    /// When the measured calls started and ended.
    started: Instant,
    ended: Instant,
}

/// Makes `warmup` unmeasured and then `calls` measured echo calls, one at a time.
fn worker(
    id: u64,
    echo: &EchoClient,
    size: usize,
    warmup: u64,
    calls: u64,
    barrier: &Barrier,
    done: &AtomicU64,
) -> WorkerReport {
    let mut payload = vec![0u8; size];
    // xorshift64: cheap pseudo-random content, different for each worker.
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (id + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    for chunk in payload.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }

    let mut report = WorkerReport {
        latencies: Latencies::with_capacity(calls as usize),
        errors: 0,
        mismatches: 0,
        attempted: 0,
        first_error: None,
        started: Instant::now(),
        ended: Instant::now(),
    };
    let mut failed_in_a_row = 0;
    let mut seq = id << 40;
    let mut call = |report: &mut WorkerReport, measured: bool| {
        // Stamp the call's sequence number so that no two requests are alike.
        seq += 1;
        let stamp = seq.to_le_bytes();
        let n = payload.len().min(stamp.len());
        payload[..n].copy_from_slice(&stamp[..n]);
        let request = EchoRequest {
            payload: payload.clone(),
        };

        let start = Instant::now();
        let result = echo.echo(request).map(rpc_core::Response::into_inner);
        let elapsed = start.elapsed();

        let failure = match result {
            Ok(reply) if reply.payload == payload => None,
            Ok(reply) => {
                report.mismatches += 1;
                Some(format!(
                    "reply of {} bytes differs from the request of {} bytes",
                    reply.payload.len(),
                    payload.len()
                ))
            }
            Err(status) => {
                report.errors += 1;
                Some(status.to_string())
            }
        };
        match failure {
            None => {
                failed_in_a_row = 0;
                if measured {
                    report.latencies.record(elapsed);
                }
            }
            Some(message) => {
                failed_in_a_row += 1;
                report.first_error.get_or_insert(message);
            }
        }
        failed_in_a_row < GIVE_UP_AFTER
    };

    let mut alive = true;
    for _ in 0..warmup {
        alive = call(&mut report, false);
        if !alive {
            break;
        }
    }
    barrier.wait();
    report.started = Instant::now();
    if alive {
        for _ in 0..calls {
            let go_on = call(&mut report, true);
            report.attempted += 1;
            done.fetch_add(1, Ordering::Relaxed);
            if !go_on {
                break;
            }
        }
    }
    report.ended = Instant::now();
    report
}

/// The most replies one EchoRepeat call may ask for (the server's limit).
const STREAM_MAX: u64 = 100_000;

/// The time the streaming call is given per reply, on top of the client's per-call timeout:
/// a call of thousands of replies is no unary call, and a slow machine (an emulated RDMA
/// wire between two emulated hosts streams some 600 replies/s, and 125 on a busy host) must
/// not fail it.
const STREAM_TIME_PER_REPLY: Duration = Duration::from_millis(20);

/// One server-streaming call: `count` replies of `size` bytes as fast as flow control lets
/// them come; prints their rate. An error if the stream failed or a reply was wrong.
fn stream_phase(echo: &EchoClient, size: usize, count: u64) -> Result<(), ()> {
    let payload = vec![0x5a; size];
    let start = Instant::now();
    let timeout = rpc_examples::CALL_TIMEOUT + STREAM_TIME_PER_REPLY * count as u32;
    let outcome = echo
        .echo_repeat(
            rpc_core::Request::new(EchoRepeatRequest {
                payload: payload.clone(),
                count: count as u32,
                interval_ms: 0,
            })
            .with_timeout(timeout),
        )
        .and_then(|response| {
            let mut received = 0u64;
            for reply in response.into_inner().into_blocking_iter() {
                if reply?.payload != payload {
                    return Err(rpc_core::Status::data_loss("a streamed reply differs"));
                }
                received += 1;
            }
            Ok(received)
        });
    let elapsed = start.elapsed();
    match outcome {
        Ok(received) if received == count => {
            println!(
                "  stream       {:.0} messages/s (one EchoRepeat of {count} replies in {:.3} s)",
                calls_per_second(received, elapsed),
                elapsed.as_secs_f64()
            );
            Ok(())
        }
        Ok(received) => {
            eprintln!("echo-client: EchoRepeat sent {received} of {count} replies");
            Err(())
        }
        Err(status) => {
            eprintln!("echo-client: EchoRepeat failed: {status}");
            Err(())
        }
    }
}

fn main() -> ExitCode {
    let args = cli::parse_or_exit(
        &EchoClientArgs::usage("echo-client", DEFAULT_CONNECT),
        |args| EchoClientArgs::parse(args, DEFAULT_CONNECT),
    );
    rpc_examples::init_tracing();

    let client = match rpc_examples::connect(&args.client) {
        Ok(client) => client,
        Err(err) => {
            eprintln!(
                "echo-client: cannot connect to {} over {}: {err}",
                args.client.connect, args.client.transport
            );
            return ExitCode::FAILURE;
        }
    };
    let transport = client.transport_name();
    let echo = EchoClient::new(client.clone());

    let threads = args.concurrency as u64;
    let share = |i: u64| args.count / threads + u64::from(i < args.count % threads);
    let warmup = |i: u64| share(i).div_ceil(100);
    let warmup_total: u64 = (0..threads).map(warmup).sum();

    let barrier = Barrier::new(args.concurrency + 1);
    let done = AtomicU64::new(0);
    let reports: Vec<WorkerReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (echo, barrier, done) = (&echo, &barrier, &done);
                let size = args.size;
                std::thread::Builder::new()
                    .name(format!("echo-{i}"))
                    .spawn_scoped(scope, move || {
                        worker(i, echo, size, warmup(i), share(i), barrier, done)
                    })
                    .expect("spawning a worker thread")
            })
            .collect();

        barrier.wait();
        let start = Instant::now();
        let mut last_report = start;
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                let n = done.load(Ordering::Relaxed);
                eprintln!(
                    "  {n}/{} calls, {:.0} calls/s so far",
                    args.count,
                    calls_per_second(n, start.elapsed())
                );
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread panicked"))
            .collect()
    });

    let started = reports.iter().map(|r| r.started).min();
    let ended = reports.iter().map(|r| r.ended).max();
    let elapsed = match (started, ended) {
        (Some(s), Some(e)) => e.saturating_duration_since(s),
        _ => Duration::ZERO,
    };
    let errors: u64 = reports.iter().map(|r| r.errors).sum();
    let mismatches: u64 = reports.iter().map(|r| r.mismatches).sum();
    let first_error = reports.iter().find_map(|r| r.first_error.clone());
    let attempted: u64 = reports.iter().map(|r| r.attempted).sum();
    let mut latencies = Latencies::new();
    for r in reports {
        latencies.merge(r.latencies);
    }
    let measured = latencies.len() as u64;

    println!("echo-client: {} over {transport}", args.client.connect);
    println!("  size         {} bytes", args.size);
    println!(
        "  count        {} calls (+{warmup_total} warm-up calls, not measured)",
        args.count
    );
    println!("  concurrency  {}", args.concurrency);
    println!("  transport    {transport}");
    match latencies.summary() {
        Some(summary) => println!("  latency      {summary}"),
        None => println!("  latency      (no successful call)"),
    }
    println!(
        "  throughput   {:.0} calls/s ({measured} calls in {:.3} s)",
        calls_per_second(measured, elapsed),
        elapsed.as_secs_f64()
    );
    println!("  errors       {errors} failed, {mismatches} mismatched");
    let counters = client.stats();
    println!(
        "  connection   {} calls, {} bytes sent, {} bytes received (frames, warm-up included)",
        counters.calls, counters.bytes_sent, counters.bytes_received
    );

    let streamed = stream_phase(&echo, args.size, args.count.min(STREAM_MAX));

    let missing = args.count.saturating_sub(attempted);
    if streamed.is_err() || errors + mismatches > 0 || missing > 0 {
        if let Some(first) = first_error {
            eprintln!("echo-client: first failure: {first}");
        }
        if missing > 0 {
            eprintln!("echo-client: {missing} calls were not made: workers gave up after {GIVE_UP_AFTER} failures in a row");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
