//! Each system's server and load generator against each other over 127.0.0.1, with small
//! loads: every reply is checked, segmented sizes included, at one and several calls in
//! flight. Also the `rpc-bench` binary's JSON line and exit status.

use std::process::Command;

use rpc_benches::report::{LoadParams, LoadResult};
use rpc_benches::stream::{self, StreamParams};
use rpc_benches::{grpc, ours, raw_tcp};

fn params(size: usize, outstanding: usize) -> LoadParams {
    LoadParams {
        size,
        outstanding,
        count: 200,
        warmup: 5,
    }
}

fn assert_clean(result: &LoadResult) {
    assert_eq!(result.errors, 0, "{:?}", result.first_error);
    assert!(
        result.p50_us.is_some() && result.calls_per_s > 0.0,
        "{result:?}"
    );
    assert!(result.p50_us <= result.p99_us && result.p99_us <= result.p999_us);
}

const LOADS: [(usize, usize); 4] = [(64, 1), (0, 4), (20_000, 1), (20_000, 8)];

#[test]
fn ours_over_tcp() {
    let server = ours::serve("127.0.0.1:0", rpc_core::TransportKind::Tcp).unwrap();
    for (size, outstanding) in LOADS {
        let r = ours::load(
            server.local_addr(),
            rpc_core::TransportKind::Tcp,
            params(size, outstanding),
        );
        assert_clean(&r);
        assert_eq!((r.system.as_str(), r.transport.as_str()), ("ours", "tcp"));
    }
    server.shutdown();
}

#[test]
fn ours_async_stream_and_grpc_face() {
    let server = ours::serve_async_with(
        rpc_core::Server::builder().grpc_listen("127.0.0.1:0"),
        "127.0.0.1:0",
        rpc_core::TransportKind::Tcp,
    )
    .unwrap();
    // One server stream, segmented messages included.
    for size in [64, 20_000] {
        let params = StreamParams {
            size,
            count: 500,
            warmup: 50,
        };
        let r = stream::run(server.local_addr(), rpc_core::TransportKind::Tcp, params);
        assert_eq!(r.errors, 0, "{:?}", r.first_error);
        assert_eq!(r.received, 500);
        assert!(
            r.messages_per_s > 0.0 && r.first_message_us.is_some(),
            "{r:?}"
        );
    }
    // The async unary handler, natively and behind the gRPC face (tonic's client).
    for (size, outstanding) in LOADS {
        assert_clean(&ours::load(
            server.local_addr(),
            rpc_core::TransportKind::Tcp,
            params(size, outstanding),
        ));
    }
    let face = server.grpc_local_addr().expect("a gRPC face").to_string();
    for (size, outstanding) in LOADS {
        assert_clean(&grpc::load(&face, params(size, outstanding)));
    }
    server.shutdown();
}

/// The blocking handlers' server (`rpc-bench serve` without `--async`), asked to run them
/// inline: a response stream far larger than the call's window must still flow. Its
/// blocking handler waits for the client's window, which only the poller receives: run on the
/// poller, it stalled the whole server for good (a hostile-peer probe found it); it runs on
/// the worker pool instead, and the server keeps answering other calls meanwhile.
#[test]
fn blocking_stream_handler_asked_inline_does_not_stall_the_server() {
    let server = ours::serve("127.0.0.1:0", rpc_core::TransportKind::Tcp).unwrap();
    let addr = server.local_addr().to_owned();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let params = StreamParams {
            size: 20_000,
            count: 300,
            warmup: 0,
        };
        let streamed = stream::run(&addr, rpc_core::TransportKind::Tcp, params);
        let beside = ours::load(&addr, rpc_core::TransportKind::Tcp, params_small());
        let _ = done.send((streamed, beside));
    });
    let (streamed, beside) = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the stream and the calls after it finish within 60 s (the server stalled)");
    assert_eq!(streamed.errors, 0, "{:?}", streamed.first_error);
    assert_eq!(streamed.received, 300);
    assert_clean(&beside);
    server.shutdown();
}

fn params_small() -> LoadParams {
    params(64, 1)
}

#[test]
fn stream_against_nobody_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let params = StreamParams {
        size: 64,
        count: 10,
        warmup: 1,
    };
    let r = stream::run(
        &format!("127.0.0.1:{port}"),
        rpc_core::TransportKind::Tcp,
        params,
    );
    assert_eq!(r.errors, 11, "{r:?}");
    assert!(r.to_json().contains("\"first_message_us\":null"));
}

#[test]
fn raw_tcp_ping_pong_and_pipeline() {
    let server = raw_tcp::serve("127.0.0.1:0").unwrap();
    let addr = server.local_addr().to_string();
    for (size, outstanding) in LOADS {
        assert_clean(&raw_tcp::load(&addr, params(size, outstanding)));
    }
}

#[test]
fn tonic_grpc() {
    let server = grpc::serve("127.0.0.1:0").unwrap();
    let addr = server.local_addr().to_string();
    for (size, outstanding) in LOADS {
        assert_clean(&grpc::load(&addr, params(size, outstanding)));
    }
}

#[test]
fn nobody_listening_fails_every_call() {
    // A port that was free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let p = params(64, 2);
    for r in [
        raw_tcp::load(&addr, p),
        grpc::load(&addr, p),
        ours::load(&addr, rpc_core::TransportKind::Tcp, p),
    ] {
        assert_eq!(r.errors, p.count + p.warmup, "{r:?}");
        assert!(r.to_json().contains("\"p50_us\":null"));
    }
}

#[test]
fn binary_prints_one_json_line() {
    let server = raw_tcp::serve("127.0.0.1:0").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(["load", "--system", "tcp", "--connect"])
        .arg(server.local_addr().to_string())
        .args(["--size", "100", "--outstanding", "3", "--count", "50"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(lines[0].starts_with(
        r#"{"system":"tcp","transport":"tcp","size":100,"outstanding":3,"count":50,"p50_us":"#
    ));
    assert!(lines[0].ends_with(r#","errors":0}"#));

    let bad = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(["load", "--system", "tcp"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--connect is required"));
}

#[test]
fn idle_measures_a_child_server() {
    let out = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(["idle", "--connections", "3", "--seconds", "0.3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with(r#"{"idle_server_cpu_percent":"#)
            && stdout
                .trim_end()
                .ends_with(r#","connections":3,"seconds":0.3}"#),
        "{stdout}"
    );
}

#[test]
fn tcp_conns_counts_a_child_servers_threads() {
    let out = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(["tcp-conns", "--conns", "50"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let threads: usize = stdout
        .trim()
        .strip_prefix(r#"{"server_threads_50_conns":"#)
        .and_then(|rest| rest.strip_suffix(r#","workers":1}"#))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    // Main, acceptor, poller, TCP I/O loop, one worker; a little slack.
    assert!(threads <= 1 + 8, "{threads} threads");
}
