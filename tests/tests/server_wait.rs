//! `Server::wait`: a program without an async runtime serves until SIGTERM, then shuts down
//! gracefully and returns. The server runs in a child process (this test binary again, the
//! test's name and `RPC_WAIT_CHILD` set), so the signal reaches it alone.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rpc_core::{Server, TransportKind};
use rpc_tests::scenarios::{payload, TortureService};
use rpc_tests::testing::torture_client::blocking::TortureClient;
use rpc_tests::testing::torture_server::TortureServer;

const TEST: &str = "wait_serves_until_sigterm_then_returns";

/// The child: serves, prints its address, waits.
fn child() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let server = Server::builder()
        .add_service(TortureServer::new(TortureService::default()))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("serves");
    eprintln!("child: listening on {}", server.local_addr());
    server.wait().expect("waits");
    eprintln!("child: wait returned");
}

#[test]
fn wait_serves_until_sigterm_then_returns() {
    if std::env::var_os("RPC_WAIT_CHILD").is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("this test binary");
    let mut server = Command::new(exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env("RPC_WAIT_CHILD", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let pid = server.id().to_string();

    // The child's lines, read on a thread; a watchdog fails the test instead of hanging.
    let (lines, read) = mpsc::channel();
    let stderr = server.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut until = |what: &str| -> String {
        loop {
            match read.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = Command::new("kill").args(["-KILL", &pid]).status();
                    panic!("no `{what}` from the child; it said: {seen:#?}");
                }
            }
        }
    };

    let listening = until("child: listening on ");
    let addr = listening.rsplit(' ').next().expect("an address").to_owned();
    // Caught from here on.
    until("serving until SIGINT or SIGTERM");
    let client = TortureClient::connect(&addr).expect("connects");
    assert_eq!(
        client
            .echo(payload(1, 16))
            .expect("served while waiting")
            .into_inner(),
        payload(1, 16)
    );

    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    until("SIGTERM received: shutting down");
    until("child: wait returned");
    let status = server.wait().expect("the child ends");
    assert!(status.success(), "the child ended with {status}");
}
