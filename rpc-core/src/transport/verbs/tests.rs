//! Transport-level tests on the real kernel verbs stack.
//!
//! They need an RDMA device: run them inside the Soft-RoCE VM (`make test-verbs`, or
//! `scripts/softroce-vm -- 'target/debug/deps/rpc_core-… verbs'`). Without a device they print
//! why and return, unless `RPC_TEST_VERBS=1` (set by `scripts/verbs-tests`), which makes a
//! missing device a failure. `RPC_TEST_VERBS_ADDR` names the address to listen on (default
//! 192.0.2.1, the VM's rxe0). The tests take a process-wide lock so the resource and counter
//! checks see only their own objects.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{verbs_device_for, VerbsEndpoint};
use crate::transport::{Acceptor, Completion, CompletionQueue, Link, RecvBuf, RingConfig};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds `SERIAL` (a std lock, not a runtime one: it is held across the whole test,
/// through waits and posts); a test that failed holding it does not fail the others.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const STEP: Duration = Duration::from_secs(20);

/// The address and device to test on, or `None` (after saying why) when there is no device.
fn device() -> Option<(IpAddr, String)> {
    let ip: IpAddr = std::env::var("RPC_TEST_VERBS_ADDR")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "192.0.2.1".into())
        .parse()
        .expect("RPC_TEST_VERBS_ADDR is an IP address");
    let required = std::env::var("RPC_TEST_VERBS").is_ok_and(|v| v == "1");
    let why = match verbs_device_for(&SocketAddr::new(ip, 0)) {
        Ok(Some(name)) => return Some((ip, name)),
        Ok(None) => format!("no RDMA device serves {ip}"),
        Err(e) => format!("{e}"),
    };
    assert!(!required, "RPC_TEST_VERBS=1 but {why}");
    eprintln!("skipping verbs test: {why} (run it inside scripts/softroce-vm)");
    None
}

fn ring(slot_count: u32, slot_size: u32) -> RingConfig {
    RingConfig {
        slot_count,
        slot_size,
        max_message_size: 1 << 20,
        ..RingConfig::DEFAULT
    }
}

/// A connected pair: (server endpoint, server link, client endpoint, client link).
struct Pair {
    server_ep: Arc<VerbsEndpoint>,
    server: Arc<dyn Link>,
    server_cq: Cq,
    client_ep: Arc<VerbsEndpoint>,
    client: Arc<dyn Link>,
    client_cq: Cq,
    acceptor: Box<dyn Acceptor>,
}

fn pair(ip: IpAddr, server_ring: RingConfig, client_ring: RingConfig) -> Pair {
    let server_ep = VerbsEndpoint::new().expect("server endpoint");
    let mut acceptor = server_ep
        .listen(SocketAddr::new(ip, 0), server_ring)
        .expect("listen");
    let addr: SocketAddr = acceptor.local_addr().parse().expect("local_addr parses");
    assert_eq!(addr.ip(), ip);
    assert_ne!(addr.port(), 0, "an ephemeral port was assigned");
    let accepting = std::thread::spawn(move || {
        let link = acceptor
            .accept(STEP)
            .expect("accept")
            .expect("a link within the timeout");
        (link, acceptor)
    });
    let client_ep = VerbsEndpoint::new().expect("client endpoint");
    let client = client_ep
        .connect(addr, client_ring, 7, STEP)
        .expect("connect");
    let (server, acceptor) = accepting.join().expect("acceptor thread");
    Pair {
        server_cq: Cq::new(server_ep.cq()),
        client_cq: Cq::new(client_ep.cq()),
        server_ep,
        server,
        client_ep,
        client,
        acceptor,
    }
}

/// Collects completions of one CQ.
struct Cq {
    cq: Arc<dyn CompletionQueue>,
    queue: VecDeque<Completion>,
    send_done: usize,
}

fn describe(c: &Completion) -> String {
    match c {
        Completion::Recv { link, buf } => format!("Recv(link {link}, {} bytes)", buf.len()),
        Completion::SendDone { link } => format!("SendDone(link {link})"),
        Completion::Closed { link, reason } => format!("Closed(link {link}: {reason})"),
    }
}

impl Cq {
    fn new(cq: Arc<dyn CompletionQueue>) -> Cq {
        Cq {
            cq,
            queue: VecDeque::new(),
            send_done: 0,
        }
    }

    fn next(&mut self, timeout: Duration) -> Option<Completion> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.queue.pop_front() {
                return Some(c);
            }
            let mut out = Vec::new();
            let n = self.cq.poll(&mut out, 4);
            assert_eq!(n, out.len());
            assert!(n <= 4, "poll appended more than max");
            if !out.is_empty() {
                self.queue.extend(out);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.cq.wait(Some(left.min(Duration::from_millis(100))));
        }
    }

    /// The next received frame, counting SendDone on the way.
    fn recv(&mut self) -> (u64, RecvBuf) {
        loop {
            match self.next(STEP) {
                Some(Completion::Recv { link, buf }) => return (link, buf),
                Some(Completion::SendDone { .. }) => self.send_done += 1,
                Some(other) => panic!("expected a frame, got {}", describe(&other)),
                None => panic!("no frame within {STEP:?}"),
            }
        }
    }

    /// Waits for a SendDone.
    fn send_done(&mut self) {
        if self.send_done > 0 {
            self.send_done -= 1;
            return;
        }
        match self.next(STEP) {
            Some(Completion::SendDone { .. }) => {}
            Some(other) => panic!("expected SendDone, got {}", describe(&other)),
            None => panic!("no SendDone within {STEP:?}"),
        }
    }

    /// The next Closed, dropping frames and SendDones on the way.
    fn closed(&mut self) -> (u64, String) {
        loop {
            match self.next(STEP) {
                Some(Completion::Closed { link, reason }) => return (link, reason),
                Some(_) => {}
                None => panic!("no Closed within {STEP:?}"),
            }
        }
    }

    /// Asserts nothing arrives for `d`.
    fn quiet(&mut self, d: Duration) {
        if let Some(c) = self.next(d) {
            panic!("expected nothing, got {}", describe(&c));
        }
    }
}

fn send(link: &Arc<dyn Link>, data: &[u8]) {
    let mut buf = link.alloc_send().expect("a free send slot");
    buf[..data.len()].copy_from_slice(data);
    link.post_send(buf, data.len()).expect("post_send");
}

/// The reason of the first Closed within `limit`, skipping everything else.
fn closed_within(cq: &mut Cq, limit: Duration) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(Completion::Closed { reason, .. }) = cq.next(Duration::from_secs(1)) {
            return Some(reason);
        }
    }
    None
}

/// Sends once a send slot is free, waiting for SendDone on `cq` while none is.
fn send_when_free(link: &Arc<dyn Link>, cq: &mut Cq, data: &[u8]) {
    loop {
        if let Some(mut buf) = link.alloc_send() {
            buf[..data.len()].copy_from_slice(data);
            link.post_send(buf, data.len()).expect("post_send");
            return;
        }
        cq.send_done();
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Soft-RoCE / HCA error counters that must not move in a test without RNR.
struct Counters {
    dir: String,
    before: Vec<(String, u64)>,
}

const RNR_COUNTERS: [&str; 4] = [
    "rcvd_rnr_err",
    "send_rnr_err",
    "retry_rnr_exceeded_err",
    "rnr_nak_retry_err",
];

impl Counters {
    fn read(dir: &str) -> Vec<(String, u64)> {
        RNR_COUNTERS
            .iter()
            .filter_map(|name| {
                let v = std::fs::read_to_string(format!("{dir}/{name}")).ok()?;
                Some((name.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    fn new(device: &str) -> Counters {
        let dir = format!("/sys/class/infiniband/{device}/ports/1/hw_counters");
        Counters {
            before: Counters::read(&dir),
            dir,
        }
    }

    fn assert_unchanged(&self) {
        let after = Counters::read(&self.dir);
        assert_eq!(after, self.before, "RNR counters in {} moved", self.dir);
        eprintln!("counters unchanged: {after:?}");
    }
}

/// Lines of `rdma res show <kind>` that belong to this process.
fn our_resources(kind: &str) -> Option<Vec<String>> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", kind])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let pid = format!(" pid {} ", std::process::id());
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| format!("{l} "))
            .filter(|l| l.contains(&pid))
            .collect(),
    )
}

/// Everything dropped, this process holds no verbs resource, within a few seconds: the
/// connection manager's event thread may still hold a link it just reported closed for a
/// moment (on a loaded machine, a long one), so a leak is what stays past the grace.
fn assert_no_resources_left() {
    const GRACE: Duration = Duration::from_secs(10);
    let start = Instant::now();
    for kind in ["qp", "cq", "mr", "pd", "cm_id"] {
        loop {
            match our_resources(kind) {
                Some(lines) if lines.is_empty() => break,
                Some(lines) if start.elapsed() >= GRACE => {
                    panic!("leaked {kind} ({GRACE:?} after the drop): {lines:#?}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(50)),
                None => {
                    eprintln!("`rdma res show {kind}` unavailable; not checked");
                    break;
                }
            }
        }
    }
    eprintln!(
        "rdma res show qp/cq/mr/pd/cm_id: nothing of ours left after {:?}",
        start.elapsed()
    );
}

#[test]
fn verbs_device_lookup() {
    let _serial = serial();
    let Some((ip, name)) = device() else { return };
    assert!(!name.is_empty());
    let any = verbs_device_for(&"0.0.0.0:0".parse().unwrap()).unwrap();
    assert!(any.is_some(), "the wildcard finds a device");
    assert_eq!(
        verbs_device_for(&SocketAddr::new(ip, 50051))
            .unwrap()
            .as_deref(),
        Some(name.as_str()),
        "a port does not matter"
    );
    let loopback = verbs_device_for(&"127.0.0.1:50051".parse().unwrap()).unwrap();
    eprintln!("device {name} serves {ip}; 127.0.0.1 → {loopback:?}");
}

#[test]
fn verbs_hello_frames_and_credits() {
    let _serial = serial();
    let Some((ip, dev)) = device() else { return };
    let counters = Counters::new(&dev);
    let (sr, cr) = (ring(4, 256), ring(8, 512));
    let mut p = pair(ip, sr, cr);
    assert_eq!(p.server_ep.device_name().as_deref(), Some(dev.as_str()));

    // HELLO via private data, both ways.
    assert_eq!(p.client.local_hello(), cr.hello());
    assert_eq!(p.client.peer_hello(), sr.hello());
    assert_eq!(p.server.local_hello(), sr.hello());
    assert_eq!(p.server.peer_hello(), cr.hello());
    assert_eq!(p.client.id(), 7);
    assert_eq!(
        p.client.send_slot_size(),
        256,
        "limited by the server's slots"
    );
    assert_eq!(p.server.send_slot_size(), 256, "limited by its own slots");
    assert!(p.client.peer_name().starts_with(&ip.to_string()));
    assert!(p.server.peer_name().starts_with(&ip.to_string()));

    // 1 byte and a full slot, client → server.
    let full = pattern(256, 3);
    send(&p.client, &[0xab]);
    send(&p.client, &full);
    let (link, one) = p.server_cq.recv();
    assert_eq!(link, p.server.id());
    assert_eq!(&one[..], &[0xab]);
    let (_, big) = p.server_cq.recv();
    assert_eq!(&big[..], &full[..]);
    assert_eq!(p.server.take_reposted(), 0, "nothing re-posted while held");
    drop(one);
    drop(big);
    assert_eq!(
        p.server.take_reposted(),
        2,
        "each dropped RecvBuf is a credit"
    );
    assert_eq!(p.server.take_reposted(), 0);

    // And server → client.
    let full = pattern(256, 9);
    send(&p.server, &[0x01]);
    send(&p.server, &full);
    let (link, one) = p.client_cq.recv();
    assert_eq!(link, 7);
    assert_eq!(&one[..], &[0x01]);
    let (_, big) = p.client_cq.recv();
    assert_eq!(&big[..], &full[..]);
    drop((one, big));
    assert_eq!(p.client.take_reposted(), 2);

    // Many more frames than slots, reusing re-posted slots and freed send slots.
    for i in 0..40u32 {
        let data = pattern(1 + (i as usize * 37) % 256, i as u8);
        send_when_free(&p.client, &mut p.client_cq, &data);
        let (_, got) = p.server_cq.recv();
        assert_eq!(&got[..], &data[..], "frame {i}");
        drop(got);
        assert_eq!(p.server.take_reposted(), 1);
    }
    counters.assert_unchanged();
    drop(p);
    assert_no_resources_left();
}

#[test]
fn verbs_qp_attributes_are_deliberate() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let server_ep = VerbsEndpoint::new().unwrap();
    let mut acceptor = server_ep
        .listen_verbs(SocketAddr::new(ip, 0), ring(16, 4096))
        .unwrap();
    let addr: SocketAddr = acceptor.local_addr().parse().unwrap();
    let accepting = std::thread::spawn(move || acceptor.accept_verbs(STEP).unwrap().unwrap());
    let client_ep = VerbsEndpoint::new().unwrap();
    let client = client_ep
        .connect_verbs(addr, ring(32, 4096), 1, STEP)
        .unwrap();
    let server = accepting.join().unwrap();
    for (side, link, slots) in [("client", &client, 32), ("server", &server, 16)] {
        let attrs = link.qp_attributes().unwrap();
        eprintln!("{side}: {attrs:?}");
        assert_eq!(attrs.state, rdma_sys::ibv_qp_state::IBV_QPS_RTS, "{side}");
        assert_eq!(attrs.rnr_retry, 0, "{side}: one RNR NAK is an error");
        assert_eq!(attrs.retry_cnt, 6, "{side}: finite (7 is infinite on rxe)");
        assert_eq!(attrs.min_rnr_timer, 12, "{side}: not rdma_cm's 0 (655 ms)");
        assert_eq!(attrs.max_rd_atomic, 0, "{side}: no RDMA READ");
        assert_eq!(attrs.max_dest_rd_atomic, 0, "{side}: no RDMA READ");
        assert!(
            attrs.max_send_wr >= slots && attrs.max_recv_wr >= slots,
            "{side}"
        );
        assert!(attrs.path_mtu >= 256, "{side}");
    }
    // Inline and non-inline sizes both arrive intact.
    let inline = client.qp_attributes().unwrap().max_inline_data as usize;
    let client: Arc<dyn Link> = client;
    let server: Arc<dyn Link> = server;
    let mut scq = Cq::new(server_ep.cq());
    let mut ccq = Cq::new(client_ep.cq());
    for len in [inline.max(1), inline + 1, 4096] {
        let data = pattern(len, len as u8);
        send_when_free(&client, &mut ccq, &data);
        let (_, got) = scq.recv();
        assert_eq!(&got[..], &data[..], "{len} bytes (inline limit {inline})");
    }
    drop((client, server, scq, ccq, client_ep, server_ep));
    assert_no_resources_left();
}

#[test]
fn verbs_send_pool_exhaustion_and_send_done() {
    let _serial = serial();
    let Some((ip, dev)) = device() else { return };
    let counters = Counters::new(&dev);
    let mut p = pair(ip, ring(16, 128), ring(4, 128));
    // All four slots out: the fifth allocation fails.
    let bufs: Vec<_> = (0..4)
        .map(|_| p.client.alloc_send().expect("slot"))
        .collect();
    assert!(p.client.alloc_send().is_none(), "pool of 4 exhausted");
    // Dropping an unposted buffer gives its slot back.
    drop(bufs);
    let mut bufs: Vec<_> = (0..4)
        .map(|_| p.client.alloc_send().expect("slot"))
        .collect();
    assert!(p.client.alloc_send().is_none());
    // Post all four; the last one (pool empty) is signalled, so SendDone must follow and
    // free all four.
    for (i, mut buf) in bufs.drain(..).enumerate() {
        buf[..3].copy_from_slice(&[i as u8, 1, 2]);
        p.client.post_send(buf, 3).expect("post");
    }
    assert!(p.client.alloc_send().is_none(), "all four in flight");
    p.client_cq.send_done();
    for i in 0..4u8 {
        let (_, got) = p.server_cq.recv();
        assert_eq!(&got[..], &[i, 1, 2]);
    }
    let again: Vec<_> = (0..4)
        .map(|_| p.client.alloc_send().expect("freed by the completion"))
        .collect();
    drop(again);
    // A frame larger than the peer's slot is refused before posting, and the slot returns.
    let buf = p.client.alloc_send().unwrap();
    let err = p.client.post_send(buf, 129).unwrap_err();
    assert!(matches!(err, crate::Error::FrameTooLarge { .. }), "{err}");
    assert_eq!((0..4).filter_map(|_| p.client.alloc_send()).count(), 4);
    counters.assert_unchanged();
    drop(p);
    assert_no_resources_left();
}

/// Frames posted with `post_send_batched` stay on this side until `flush_sends`, then go
/// out in order (40 of them: more than one chained `ibv_post_send`); a plain `post_send`
/// after held ones sends those first.
#[test]
fn verbs_held_sends_go_out_in_order_at_the_flush() {
    let _serial = serial();
    let Some((ip, dev)) = device() else { return };
    let counters = Counters::new(&dev);
    let mut p = pair(ip, ring(64, 128), ring(64, 128));
    let batch = 2 * super::qp::POST_CHAIN + 8;
    for i in 0..batch {
        let mut buf = p.client.alloc_send().expect("slot");
        buf[..2].copy_from_slice(&[i as u8, 0xb]);
        p.client.post_send_batched(buf, 2).expect("held");
    }
    p.server_cq.quiet(Duration::from_millis(300));
    p.client.flush_sends().expect("flush");
    for i in 0..batch {
        let (_, got) = p.server_cq.recv();
        assert_eq!(&got[..], &[i as u8, 0xb], "frame {i} in order");
    }
    // Held, then one posted at once: the held ones go first.
    for i in 0..3u8 {
        let mut buf = p.client.alloc_send().expect("slot");
        buf[..2].copy_from_slice(&[i, 0xc]);
        p.client.post_send_batched(buf, 2).expect("held");
    }
    send(&p.client, &[3, 0xc]);
    for i in 0..4u8 {
        let (_, got) = p.server_cq.recv();
        assert_eq!(&got[..], &[i, 0xc], "frame {i} in order");
    }
    // A flush with nothing held posts nothing.
    p.client.flush_sends().expect("an empty flush");
    p.server_cq.quiet(Duration::from_millis(100));
    counters.assert_unchanged();
    drop(p);
    assert_no_resources_left();
}

#[test]
fn verbs_close_reports_closed_on_both_sides() {
    let _serial = serial();
    let Some((ip, dev)) = device() else { return };
    let counters = Counters::new(&dev);
    let mut p = pair(ip, ring(4, 128), ring(4, 128));
    // A frame in flight before the close is still delivered before Closed.
    send(&p.client, b"last words");
    let (_, got) = p.server_cq.recv();
    assert_eq!(&got[..], b"last words");
    p.client.close();
    p.client.close(); // idempotent
    let (link, reason) = p.client_cq.closed();
    assert_eq!(link, 7);
    eprintln!("client side: {reason}");
    let (link, reason) = p.server_cq.closed();
    assert_eq!(link, p.server.id());
    assert!(reason.contains("disconnected"), "{reason}");
    eprintln!("server side: {reason}");
    // Exactly one Closed per link, nothing after it.
    p.client_cq.quiet(Duration::from_millis(300));
    p.server_cq.quiet(Duration::from_millis(300));
    // A closed link refuses to send; a buffer held across the close is released, not re-posted.
    assert!(p.client.alloc_send().is_none());
    assert!(p.server.alloc_send().is_none());
    drop(got);
    assert_eq!(p.server.take_reposted(), 0);
    counters.assert_unchanged();
    drop(p);
    assert_no_resources_left();
}

#[test]
fn verbs_link_dropped_without_close_tells_the_peer() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let p = pair(ip, ring(4, 128), ring(4, 128));
    let Pair {
        server_ep,
        server,
        mut server_cq,
        client_ep,
        client,
        client_cq,
        acceptor,
    } = p;
    drop(client);
    let (_, reason) = server_cq.closed();
    assert!(reason.contains("disconnected"), "{reason}");
    drop((server, server_ep, client_ep, client_cq, server_cq, acceptor));
    assert_no_resources_left();
}

#[test]
fn verbs_rnr_is_an_error_not_a_stall() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    // The server posts 3 receive slots (the protocol's minimum) and holds all three frames:
    // the client's fourth SEND has no receive to land in. With rnr_retry 0 that must fail at
    // once instead of being retried.
    let mut p = pair(ip, ring(3, 128), ring(4, 128));
    send(&p.client, b"one");
    send(&p.client, b"two");
    send(&p.client, b"three");
    let held = [
        p.server_cq.recv().1,
        p.server_cq.recv().1,
        p.server_cq.recv().1,
    ];
    let start = Instant::now();
    send(&p.client, b"four: no credit for this one");
    let (_, reason) = p.client_cq.closed();
    eprintln!("client closed after {:?}: {reason}", start.elapsed());
    assert!(reason.contains("RNR"), "{reason}");
    let (_, reason) = p.server_cq.closed();
    eprintln!("server: {reason}");
    drop(held);
    assert_eq!(
        p.server.take_reposted(),
        0,
        "slots of a closed link are not re-posted"
    );
    drop(p);
    assert_no_resources_left();
}

#[test]
fn verbs_connect_to_nobody_is_refused() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let ep = VerbsEndpoint::new().unwrap();
    let start = Instant::now();
    let err = match ep.connect(SocketAddr::new(ip, 9), ring(4, 128), 1, STEP) {
        Ok(_) => panic!("connected to a port nobody listens on"),
        Err(e) => e,
    };
    eprintln!("refused after {:?}: {err}", start.elapsed());
    assert!(start.elapsed() < STEP, "refused, not timed out");
    drop(ep);
    assert_no_resources_left();
}

#[test]
fn verbs_wait_sleeps_and_wake_interrupts() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let p = pair(ip, ring(4, 128), ring(4, 128));
    let cq = p.server_ep.cq();
    // Wake-ups left from setting up (device creation wakes the poller) may end one wait early.
    cq.wait(Some(Duration::ZERO));
    cq.wait(Some(Duration::ZERO));
    let start = Instant::now();
    cq.wait(Some(Duration::from_millis(200)));
    let slept = start.elapsed();
    assert!(slept >= Duration::from_millis(150), "slept only {slept:?}");
    let waker = cq.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        waker.wake();
    });
    let start = Instant::now();
    cq.wait(Some(Duration::from_secs(10)));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "wake() interrupted wait()"
    );
    t.join().unwrap();
    // A completion wakes a waiter too.
    let sender = p.client.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        send(&sender, b"wake up");
    });
    let start = Instant::now();
    let mut out = Vec::new();
    while out.is_empty() && start.elapsed() < Duration::from_secs(10) {
        cq.wait(Some(Duration::from_secs(10)));
        cq.poll(&mut out, 8);
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the completion woke the waiter"
    );
    assert!(matches!(&out[0], Completion::Recv { buf, .. } if &buf[..] == b"wake up"));
    t.join().unwrap();
    drop(out);
    drop(p);
    assert_no_resources_left();
}

#[test]
fn verbs_many_links_share_one_cq() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let server_ep = VerbsEndpoint::new().unwrap();
    let mut acceptor = server_ep
        .listen(SocketAddr::new(ip, 0), ring(8, 256))
        .unwrap();
    let addr: SocketAddr = acceptor.local_addr().parse().unwrap();
    const N: u64 = 6;
    let accepting = std::thread::spawn(move || {
        let links: Vec<_> = (0..N)
            .map(|_| acceptor.accept(STEP).unwrap().expect("link"))
            .collect();
        (links, acceptor)
    });
    // One client endpoint, N links on its one CQ (grows it past its initial size).
    let client_ep = VerbsEndpoint::new().unwrap();
    let clients: Vec<_> = (0..N)
        .map(|i| {
            client_ep
                .connect(addr, ring(64, 256), 100 + i, STEP)
                .unwrap()
        })
        .collect();
    let (servers, _acceptor) = accepting.join().unwrap();
    let mut ids: Vec<_> = servers.iter().map(|l| l.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), N as usize, "distinct link ids");
    for (i, c) in clients.iter().enumerate() {
        send(c, format!("from client {i}").as_bytes());
    }
    let mut scq = Cq::new(server_ep.cq());
    let mut seen = Vec::new();
    for _ in 0..N {
        let (link, buf) = scq.recv();
        let server = servers.iter().find(|l| l.id() == link).expect("known link");
        // Echo on the link it came in on.
        let text = String::from_utf8(buf.to_vec()).unwrap();
        send(server, text.as_bytes());
        seen.push(text);
    }
    seen.sort();
    assert_eq!(seen.len(), N as usize);
    let mut ccq = Cq::new(client_ep.cq());
    for _ in 0..N {
        let (link, buf) = ccq.recv();
        let i = link - 100;
        assert_eq!(
            &buf[..],
            format!("from client {i}").as_bytes(),
            "echo on the right link"
        );
    }
    drop((clients, servers, ccq, scq, client_ep, server_ep));
    assert_no_resources_left();
}

/// This guest's role and the peer's address in a two-host run; `None` (skip) otherwise.
fn two_host_roles() -> Option<(String, String)> {
    match (
        std::env::var("RPC_TEST_HOST"),
        std::env::var("RPC_TEST_PEER"),
    ) {
        (Ok(host), Ok(peer)) => Some((host, peer)),
        _ => {
            eprintln!("skipping: not a two-host run (RPC_TEST_HOST/RPC_TEST_PEER unset)");
            None
        }
    }
}

/// Connects to the other guest, retrying while it is still starting its listener.
fn connect_to_peer(
    ep: &VerbsEndpoint,
    peer: &str,
    port: u16,
    ring: RingConfig,
    wait: Duration,
) -> Arc<dyn Link> {
    let peer: IpAddr = peer.parse().unwrap();
    let start = Instant::now();
    loop {
        match ep.connect(SocketAddr::new(peer, port), ring, 1, STEP) {
            Ok(link) => return link,
            Err(e) if start.elapsed() < wait => {
                eprintln!("a: connect: {e}; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("a: could not connect: {e}"),
        }
    }
}

/// Two guests (`scripts/softroce-vm --hosts`): b serves, a connects across the emulated wire.
#[test]
fn verbs_two_host_exchange() {
    let Some((host, peer)) = two_host_roles() else {
        return;
    };
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    const PORT: u16 = 47411;
    const FRAMES: usize = 50;
    let wait = Duration::from_secs(120);
    if host == "b" {
        let ep = VerbsEndpoint::new().unwrap();
        let mut acceptor = ep.listen(SocketAddr::new(ip, PORT), ring(8, 1024)).unwrap();
        let link = acceptor.accept(wait).unwrap().expect("a's link");
        let mut cq = Cq::new(ep.cq());
        for _ in 0..FRAMES {
            let (_, buf) = cq.recv();
            let data = buf.to_vec();
            drop(buf);
            send_when_free(&link, &mut cq, &data);
        }
        let (_, reason) = cq.closed();
        eprintln!("b: closed: {reason}");
    } else {
        let ep = VerbsEndpoint::new().unwrap();
        let link = connect_to_peer(&ep, &peer, PORT, ring(8, 1024), wait);
        let mut cq = Cq::new(ep.cq());
        for i in 0..FRAMES {
            let data = pattern(1 + i * 20, i as u8);
            send_when_free(&link, &mut cq, &data);
            let (_, echo) = cq.recv();
            assert_eq!(&echo[..], &data[..], "echo {i}");
        }
        link.close();
        cq.closed();
        eprintln!("a: {FRAMES} frames echoed by b");
    }
}

/// A registration over `RLIMIT_MEMLOCK` names the limit and `ulimit -l`. Root with
/// CAP_IPC_LOCK is exempt from the limit: run under
/// `setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock` to see it fail.
#[test]
fn verbs_memlock_limit_is_named() {
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the valid `old`.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old) };
    assert_eq!(ret, 0);
    let low = libc::rlimit {
        rlim_cur: 64 * 1024,
        rlim_max: old.rlim_max,
    };
    // SAFETY: setrlimit reads the valid `low`; lowering the soft limit is always allowed.
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &low) };
    assert_eq!(ret, 0);
    let ep = VerbsEndpoint::new().unwrap();
    // 2 rings of 64 × 8 KiB: far over 64 KiB. Nothing listens on port 9, so if registration
    // succeeds (CAP_IPC_LOCK), the connection is refused instead.
    let result = ep.connect(SocketAddr::new(ip, 9), ring(64, 8192), 1, STEP);
    // SAFETY: restores the limit read above (raising back to at most the hard limit).
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &old) };
    assert_eq!(ret, 0);
    let err = match result {
        Ok(_) => panic!("connected to a port nobody listens on"),
        Err(e) => e.to_string(),
    };
    if err.contains("ibv_reg_mr") {
        eprintln!("registration refused as expected: {err}");
        assert!(err.contains("ulimit -l"), "{err}");
        assert!(err.contains("64 KiB"), "{err}");
        assert!(err.contains("RLIMIT_MEMLOCK"), "{err}");
    } else {
        eprintln!("registration was allowed (CAP_IPC_LOCK exempts from RLIMIT_MEMLOCK): {err}");
    }
    drop(ep);
    assert_no_resources_left();
}

/// Two guests: b stops sending anything (netem drops all its egress, so a's SENDs are never
/// acknowledged). a's QP must give up after its retries with RETRY_EXC_ERR and report Closed;
/// so must b's, whose own SEND is lost too. Nothing hangs.
#[test]
fn verbs_two_host_lost_acks_surface_as_retry_exceeded() {
    let Some((host, peer)) = two_host_roles() else {
        return;
    };
    let _serial = serial();
    let Some((ip, _)) = device() else { return };
    const PORT: u16 = 47412;
    let netdev = std::env::var("RPC_TEST_NETDEV").unwrap_or_else(|_| "eth0".into());
    let tc = |args: &str| {
        let status = std::process::Command::new("tc")
            .args(args.split(' '))
            .status()
            .expect("tc runs");
        assert!(status.success(), "tc {args}");
    };
    let wait = Duration::from_secs(120);
    if host == "b" {
        let ep = VerbsEndpoint::new().unwrap();
        let mut acceptor = ep.listen(SocketAddr::new(ip, PORT), ring(8, 256)).unwrap();
        let link = acceptor.accept(wait).unwrap().expect("a's link");
        let mut cq = Cq::new(ep.cq());
        let (_, first) = cq.recv();
        assert_eq!(&first[..], b"1");
        drop(first);
        send(&link, b"ok");
        // Let "ok" leave (a acknowledges it; a waits 2 s before its next frame).
        std::thread::sleep(Duration::from_millis(500));
        // From now on, b's packets (ACKs included) are lost.
        tc(&format!("qdisc add dev {netdev} root netem loss 100%"));
        // b's own SEND cannot be acknowledged either (it never leaves): b's QP must give up
        // by itself, whether or not a's disconnect request gets through.
        send(&link, b"3: lost on the wire");
        let reason =
            closed_within(&mut cq, Duration::from_secs(90)).expect("b: Closed within 90 s");
        tc(&format!("qdisc del dev {netdev} root"));
        eprintln!("b: closed: {reason}");
    } else {
        let ep = VerbsEndpoint::new().unwrap();
        let link = connect_to_peer(&ep, &peer, PORT, ring(8, 256), wait);
        let mut cq = Cq::new(ep.cq());
        send(&link, b"1");
        let (_, ok) = cq.recv();
        assert_eq!(&ok[..], b"ok");
        drop(ok);
        std::thread::sleep(Duration::from_secs(2)); // b installs its netem meanwhile
        let start = Instant::now();
        send(&link, b"2: never acknowledged");
        let reason =
            closed_within(&mut cq, Duration::from_secs(90)).expect("a: Closed within 90 s");
        eprintln!("a: closed after {:?}: {reason}", start.elapsed());
        assert!(reason.contains("retry"), "{reason}");
        assert!(link.alloc_send().is_none());
    }
}
