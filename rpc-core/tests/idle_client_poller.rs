//! An idle client's poller thread on a completion queue that needs polling (verbs; here the
//! in-memory transport, which needs polling too) parks between its connections' ticks
//! instead of waking every deadline tick (1 ms) for nothing, and still serves the next call
//! of each kind at once, and learns at once that its connection closed. One test in this
//! binary: it counts the process's client poller threads' wake-ups.

use std::time::{Duration, Instant};

mod common;

use common::{with_watchdog, Blob, EchoService, METHODS};
use rpc_core::{Client, Request, Server, TransportKind};

/// Sleeps (voluntary context switches) of this process's client poller threads so far.
fn client_poller_sleeps() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let task = task.expect("a task").path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        // Thread names are cut to 15 bytes: `rpc-poller-client` reads `rpc-poller-clie`.
        if !name.starts_with("rpc-poller-clie") {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

fn echo(client: &Client, byte: u8) {
    let blob = Blob {
        data: vec![byte; 64],
    };
    let echoed: Blob = client
        .unary(&METHODS[0], Request::new(blob.clone()))
        .expect("the call is served")
        .into_inner();
    assert_eq!(echoed, blob);
}

#[test]
fn an_idle_client_poller_parks_between_its_ticks_serves_the_next_call_and_sees_closes() {
    with_watchdog(Duration::from_secs(60), || {
        let mut server = Server::builder()
            .add_service(EchoService)
            .start("mem:idle-client-poller", TransportKind::Tcp)
            .expect("serve");
        let client = Client::builder()
            .timeout(Duration::from_secs(10))
            .connect(server.local_addr())
            .expect("connect");
        echo(&client, 1);
        // Past the poller's spin after work and its stand-back delay (10 ms).
        std::thread::sleep(Duration::from_millis(300));
        let before = client_poller_sleeps();
        let idle = Duration::from_secs(1);
        let started = Instant::now();
        std::thread::sleep(idle);
        let slept = client_poller_sleeps() - before;
        let elapsed = started.elapsed();
        // Waking every 1 ms tick, the poller slept about 1,000 times in the second; parked
        // between connection ticks (at most 200 ms apart), a handful.
        assert!(
            slept <= 20,
            "the idle client's poller slept {slept} times in {elapsed:?}"
        );
        // A blocking call drives the queue itself; an async one calls the poller back.
        echo(&client, 2);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        std::thread::sleep(Duration::from_millis(300));
        let blob = Blob { data: vec![3; 64] };
        let echoed: Blob = runtime
            .block_on(client.unary_async(&METHODS[0], Request::new(blob.clone())))
            .expect("the async call is served")
            .into_inner();
        assert_eq!(echoed, blob);

        // The server goes away while the client idles, and another takes its address: the
        // parked poller learns of the close at once (not at its next tick, up to 200 ms
        // later), so a call soon after reconnects instead of going out on the dead link.
        for round in 0..3u8 {
            std::thread::sleep(Duration::from_millis(300));
            let addr = server.local_addr().to_string();
            server.shutdown();
            server = Server::builder()
                .add_service(EchoService)
                .start(&addr, TransportKind::Tcp)
                .expect("serve again");
            std::thread::sleep(Duration::from_millis(50));
            echo(&client, 10 + round);
        }
    });
}
