//! End-to-end checks of the demos over TCP on the loopback interface: the services through the
//! generated stubs in-process, then the real binaries as separate processes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rpc_core::codegen::Code;
use rpc_core::protocol::v2::HELLO_LEN;
use rpc_core::protocol::{Header, Hello, Kind, HEADER_LEN};
use rpc_core::{RingConfig, TransportKind};
use rpc_examples::calc::calculator_client::blocking::CalculatorClient;
use rpc_examples::calc::calculator_server::CalculatorServer;
use rpc_examples::calc::{DivideRequest, EvaluateRequest, MultiplyRequest, SumRequest};
use rpc_examples::echo::echo_client::blocking::EchoClient;
use rpc_examples::echo::echo_server::EchoServer;
use rpc_examples::echo::{EchoRepeatRequest, EchoReply, EchoRequest};
use rpc_examples::services::{CalculatorService, EchoService};

fn tcp_client(addr: &str) -> rpc_core::Client {
    rpc_core::Client::builder()
        .transport(TransportKind::Tcp)
        .timeout(Duration::from_secs(10))
        .connect(addr)
        .expect("connecting to the test server")
}

#[test]
fn calculator_service_over_tcp() {
    let server = rpc_core::Server::builder()
        .add_service(CalculatorServer::new(CalculatorService))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the calculator server");
    assert_eq!(server.transport_name(), "tcp");
    let calc = CalculatorClient::new(tcp_client(server.local_addr()));

    assert_eq!(
        calc.multiply(MultiplyRequest { a: 6, b: 7 })
            .unwrap()
            .into_inner()
            .value,
        42
    );
    let d = calc
        .divide(DivideRequest { a: -7, b: 2 })
        .unwrap()
        .into_inner();
    assert_eq!((d.quotient, d.remainder), (-3, -1));
    let status = calc.divide(DivideRequest { a: 1, b: 0 }).unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "division by zero: 1 / 0");

    let eval = |s: &str| {
        calc.evaluate(EvaluateRequest {
            expression: s.to_owned(),
        })
    };
    assert_eq!(eval("2 * (3 + 4) ^ 2").unwrap().into_inner().value, 98.0);
    let status = eval("2 + * 3").unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "syntax error at position 5: expected a number or '(', found '*'"
    );
    let hostile = "(".repeat(4000);
    assert_eq!(eval(&hostile).unwrap_err().code(), Code::InvalidArgument);

    // Client streaming: the sum of a stream, blocking and async.
    let numbers = (1..=100).map(|value| SumRequest { value });
    let sum = calc.sum(numbers).expect("sum").into_inner();
    assert_eq!((sum.total, sum.count), (5050, 100));
    let overflow = calc.sum(vec![
        SumRequest { value: i64::MAX },
        SumRequest { value: 1 },
    ]);
    assert_eq!(overflow.unwrap_err().code(), Code::OutOfRange);
    let sum = futures::executor::block_on(
        rpc_examples::calc::calculator_client::CalculatorClient::from(calc.clone()).sum(
            futures::stream::iter((1..=10).map(|value| SumRequest { value })),
        ),
    )
    .expect("sum_async")
    .into_inner();
    assert_eq!(sum.total, 55);

    // Bidirectional: each number answered with the running total before the next is sent.
    let mut running = calc.running_total(()).expect("running total opens");
    let mut expected = 0;
    for value in [5, -2, 10] {
        running.send(&SumRequest { value }).expect("send");
        expected += value;
        let step = running.recv().expect("a total").expect("not the end");
        assert_eq!(step.total, expected);
    }
    running.close_send();
    assert_eq!(running.recv().expect("ends OK"), None);
    server.shutdown();
}

#[test]
fn echo_service_inline_over_tcp() {
    let server = rpc_core::Server::builder()
        .add_service_with(EchoServer::new(EchoService), rpc_core::Execution::Inline)
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("starting the echo server");
    let echo = EchoClient::new(tcp_client(server.local_addr()));
    // Empty, small, and larger than one slot (segmented).
    for size in [0usize, 1, 64, 4096, 100_000] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let reply = echo
            .echo(EchoRequest {
                payload: payload.clone(),
            })
            .unwrap_or_else(|s| panic!("echo of {size} bytes: {s}"))
            .into_inner();
        assert_eq!(reply.payload, payload, "echo of {size} bytes");
    }
    // Server streaming: every copy, in order, then the end.
    let copies: Vec<EchoReply> = echo
        .echo_repeat(EchoRepeatRequest {
            payload: b"again".to_vec(),
            count: 1000,
            interval_ms: 0,
        })
        .expect("echo_repeat")
        .into_inner()
        .into_blocking_iter()
        .collect::<Result<_, _>>()
        .expect("all copies");
    assert_eq!(copies.len(), 1000);
    assert!(copies.iter().all(|c| c.payload == b"again"));
    server.shutdown();
}

/// A port that was free a moment ago (for a client that must find nobody there).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a probe socket")
        .port()
}

/// A demo server process, killed when dropped, and the lines of its log not read yet.
struct ServerProcess(Child, mpsc::Receiver<String>);

impl ServerProcess {
    /// Starts `binary` on a port the kernel picks (`--listen 127.0.0.1:0`) and returns it
    /// with the address it logged as bound. Picking a free port beforehand would race other
    /// tests doing the same: two servers on one port, one of them failing to bind while the
    /// other answers the readiness check for it.
    fn start(binary: &str) -> (ServerProcess, String) {
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0", "--transport", "tcp"])
            // Few log lines: the one saying where it listens, and errors.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        // A thread reads the log to its end (the server never blocks on a full pipe) and
        // sends each line here.
        let (lines, log) = mpsc::channel();
        let mut server = ServerProcess(child, log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match server.1.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        return (server, addr.to_owned());
                    }
                    seen.push_str(&line);
                    seen.push('\n');
                }
                Err(_) => {
                    let status = server.0.try_wait().ok().flatten();
                    panic!("{binary} did not say where it listens (exit: {status:?}):\n{seen}");
                }
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"))
}

#[test]
fn calculator_binaries() {
    let (_server, addr) = ServerProcess::start(env!("CARGO_BIN_EXE_calculator-server"));
    let out = run(
        env!("CARGO_BIN_EXE_calculator-client"),
        &["--connect", &addr, "--transport", "tcp"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "calculator-client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "Add(7, 5) = 12",
        "Divide(1, 0) -> INVALID_ARGUMENT: division by zero: 1 / 0",
        "Evaluate(\"2 * (3 + 4) ^ 2\") = 98",
        "Evaluate(\"2 + * 3\") -> INVALID_ARGUMENT: syntax error at position 5",
        "calls returned what they should",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
}

#[test]
fn echo_binaries() {
    let (_server, addr) = ServerProcess::start(env!("CARGO_BIN_EXE_echo-server"));
    let out = run(
        env!("CARGO_BIN_EXE_echo-client"),
        &[
            "--connect",
            &addr,
            "--transport",
            "tcp",
            "--size",
            "1k",
            "--count",
            "400",
            "--concurrency",
            "4",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "echo-client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "size         1024 bytes",
        "count        400 calls",
        "concurrency  4",
        "transport    tcp",
        "p99.9",
        "calls/s",
        "errors       0 failed, 0 mismatched",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

#[test]
fn bad_flags_are_rejected_with_status_2() {
    let out = run(
        env!("CARGO_BIN_EXE_echo-client"),
        &["--concurrency", "zero"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value `zero` for --concurrency"),
        "{stderr}"
    );
    let out = run(env!("CARGO_BIN_EXE_calculator-server"), &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: calculator-server"));
}

#[test]
fn clients_fail_cleanly_without_a_server() {
    let addr = format!("127.0.0.1:{}", free_port());
    let out = run(
        env!("CARGO_BIN_EXE_calculator-client"),
        &["--connect", &addr, "--transport", "tcp"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

/// PROTOCOL.md §14: SIGTERM (and SIGINT, Ctrl-C) makes a demo server shut down gracefully: it
/// logs that it is shutting down, sends its clients GOODBYE, closes their connections with an
/// orderly end of stream (not a reset) and exits with status 0.
#[test]
fn servers_shut_down_gracefully_on_sigterm_and_sigint() {
    for (binary, signal) in [
        (env!("CARGO_BIN_EXE_echo-server"), "TERM"),
        (env!("CARGO_BIN_EXE_calculator-server"), "INT"),
    ] {
        let (mut server, addr) = ServerProcess::start(binary);
        // A raw peer past the handshake, to see the frames and the close as they are.
        let mut raw = std::net::TcpStream::connect(&addr).expect("connecting a raw peer");
        raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        raw.write_all(&RingConfig::DEFAULT.hello().to_frame())
            .unwrap();
        let mut hello = [0u8; HEADER_LEN + HELLO_LEN];
        raw.read_exact(&mut hello).expect("the server's HELLO");
        Hello::from_frame(&hello).expect("a valid HELLO");
        // And a client of the framework.
        let client = tcp_client(&addr);

        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &server.0.id().to_string()])
            .status()
            .expect("running kill");
        assert!(killed.success(), "kill -{signal} failed");

        // GOODBYE (after keepalive PINGs, if the server grew impatient), then the end of the
        // stream.
        loop {
            let mut header = [0u8; HEADER_LEN];
            raw.read_exact(&mut header)
                .unwrap_or_else(|e| panic!("{binary}: no GOODBYE after SIG{signal}: {e}"));
            let h = Header::decode(&header).expect("a valid frame header");
            assert_eq!(h.segment_len, 0, "{binary}: an unexpected {:?}", h.kind);
            if h.kind == Kind::Goodbye {
                assert_eq!(h.call_id, 0, "no call was opened");
                break;
            }
            assert_eq!(h.kind, Kind::Ping, "{binary}: an unexpected frame");
        }
        let mut rest = Vec::new();
        match raw.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => panic!("{binary}: the connection ended with {e}, not an end of stream"),
        }

        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = server.0.try_wait().expect("waiting for the server") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{binary} still runs after SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let log: Vec<String> = server.1.try_iter().collect();
        let log = log.join("\n");
        assert_eq!(status.code(), Some(0), "{binary} after SIG{signal}:\n{log}");
        assert!(
            log.contains(&format!("SIG{signal} received, shutting down")),
            "{binary}: the shutdown is not logged:\n{log}"
        );
        assert!(log.contains("shut down"), "{log}");

        // The framework's client was told GOODBYE, or found the connection closed: either way
        // a new call fails UNAVAILABLE, never hangs.
        let echo = EchoClient::new(client);
        let status = echo
            .echo(EchoRequest {
                payload: b"late".to_vec(),
            })
            .expect_err("a call after the server left");
        assert_eq!(status.code(), Code::Unavailable, "{status}");
    }
}
